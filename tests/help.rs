//! `ojsd --help` as a newcomer reads it (issue 22): every flag has its own description,
//! and the test-only flag is not shown.

use std::process::Command;

#[test]
fn every_flag_has_its_own_description_and_test_flags_are_hidden() {
    let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .arg("--help")
        .output()
        .expect("run ojsd --help");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut flags = 0;
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if !(t.starts_with("--") && l.starts_with("      ")) || t.starts_with("--help") {
            continue;
        }
        flags += 1;
        let next = lines.get(i + 1).map(|n| n.trim()).unwrap_or("");
        assert!(
            !next.is_empty() && !next.starts_with('[') && !next.starts_with("--"),
            "{t} has no description of its own: next line {next:?}"
        );
    }
    assert!(flags > 30, "{flags} flags found in:\n{text}");
    let faktory = text.find("--faktory-listen <").expect("--faktory-listen");
    assert!(text[faktory..].lines().nth(1).unwrap().contains("Faktory"));
    let sse = text
        .find("--sse-keepalive-ms <")
        .expect("--sse-keepalive-ms");
    assert!(text[sse..].lines().nth(1).unwrap().contains("SSE"));
    assert!(!text.contains("--test-clock"), "a test-only flag in --help");
}

#[test]
fn a_misspelt_environment_variable_is_named_with_the_one_meant() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
            "--data-dir",
        ])
        .arg(dir.path())
        .env("OJSD_CORS_ORIGIN", "https://admin.example.com")
        .env("OJSD_NOT_A_THING", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ojsd");
    // The warnings come before the store opens (logged at info).
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    while lines.len() < 50 {
        let mut l = String::new();
        if std::io::BufRead::read_line(&mut err, &mut l).unwrap() == 0 || l.contains("store opened")
        {
            break;
        }
        lines.push(l);
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = lines.concat();
    assert!(
        text.contains(
            "OJSD_CORS_ORIGIN is not a setting ojsd reads; did you mean OJSD_CORS_ORIGINS?"
        ),
        "{text}"
    );
    assert!(
        text.contains("OJSD_NOT_A_THING is not a setting ojsd reads\n"),
        "{text}"
    );
}

/// Every admin subcommand (and theirs, recursively): each flag and argument has a
/// description, and `--json` says what it prints there (only `tail` prints events).
#[test]
fn every_subcommand_argument_has_a_description() {
    fn help(path: &[String]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(path)
            .arg("--help")
            .output()
            .expect("run ojsd help");
        assert!(out.status.success(), "ojsd {path:?} --help");
        String::from_utf8(out.stdout).unwrap()
    }
    fn subcommands(text: &str) -> Vec<String> {
        let Some(at) = text.find("\nCommands:\n") else {
            return Vec::new();
        };
        text[at + 11..]
            .lines()
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_string)
            .collect()
    }
    let mut todo: Vec<Vec<String>> = subcommands(&help(&[]))
        .into_iter()
        .map(|c| vec![c])
        .collect();
    let (mut checked, mut missing) = (0, Vec::new());
    while let Some(path) = todo.pop() {
        let text = help(&path);
        for sub in subcommands(&text) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        for l in text.lines() {
            let t = l.trim_start();
            let is_arg = l.starts_with("  ") && (t.starts_with('-') || t.starts_with('<'));
            if !is_arg || t.starts_with("-h, --help") {
                continue;
            }
            checked += 1;
            // The spec and its description are separated by at least two spaces.
            let described = t
                .split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .nth(1)
                .is_some_and(|d| !d.starts_with('['));
            if !described {
                missing.push(format!("ojsd {}: {}", path.join(" "), t.trim()));
            }
            if t.starts_with("--json") {
                let tail = path == ["tail"];
                assert_eq!(t.contains("event"), tail, "ojsd {path:?}: {t}");
                assert!(!t.contains("tail"), "ojsd {path:?}: {t}");
            }
        }
    }
    assert!(
        missing.is_empty(),
        "no description:\n{}",
        missing.join("\n")
    );
    assert!(checked > 50, "{checked} arguments checked");
}
