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

/// The RESP form of an engine answer in the OJS dialect: `+OK`, a bulk JSON document, a
/// null bulk for nothing, or `-ERR CODE message`.
impl From<crate::engine::Answered> for Reply {
    fn from(a: crate::engine::Answered) -> Self {
        use crate::engine::Answer;
        match a {
            Err(e) => Reply::Error(e),
            Ok(Answer::Ok) => Reply::Ok,
            Ok(Answer::Nothing) => Reply::Null,
            Ok(a) => a.to_json().map_or(Reply::Ok, Reply::Bulk),
        }
    }
}
