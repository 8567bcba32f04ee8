use super::*;
use crate::job::validate::Limits;
use crate::workflow::parse_definition;

fn t0() -> DateTime<Utc> {
    "2026-02-12T10:30:00Z".parse().unwrap()
}

fn job(t: &str) -> Value {
    json!({"type": t, "args": []})
}

/// A workflow plus a record of what it asked for, standing in for the engine.
struct Run {
    wf: Workflow,
    /// (node, parent_results) of every job created, in order.
    enqueued: Vec<(u32, Map<String, Value>)>,
    events: Vec<(String, Value)>,
}

impl Run {
    fn new(def: Value) -> Run {
        let def = parse_definition(&def, &Limits::default(), t0()).unwrap();
        let mut r = Run {
            wf: Workflow::new("wf1".into(), def, t0()),
            enqueued: Vec::new(),
            events: Vec::new(),
        };
        let effects = r.wf.start(t0());
        r.apply(effects);
        r
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Enqueue {
                    node,
                    parent_results,
                } => {
                    let ev = self.wf.enqueued(node, format!("job-{node}"));
                    self.enqueued.push((node, parent_results));
                    self.apply(ev.into_iter().collect());
                }
                Effect::Event { kind, data } => self.events.push((kind.name().to_string(), data)),
            }
        }
    }

    fn node_at(&self, path: &str) -> u32 {
        self.wf
            .nodes
            .iter()
            .position(|n| n.path == path)
            .unwrap_or_else(|| panic!("no node {path}")) as u32
    }

    fn settle(&mut self, path: &str, outcome: Outcome) {
        let n = self.node_at(path);
        let s = Settle {
            outcome,
            attempt: 1,
            started_at: Some(t0()),
        };
        let effects = self.wf.leaf_settled(n, s, t0());
        self.apply(effects);
    }

    fn ok(&mut self, path: &str, result: Value) {
        self.settle(path, Outcome::Completed(Some(result)));
    }

    fn fail(&mut self, path: &str) {
        let e = json!({"code": "boom", "message": "it broke", "attempt": 1});
        self.settle(path, Outcome::Failed(e));
    }

    fn paths_enqueued(&self) -> Vec<String> {
        self.enqueued
            .iter()
            .map(|(n, _)| self.wf.nodes[*n as usize].path.clone())
            .collect()
    }

    fn results_for(&self, path: &str) -> Value {
        let n = self.node_at(path);
        let (_, pr) = self.enqueued.iter().find(|(m, _)| *m == n).unwrap();
        Value::Object(pr.clone())
    }

    fn kinds(&self) -> Vec<&str> {
        self.events.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn state_of(&self, path: &str) -> NodeState {
        self.wf.nodes[self.node_at(path) as usize].state
    }
}

fn chain4() -> Value {
    json!({"type": "chain", "name": "order-processing", "steps":
        [job("order.validate"), job("payment.charge"), job("inventory.reserve"), job("notification.send")]})
}

#[test]
fn chain_runs_one_step_at_a_time_passing_every_earlier_result() {
    let mut r = Run::new(chain4());
    assert_eq!(r.paths_enqueued(), ["0"]);
    assert_eq!(r.results_for("0"), json!({}));
    assert_eq!(r.state_of("1"), NodeState::Waiting);
    assert!(r.wf.job_started(t0()).is_some());
    assert!(r.wf.job_started(t0()).is_none(), "started once");
    r.ok("0", json!({"total": 99.99}));
    assert_eq!(r.paths_enqueued(), ["0", "1"]);
    assert_eq!(r.results_for("1"), json!({"0": {"total": 99.99}}));
    r.ok("1", json!({"charge_id": "ch"}));
    assert_eq!(
        r.results_for("2"),
        json!({"0": {"total": 99.99}, "1": {"charge_id": "ch"}})
    );
    r.ok("2", json!(3));
    r.ok("3", json!(null));
    assert_eq!(r.wf.header.state, WfState::Completed);
    assert_eq!(
        (r.wf.header.completed_count, r.wf.header.failed_count),
        (4, 0)
    );
    assert_eq!(
        r.kinds(),
        [
            "workflow.created",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.completed"
        ]
    );
    let (_, first) = &r.events[1];
    assert_eq!(first["step_id"], "0");
    assert_eq!(first["steps_remaining"], 3);
    assert_eq!(first["workflow_name"], "order-processing");
}

#[test]
fn chain_failure_cancels_later_steps() {
    let mut r = Run::new(chain4());
    r.ok("0", json!(1));
    r.fail("1");
    assert_eq!(r.paths_enqueued(), ["0", "1"]);
    assert_eq!(r.state_of("2"), NodeState::Cancelled);
    assert_eq!(r.state_of("3"), NodeState::Cancelled);
    assert_eq!(r.wf.header.state, WfState::Failed);
    assert_eq!(r.kinds().last(), Some(&"workflow.failed"));
    let (_, failed) = r.events.last().unwrap();
    assert_eq!(failed["failed_step_id"], "1");
    assert_eq!(failed["error"]["code"], "boom");
    let view = r.wf.view(&|_| None);
    assert_eq!(view["metadata"]["error"]["failed_step_index"], 1);
    assert_eq!(
        view["metadata"]["error"]["failed_job_ids"],
        json!(["job-2"])
    );
    assert_eq!(view["steps"][2]["state"], "cancelled");
    assert_eq!(view["steps"][2]["job_id"], Value::Null);
    // A late settle of the failed step (a dead-letter retry) changes nothing.
    r.ok("1", json!(2));
    assert_eq!(r.state_of("1"), NodeState::Failed);
}

#[test]
fn group_fails_only_after_every_job_is_done() {
    let mut r = Run::new(json!({"type": "group", "jobs": [job("a"), job("b"), job("c")]}));
    assert_eq!(r.paths_enqueued(), ["0", "1", "2"]);
    r.fail("1");
    assert_eq!(r.wf.header.state, WfState::Pending);
    r.ok("0", json!("a"));
    assert!(!r.wf.header.state.is_terminal());
    r.ok("2", json!("c"));
    assert_eq!(r.wf.header.state, WfState::Failed);
    assert_eq!(
        (r.wf.header.completed_count, r.wf.header.failed_count),
        (2, 1)
    );
    assert_eq!(r.events[1].0, "workflow.job_failed");
}

fn batch(callbacks: Value) -> Value {
    json!({"type": "batch", "jobs": [job("e.send"), job("e.send"), job("e.send")],
        "callbacks": callbacks})
}

fn all_callbacks() -> Value {
    json!({"on_complete": job("b.report"), "on_success": job("b.celebrate"),
        "on_failure": job("b.alert")})
}

#[test]
fn batch_firing_matrix_scenario_a() {
    let mut r = Run::new(batch(all_callbacks()));
    for i in 0..3 {
        r.ok(&i.to_string(), json!({"n": i}));
    }
    let all = json!({"0": {"n": 0}, "1": {"n": 1}, "2": {"n": 2}});
    assert_eq!(
        r.paths_enqueued(),
        ["0", "1", "2", "on_complete", "on_success"]
    );
    assert_eq!(r.results_for("on_complete"), all);
    assert_eq!(r.results_for("on_success"), all);
    assert_eq!(r.state_of("on_failure"), NodeState::Skipped);
    assert_eq!(
        r.kinds()
            .iter()
            .filter(|k| **k == "workflow.callback_fired")
            .count(),
        2
    );
    r.ok("on_complete", json!(1));
    assert!(!r.wf.header.state.is_terminal(), "waits for every callback");
    r.ok("on_success", json!(1));
    assert_eq!(r.wf.header.state, WfState::Completed);
    assert_eq!(r.wf.header.completed_count, 3, "callbacks are not counted");
}

#[test]
fn batch_firing_matrix_scenario_b_and_failing_callbacks() {
    let mut r = Run::new(batch(all_callbacks()));
    r.ok("0", json!(0));
    r.ok("1", json!(1));
    r.fail("2");
    assert_eq!(
        r.paths_enqueued(),
        ["0", "1", "2", "on_complete", "on_failure"]
    );
    let want = json!({"0": 0, "1": 1, "2": {"error": {"code": "boom", "message": "it broke", "attempt": 1}}});
    assert_eq!(r.results_for("on_failure"), want);
    assert_eq!(r.state_of("on_success"), NodeState::Skipped);
    r.ok("on_complete", json!(null));
    r.ok("on_failure", json!(null));
    assert_eq!(r.wf.header.state, WfState::Completed);

    let mut r = Run::new(batch(all_callbacks()));
    for i in 0..3 {
        r.ok(&i.to_string(), json!(i));
    }
    r.fail("on_success");
    assert!(!r.wf.header.state.is_terminal());
    r.ok("on_complete", json!(null));
    assert_eq!(r.wf.header.state, WfState::Failed);
    let (_, failed) = r.events.last().unwrap();
    assert_eq!(failed["failed_step_id"], "on_success");
    let view = r.wf.view(&|_| None);
    assert_eq!(
        view["metadata"]["error"]["errors"][0]["callback"],
        "on_success"
    );

    // Nothing selected: the batch is done once its jobs are.
    let mut r = Run::new(batch(json!({"on_success": job("b.celebrate")})));
    r.ok("0", json!(0));
    r.ok("1", json!(1));
    r.fail("2");
    assert_eq!(r.paths_enqueued(), ["0", "1", "2"]);
    assert_eq!(r.wf.header.state, WfState::Completed);
}

#[test]
fn nested_chain_group_chain_passes_results_down_and_up() {
    let def = json!({"type": "chain", "steps": [
        job("extract"),
        {"type": "group", "jobs": [
            {"type": "chain", "steps": [job("t.a1"), job("t.a2")]},
            job("t.b")]},
        job("load")]});
    let mut r = Run::new(def);
    r.ok("0", json!("raw"));
    assert_eq!(r.paths_enqueued(), ["0", "1.0.0", "1.1"]);
    assert_eq!(r.results_for("1.0.0"), json!({"0": "raw"}));
    assert_eq!(r.results_for("1.1"), json!({"0": "raw"}));
    r.ok("1.1", json!("b"));
    r.ok("1.0.0", json!("a1"));
    assert_eq!(r.results_for("1.0.1"), json!({"0": "a1"}));
    assert_eq!(r.state_of("1"), NodeState::Pending);
    r.ok("1.0.1", json!("a2"));
    assert_eq!(r.state_of("1.0"), NodeState::Completed);
    assert_eq!(
        r.results_for("2"),
        json!({"0": "raw", "1": {"0": {"0": "a1", "1": "a2"}, "1": "b"}})
    );
    r.ok("2", json!(null));
    assert_eq!(r.wf.header.state, WfState::Completed);
    assert_eq!(r.wf.header.completed_count, 5);
    let view = r.wf.view(&|_| None);
    assert_eq!(view["steps"][1]["type"], "group");
    assert_eq!(view["steps"][1]["jobs"][0]["steps"][1]["result"], "a2");

    // A failure deep inside fails the group only when the group is done, then the chain.
    let def = json!({"type": "chain", "steps": [
        {"type": "group", "jobs": [{"type": "chain", "steps": [job("x"), job("y")]}, job("z")]},
        job("never")]});
    let mut r = Run::new(def);
    r.fail("0.0.0");
    assert_eq!(r.state_of("0.0.1"), NodeState::Cancelled);
    assert_eq!(r.state_of("0"), NodeState::Pending);
    r.ok("0.1", json!(1));
    assert_eq!(r.state_of("0"), NodeState::Failed);
    assert_eq!(r.state_of("1"), NodeState::Cancelled);
    assert_eq!(r.wf.header.state, WfState::Failed);
}

#[test]
fn cancel_stops_what_has_not_run() {
    let mut r = Run::new(json!({"type": "chain", "steps": [
        {"type": "group", "jobs": [job("a"), job("b")]}, job("c")]}));
    let (effects, jobs) = r.wf.cancel(t0(), |id| id == "job-2").unwrap();
    assert_eq!(
        jobs,
        vec![(3, "job-3".to_string())],
        "the running job may finish"
    );
    assert!(matches!(
        &effects[0],
        Effect::Event {
            kind: EventKind::WorkflowCancelled,
            ..
        }
    ));
    assert_eq!(r.state_of("1"), NodeState::Cancelled);
    assert_eq!(r.wf.header.state, WfState::Cancelled);
    r.settle("0.1", Outcome::Cancelled);
    r.ok("0.0", json!("late"));
    assert_eq!(r.state_of("0.0"), NodeState::Completed);
    assert_eq!(r.state_of("0.1"), NodeState::Cancelled);
    assert_eq!(
        (r.wf.header.completed_count, r.wf.header.failed_count),
        (1, 0)
    );
    assert_eq!(
        r.paths_enqueued(),
        ["0.0", "0.1"],
        "nothing new after cancel"
    );
    assert_eq!(
        r.wf.cancel(t0(), |_| false).unwrap_err(),
        WfState::Cancelled
    );
}

#[test]
fn a_job_cancelled_on_its_own_fails_the_workflow() {
    let mut r = Run::new(chain4());
    r.settle("0", Outcome::Cancelled);
    assert_eq!(r.wf.header.state, WfState::Failed);
    assert_eq!(r.wf.header.failed_count, 1);
    assert_eq!(r.state_of("0"), NodeState::Cancelled);
}

#[test]
fn records_round_trip_and_only_touched_nodes_are_dirty() {
    let mut r = Run::new(chain4());
    let (header, all) = r.wf.take_dirty();
    assert!(header);
    assert_eq!(all.len(), 5);
    r.ok("0", json!({"x": 1}));
    let (header, nodes) = r.wf.take_dirty();
    assert!(header);
    assert_eq!(nodes, vec![1, 2]);

    let h: Header = serde_json::from_value(serde_json::to_value(&r.wf.header).unwrap()).unwrap();
    let nodes: Vec<Node> =
        r.wf.nodes
            .iter()
            .map(|n| serde_json::from_value(serde_json::to_value(n).unwrap()).unwrap())
            .collect();
    let back = Workflow::restore(h.clone(), nodes.clone()).expect("consistent");
    assert_eq!(back.view(&|_| None), r.wf.view(&|_| None));
    let mut broken = nodes.clone();
    broken[0].children.push(99);
    assert!(Workflow::restore(h.clone(), broken).is_none());
    assert!(Workflow::restore(h, nodes[..3].to_vec()).is_none());
}

#[test]
fn an_instance_carries_the_workflow_attributes() {
    let r = Run::new(chain4());
    let mut pr = Map::new();
    pr.insert("0".into(), json!({"a": [1]}));
    let (new, len, depth) = r.wf.instance(2, pr.clone()).unwrap();
    let extra = &new.job.extra;
    assert_eq!(extra["workflow_id"], "wf1");
    assert_eq!(extra["workflow_step"], "1");
    assert_eq!(extra["parent_results"], json!({"0": {"a": [1]}}));
    assert_eq!(new.job.job_type, "payment.charge");
    // Its size counts the results it carries; its depth is theirs plus the attribute.
    let (_, small, _) = r.wf.instance(2, Map::new()).unwrap();
    assert!(len >= small + 12, "{len} vs {small}");
    assert_eq!(depth, 4);
    // Each instance is a job of its own.
    assert_ne!(r.wf.instance(2, pr).unwrap().0.job.id, new.job.id);
}

fn step(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "type": format!("dag.{id}"), "args": [], "depends_on": deps})
}

fn diamond() -> Value {
    json!({"steps": [step("d", &["b", "c"]), step("a", &[]), step("b", &["a"]), step("c", &["a"])]})
}

#[test]
fn dag_fans_out_and_in_passing_results_by_step_id() {
    let mut r = Run::new(diamond());
    assert_eq!(r.wf.header.kind, crate::workflow::Kind::Dag);
    assert_eq!(r.paths_enqueued(), ["a"]);
    assert_eq!(r.results_for("a"), json!({}));
    r.ok("a", json!("ra"));
    assert_eq!(r.paths_enqueued(), ["a", "b", "c"]);
    assert_eq!(r.results_for("c"), json!({"a": "ra"}));
    r.ok("c", json!("rc"));
    assert_eq!(r.paths_enqueued().len(), 3, "d waits for b too");
    assert_eq!(r.state_of("d"), NodeState::Waiting);
    r.ok("b", json!("rb"));
    assert_eq!(r.paths_enqueued(), ["a", "b", "c", "d"]);
    assert_eq!(r.results_for("d"), json!({"b": "rb", "c": "rc"}));
    r.ok("d", json!(null));
    assert_eq!(r.wf.header.state, WfState::Completed);
    assert_eq!(r.wf.header.completed_count, 4);
    let steps: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e.0 == "workflow.step_completed")
        .map(|e| &e.1["step_id"])
        .collect();
    assert_eq!(steps, [&json!("a"), &json!("c"), &json!("b"), &json!("d")]);
    assert_eq!(r.kinds().last(), Some(&"workflow.completed"));
    let view = r.wf.view(&|_| None);
    assert_eq!(view["type"], "dag");
    assert_eq!(view["steps"][0]["id"], "d");
    assert_eq!(view["steps"][0]["depends_on"], json!(["b", "c"]));
    assert_eq!(view["steps"][1]["depends_on"], json!([]));
}

#[test]
fn dag_failure_cancels_every_dependent_and_lets_other_branches_finish() {
    let mut r = Run::new(json!({"steps": [step("a", &[]), step("b", &[]),
        step("c", &["a"]), step("d", &["c", "b"]), step("e", &["b"])]}));
    assert_eq!(r.paths_enqueued(), ["a", "b"]);
    r.fail("a");
    assert_eq!(r.state_of("c"), NodeState::Cancelled);
    assert_eq!(r.state_of("d"), NodeState::Cancelled);
    assert_eq!(r.state_of("e"), NodeState::Waiting);
    assert!(!r.wf.header.state.is_terminal());
    r.ok("b", json!(1));
    // d depended on b too, but it is cancelled: only e starts.
    assert_eq!(r.paths_enqueued(), ["a", "b", "e"]);
    r.ok("e", json!(2));
    assert_eq!(r.wf.header.state, WfState::Failed);
    assert_eq!(
        (r.wf.header.completed_count, r.wf.header.failed_count),
        (2, 1)
    );
    let failed = &r
        .events
        .iter()
        .find(|e| e.0 == "workflow.failed")
        .unwrap()
        .1;
    assert_eq!(failed["failed_step_id"], "a");
    assert_eq!(failed["workflow_type"], "dag");
}

#[test]
fn dag_records_round_trip_and_bad_edges_are_refused() {
    let mut r = Run::new(diamond());
    r.ok("a", json!("ra"));
    let h: Header = serde_json::from_value(serde_json::to_value(&r.wf.header).unwrap()).unwrap();
    let nodes: Vec<Node> =
        r.wf.nodes
            .iter()
            .map(|n| serde_json::from_value(serde_json::to_value(n).unwrap()).unwrap())
            .collect();
    let mut back = Workflow::restore(h.clone(), nodes.clone()).expect("consistent");
    assert_eq!(back.view(&|_| None), r.wf.view(&|_| None));
    // The restored workflow goes on as the original would.
    let b = r.node_at("b");
    let c = r.node_at("c");
    let settle = || Settle {
        outcome: Outcome::Completed(None),
        attempt: 1,
        started_at: None,
    };
    assert!(back
        .leaf_settled(b, settle(), t0())
        .iter()
        .all(|e| !matches!(e, Effect::Enqueue { .. })));
    let next = back.leaf_settled(c, settle(), t0());
    assert!(next
        .iter()
        .any(|e| matches!(e, Effect::Enqueue { node: 1, .. })));
    let d = r.node_at("d") as usize;
    let mut own = nodes.clone();
    own[d].deps.push(d as u32);
    assert!(Workflow::restore(h.clone(), own).is_none());
    let mut root = nodes.clone();
    root[d].deps.push(0);
    assert!(Workflow::restore(h, root).is_none());
}

#[test]
fn cancelling_a_dag_cancels_the_steps_not_started() {
    let mut r = Run::new(diamond());
    r.ok("a", json!(1));
    let (_, jobs) = r.wf.cancel(t0(), |_| false).unwrap();
    assert_eq!(jobs.len(), 2, "b and c were enqueued");
    assert_eq!(r.state_of("d"), NodeState::Cancelled);
    assert_eq!(r.wf.header.state, WfState::Cancelled);
}
