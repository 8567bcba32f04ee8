//! Tests of the rebuild at start (`rebuild.rs`).

use super::*;
use crate::engine::request::Command;
use crate::engine::Answer;
use crate::job::parts::Parts;
use crate::job::Job;
use crate::store::{Batch, StoreKind};
use serde_json::{json, Value};

fn job(state: &str, queue: &str, extra: Value) -> Job {
    let mut v = json!({
        "specversion": "1.0.0-rc.1", "id": Uuid::now_v7().to_string(), "type": "t",
        "queue": queue, "args": [1], "retry": crate::job::RetryPolicy::default(),
        "state": state, "attempt": 1, "created_at": "2026-01-01T00:00:00Z",
    });
    if let (Some(m), Value::Object(x)) = (v.as_object_mut(), extra) {
        m.extend(x);
    }
    serde_json::from_value(v).unwrap()
}

fn jobs() -> Vec<Job> {
    // Far ahead, so no timer fires while the test looks.
    let t = "2099-03-01T10:00:00.123456Z";
    vec![
        job("available", "a", json!({"priority": 7, "timeout": 30})),
        job(
            "available",
            "a",
            json!({"expires_at": "2099-03-01T12:00:00+01:00"}),
        ),
        job("scheduled", "b", json!({"scheduled_at": t})),
        job("pending", "b", json!({"unique": {"keys": ["type"]}})),
        job(
            "active",
            "c",
            json!({"started_at": t, "worker_id": "w", "timeout": 0}),
        ),
        job("retryable", "c", json!({"next_retry_at": t})),
        job("completed", "d", json!({"completed_at": t})),
        job("cancelled", "d", json!({"cancelled_at": t})),
        job("discarded", "e", json!({"discarded_at": t, "priority": -3})),
    ]
}

fn v1_record(seq: u64, job: &Job) -> Vec<u8> {
    let mut v = vec![1u8];
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend(serde_json::to_vec(job).unwrap());
    v
}

fn v3_records(seq: u64, job: &Job) -> [(Vec<u8>, Vec<u8>); 2] {
    use super::super::record::{encode_job_record, state};
    let id = Uuid::parse_str(&job.id).unwrap();
    [
        (
            id.as_bytes().to_vec(),
            encode_job_record(job, &Parts::of(job)),
        ),
        (
            state::state_key(&id).to_vec(),
            state::encode_state(seq, job),
        ),
    ]
}

/// What one scanner makes of `records`, in the order given.
fn scan(records: &[(Vec<u8>, Vec<u8>)]) -> Chunk {
    let mut scanner = Scanner {
        now_ms: 1,
        retention_ms: 1000,
        default_timeout_secs: 5,
        numbers: HashMap::new(),
        waiting: None,
    };
    let mut chunk = Chunk::default();
    for (k, v) in records {
        scanner.add(&mut chunk, k, v);
    }
    scanner.give_up_waiting(&mut chunk);
    chunk
}

fn fields(f: &Found) -> impl PartialEq + std::fmt::Debug {
    let e = &f.entry;
    let t = (e.state, e.queue, e.priority, e.seq, e.timer, e.expires);
    (f.id, f.dead_at, t, e.timeout_ms)
}

#[test]
fn old_and_lean_records_give_the_same_index_entries() {
    for (seq, j) in jobs().iter().enumerate() {
        let (v2, _) = super::super::record::encode_record(seq as u64, j, &Parts::of(j));
        let id = Uuid::parse_str(&j.id).unwrap().as_bytes().to_vec();
        let old = scan(&[(id, v2)]);
        let lean = scan(&v3_records(seq as u64, j));
        assert_eq!((old.bad, lean.bad, old.old_format), (0, 0, 1));
        assert_eq!(fields(&old.jobs[0]), fields(&lean.jobs[0]), "{j:?}");
        assert_eq!(old.interrupted, lean.interrupted);
        assert_eq!(old.unique.len(), lean.unique.len());
        for (a, b) in old.unique.iter().zip(&lean.unique) {
            assert_eq!((a.0, &a.1, a.2), (b.0, &b.1, b.2));
        }
    }
}

#[test]
fn a_lean_job_needs_both_its_records() {
    let js = jobs();
    let [a_rec, a_state] = v3_records(1, &js[0]);
    let [b_rec, b_state] = v3_records(2, &js[1]);
    // Alone, a job record or a state record is unreadable; a good pair after them
    // still reads.
    let c = scan(&[a_rec.clone(), b_rec.clone(), b_state.clone()]);
    assert_eq!((c.bad, c.jobs.len()), (1, 1));
    let c = scan(&[a_state.clone(), b_rec.clone(), b_state.clone()]);
    assert_eq!((c.bad, c.jobs.len()), (1, 1));
    let c = scan(std::slice::from_ref(&b_rec));
    assert_eq!((c.bad, c.jobs.len()), (1, 0));
    // Another job's state record does not complete it.
    let c = scan(&[a_rec.clone(), b_state.clone()]);
    assert_eq!((c.bad, c.jobs.len()), (2, 0));
    let mut garbled = a_state.clone();
    garbled.1[9] = 99;
    let c = scan(&[a_rec, garbled, b_rec, b_state]);
    assert_eq!((c.bad, c.jobs.len()), (1, 1));
}

#[test]
fn both_record_versions_give_the_same_index_fields() {
    for (seq, j) in jobs().iter().enumerate() {
        let view: View = serde_json::from_slice(&serde_json::to_vec(j).unwrap()).unwrap();
        assert_eq!(view.header(), IndexHeader::of(j), "{}", j.state.as_str());
        let (rec, _) = super::super::record::encode_record(seq as u64, j, &Parts::of(j));
        assert_eq!(
            decode_record(&rec).and_then(|r| r.header),
            Some(view.header())
        );
    }
}

/// A typed request to the engine; the job or document it answers, as JSON.
fn call(handle: &super::super::EngineHandle, cmd: Command) -> Option<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    match rt.block_on(handle.call(None, cmd.clone())) {
        Ok(Answer::Job(j)) => Some(serde_json::from_slice(j.json()).unwrap()),
        Ok(Answer::Info(i)) => Some(serde_json::to_value(&i).unwrap()),
        Ok(Answer::Nothing | Answer::Ok) => None,
        other => panic!("{cmd:?}: {other:?}"),
    }
}

fn job_cmd(id: &str) -> Command {
    Command::Job { id: id.to_string() }
}

fn fetch_cmd(queue: &str) -> Command {
    Command::Fetch {
        queues: vec![queue.to_string()],
        count: None,
        wait: None,
    }
}

#[test]
fn start_reads_old_and_new_records_and_skips_bad_ones() {
    for kind in [StoreKind::Fjall, StoreKind::Sled] {
        start_reads_old_and_new_records_and_skips_bad_ones_in(kind);
    }
}

fn start_reads_old_and_new_records_and_skips_bad_ones_in(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let jobs = jobs();
    let mut store = crate::store::open(kind, dir.path(), 1 << 20).unwrap();
    let mut batch = Batch::default();
    for (n, j) in jobs.iter().enumerate() {
        let id = Uuid::parse_str(&j.id).unwrap();
        let seq = 100 + n as u64;
        let rec = match n % 3 {
            0 => v1_record(seq, j),
            1 => super::super::record::encode_record(seq, j, &Parts::of(j)).0,
            _ => {
                for (k, v) in v3_records(seq, j) {
                    batch.put(Space::Job, &k, v);
                }
                continue;
            }
        };
        batch.put(Space::Job, id.as_bytes(), rec);
    }
    // A lean job record without its state record, and a state record alone.
    let lost = job("available", "a", json!({}));
    let [lost_rec, _] = v3_records(1, &lost);
    batch.put(Space::Job, &lost_rec.0, lost_rec.1);
    let [_, orphan] = v3_records(1, &job("available", "a", json!({})));
    batch.put(Space::Job, &orphan.0, orphan.1);
    let (mut truncated, _) = super::super::record::encode_record(1, &jobs[0], &Parts::of(&jobs[0]));
    truncated.pop();
    batch.put(Space::Job, Uuid::now_v7().as_bytes(), truncated);
    batch.put(
        Space::Job,
        Uuid::now_v7().as_bytes(),
        b"\x02garbage".to_vec(),
    );
    batch.put(Space::Job, b"not a uuid", v1_record(1, &jobs[0]));
    store.commit(batch).unwrap();

    let cfg = super::super::Config {
        fetch_wait: std::time::Duration::from_millis(10),
        ..Default::default()
    };
    let (handle, thread) = super::super::start(store, cfg).unwrap();
    let info = call(&handle, Command::Info).unwrap();
    assert_eq!(info["totals"]["jobs"], jobs.len());
    assert_eq!(info["totals"]["dead"], 1);
    assert_eq!(info["totals"]["unique_keys"], 1);
    let count = |q: &str, s: &str| info["queues"][q][s].as_u64().unwrap();
    assert_eq!((count("a", "available"), count("b", "scheduled")), (2, 1));
    assert_eq!((count("b", "pending"), count("c", "available")), (1, 1));
    assert_eq!((count("c", "retryable"), count("d", "completed")), (1, 1));
    assert_eq!((count("d", "cancelled"), count("e", "discarded")), (1, 1));
    for j in jobs.iter().filter(|j| j.state != State::Active) {
        let got = call(&handle, job_cmd(&j.id)).unwrap();
        assert_eq!(
            got,
            serde_json::to_value(j).unwrap(),
            "{}",
            j.state.as_str()
        );
    }
    // Priority first.
    let fetched = call(&handle, fetch_cmd("a")).unwrap();
    assert_eq!(fetched["id"], jobs[0].id.as_str());
    let fetched = call(&handle, fetch_cmd("c")).unwrap();
    assert_eq!(
        fetched["id"],
        jobs[4].id.as_str(),
        "the interrupted job is requeued"
    );
    assert_eq!(call(&handle, fetch_cmd("b")), None);
    // Old records change like new ones: the ACKed v1 and v2 jobs are lean now.
    assert_eq!(
        call(
            &handle,
            Command::Ack {
                id: jobs[0].id.clone(),
                result: Some(json!([1.5])),
                handed_out: false,
            }
        ),
        None
    );
    assert_eq!(
        call(
            &handle,
            Command::Ack {
                id: jobs[4].id.clone(),
                result: None,
                handed_out: false,
            },
        ),
        None
    );
    let acked: Vec<Value> = [&jobs[0], &jobs[4]]
        .iter()
        .map(|j| call(&handle, job_cmd(&j.id)).unwrap())
        .collect();
    assert_eq!(acked[0]["state"], "completed");
    assert_eq!(acked[0]["args"], json!([1]));
    assert_eq!(acked[0]["result"], json!([1.5]));
    handle.shutdown();
    thread.join().unwrap().unwrap();
    // A restart reads them back as they were answered, from their lean records.
    let store = crate::store::open(kind, dir.path(), 1 << 20).unwrap();
    for (j, before) in [&jobs[0], &jobs[4]].iter().zip(&acked) {
        let id = Uuid::parse_str(&j.id).unwrap();
        let raw = store.get(Space::Job, id.as_bytes()).unwrap().unwrap();
        assert_eq!(raw[0], super::super::record::RECORD_V3, "rewritten as v3");
        let body = super::super::stored::load_body(store.as_ref(), id)
            .unwrap()
            .unwrap();
        assert_eq!(&serde_json::from_slice::<Value>(&body).unwrap(), before);
    }
    let (handle, thread) = super::super::start(store, Default::default()).unwrap();
    for (j, before) in [&jobs[0], &jobs[4]].iter().zip(&acked) {
        assert_eq!(&call(&handle, job_cmd(&j.id)).unwrap(), before);
    }
    handle.shutdown();
    thread.join().unwrap().unwrap();
}

#[test]
fn key_ranges_cover_every_key_once() {
    let k = |n: u128| n.to_be_bytes().to_vec();
    for (first, last, n) in [
        (0, u128::MAX, 4),
        (5, 5, 4),
        (10, 13, 8),
        (1000, 1_000_000, 3),
        (7, 9, 1),
    ] {
        let r = key_ranges(Some(&k(first)), Some(&k(last)), n);
        assert!(!r.is_empty() && r.len() <= n, "{first}..{last}/{n}: {r:?}");
        assert_eq!((r[0].0.as_slice(), &r[r.len() - 1].1), (&[][..], &None));
        for w in r.windows(2) {
            assert_eq!(w[0].1.as_ref(), Some(&w[1].0), "ranges meet");
            assert!(w[0].0 < w[1].0, "ranges are in order");
        }
    }
    assert_eq!(key_ranges(Some(&k(0)), Some(&k(u128::MAX)), 4).len(), 4);
    assert_eq!(
        key_ranges(Some(b"odd"), Some(&k(9)), 4),
        vec![(vec![], None)]
    );
    assert_eq!(key_ranges(None, None, 4), vec![(vec![], None)]);
    // The last key is usually a state record's: its job's id and one byte more.
    let mut state_key = k(u128::MAX);
    state_key.push(1);
    let r = key_ranges(Some(&k(0)), Some(&state_key), 4);
    assert_eq!(r, key_ranges(Some(&k(0)), Some(&k(u128::MAX)), 4));
    assert_eq!(r.len(), 4);
}

#[test]
fn start_indexes_many_records_over_several_scanners() {
    for kind in [StoreKind::Fjall, StoreKind::Sled] {
        start_indexes_many_records_over_several_scanners_in(kind);
    }
}

fn start_indexes_many_records_over_several_scanners_in(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = crate::store::open(kind, dir.path(), 1 << 20).unwrap();
    let mut batch = Batch::default();
    let queues = ["q0", "q1", "q2", "q3", "q4", "q5", "q6"];
    let total = 5 * CHUNK + 17;
    let mut ids = Vec::new();
    for n in 0..total {
        // Random ids spread over the whole key space, so every range gets some.
        let mut j = job("available", queues[n % queues.len()], json!({}));
        let id = Uuid::from_u128(rand::random());
        j.id = id.to_string();
        ids.push(j.id.clone());
        // Mostly lean pairs (a job record and its state record), some old records.
        if n % 10 == 0 {
            let (rec, _) = super::super::record::encode_record(n as u64, &j, &Parts::of(&j));
            batch.put(Space::Job, id.as_bytes(), rec);
        } else {
            for (k, v) in v3_records(n as u64, &j) {
                batch.put(Space::Job, &k, v);
            }
        }
    }
    store.commit(batch).unwrap();
    let (handle, thread) = super::super::start(store, Default::default()).unwrap();
    let info = call(&handle, Command::Info).unwrap();
    assert_eq!(info["totals"]["jobs"], total);
    for (i, q) in queues.iter().enumerate() {
        let expected = (0..total).filter(|n| n % queues.len() == i).count();
        assert_eq!(info["queues"][q]["available"], expected, "{q}");
    }
    // FIFO across the scanners' parts: the lowest seq first.
    assert_eq!(
        call(&handle, fetch_cmd("q3")).unwrap()["id"],
        ids[3].as_str()
    );
    assert_eq!(
        call(&handle, fetch_cmd("q3")).unwrap()["id"],
        ids[10].as_str()
    );
    handle.shutdown();
    thread.join().unwrap().unwrap();
}
