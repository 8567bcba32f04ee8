//! The HTTP binding's workflow shape (ojs-http-binding §14.1, what the OJS SDKs send): no
//! `type`, and `steps` that each carry a unique `id` and the ids they `depends_on`. Any
//! acyclic graph is accepted; every step is a job, validated like any other workflow job,
//! and the workflow's `options` are defaults for every step's `options`.

use super::{present, quoted, Ctx, OPTIONS};
use crate::workflow::{is_valid_id, DagStep, Def, Flow, Kind};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Whether an object without `type` is the binding's shape: `steps` is an array that is
/// empty or has a step with an `id` or `depends_on`. Otherwise (a chain that forgot its
/// type, say) the missing `type` is what gets reported.
pub(super) fn is_dag(m: &Map<String, Value>) -> bool {
    match present(m, "steps") {
        Some(Value::Array(items)) => {
            items.is_empty()
                || items.iter().any(|s| {
                    s.as_object()
                        .is_some_and(|o| o.contains_key("id") || o.contains_key("depends_on"))
                })
        }
        _ => false,
    }
}

const ID_RULE: &str = "must be a string of 1 to 128 characters from [A-Za-z0-9._:-]";

impl Ctx<'_> {
    /// The top-level object, recognized by its `steps` and lack of `type`.
    pub(super) fn dag(&mut self, m: &Map<String, Value>) -> Option<Flow> {
        let mut ok = true;
        let (id, name) = self.id_and_name(m, "$", &mut ok);
        for key in ["jobs", "callbacks"] {
            if m.contains_key(key) {
                let msg = format!("a workflow of steps with depends_on has no {key}");
                self.problem(format!("$.{key}"), msg);
                ok = false;
            }
        }
        let defaults = self.defaults(m, &mut ok);
        let items = match present(m, "steps") {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => {
                let msg = "steps array must contain at least one element";
                self.problem("$.steps".into(), msg.into());
                return None;
            }
            None => {
                self.problem("$.steps".into(), "steps is required".into());
                return None;
            }
            Some(_) => {
                self.problem("$.steps".into(), "steps must be an array".into());
                return None;
            }
        };
        // Pass 1: the step ids, so depends_on may name a step listed later.
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut ids: Vec<String> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let at = format!("$.steps[{i}]");
            let Value::Object(step) = item else {
                let msg = r#"a step must be an object: {"id", "type", "args", "depends_on"}"#;
                self.problem(at, msg.into());
                ok = false;
                ids.push(String::new());
                continue;
            };
            match present(step, "id") {
                Some(Value::String(s)) if is_valid_id(s) => {
                    if let Some(first) = index.get(s.as_str()) {
                        let msg = format!(
                            "duplicate step id {}: $.steps[{first}] has it too",
                            quoted(s)
                        );
                        self.problem(format!("{at}.id"), msg);
                        ok = false;
                    } else {
                        index.insert(s, i);
                    }
                    ids.push(s.clone());
                }
                None => {
                    let msg = "id is required: every step needs an id unique in the workflow";
                    self.problem(format!("{at}.id"), msg.into());
                    ok = false;
                    ids.push(String::new());
                }
                Some(_) => {
                    self.problem(format!("{at}.id"), format!("id {ID_RULE}"));
                    ok = false;
                    ids.push(String::new());
                }
            }
        }
        // Pass 2: the edges (dependency index, position in depends_on) and the jobs.
        let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); items.len()];
        let mut edges_ok = true;
        let mut children = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let Value::Object(step) = item else {
                continue;
            };
            let at = format!("$.steps[{i}]");
            match present(step, "depends_on") {
                None => {} // a root step (the binding requires `[]`; absence is read so)
                Some(Value::Array(deps)) => {
                    for (j, d) in deps.iter().enumerate() {
                        let here = format!("{at}.depends_on[{j}]");
                        match d.as_str().map(|s| (s, index.get(s))) {
                            Some((_, Some(&k))) => {
                                if !edges[i].iter().any(|(e, _)| *e == k) {
                                    edges[i].push((k, j));
                                }
                            }
                            Some((s, None)) => {
                                let msg = format!("unknown step id {}: no step has it", quoted(s));
                                self.problem(here, msg);
                                edges_ok = false;
                            }
                            None => {
                                self.problem(here, "must be a step id (a string)".into());
                                edges_ok = false;
                            }
                        }
                    }
                }
                Some(_) => {
                    let msg = "depends_on must be an array of step ids";
                    self.problem(format!("{at}.depends_on"), msg.into());
                    edges_ok = false;
                }
            }
            let nested = step
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| Kind::from_type(t).is_some());
            if nested {
                let msg = "a step with depends_on is a single job, not a nested workflow";
                self.problem(format!("{at}.type"), msg.into());
                ok = false;
                continue;
            }
            let mut env = step.clone();
            env.shift_remove("id");
            env.shift_remove("depends_on");
            with_defaults(&mut env, &defaults);
            self.jobs += 1;
            match self.job(&env, &at) {
                Some(j) => children.push(Def::Job(j)),
                None => ok = false,
            }
        }
        if edges_ok {
            if let Some(cycle) = find_cycle(&edges) {
                let first = cycle[0];
                let next = cycle.get(1).copied().unwrap_or(first);
                let j = edges[first]
                    .iter()
                    .find(|(k, _)| *k == next)
                    .map_or(0, |(_, j)| *j);
                let mut names: Vec<String> = cycle.iter().map(|c| quoted(&ids[*c])).collect();
                names.push(quoted(&ids[first]));
                let msg = format!(
                    "dependency cycle: {} (each step depends on the next)",
                    names.join(" -> ")
                );
                self.problem(format!("$.steps[{first}].depends_on[{j}]"), msg);
                ok = false;
            }
        }
        if !(ok && edges_ok) {
            return None;
        }
        let dag = ids
            .into_iter()
            .zip(edges)
            .map(|(id, e)| DagStep {
                id,
                depends_on: e.into_iter().map(|(k, _)| k as u32).collect(),
            })
            .collect();
        Some(Flow {
            kind: Kind::Dag,
            id,
            name,
            children,
            callbacks: Vec::new(),
            dag,
        })
    }

    /// The workflow's `options`: defaults for every step (the binding's "default enqueue
    /// options for all steps"), checked once here against the known job options.
    fn defaults(&mut self, m: &Map<String, Value>, ok: &mut bool) -> Map<String, Value> {
        match present(m, "options") {
            None => Map::new(),
            Some(Value::Object(o)) => {
                let mut out = Map::new();
                for (key, value) in o {
                    if value.is_null() {
                        continue;
                    }
                    if OPTIONS.iter().any(|(k, _)| k == key) {
                        out.insert(key.clone(), value.clone());
                    } else {
                        let known: Vec<&str> = OPTIONS.iter().map(|(k, _)| *k).collect();
                        let msg = format!("unknown job option; known: {}", known.join(", "));
                        self.problem(format!("$.options.{key}"), msg);
                        *ok = false;
                    }
                }
                out
            }
            Some(_) => {
                self.problem("$.options".into(), "options must be an object".into());
                *ok = false;
                Map::new()
            }
        }
    }
}

/// Add each default the step does not set itself (in its `options` or, for the attribute
/// the option sets, at its top level). A step whose `options` is not an object is left to
/// the job validation to report.
fn with_defaults(env: &mut Map<String, Value>, defaults: &Map<String, Value>) {
    if defaults.is_empty() {
        return;
    }
    let own = |key: &str, env: &Map<String, Value>| {
        let target = OPTIONS.iter().find(|(k, _)| *k == key).map(|(_, t)| *t);
        let in_options = env
            .get("options")
            .and_then(Value::as_object)
            .is_some_and(|o| {
                o.iter().any(|(k, v)| {
                    !v.is_null()
                        && OPTIONS
                            .iter()
                            .any(|(name, t)| name == k && Some(*t) == target)
                })
            });
        in_options || target.is_some_and(|t| present(env, t).is_some())
    };
    let missing: Vec<(String, Value)> = defaults
        .iter()
        .filter(|(k, _)| !own(k, env))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if missing.is_empty() {
        return;
    }
    match env.get_mut("options") {
        Some(Value::Object(o)) => o.extend(missing),
        None | Some(Value::Null) => {
            env.insert(
                "options".into(),
                Value::Object(missing.into_iter().collect()),
            );
        }
        Some(_) => {}
    }
}

/// A cycle of the graph (`edges[i]`: the steps step `i` depends on), as step indices each
/// depending on the next and the last on the first, starting at its lowest index. An
/// iterative depth-first search, so 10,000 steps in a line cannot overflow the stack.
fn find_cycle(edges: &[Vec<(usize, usize)>]) -> Option<Vec<usize>> {
    let n = edges.len();
    // 0: not seen, 1: on the current path, 2: done (no cycle through it).
    let mut color = vec![0u8; n];
    for start in 0..n {
        if color[start] != 0 {
            continue;
        }
        color[start] = 1;
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some(top) = stack.last_mut() {
            let v = top.0;
            match edges[v].get(top.1) {
                Some(&(w, _)) => {
                    top.1 += 1;
                    match color[w] {
                        0 => {
                            color[w] = 1;
                            stack.push((w, 0));
                        }
                        1 => {
                            let from = stack.iter().position(|(x, _)| *x == w)?;
                            let mut cycle: Vec<usize> = stack[from..].iter().map(|e| e.0).collect();
                            let low = (0..cycle.len()).min_by_key(|i| cycle[*i])?;
                            cycle.rotate_left(low);
                            return Some(cycle);
                        }
                        _ => {}
                    }
                }
                None => {
                    color[v] = 2;
                    stack.pop();
                }
            }
        }
    }
    None
}
