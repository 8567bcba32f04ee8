//! The Rust crate `faktory` (a real Faktory client, unmodified) against `--faktory-listen`.

mod common;

use common::Server;
use faktory::{Client, Job, Worker};
use std::sync::{Arc, Mutex};

/// What the worker's handler saw: each job's jid and args.
type Seen = Arc<Mutex<Vec<(String, Vec<serde_json::Value>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_faktory_crate_pushes_runs_and_acks_a_job() {
    let s =
        tokio::task::spawn_blocking(|| Server::start_with(&["--faktory-listen", "127.0.0.1:0"]))
            .await
            .unwrap();
    let url = format!("tcp://{}", s.faktory_addr);
    let mut client = Client::connect_to(&url).await.expect("client connects");
    let job = Job::new("SomeJob", vec!["hello", "world"]).on_queue("Crate_Q");
    let jid = job.id().to_string();
    client.enqueue(job).await.expect("enqueue");

    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let mut worker = Worker::builder()
        .register_fn("SomeJob", move |job| {
            let sink = sink.clone();
            async move {
                sink.lock()
                    .unwrap()
                    .push((job.id().to_string(), job.args().to_vec()));
                Ok::<(), std::io::Error>(())
            }
        })
        .connect_to(&url)
        .await
        .expect("worker connects");
    let ran = worker.run_one(0, &["Crate_Q"]).await.expect("run_one");
    assert!(ran, "a job was fetched and run");
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, jid);
    assert_eq!(
        got[0].1,
        vec![serde_json::json!("hello"), serde_json::json!("world")]
    );

    // Acknowledged: the OJS side sees the one record completed.
    let id = ojsd::protocol::faktory::ojs_id(&jid);
    let state = tokio::task::spawn_blocking(move || {
        let mut o = s.client();
        common::state_of(&mut o, &id)
    })
    .await
    .unwrap();
    assert_eq!(state, "completed");
}
