use crate::error::OjsError;
use bytes::Bytes;

/// One server reply, in the RESP subset Faktory uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Ok,
    Simple(String),
    Bulk(Bytes),
    Null,
    Error(OjsError),
}

impl Reply {
    pub fn json(v: &serde_json::Value) -> Reply {
        // Serializing a Value cannot fail (keys are strings).
        Reply::Bulk(Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
    }
}

impl From<OjsError> for Reply {
    fn from(e: OjsError) -> Self {
        Reply::Error(e)
    }
}
