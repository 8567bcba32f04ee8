use super::*;

fn parse(line: &[u8]) -> OjsResult<(Command, Render)> {
    super::parse(line, &Intake::default())
}

#[test]
fn jid_maps_to_a_stable_uuid_v7_and_a_uuid_v7_jid_is_kept() {
    let a = ojs_id("0123456789abcdef");
    assert_eq!(a, ojs_id("0123456789abcdef"));
    assert_ne!(a, ojs_id("0123456789abcdeg"));
    let u = uuid::Uuid::try_parse(&a).unwrap();
    assert_eq!(u.get_version_num(), 7);
    let v7 = "01890f6e-1b2c-7d3e-8f40-123456789abc";
    assert_eq!(ojs_id(v7), v7);
}

#[test]
fn push_keeps_the_faktory_fields_and_fetch_gives_them_back() {
    let (cmd, how) = parse(
        br#"PUSH {"jid":"abcdefgh12","jobtype":"SomeJob","args":[1,"a"],"queue":"Q_1","retry":3,"custom":{"k":1},"zzz":true}"#,
    )
    .unwrap();
    assert_eq!(how, Render::Plain);
    let Command::Push { job, .. } = cmd else {
        panic!("not a push: {cmd:?}")
    };
    let job = serde_json::to_value(&job.job).unwrap();
    assert_eq!(job["id"], ojs_id("abcdefgh12"));
    let back = to_faktory_job(&job);
    assert_eq!(back["jid"], "abcdefgh12");
    assert_eq!(back["jobtype"], "SomeJob");
    assert_eq!(back["queue"], "Q_1");
    assert_eq!(back["args"], json!([1, "a"]));
    assert_eq!(back["retry"], 3);
    assert_eq!(back["custom"], json!({"k": 1}));
    // Faktory drops unknown top-level fields; the job keeps what Faktory keeps.
    assert!(back.get("zzz").is_none(), "{back}");
    assert_eq!(back["retry"], 3);
    assert_eq!(back["reserve_for"], 1800);
    assert_eq!(job["timeout"], 1800);
    assert_eq!(job["retry"]["backoff_strategy"], "faktory");
    assert_eq!(job["retry"]["max_attempts"], 4);
}

#[test]
fn bad_pushes_get_faktory_errors() {
    let msg = |l: &str| parse(l.as_bytes()).unwrap_err().message;
    assert_eq!(
        msg(r#"PUSH {"jid":"abcdefgh12"}"#),
        "jobs must have a jobtype parameter"
    );
    assert_eq!(
        msg(r#"PUSH {"jobtype":"x"}"#),
        "jobs must have a reasonable jid parameter"
    );
    assert_eq!(
        msg(r#"PUSH {"jid":"short","jobtype":"x"}"#),
        "jobs must have a reasonable jid parameter"
    );
    assert!(msg("PUSH nope").starts_with("Invalid JSON"));
    assert_eq!(
        msg("BATCH NEW {}"),
        "BATCH is only available in Faktory Enterprise"
    );
    assert_eq!(msg("FLUSHX"), "unknown command FLUSHX");
    assert_eq!(
        msg(r#"PUSH {"jid":"abcdefgh12","jobtype":"x"}"#),
        "jobs must have an args parameter of type Array"
    );
    assert_eq!(
        msg(r#"PUSH {"jid":"abcdefgh12","jobtype":"x","args":[],"reserve_for":86401}"#),
        "jobs cannot be reserved for more than one day"
    );
    assert_eq!(
        msg(r#"MUTATE {"cmd":"explode","target":"dead"}"#),
        "Invalid mutate command"
    );
    assert_eq!(
        msg(r#"MUTATE {"cmd":"kill","target":"busy"}"#),
        "Invalid target for mutation"
    );
}

#[test]
fn ack_fail_beat_fetch_parse() {
    let (c, r) = parse(br#"ACK {"jid":"abcdefgh12"}"#).unwrap();
    assert_eq!(r, Render::Ack);
    assert!(matches!(c, Command::Ack { id, .. } if id == ojs_id("abcdefgh12")));
    let (c, _) =
        parse(br#"FAIL {"jid":"abcdefgh12","errtype":"E","message":"m","backtrace":["a"]}"#)
            .unwrap();
    let Command::Fail {
        id,
        error,
        handed_out: true,
        requeue: false,
    } = c
    else {
        panic!()
    };
    assert_eq!(id, ojs_id("abcdefgh12"));
    assert_eq!(error["type"], "E");
    assert_eq!(error["message"], "m");
    let (c, r) = parse(b"FETCH Critical default").unwrap();
    assert_eq!(r, Render::Fetch);
    assert!(
        matches!(c, Command::Fetch { queues, .. } if queues == vec![ojs_queue("Critical").unwrap(), "default".to_string()])
    );
    let (_, r) = parse(br#"BEAT {"wid":"w1","current_state":"quiet"}"#).unwrap();
    assert_eq!(r, Render::Beat);
}

#[test]
fn ack_of_an_unknown_jid_is_an_error_and_directives_render_as_state() {
    let nf = OjsError::new(ErrorCode::NotFound, "no such job");
    let shown = OjsError::new(ErrorCode::NotFound, "Job not found");
    assert_eq!(
        render(Render::Ack, Err(nf.clone())),
        Reply::Error(shown.clone())
    );
    assert_eq!(render(Render::Plain, Err(nf.clone())), Reply::Error(shown));
    let other = OjsError::new(ErrorCode::NotOwner, "job x is reserved by worker w");
    assert_eq!(render(Render::Ack, Err(other.clone())), Reply::Error(other));
    let q = render(
        Render::Beat,
        Ok(Answer::Directive(
            crate::protocol::command::WorkerDirective::Quiet,
        )),
    );
    assert_eq!(q, Reply::json(&json!({"state": "quiet"})));
}
