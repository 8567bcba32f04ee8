use super::*;

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
fn faktory_names_map_to_valid_ojs_names() {
    assert_eq!(ojs_type("send_email"), "send_email");
    let t = ojs_type("SomeWorker::Job");
    assert!(is_valid_job_type(&t), "{t}");
    assert_eq!(ojs_queue("default"), "default");
    let q = ojs_queue("High_Prio");
    assert!(crate::job::is_valid_queue(&q), "{q}");
    assert!(crate::job::is_valid_queue(&ojs_queue("_x")));
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
    assert_eq!(job["id"], ojs_id("abcdefgh12"));
    let back = to_faktory_job(&job);
    assert_eq!(back["jid"], "abcdefgh12");
    assert_eq!(back["jobtype"], "SomeJob");
    assert_eq!(back["queue"], "Q_1");
    assert_eq!(back["args"], json!([1, "a"]));
    assert_eq!(back["retry"], 3);
    assert_eq!(back["custom"], json!({"k": 1}));
    assert_eq!(back["zzz"], true);
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
        "jobs must have a reliable jid"
    );
    assert_eq!(
        msg(r#"PUSH {"jid":"short","jobtype":"x"}"#),
        "jid must be at least 8 characters"
    );
    assert!(msg("PUSH nope").starts_with("Invalid JSON"));
    assert_eq!(
        msg("BATCH NEW {}"),
        "BATCH is only available in Faktory Enterprise"
    );
    assert_eq!(msg("FLUSHX"), "Unknown command FLUSHX");
}

#[test]
fn ack_fail_beat_fetch_parse() {
    let (c, r) = parse(br#"ACK {"jid":"abcdefgh12"}"#).unwrap();
    assert_eq!(r, Render::Ack);
    assert!(matches!(c, Command::Ack { id, .. } if id == ojs_id("abcdefgh12")));
    let (c, _) =
        parse(br#"FAIL {"jid":"abcdefgh12","errtype":"E","message":"m","backtrace":["a"]}"#)
            .unwrap();
    let Command::Fail { id, error } = c else {
        panic!()
    };
    assert_eq!(id, ojs_id("abcdefgh12"));
    assert_eq!(error["type"], "E");
    assert_eq!(error["message"], "m");
    let (c, r) = parse(b"FETCH Critical default").unwrap();
    assert_eq!(r, Render::Fetch);
    assert!(
        matches!(c, Command::Fetch { queues, .. } if queues == vec![ojs_queue("Critical"), "default".to_string()])
    );
    let (_, r) = parse(br#"BEAT {"wid":"w1","current_state":"quiet"}"#).unwrap();
    assert_eq!(r, Render::Beat);
}

#[test]
fn ack_of_an_unknown_jid_is_ok_and_directives_render_as_state() {
    let nf = OjsError::new(ErrorCode::NotFound, "no such job");
    assert_eq!(render(Render::Ack, Err(nf.clone())), Reply::Ok);
    assert_eq!(render(Render::Plain, Err(nf.clone())), Reply::Error(nf));
    let q = render(
        Render::Beat,
        Ok(Answer::Directive(
            crate::protocol::command::WorkerDirective::Quiet,
        )),
    );
    assert_eq!(q, Reply::json(&json!({"state": "quiet"})));
}
