//! `CRON ADD {definition}`, `CRON LIST [{filter}]`, `CRON GET <name>`, `CRON DEL <name>`,
//! `CRON ENABLE <name>`, `CRON DISABLE <name>`. What a definition must contain is the
//! cron model's business (`crate::cron::def`); here only the shape of the line is checked.

use super::words::{json_object, malformed};
use super::Command;
use crate::engine::intake::Intake;
pub use crate::engine::request::CronCmd;
use crate::error::OjsResult;
use serde_json::{Map, Value};

/// Most cron jobs one `CRON LIST` page returns (also the default).
pub const MAX_LIST: usize = 1000;

fn name(verb: &str, rest: &str) -> OjsResult<String> {
    let mut words = rest.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Ok(w.to_string()),
        _ => Err(malformed(format!("{verb} needs exactly one cron job name"))),
    }
}

fn list(rest: &str) -> OjsResult<CronCmd> {
    let opts = if rest.is_empty() {
        Map::new()
    } else {
        json_object("CRON LIST", rest)?
    };
    let enabled = match opts.get("enabled") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(malformed("CRON LIST: enabled must be a boolean")),
    };
    let num = |k: &str, default: usize| -> OjsResult<usize> {
        match opts.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| malformed(format!("CRON LIST: {k} must be a non-negative integer"))),
        }
    };
    Ok(CronCmd::List {
        enabled,
        limit: num("limit", MAX_LIST)?.clamp(1, MAX_LIST),
        offset: num("offset", 0)?,
    })
}

/// The rest of a `CRON` line; `intake` validates a registration.
pub fn parse(payload: &str, intake: &Intake) -> OjsResult<Command> {
    let (sub, rest) = match payload.find(' ') {
        Some(i) => (&payload[..i], payload[i + 1..].trim()),
        None => (payload, ""),
    };
    let cmd = match sub.to_ascii_uppercase().as_str() {
        "ADD" if rest.is_empty() => return Err(malformed("CRON ADD needs a JSON definition")),
        "ADD" => {
            let def = Value::Object(json_object("CRON ADD", rest)?);
            CronCmd::Add(Box::new(intake.cron(&def)?))
        }
        "LIST" => list(rest)?,
        "GET" => CronCmd::Get(name("CRON GET", rest)?),
        "DEL" | "DELETE" => CronCmd::Del(name("CRON DEL", rest)?),
        "ENABLE" => CronCmd::Enable(name("CRON ENABLE", rest)?),
        "DISABLE" => CronCmd::Disable(name("CRON DISABLE", rest)?),
        _ => {
            return Err(malformed(
                "CRON needs ADD, LIST, GET, DEL, ENABLE or DISABLE",
            ))
        }
    };
    Ok(Command::Cron(cmd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn parse_command(line: &[u8]) -> OjsResult<Command> {
        crate::protocol::parse_command(line, &Intake::default())
    }

    fn cron(line: &str) -> OjsResult<CronCmd> {
        match parse_command(line.as_bytes())? {
            Command::Cron(c) => Ok(c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_each_subcommand() {
        let CronCmd::Add(def) =
            cron(r#"CRON ADD {"name":"a","cron":"@daily","type":"x"}"#).unwrap()
        else {
            panic!("not CRON ADD")
        };
        assert_eq!(
            (def.name, def.cron, def.job_type),
            ("a".into(), "@daily".into(), "x".into())
        );
        // Validated where it is parsed, not on the engine thread.
        assert_eq!(
            cron(r#"CRON ADD {"name":"a","cron":"61 * * * *","type":"x"}"#)
                .unwrap_err()
                .code,
            ErrorCode::InvalidCronExpression
        );
        assert_eq!(
            cron("cron list").unwrap(),
            CronCmd::List {
                enabled: None,
                limit: MAX_LIST,
                offset: 0
            }
        );
        assert_eq!(
            cron(r#"CRON LIST {"enabled":false,"limit":5000,"offset":2}"#).unwrap(),
            CronCmd::List {
                enabled: Some(false),
                limit: MAX_LIST,
                offset: 2
            }
        );
        assert_eq!(cron("CRON GET a").unwrap(), CronCmd::Get("a".into()));
        assert_eq!(cron("CRON DEL a").unwrap(), CronCmd::Del("a".into()));
        assert_eq!(cron("CRON DELETE a").unwrap(), CronCmd::Del("a".into()));
        assert_eq!(cron("CRON ENABLE a").unwrap(), CronCmd::Enable("a".into()));
        assert_eq!(
            cron("CRON DISABLE a").unwrap(),
            CronCmd::Disable("a".into())
        );
    }

    #[test]
    fn malformed_lines() {
        for bad in [
            "CRON",
            "CRON ADD",
            "CRON ADD [1]",
            "CRON ADD {oops",
            "CRON DEL",
            "CRON DEL a b",
            "CRON LIST [1]",
            r#"CRON LIST {"enabled":"yes"}"#,
            r#"CRON LIST {"limit":-1}"#,
            "CRON FIRE a",
        ] {
            assert_eq!(
                cron(bad).unwrap_err().code,
                ErrorCode::MalformedCommand,
                "{bad}"
            );
        }
    }
}
