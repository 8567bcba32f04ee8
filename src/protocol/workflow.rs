//! `WORKFLOW CREATE {definition}`, `WORKFLOW GET <id>`, `WORKFLOW CANCEL <id>`. What a
//! definition must contain is the workflow model's business (`crate::workflow`); here only
//! the shape of the line is checked.

use super::Command;
use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum WorkflowCmd {
    Create { definition: Value },
    Get(String),
    Cancel(String),
}

fn malformed(msg: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::MalformedCommand, msg)
}

fn id(verb: &str, rest: &str) -> OjsResult<String> {
    let mut words = rest.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Ok(w.to_string()),
        _ => Err(malformed(format!("{verb} needs exactly one workflow id"))),
    }
}

/// The payload after the `WORKFLOW` verb.
pub fn parse(payload: &str) -> OjsResult<Command> {
    let (sub, rest) = match payload.find(' ') {
        Some(i) => (&payload[..i], payload[i + 1..].trim_start()),
        None => (payload, ""),
    };
    let cmd = match sub.to_ascii_uppercase().as_str() {
        "CREATE" => {
            if rest.is_empty() {
                return Err(malformed("WORKFLOW CREATE needs a JSON definition"));
            }
            let definition = crate::json::parse(rest.as_bytes())
                .map_err(|e| malformed(format!("WORKFLOW CREATE: {e}")))?;
            WorkflowCmd::Create { definition }
        }
        "GET" => WorkflowCmd::Get(id("WORKFLOW GET", rest)?),
        "CANCEL" => WorkflowCmd::Cancel(id("WORKFLOW CANCEL", rest)?),
        _ => return Err(malformed("WORKFLOW needs CREATE, GET or CANCEL")),
    };
    Ok(Command::Workflow(cmd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse_command;
    use serde_json::json;

    #[test]
    fn parses_the_three_subcommands() {
        assert_eq!(
            parse_command(br#"WORKFLOW CREATE {"type":"chain","steps":[]}"#).unwrap(),
            Command::Workflow(WorkflowCmd::Create {
                definition: json!({"type": "chain", "steps": []})
            })
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
