//! `--config PATH`: a TOML file whose keys are the binary's long flag names, read before
//! clap parses the command line and handed to clap as each argument's default value. So clap
//! still validates every value and applies the precedence: a flag, then its `OJSD_*`
//! environment variable, then the file, then the built-in default.
//!
//! Nothing here knows the flags: keys are looked up in the `clap::Command`'s own argument
//! list, so a new field of the binary's `Args` can be set from the file with no code here.

use clap::{ArgAction, Command};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The long name of the flag that names the file (and `OJSD_CONFIG`, its variable).
pub const CONFIG_FLAG: &str = "config";

/// Where the config file is: `--config PATH` or `--config=PATH` on the command line
/// (`argv` includes the program name), else `env` (the value of `OJSD_CONFIG`). This runs
/// before clap so that the file can supply clap's defaults; clap parses `--config` again
/// with everything else, and reports a `--config` with no value itself.
pub fn config_path(argv: &[OsString], env: Option<OsString>) -> Option<PathBuf> {
    let flag = format!("--{CONFIG_FLAG}");
    let with_eq = format!("--{CONFIG_FLAG}=");
    let mut args = argv.iter().skip(1);
    let mut found = None;
    while let Some(a) = args.next() {
        let Some(s) = a.to_str() else { continue };
        if s == "--" {
            break;
        }
        if s == flag {
            if let Some(v) = args.next() {
                found = Some(PathBuf::from(v));
            }
        } else if let Some(v) = s.strip_prefix(&with_eq) {
            found = Some(PathBuf::from(v));
        }
    }
    found.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from))
}

/// Read `path` and apply it to `cmd` (see `apply_str`). The error is one line naming the file.
pub fn apply(cmd: Command, path: &Path) -> Result<Command, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config {}: cannot read it: {e}", path.display()))?;
    apply_str(cmd, &text).map_err(|e| format!("config {}: {e}", path.display()))
}

/// Set the default value of each argument named in the TOML `text`. A key is an argument's
/// long name, either as the flag is spelled (`max-line-bytes`) or in snake_case
/// (`max_line_bytes`). A value is a string, an integer, a float, a boolean (for on/off
/// flags like `test_clock`), or an array of those for an argument that takes several.
/// Unknown keys, a key given in both spellings, a value of the wrong shape and a value the
/// argument's own parser refuses are errors naming the key.
pub fn apply_str(mut cmd: Command, text: &str) -> Result<Command, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| describe_toml_error(text, &e))?;
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        // A flag's aliases name it too (`tokens` for the repeatable `--token`).
        let arg = cmd
            .get_arguments()
            .find(|a| {
                let named = a.get_long() == Some(long.as_str())
                    || a.get_all_aliases()
                        .is_some_and(|all| all.contains(&long.as_str()));
                named && settable(a.get_action())
            })
            .filter(|_| long != CONFIG_FLAG)
            .ok_or_else(|| {
                format!(
                    "unknown key `{key}`; keys are the long flag names of `ojsd --help` \
                     (as max_line_bytes or max-line-bytes), `config` excepted"
                )
            })?;
        let setting = arg.get_id().to_string();
        if let Some((_, other)) = seen.iter().find(|(l, _)| *l == setting) {
            return Err(format!(
                "`{key}` and `{other}` are the same setting; give it once"
            ));
        }
        seen.push((setting, key));
        let values = to_strings(arg, key, value)?;
        check(arg, &long, &values).map_err(|e| format!("{key} = {}: {e}", show(value)))?;
        let id = arg.get_id().clone();
        // A secret (its variable's value hidden, like --password) must not show up in
        // --help as "[default: ...]" either.
        let secret = arg.is_hide_env_values_set();
        cmd = cmd.mut_arg(id, |a| a.default_values(values).hide_default_value(secret));
    }
    Ok(cmd)
}

/// Arguments a file may set: those that take values, and on/off flags.
fn settable(action: &ArgAction) -> bool {
    matches!(
        action,
        ArgAction::Set | ArgAction::Append | ArgAction::SetTrue | ArgAction::SetFalse
    )
}

fn to_strings(arg: &clap::Arg, key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    let scalar = |v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::Boolean(b) => Ok(b.to_string()),
            _ if flag => Err(format!(
                "`{key}` is an on/off flag: give true or false, not {}",
                show(v)
            )),
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            other => Err(format!(
                "`{key}`: expected a string, number or boolean, not {}",
                other.type_str()
            )),
        }
    };
    match value {
        toml::Value::Array(items) if matches!(arg.get_action(), ArgAction::Append) => {
            items.iter().map(scalar).collect()
        }
        toml::Value::Array(_) => Err(format!("`{key}` takes one value, not an array")),
        v => scalar(v).map(|s| vec![s]),
    }
}

/// Run the argument's own parser over the file's values, in a command holding only that
/// argument (and no environment variable), so that a bad value is reported against the
/// file rather than later as if it had been typed as a flag.
fn check(arg: &clap::Arg, long: &str, values: &[String]) -> Result<(), String> {
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        // An on/off flag takes no value on the command line; `to_strings` let only
        // booleans through, which clap reads back as its default.
        return Ok(());
    }
    let probe = arg
        .clone()
        .env(None::<&str>)
        .default_value(None::<&str>)
        .required(false);
    Command::new("ojsd")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from(values.iter().map(|v| format!("--{long}={v}")))
        .map(|_| ())
        .map_err(|e| match std::error::Error::source(&e) {
            Some(inner) => inner.to_string(),
            None => first_line(&e.to_string()),
        })
}

/// A value as the file spelled it, near enough for an error message.
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "an array".to_string(),
        toml::Value::Table(_) => "a table".to_string(),
    }
}

fn first_line(rendered: &str) -> String {
    let line = rendered.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// toml's own message spans several lines with a caret; this keeps the position and the
/// reason on one.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e.message().trim().trim_end_matches('.');
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("not valid TOML at line {line}, column {column}: {reason}")
        }
        None => format!("not valid TOML: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgMatches};

    fn cmd() -> Command {
        Command::new("t")
            .no_binary_name(true)
            .arg(
                Arg::new("max_line_bytes")
                    .long("max-line-bytes")
                    .value_parser(clap::value_parser!(u64))
                    .default_value("10"),
            )
            .arg(Arg::new("name").long("name"))
            .arg(
                Arg::new("tag")
                    .long("tag")
                    .alias("tags")
                    .action(ArgAction::Append),
            )
            .arg(Arg::new("flag").long("flag").action(ArgAction::SetTrue))
            .arg(Arg::new("config").long("config"))
            .arg(Arg::new("secret").long("secret").hide_env_values(true))
    }

    fn parse(file: &str, argv: &[&str]) -> Result<ArgMatches, String> {
        let c = apply_str(cmd(), file)?;
        c.try_get_matches_from(argv).map_err(|e| e.to_string())
    }

    #[test]
    fn file_values_become_defaults_and_flags_win() {
        let file = "max_line_bytes = 99\nname = \"a\"\ntag = [\"x\", \"y\"]\nflag = true\n";
        let m = parse(file, &[]).unwrap();
        assert_eq!(m.get_one::<u64>("max_line_bytes"), Some(&99));
        assert_eq!(m.get_one::<String>("name").unwrap(), "a");
        let tags: Vec<&String> = m.get_many("tag").unwrap().collect();
        assert_eq!(tags, ["x", "y"]);
        assert!(m.get_flag("flag"));
        let m = parse(file, &["--max-line-bytes", "7", "--name=b"]).unwrap();
        assert_eq!(m.get_one::<u64>("max_line_bytes"), Some(&7));
        assert_eq!(m.get_one::<String>("name").unwrap(), "b");
        // Without the file, the built-in default.
        let m = parse("", &[]).unwrap();
        assert_eq!(m.get_one::<u64>("max_line_bytes"), Some(&10));
        assert!(!m.get_flag("flag"));
    }

    #[test]
    fn a_secret_from_the_file_stays_out_of_help() {
        let mut c = apply_str(cmd(), "secret = \"hunter2\"\nname = \"shown\"").unwrap();
        let help = c.render_long_help().to_string();
        assert!(help.contains("[default: shown]"), "{help}");
        assert!(!help.contains("hunter2"), "{help}");
        let m = c.try_get_matches_from(Vec::<String>::new()).unwrap();
        assert_eq!(m.get_one::<String>("secret").unwrap(), "hunter2");
    }

    #[test]
    fn both_spellings_are_keys_but_not_together() {
        let m = parse("max-line-bytes = 5", &[]).unwrap();
        assert_eq!(m.get_one::<u64>("max_line_bytes"), Some(&5));
        let e = parse("max-line-bytes = 5\nmax_line_bytes = 6", &[]).unwrap_err();
        assert!(e.contains("same setting"), "{e}");
    }

    #[test]
    fn an_alias_is_a_key_too() {
        let m = parse("tags = [\"x\", \"y\"]", &[]).unwrap();
        let tags: Vec<&String> = m.get_many("tag").unwrap().collect();
        assert_eq!(tags, ["x", "y"]);
        let e = parse("tags = [\"x\"]\ntag = [\"y\"]", &[]).unwrap_err();
        assert!(e.contains("same setting"), "{e}");
    }

    #[test]
    fn refusals_name_the_key() {
        let e = parse("max_lines = 5", &[]).unwrap_err();
        assert!(e.starts_with("unknown key `max_lines`"), "{e}");
        let e = parse("config = \"x\"", &[]).unwrap_err();
        assert!(e.starts_with("unknown key `config`"), "{e}");
        let e = parse("help = true", &[]).unwrap_err();
        assert!(e.starts_with("unknown key `help`"), "{e}");
        let e = parse("max_line_bytes = \"lots\"", &[]).unwrap_err();
        assert_eq!(
            e,
            "max_line_bytes = \"lots\": invalid digit found in string"
        );
        let e = parse("max_line_bytes = -1", &[]).unwrap_err();
        assert!(e.starts_with("max_line_bytes = -1: "), "{e}");
        let e = parse("flag = \"yes\"", &[]).unwrap_err();
        assert!(e.contains("give true or false"), "{e}");
        let e = parse("name = [\"a\"]", &[]).unwrap_err();
        assert!(e.contains("takes one value"), "{e}");
        let e = parse("[server]\nname = \"a\"", &[]).unwrap_err();
        assert!(e.starts_with("unknown key `server`"), "{e}");
    }

    #[test]
    fn malformed_toml_is_one_line_with_its_position() {
        let e = parse("name = \"a\"\nmax_line_bytes = = 5\n", &[]).unwrap_err();
        assert!(e.starts_with("not valid TOML at line 2, column "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn config_path_prefers_the_flag_then_the_env() {
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let env = Some(OsString::from("/env.toml"));
        assert_eq!(
            config_path(&argv(&["ojsd", "--config", "/a.toml"]), env.clone()),
            Some(PathBuf::from("/a.toml"))
        );
        assert_eq!(
            config_path(
                &argv(&["ojsd", "--listen", "x", "--config=/b.toml"]),
                env.clone()
            ),
            Some(PathBuf::from("/b.toml"))
        );
        assert_eq!(
            config_path(&argv(&["ojsd"]), env),
            Some(PathBuf::from("/env.toml"))
        );
        assert_eq!(config_path(&argv(&["ojsd"]), Some(OsString::new())), None);
        assert_eq!(
            config_path(&argv(&["ojsd", "--", "--config", "x"]), None),
            None
        );
    }
}
