//! The answers' JSON forms: as clients see them, and through a peer and back.

use super::*;

#[test]
fn state_counts_render_every_state_in_order() {
    let mut c = StateCounts::default();
    c.0[1] = 3;
    let v = serde_json::to_string(&c).unwrap();
    assert_eq!(
        v,
        r#"{"scheduled":0,"available":3,"pending":0,"active":0,"completed":0,"retryable":0,"cancelled":0,"discarded":0}"#
    );
    assert_eq!(c.get(State::Available), 3);
}

fn counts() -> StateCounts {
    StateCounts([1, 2, 3, 4, 5, 6, 7, 8])
}

fn summary() -> QueueSummary {
    QueueSummary {
        name: "q".into(),
        state: "paused",
        paused: true,
        counts: counts(),
        throughput: Throughput {
            processed_per_minute: 1,
            failed_per_minute: 2,
            processed_last_5m: 3,
            failed_last_5m: 4,
        },
    }
}

fn job() -> JobView {
    JobView::encoded(Bytes::from_static(
        br#"{"specversion":"1.0","id":"019300000000700080000000000000a1","type":"t","queue":"q","args":[1,"\u00e9"],"state":"available"}"#,
    ))
}

/// One value of every variant (the `match` makes a new variant fail to compile here
/// until it has one), each through JSON and back unchanged.
fn one_of_each() -> Vec<Answer> {
    let all = vec![
        Answer::Ok,
        Answer::Nothing,
        Answer::Job(job()),
        Answer::Jobs(vec![job(), job()]),
        Answer::Directive(WorkerDirective::Quiet),
        Answer::Info(Box::new(Info {
            server: ServerInfo {
                name: "ojsd",
                version: "9.9.9-peer",
                now: "2026-01-01T00:00:00Z".into(),
                uptime_s: 5,
                connections: 2,
                store: "postgres",
                store_bytes: 1 << 40,
            },
            totals: Totals {
                enqueued: 1,
                completed: 2,
                failed: 3,
                jobs: 4,
                dead: 5,
                unique_keys: 6,
                waiting_fetches: 7,
            },
            queues: QueueCountsMap(vec![
                QueueCounts {
                    name: "b".into(),
                    paused: true,
                    counts: counts(),
                },
                QueueCounts {
                    name: "a".into(),
                    paused: false,
                    counts: StateCounts::default(),
                },
            ]),
            workers: vec![InfoWorker {
                wid: "w1".into(),
                state: "quiet",
                last_seen: None,
                active_jobs: 1,
                info: serde_json::json!({"hostname": "h"}),
            }],
        })),
        Answer::Cluster(Box::new(ClusterState {
            store: "postgres",
            partitions: 1,
            nodes: vec![ClusterNode {
                peer_addr: Some("127.0.0.1:2".into()),
                id: "n1".into(),
                addr: Some("127.0.0.1:1".into()),
                partitions: vec![0],
                epoch: Some(3),
                lease_until: Some("2026-01-01T00:00:05.000Z".into()),
                heartbeat_at: None,
                role: "active",
                local: true,
            }],
            unowned: vec![],
        })),
        Answer::Queues(QueueList {
            total: 1,
            queues: vec![summary()],
        }),
        Answer::QueueStats(Box::new(QueueStats {
            summary: summary(),
            depth: 3,
            oldest_available_at: Some("2026-01-01T00:00:00Z".into()),
            latency_ms: -1,
            workers: 2,
            rate_limit: Some(serde_json::json!({"max": 5})),
        })),
        Answer::Purged(Purged {
            queue: "q".into(),
            purged_count: 3,
            states: vec!["available", "scheduled"],
        }),
        Answer::History(History {
            period_ms: 60_000,
            points: vec![HistoryPoint {
                at_ms: 1,
                processed: 2,
                failed: 3,
                enqueued: 4,
            }],
        }),
        Answer::Workers(WorkerList {
            total: 1,
            workers: vec![WorkerView {
                id: "w".into(),
                state: "running",
                connected: true,
                connections: 1,
                stale: false,
                last_heartbeat_at: None,
                started_at: Some("x".into()),
                active_jobs: 0,
                active_job_ids: vec!["j".into()],
                jobs_completed: 9,
                queues: serde_json::json!(["q"]),
                concurrency: Value::Null,
                hostname: serde_json::json!("h"),
                info: serde_json::json!({}),
            }],
            summary: WorkerSummary {
                total: 1,
                running: 1,
                quiet: 0,
                terminate: 0,
                stale: 0,
            },
        }),
        Answer::JobPage(JobPage {
            total: 10,
            jobs: vec![job()],
        }),
        Answer::Overview(Box::new(Overview {
            now_ms: 5,
            bucket_ms: 1000,
            points: vec![OverviewPoint {
                at_ms: 1,
                enqueued: 2,
                completed: 3,
                failed: 4,
                available: 5,
                active: 6,
            }],
            pickup: Pickup {
                samples: 3,
                p50_ms: Some(1),
                p99_ms: None,
            },
        })),
        Answer::DeadPage(DeadPage {
            total: 1,
            jobs: vec![job()],
        }),
        Answer::DeadStats(Box::new(DeadStats {
            total: 2,
            by_queue: serde_json::json!({"q": 2}).as_object().unwrap().clone(),
            by_error_type: [("E".to_string(), 2)].into_iter().collect(),
            oldest_at: None,
            newest_at: Some("t".into()),
            retention: DeadRetention {
                max_age: "P180D".into(),
                max_count: 10,
                next_prune_at: None,
            },
        })),
        Answer::DeadRetried(DeadRetried {
            matched: 3,
            retried: 2,
            failed: 1,
            errors: vec![BulkError {
                job_id: "j".into(),
                error: "gone".into(),
            }],
        }),
        Answer::DeadDeleted(DeadDeleted {
            matched: 2,
            deleted: 2,
        }),
        Answer::CronPage(CronPage {
            cron_jobs: vec![serde_json::json!({"name": "c"})],
            count: 1,
            pagination: Pagination {
                total: 1,
                limit: 10,
                offset: 0,
                has_more: false,
            },
        }),
        Answer::CronJob(CronJob {
            cron_job: serde_json::json!({"name": "c"}),
            created: Some(true),
        }),
        Answer::Workflow(WorkflowView {
            id: "wf1".into(),
            doc: serde_json::json!({"id": "wf1", "type": "chain"}),
        }),
        Answer::WorkflowPage(WorkflowPage {
            total: 1,
            workflows: vec![WorkflowSummary {
                id: "wf1".into(),
                kind: "chain",
                name: None,
                state: "running",
                created_at: "t".into(),
                completed_at: None,
                job_count: 2,
                completed_count: 1,
                failed_count: 0,
            }],
        }),
        Answer::PushedEach(Each {
            accepted: 1,
            rejected: vec![(
                1,
                OjsError::new(crate::error::ErrorCode::InvalidPayload, "bad"),
            )],
        }),
        Answer::Acked(Each {
            accepted: 2,
            rejected: vec![(
                0,
                OjsError::new(crate::error::ErrorCode::NotOwner, "not yours"),
            )],
        }),
        Answer::Mutated(Mutated {
            matched: 2,
            changed: 1,
        }),
        Answer::Flushed(Flushed {
            jobs: 3,
            workflows: 1,
        }),
        Answer::Latencies(vec![QueueLatency {
            queue: "q".into(),
            seconds: 1.25,
        }]),
        Answer::Letters(vec![
            crate::engine::request::Posted {
                seq: 7,
                to: 3,
                letter: crate::engine::request::Letter::Cancel {
                    job: uuid::Uuid::now_v7(),
                },
            },
            crate::engine::request::Posted {
                seq: 8,
                to: 0,
                letter: crate::engine::request::Letter::Started {
                    workflow: "w".into(),
                    job: uuid::Uuid::now_v7(),
                },
            },
        ]),
    ];
    for a in &all {
        // Exhaustive: a new variant must be added above.
        match a {
            Answer::Ok
            | Answer::Nothing
            | Answer::Job(_)
            | Answer::Jobs(_)
            | Answer::Directive(_)
            | Answer::Info(_)
            | Answer::Cluster(_)
            | Answer::Queues(_)
            | Answer::QueueStats(_)
            | Answer::Purged(_)
            | Answer::History(_)
            | Answer::Workers(_)
            | Answer::JobPage(_)
            | Answer::Overview(_)
            | Answer::DeadPage(_)
            | Answer::DeadStats(_)
            | Answer::DeadRetried(_)
            | Answer::DeadDeleted(_)
            | Answer::CronPage(_)
            | Answer::CronJob(_)
            | Answer::Workflow(_)
            | Answer::WorkflowPage(_)
            | Answer::PushedEach(_)
            | Answer::Acked(_)
            | Answer::Mutated(_)
            | Answer::Flushed(_)
            | Answer::Latencies(_)
            | Answer::Letters(_) => {}
        }
    }
    all
}

#[test]
fn every_answer_variant_round_trips_through_json() {
    let all = one_of_each();
    assert_eq!(all.len(), 28, "one value per variant");
    for a in all {
        let wire = serde_json::to_string(&Ok::<_, OjsError>(a.clone())).unwrap();
        let back: Answered = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, Ok(a), "through {wire}");
    }
    let e: Answered = Err(OjsError::new(crate::error::ErrorCode::NotFound, "no job"));
    let back: Answered = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
    assert_eq!(back, e);
}

#[test]
fn a_job_travels_as_its_json_not_as_a_byte_array() {
    let wire = serde_json::to_string(&Answer::Job(job())).unwrap();
    assert_eq!(
        wire,
        format!("{{\"Job\":{}}}", std::str::from_utf8(job().json()).unwrap())
    );
}

#[test]
fn a_jobs_id_is_read_alike_from_a_composed_envelope_and_any_other_json() {
    let view = |s: &str| JobView::encoded(Bytes::copy_from_slice(s.as_bytes()));
    let cases = [
        // As the engine composes it: read without a parse.
        (
            r#"{"specversion":"1.0","id":"019a-1","type":"t"}"#,
            Some("019a-1"),
        ),
        // Escapes in either string, another order, no id, not an object: parsed.
        (r#"{"specversion":"1\"0","id":"a","type":"t"}"#, Some("a")),
        (r#"{"specversion":"1.0","id":"a\u0041\"b"}"#, Some("aA\"b")),
        (r#"{"id":"x","specversion":"1.0"}"#, Some("x")),
        (r#"{"specversion":"1.0","type":"t"}"#, None),
        (r#"{"specversion":"1.0","id":"#, None),
        ("[]", None),
    ];
    for (json, id) in cases {
        assert_eq!(view(json).id().as_deref(), id, "{json}");
    }
    // A real envelope: what its full parse says.
    let j = job();
    let parsed: serde_json::Value = serde_json::from_slice(j.json()).unwrap();
    assert_eq!(j.id().as_deref(), parsed["id"].as_str());
}
