mod common;

use common::*;
use serde_json::json;

#[test]
fn push_fetch_ack_round_trip() {
    let srv = Server::start();
    let mut c = srv.client();
    let pushed = c
        .push(&json!({"type": "email.send", "args": ["a@example.com"]}))
        .unwrap();
    assert_eq!(pushed["state"], "available");
    let mut w = srv.worker("w-1");
    let job = w.fetch(&["default"]).unwrap().expect("a job");
    assert_eq!(job["id"], pushed["id"]);
    assert_eq!(job["attempt"], 1);
    w.ack(&id_of(&job), Some(&json!({"sent": true}))).unwrap();
    let done = c.job(&id_of(&job)).unwrap();
    assert_eq!(done["state"], "completed");
    assert_eq!(done["result"], json!({"sent": true}));
}
