use super::*;
use serde_json::json;

fn now() -> DateTime<Utc> {
    "2026-02-12T10:30:00Z".parse().unwrap()
}

fn parse(v: Value) -> Result<Definition, Vec<Problem>> {
    parse_definition(&v, &Limits::default(), now())
}

fn problems(v: Value) -> Vec<(String, String)> {
    parse(v)
        .unwrap_err()
        .into_iter()
        .map(|p| (p.path, p.message))
        .collect()
}

fn paths(v: Value) -> Vec<String> {
    problems(v).into_iter().map(|p| p.0).collect()
}

fn job(t: &str) -> Value {
    json!({"type": t, "args": []})
}

/// The §12.1 definition, options and all.
fn order_chain() -> Value {
    json!({"type": "chain", "id": "wf_019539a4-chain-example", "name": "order-processing",
    "steps": [
        {"type": "order.validate", "args": [{"order_id": "ord_123"}],
         "options": {"queue": "orders",
            "retry": {"max_attempts": 3, "backoff": "exponential", "base_delay_ms": 1000}}},
        {"type": "payment.charge", "args": [],
         "options": {"queue": "payments", "timeout_ms": 30000,
            "retry": {"max_attempts": 5, "backoff": "exponential", "base_delay_ms": 2000}}},
        {"type": "inventory.reserve", "args": [],
         "options": {"queue": "inventory", "retry": {"max_attempts": 3}}},
        {"type": "notification.send", "args": [],
         "options": {"queue": "notifications", "retry": {"max_attempts": 2}}}
    ]})
}

fn leaf(d: &Def) -> &JobDef {
    match d {
        Def::Job(j) => j,
        Def::Flow(_) => panic!("expected a job"),
    }
}

#[test]
fn spec_examples_parse_and_options_fold_into_the_envelope() {
    let def = parse(order_chain()).unwrap();
    assert_eq!(def.root.kind, Kind::Chain);
    assert_eq!(def.root.id.as_deref(), Some("wf_019539a4-chain-example"));
    assert_eq!((def.job_count, def.callback_count), (4, 0));
    let charge = &leaf(&def.root.children[1]).template.envelope();
    assert_eq!(charge["queue"], "payments");
    assert_eq!(charge["timeout"], 30);
    assert_eq!(charge["retry"]["initial_interval"], "PT2S");
    assert!(charge.get("options").is_none());
    assert_eq!(leaf(&def.root.children[1]).job_type, "payment.charge");

    let batch = json!({"type": "batch", "name": "bulk-email-send",
        "jobs": [{"type": "email.send", "args": ["user1@example.com", "welcome"]}],
        "callbacks": {
            "on_complete": {"type": "batch.report", "args": [], "options": {"queue": "reporting"}},
            "on_success": {"type": "batch.celebrate", "args": []},
            "on_failure": {"type": "batch.alert", "args": [],
                "options": {"queue": "alerts", "retry": {"max_attempts": 5}}}}});
    let def = parse(batch).unwrap();
    assert_eq!((def.job_count, def.callback_count), (1, 3));
    let roles: Vec<Role> = def.root.callbacks.iter().map(|c| c.0).collect();
    assert_eq!(roles, Role::ALL);
    assert_eq!(
        def.root.callbacks[2].1.template.envelope()["retry"]["max_attempts"],
        5
    );

    let composed = json!({"type": "chain", "name": "etl-with-fanout", "steps": [
        {"type": "data.extract", "args": [{"source": "api"}]},
        {"type": "group", "id": "wf_019539a4-transform-group", "name": "parallel-transforms",
         "jobs": [job("transform.normalize"), job("transform.enrich"), job("transform.deduplicate")]},
        {"type": "data.load", "args": []}]});
    let def = parse(composed).unwrap();
    assert_eq!(def.job_count, 5);
    match &def.root.children[1] {
        Def::Flow(f) => {
            assert_eq!(f.kind, Kind::Group);
            assert_eq!(f.id.as_deref(), Some("wf_019539a4-transform-group"));
            assert_eq!(f.children.len(), 3);
        }
        Def::Job(_) => panic!("step 1 is a group"),
    }
}

fn nest(kind: &str, inner: Value) -> Value {
    match kind {
        "chain" => json!({"type": "chain", "steps": [job("a.b"), inner]}),
        "group" => json!({"type": "group", "jobs": [job("a.b"), inner]}),
        _ => json!({"type": "batch", "jobs": [job("a.b"), inner],
            "callbacks": {"on_complete": job("a.done")}}),
    }
}

#[test]
fn every_composition_nests_three_levels_and_more_up_to_the_limit() {
    let kinds = ["chain", "group", "batch"];
    for outer in kinds {
        for middle in kinds {
            for inner in kinds {
                let v = nest(outer, nest(middle, nest(inner, job("x.y"))));
                let def = parse(v.clone()).unwrap_or_else(|p| panic!("{v}: {p:?}"));
                assert_eq!(def.job_count, 4, "{outer}/{middle}/{inner}");
            }
        }
    }
    let mut v = job("x.y");
    for _ in 0..MAX_DEPTH {
        v = nest("chain", v);
    }
    assert!(parse(v.clone()).is_ok(), "{MAX_DEPTH} levels are allowed");
    let too_deep = nest("group", v);
    let found = problems(too_deep);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "$.jobs[1].steps[1].steps[1].steps[1].steps[1]");
    assert!(found[0]
        .1
        .contains("nesting depth 6 exceeds the maximum of 5"));
}

#[test]
fn invalid_definitions_report_every_problem_with_its_path() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!([]), vec!["$"]),
        (json!({"steps": [job("a")]}), vec!["$.type"]),
        (json!({"type": "dag", "steps": [job("a")]}), vec!["$.type"]),
        (json!({"type": "chain", "steps": []}), vec!["$.steps"]),
        (json!({"type": "chain"}), vec!["$.steps"]),
        (json!({"type": "chain", "steps": {}}), vec!["$.steps"]),
        (json!({"type": "group", "jobs": []}), vec!["$.jobs"]),
        (
            json!({"type": "chain", "jobs": [job("a")]}),
            vec!["$.jobs", "$.steps"],
        ),
        (
            json!({"type": "batch", "jobs": [job("a")]}),
            vec!["$.callbacks"],
        ),
        (
            json!({"type": "batch", "jobs": [job("a")], "callbacks": {}}),
            vec!["$.callbacks"],
        ),
        (
            json!({"type": "batch", "jobs": [job("a")], "callbacks": {"on_done": job("b")}}),
            vec!["$.callbacks.on_done", "$.callbacks"],
        ),
        (
            json!({"type": "batch", "jobs": [job("a")], "callbacks": {"on_success":
                {"type": "group", "jobs": [job("b")]}}}),
            vec!["$.callbacks.on_success.type"],
        ),
        (
            json!({"type": "group", "jobs": [job("a")], "callbacks": {"on_success": job("b")}}),
            vec!["$.callbacks"],
        ),
        (
            json!({"type": "chain", "id": "has space", "name": 5, "steps": [job("a")]}),
            vec!["$.id", "$.name"],
        ),
        (
            json!({"type": "chain", "steps": [job("Bad Type"), 7, {"args": []}]}),
            vec!["$.steps[0].type", "$.steps[1]", "$.steps[2].type"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": {}}]}),
            vec!["$.steps[0].args"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "options": {"queue": "Bad Queue"}}]}),
            vec!["$.steps[0].options.queue"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "options": {"retry": {"max_attempts": -1}}}]}),
            vec!["$.steps[0].options.retry.max_attempts"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "options": {"timeout_ms": "soon", "colour": "red"}, "queue": "q"}]}),
            vec!["$.steps[0].options.timeout_ms", "$.steps[0].options.colour"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [], "queue": "q",
                "options": {"queue": "r"}}]}),
            vec!["$.steps[0].options.queue"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "options": []}]}),
            vec!["$.steps[0].options"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "id": "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "parent_results": {}}]}),
            vec!["$.steps[0].id", "$.steps[0].parent_results"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [], "tags": [1]}]}),
            vec!["$.steps[0].tags"],
        ),
        (
            json!({"type": "chain", "steps": [{"type": "a", "args": [],
                "retry": {"base_delay_ms": -5}}]}),
            vec!["$.steps[0].retry.base_delay_ms"],
        ),
        (
            json!({"type": "chain", "steps": [job("a"),
                {"type": "group", "jobs": [job("b"), job("B"),
                    {"type": "batch", "jobs": [job("c")], "callbacks": {"on_failure": job("-")}}]}]}),
            vec![
                "$.steps[1].jobs[1].type",
                "$.steps[1].jobs[2].callbacks.on_failure.type",
            ],
        ),
    ];
    for (v, want) in cases {
        assert_eq!(paths(v.clone()), want, "{v}");
    }
}

#[test]
fn messages_and_the_summary_line() {
    let found = problems(json!({"type": "chain", "steps": []}));
    assert_eq!(
        found,
        vec![(
            "$.steps".to_string(),
            "steps array must contain at least one element".to_string()
        )]
    );
    let p =
        parse(json!({"type": "group", "jobs": [job("Bad"), job("a"), {"type": "a"}]})).unwrap_err();
    let line = super::super::summary(&p);
    assert!(line.starts_with("workflow validation failed: $.jobs[0].type: type \"Bad\""));
    assert!(
        line.contains("; $.jobs[2].args: args is required"),
        "{line}"
    );
}

#[test]
fn size_limits() {
    let many: Vec<Value> = (0..=MAX_JOBS).map(|_| job("a")).collect();
    let found = problems(json!({"type": "group", "jobs": many}));
    assert_eq!(found.len(), 1);
    assert!(found[0].1.contains("10001 jobs"));

    let bad: Vec<Value> = (0..MAX_PROBLEMS + 5).map(|_| job("A")).collect();
    let found = problems(json!({"type": "group", "jobs": bad}));
    assert_eq!(found.len(), MAX_PROBLEMS + 1);
    assert_eq!(found[MAX_PROBLEMS].1, "... and 5 more problems");

    let limits = Limits { max_job_bytes: 60 };
    let big = json!({"type": "chain", "steps": [{"type": "a", "args": ["x".repeat(100)]}]});
    let p = parse_definition(&big, &limits, now()).unwrap_err();
    assert_eq!(p[0].path, "$.steps[0]");
    assert!(p[0].message.contains("the limit is 60"));
}

#[test]
fn option_conversions() {
    let def = parse(
        json!({"type": "group", "jobs": [{"type": "a", "args": [], "options": {
        "timeout_ms": 1500, "delay_until": "2030-01-01T00:00:00Z", "tags": ["x"],
        "retry": {"initial_interval_ms": 250, "max_interval_ms": 60000}}}]}),
    )
    .unwrap();
    let env = &leaf(&def.root.children[0]).template.envelope();
    assert_eq!(env["timeout"], 2);
    assert_eq!(env["scheduled_at"], "2030-01-01T00:00:00Z");
    assert_eq!(env["tags"], json!(["x"]));
    assert_eq!(env["retry"]["initial_interval"], "PT0.25S");
    assert_eq!(env["retry"]["max_interval"], "PT1M");
}

fn step(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "type": "dag.step", "args": [], "depends_on": deps})
}

#[test]
fn a_dag_keeps_its_ids_edges_and_default_options() {
    let d = parse(
        json!({"name": "n", "options": {"queue": "email", "priority": 3}, "steps": [
        step("a", &[]),
        {"id": "b", "type": "dag.step", "args": [], "depends_on": ["a", "a"], "queue": "own"},
        {"id": "c", "type": "dag.step", "args": [], "depends_on": ["b", "a"],
         "options": {"priority": 9}}]}),
    )
    .unwrap();
    assert_eq!(d.root.kind, Kind::Dag);
    assert_eq!(d.job_count, 3);
    let edges: Vec<(&str, &[u32])> = d
        .root
        .dag
        .iter()
        .map(|s| (s.id.as_str(), &s.depends_on[..]))
        .collect();
    assert_eq!(edges, [("a", &[][..]), ("b", &[0][..]), ("c", &[1, 0][..])]);
    let env = |i: usize| match &d.root.children[i] {
        Def::Job(j) => serde_json::to_value(&*j.template).unwrap(),
        Def::Flow(_) => panic!("a flow"),
    };
    let shown = |i: usize| {
        let e = env(i);
        (
            e.to_string().contains("\"queue\":\"email\""),
            e.to_string().contains("\"priority\":9"),
        )
    };
    assert_eq!(shown(0), (true, false));
    assert!(env(1).to_string().contains("\"queue\":\"own\""));
    assert_eq!(shown(2), (true, true));
}

#[test]
fn dag_problems_have_paths() {
    assert_eq!(
        problems(json!({"steps": [step("a", &["c"]), step("b", &["a"]), step("c", &["b"])]})),
        [(
            "$.steps[0].depends_on[0]".to_string(),
            r#"dependency cycle: "a" -> "c" -> "b" -> "a" (each step depends on the next)"#
                .to_string()
        )]
    );
    assert_eq!(
        paths(
            json!({"steps": [step("a", &["nope", "a"]), 7, step("a", &[]),
            {"id": "x y", "type": "t", "args": []}], "jobs": []})
        ),
        [
            "$.jobs",
            "$.steps[1]",
            "$.steps[2].id",
            "$.steps[3].id",
            "$.steps[0].depends_on[0]"
        ]
    );
    // A cycle is looked for only once every edge is known.
    assert_eq!(
        paths(json!({"steps": [step("a", &["a", "b"])]})),
        ["$.steps[0].depends_on[1]"]
    );
    assert_eq!(paths(json!({"steps": null})), ["$.type"]);
    assert_eq!(paths(json!({"steps": [job("a.b")]})), ["$.type"]);
    assert_eq!(paths(json!({"steps": []})), ["$.steps"]);
}

#[test]
fn a_long_dag_is_checked_without_deep_recursion() {
    let n = 10_000;
    let mut steps: Vec<Value> = (0..n)
        .map(|i| {
            let deps: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            };
            json!({"id": format!("s{i}"), "type": "t", "args": [], "depends_on": deps})
        })
        .collect();
    assert!(parse(json!({"steps": steps.clone()})).is_ok());
    steps[0]["depends_on"] = json!([format!("s{}", n - 1)]);
    let p = problems(json!({"steps": steps}));
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, "$.steps[0].depends_on[0]");
}
