//! `WORKFLOW CREATE {definition}`, `WORKFLOW GET <id>`, `WORKFLOW CANCEL <id>`. What a
//! definition must contain is the workflow model's business (`crate::workflow`); here only
//! the shape of the line is checked.

use super::words::{json_object, malformed};
use super::Command;
use crate::engine::intake::Intake;
pub use crate::engine::request::WorkflowCmd;
use crate::error::OjsResult;
use serde_json::Value;

/// Most workflows one `WORKFLOW LIST` returns.
pub const LIST_MAX: usize = 1000;

fn id(verb: &str, rest: &str) -> OjsResult<String> {
    let mut words = rest.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Ok(w.to_string()),
        _ => Err(malformed(format!("{verb} needs exactly one workflow id"))),
    }
}

/// `WORKFLOW LIST [{"state"?, "limit"?, "offset"?}]`.
fn list(rest: &str) -> OjsResult<WorkflowCmd> {
    let obj = if rest.is_empty() {
        serde_json::Map::new()
    } else {
        json_object("WORKFLOW LIST", rest)?
    };
    list_query(&obj)
}

/// The filter of `WORKFLOW LIST` (also built by the HTTP route from its query).
pub fn list_query(obj: &serde_json::Map<String, Value>) -> OjsResult<WorkflowCmd> {
    if let Some(k) = obj
        .keys()
        .find(|k| !["state", "limit", "offset"].contains(&k.as_str()))
    {
        let shown: String = k.chars().take(64).collect();
        return Err(malformed(format!(
            "WORKFLOW LIST: unknown field {shown:?} (expected state, limit, offset)"
        )));
    }
    let state = match obj.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s))
            if ["pending", "running", "completed", "failed", "cancelled"].contains(&s.as_str()) =>
        {
            Some(s.clone())
        }
        Some(_) => {
            return Err(malformed(
                "WORKFLOW LIST: state must be pending, running, completed, failed or cancelled",
            ))
        }
    };
    let num = |k: &str, default: usize, max: usize| {
        super::admin::page_num("WORKFLOW LIST", obj, k, default, max)
    };
    Ok(WorkflowCmd::List {
        state,
        limit: num("limit", 50, LIST_MAX)?,
        offset: num("offset", 0, usize::MAX)?,
    })
}

/// The payload after the `WORKFLOW` verb; `intake` validates a definition.
pub fn parse(payload: &str, intake: &Intake) -> OjsResult<Command> {
    let (sub, rest) = match payload.find(' ') {
        Some(i) => (&payload[..i], payload[i + 1..].trim_start()),
        None => (payload, ""),
    };
    let cmd = match sub.to_ascii_uppercase().as_str() {
        "CREATE" => {
            if rest.is_empty() {
                return Err(malformed("WORKFLOW CREATE needs a JSON definition"));
            }
            let definition: serde_json::Value = crate::json::parse(rest.as_bytes())
                .map_err(|e| malformed(format!("WORKFLOW CREATE: {e}")))?;
            WorkflowCmd::Create {
                definition: Box::new(intake.workflow(&definition)?),
            }
        }
        "GET" => WorkflowCmd::Get(id("WORKFLOW GET", rest)?),
        "CANCEL" => WorkflowCmd::Cancel(id("WORKFLOW CANCEL", rest)?),
        "LIST" => list(rest)?,
        _ => return Err(malformed("WORKFLOW needs CREATE, GET, CANCEL or LIST")),
    };
    Ok(Command::Workflow(cmd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn parse_command(line: &[u8]) -> OjsResult<Command> {
        crate::protocol::parse_command(line, &Intake::default())
    }

    #[test]
    fn parses_the_three_subcommands() {
        let line = br#"WORKFLOW CREATE {"type":"chain","steps":[{"type":"a","args":[]}]}"#;
        let Command::Workflow(WorkflowCmd::Create { definition }) = parse_command(line).unwrap()
        else {
            panic!("not WORKFLOW CREATE")
        };
        assert_eq!(
            (definition.root.kind, definition.job_count),
            (crate::workflow::Kind::Chain, 1)
        );
        assert_eq!(
            parse_command(b"workflow get wf-1").unwrap(),
            Command::Workflow(WorkflowCmd::Get("wf-1".into()))
        );
        assert_eq!(
            parse_command(b"WORKFLOW CANCEL wf-1").unwrap(),
            Command::Workflow(WorkflowCmd::Cancel("wf-1".into()))
        );
        for bad in [
            "WORKFLOW",
            "WORKFLOW CREATE",
            "WORKFLOW CREATE {nope",
            "WORKFLOW GET",
            "WORKFLOW GET a b",
            "WORKFLOW RUN x",
        ] {
            let e = parse_command(bad.as_bytes()).unwrap_err();
            assert_eq!(e.code, ErrorCode::MalformedCommand, "{bad}");
        }
    }
}
