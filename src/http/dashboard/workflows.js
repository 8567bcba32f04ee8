// The workflow pages: the list, and one workflow drawn as boxes (chains left to right,
// groups and batches framed under their names with their callbacks, DAGs by depth).
"use strict";

const STATE_COLOR = { pending: "#eaecf0", waiting: "#eaecf0", available: "#d1e9ff", active: "#fef0c7", running: "#fef0c7",
  completed: "#d1fadf", failed: "#fee4e2", discarded: "#fee4e2", cancelled: "#d0d5dd", retryable: "#fdead7", scheduled: "#fdead7",
  retrying: "#fdead7" };

/** What a job box says: its job's state, except that a job back in its queue after a
 *  failed attempt (available again, attempt ≥ 1) is "retrying", and a failed one waiting
 *  for its backoff says which attempt failed. */
function stepState(node) {
  const state = node.job_state || node.state || "pending";
  const attempt = Number(node.attempt) || 0;
  if (state === "available" && attempt >= 1) return { state: "retrying", text: `retrying (try ${attempt + 1})` };
  if (state === "retryable") return { state, text: attempt ? `retryable (${attempt} failed)` : "retryable" };
  if (state === "active" && attempt > 1) return { state, text: `active (try ${attempt})` };
  return { state, text: state };
}

/** "on_complete" → "on complete". */
const callbackLabel = (role) => `on ${String(role).replace(/^on_/, "").replace(/_/g, " ")}`;

const isNested = (n) => ["chain", "group", "batch", "dag"].includes(n.type) && (n.steps || n.jobs);

/** A DAG (steps with depends_on): each step in the column of its longest path from a
 *  root (Kahn's order, no recursion), arrows from every dependency. */
function layoutDag(node, depth) {
  const g = svgEl("g");
  const steps = node.steps;
  const at = new Map(steps.map((s, i) => [s.id, i]));
  const level = steps.map(() => 0), indeg = steps.map(() => 0), out = steps.map(() => []);
  steps.forEach((s, i) => (s.depends_on || []).forEach((d) => {
    const j = at.get(d);
    if (j !== undefined) { out[j].push(i); indeg[i] += 1; }
  }));
  const order = [];
  indeg.forEach((d, i) => { if (!d) order.push(i); });
  for (let q = 0; q < order.length; q++) {
    for (const k of out[order[q]]) {
      level[k] = Math.max(level[k], level[order[q]] + 1);
      if (--indeg[k] === 0) order.push(k);
    }
  }
  const kids = steps.map((c) => layout(c, depth + 1));
  const pad = depth ? 10 : 0, head = depth ? 16 : 0, gapX = 40, gapY = 10;
  const colX = [], colY = [], pos = [];
  let w = 0, h = 0;
  steps.forEach((_, i) => {
    const c = level[i];
    colX[c] = colX[c] ?? 0;
    colY[c] = colY[c] ?? head + pad;
    pos[i] = { c, y: colY[c] };
    colY[c] += kids[i].h + gapY;
    colX[c] = Math.max(colX[c], kids[i].w);
  });
  const left = [];
  let x = pad;
  colX.forEach((cw, c) => { left[c] = x; x += (cw || 0) + gapX; });
  steps.forEach((s, i) => {
    const { c, y } = pos[i];
    for (const d of s.depends_on || []) {
      const j = at.get(d);
      if (j === undefined) continue;
      const from = pos[j];
      g.append(svgEl("line", { x1: left[from.c] + kids[j].w, y1: from.y + 22, x2: left[c], y2: y + 22, stroke: "#98a2b3", "stroke-width": 2 }));
    }
  });
  steps.forEach((_, i) => {
    kids[i].g.setAttribute("transform", `translate(${left[pos[i].c]},${pos[i].y})`);
    g.append(kids[i].g);
    h = Math.max(h, pos[i].y + kids[i].h);
  });
  w = x - gapX + pad;
  h += pad;
  return { g, w, h };
}

/** Lay out a node of the workflow tree: a job is a box; a chain puts its steps left to
 *  right joined by arrows; a group or batch stacks its jobs in a frame (a batch with its
 *  callbacks beside). Returns an SVG group and its size. */
function layout(node, depth = 0) {
  const g = svgEl("g");
  if (!isNested(node)) {
    const { state, text } = stepState(node);
    g.append(svgEl("rect", { x: 0, y: 0, width: 150, height: 44, rx: 6, fill: STATE_COLOR[state] || "#eaecf0", stroke: "#98a2b3", "data-state": state }));
    g.append(svgEl("text", { x: 8, y: 18 }, String(node.type || "job").slice(0, 22)));
    g.append(svgEl("text", { x: 8, y: 34, fill: "#475467" }, text));
    return { g, w: 150, h: 44 };
  }
  if (node.type === "dag") return layoutDag(node, depth);
  const kids = (node.steps || node.jobs).map((c) => layout(c, depth + 1));
  const callbacks = Object.entries(node.callbacks || {}).map(([role, c]) => ({ role, ...layout(c, depth + 1) }));
  const pad = depth ? 10 : 0, head = depth ? 16 : 0, gap = 30;
  let w, h;
  if (node.type === "chain") {
    let x = pad;
    h = 0;
    kids.forEach((k, i) => {
      if (i) g.append(svgEl("line", { x1: x - gap, y1: head + pad + 22, x2: x, y2: head + pad + 22, stroke: "#98a2b3", "stroke-width": 2 }));
      k.g.setAttribute("transform", `translate(${x},${head + pad})`);
      g.append(k.g);
      x += k.w + gap;
      h = Math.max(h, k.h);
    });
    w = x - gap + pad;
    h += head + 2 * pad;
  } else {
    let y = head + pad;
    w = 0;
    for (const k of kids) {
      k.g.setAttribute("transform", `translate(${pad},${y})`);
      g.append(k.g);
      y += k.h + 10;
      w = Math.max(w, k.w);
    }
    let cy = head + pad;
    for (const c of callbacks) {
      c.g.setAttribute("transform", `translate(${pad + w + gap},${cy + 12})`);
      g.append(svgEl("text", { x: pad + w + gap, y: cy + 8, fill: "#475467", class: "callback" }, callbackLabel(c.role)));
      g.append(c.g);
      cy += c.h + 26;
    }
    w += 2 * pad + (callbacks.length ? gap + Math.max(...callbacks.map((c) => c.w)) : 0);
    h = Math.max(y - 10, cy - 14) + pad;
  }
  if (depth) {
    g.prepend(svgEl("rect", { x: 0, y: 0, width: w, height: h, rx: 8, fill: "none", stroke: "#c0c6d0", "stroke-dasharray": "4 3" }));
    // A group or batch under its name (its kind beside it), or its kind when it has none.
    const title = node.name ? `${node.name} (${node.type})` : node.type;
    g.append(svgEl("text", { x: 8, y: 12, fill: "#667085", class: "frame-title" }, `${title} · ${node.state || ""}`));
  }
  return { g, w, h };
}

/** The workflow as a tree of boxes, each job coloured by its state. */
function drawWorkflow(wf) {
  const { g, w, h } = layout(wf);
  g.setAttribute("transform", "translate(10,10)");
  const svg = svgEl("svg", { width: Math.max(w + 20, 240), height: h + 20, role: "img", "aria-label": `${wf.type} ${wf.id}`, id: "wf-drawing" });
  svg.append(g);
  return svg;
}

pages.workflows = {
  async render({ params }) {
    const state = params.get("state") || "";
    const list = await api("GET", `/ojs/v1/workflows?limit=100${state ? `&state=${encodeURIComponent(state)}` : ""}`);
    const rows = list.workflows.map((w) => el("tr", { "data-workflow": w.id },
      el("td", {}, el("a", { href: `#/workflow/${encodeURIComponent(w.id)}` }, w.id)), el("td", {}, w.name || ""),
      el("td", {}, w.type), el("td", {}, stateBadge(w.state)),
      el("td", { class: "num" }, `${w.completed_count} / ${w.job_count}`), el("td", { class: "num" }, w.failed_count),
      el("td", {}, fmtTime(w.created_at))));
    return el("section", {}, el("h2", {}, `Workflows (${fmtNum(list.total)})`),
      table(["id", "name", "type", "state", { label: "done / jobs", num: 1 }, { label: "failed", num: 1 }, "created"], rows));
  },
  live: (e) => e.type.startsWith("workflow."),
};

/** The workflow's view gives the attempt of active and retryable steps only; an available
 *  step may be a retry that came due (or was retried now). Its attempt is read from the job
 *  itself, for the first 50 such steps (the rest show as available). */
async function addAttempts(wf) {
  const leaves = [];
  const walk = (n) => {
    if (!n || typeof n !== "object") return;
    if (n.job_state === "available" && n.job_id && !n.attempt && leaves.length < 50) leaves.push(n);
    for (const c of [...(n.steps || []), ...(n.jobs || []), ...Object.values(n.callbacks || {})]) walk(c);
  };
  walk(wf);
  await Promise.all(leaves.map(async (n) => {
    const got = await api("GET", `/ojs/v1/jobs/${encodeURIComponent(n.job_id)}`).catch(() => null);
    if (got?.job?.state === "available" && got.job.attempt > 0) n.attempt = got.job.attempt;
  }));
}

pages.workflow = {
  async render({ arg: id }) {
    const { workflow: wf } = await api("GET", `/ojs/v1/workflows/${encodeURIComponent(id)}`);
    const definition = JSON.stringify(wf, null, 2);
    await addAttempts(wf);
    return el("section", {}, el("h2", {}, `Workflow ${wf.name || wf.id} `, stateBadge(wf.state)),
      el("p", { class: "muted" }, `${wf.type} · ${wf.id}`),
      el("div", { class: "chart drawing" }, drawWorkflow(wf)),
      el("h3", {}, "Definition and state"), el("pre", {}, definition));
  },
  live: (e, route) => e.type.startsWith("workflow.") && e.subject === route.arg,
};
