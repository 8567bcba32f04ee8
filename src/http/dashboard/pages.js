// The dashboard's pages: each renders from the API and says which live events make it
// stale (the core re-renders it, coalesced). Uses app.js: el, api, action, table, ...
"use strict";

const STATES = ["available", "active", "scheduled", "retryable", "pending", "completed", "cancelled", "discarded"];
const isJobEvent = (e) => e.type && e.type.startsWith("job.");

// ---- overview ----------------------------------------------------------------------------

function lineChart(title, points, series, height = 150) {
  const w = 560, h = height, pad = 28;
  const max = Math.max(1, ...points.flatMap((p) => series.map((s) => s.value(p))));
  const x = (i) => pad + (i * (w - pad - 8)) / Math.max(1, points.length - 1);
  const y = (v) => h - 18 - (v * (h - 30)) / max;
  const svg = svgEl("svg", { width: w, height: h, role: "img", "aria-label": title });
  svg.append(svgEl("line", { x1: pad, y1: h - 18, x2: w - 8, y2: h - 18, stroke: "#c0c6d0" }));
  svg.append(svgEl("text", { x: 2, y: 12, fill: "#667085" }, fmtNum(Math.round(max * 10) / 10)));
  svg.append(svgEl("text", { x: 2, y: h - 20, fill: "#667085" }, "0"));
  svg.append(svgEl("text", { x: pad, y: h - 4, fill: "#667085" }, "−5 min"));
  svg.append(svgEl("text", { x: w - 40, y: h - 4, fill: "#667085" }, "now"));
  for (const s of series) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(" ");
    svg.append(svgEl("path", { d, fill: "none", stroke: s.color, "stroke-width": 2 }));
  }
  return el("div", { class: "chart" }, el("strong", {}, title), svg,
    // Swatches as SVG (the page's CSP allows no inline style attributes).
    el("div", { class: "legend" }, series.map((s) => el("span", {},
      svgEl("svg", { width: 10, height: 10 }, svgEl("rect", { width: 10, height: 10, fill: s.color })), ` ${s.label}`))));
}

pages.overview = {
  async render() {
    const [ov, queues] = await Promise.all([api("GET", "/ojs/v1/admin/overview"), api("GET", "/ojs/v1/admin/queues?per_page=1000")]);
    const totals = Object.fromEntries(STATES.map((s) => [s, 0]));
    for (const q of queues.items) for (const s of STATES) totals[s] += q.counts[s] || 0;
    const perSec = (n) => n / (ov.bucket_ms / 1000);
    return el("section", {},
      el("h2", {}, "Overview"),
      el("div", { class: "cards", id: "totals" }, STATES.map((s) =>
        el("div", { class: "card", "data-state": s }, el("div", { class: "n" }, fmtNum(totals[s])), el("div", { class: "l" }, s)))),
      el("div", { class: "cards" },
        el("div", { class: "card" }, el("div", { class: "n" }, ov.pickup.p50_ms ?? "—", " ms"), el("div", { class: "l" }, "pickup p50 (1 min)")),
        el("div", { class: "card" }, el("div", { class: "n" }, ov.pickup.p99_ms ?? "—", " ms"), el("div", { class: "l" }, "pickup p99 (1 min)")),
        el("div", { class: "card" }, el("div", { class: "n" }, fmtNum(queues.items.length)), el("div", { class: "l" }, "queues"))),
      el("div", { class: "charts" },
        lineChart("Jobs per second", ov.points, [
          { label: "enqueued", color: "#2e90fa", value: (p) => perSec(p.enqueued) },
          { label: "completed", color: "#12b76a", value: (p) => perSec(p.completed) },
          { label: "failed", color: "#f04438", value: (p) => perSec(p.failed) },
        ]),
        lineChart("Queue depth", ov.points, [
          { label: "available", color: "#2e90fa", value: (p) => p.available },
          { label: "active", color: "#f79009", value: (p) => p.active },
        ])));
  },
  live: isJobEvent,
};

// ---- queues ------------------------------------------------------------------------------

pages.queues = {
  async render() {
    const { items } = await api("GET", "/ojs/v1/admin/queues?per_page=1000");
    const enc = encodeURIComponent;
    // Latency (how long the oldest available job has waited) is in each queue's stats.
    const stats = await Promise.all(items.map((q) => api("GET", `/ojs/v1/admin/queues/${enc(q.name)}`).catch(() => null)));
    const rows = items.map((q, i) => el("tr", { "data-queue": q.name },
      el("td", {}, el("a", { href: `#/jobs?queue=${enc(q.name)}` }, q.name)),
      el("td", { class: "status" }, stateBadge(q.paused ? "paused" : "running")),
      ...["available", "active", "scheduled", "retryable", "completed", "discarded"].map((s) =>
        el("td", { class: `num count-${s}` }, fmtNum(q.counts[s]))),
      el("td", { class: "num latency" }, stats[i] ? `${fmtNum(stats[i].latency_ms)} ms` : "—"),
      el("td", { class: "num" }, fmtNum(q.throughput.processed_per_minute), " / ", fmtNum(q.throughput.failed_per_minute)),
      el("td", {},
        q.paused
          ? action("Resume", () => api("POST", `/ojs/v1/admin/queues/${enc(q.name)}/resume`))
          : action("Pause", () => api("POST", `/ojs/v1/admin/queues/${enc(q.name)}/pause`)),
        " ",
        action("Purge…", async () => {
          if (await confirmAction(`Delete every available and scheduled job of queue "${q.name}"? This cannot be undone.`)) {
            await api("DELETE", `/ojs/v1/admin/queues/${enc(q.name)}/jobs`, { states: ["available", "scheduled"], confirm: true });
          }
        }, "danger"))));
    return el("section", {}, el("h2", {}, "Queues"),
      table(["queue", "status", { label: "available", num: 1 }, { label: "active", num: 1 }, { label: "scheduled", num: 1 },
        { label: "retryable", num: 1 }, { label: "completed", num: 1 }, { label: "dead", num: 1 },
        { label: "latency", num: 1 }, { label: "done / failed per min", num: 1 }, ""], rows));
  },
  live: (e) => isJobEvent(e) || e.type.startsWith("queue."),
};

// ---- jobs --------------------------------------------------------------------------------

function jobRows(jobs) {
  return jobs.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, el("a", { href: `#/job/${encodeURIComponent(j.id)}` }, j.id)),
    el("td", {}, j.type), el("td", {}, j.queue), el("td", {}, stateBadge(j.state)),
    el("td", { class: "num" }, j.attempt),
    el("td", {}, fmtTime(j.next_retry_at || j.scheduled_at || j.enqueued_at || j.created_at)),
    el("td", { class: "muted" }, j.error ? `${j.error.type}: ${j.error.message}` : "")));
}

const JOB_HEADERS = ["id", "type", "queue", "state", { label: "attempt", num: 1 }, "when", "last error"];

async function jobList(queue, state, page, perPage = 25) {
  const q = new URLSearchParams({ page, per_page: perPage });
  if (queue) q.set("queue", queue);
  if (state) q.set("state", state);
  return api("GET", `/ojs/v1/admin/jobs?${q}`);
}

pages.jobs = {
  async render({ params }) {
    const queue = params.get("queue") || "", state = params.get("state") || "";
    const page = Math.max(1, Number(params.get("page")) || 1);
    const list = await jobList(queue, state, page);
    const go = (p) => {
      const q = new URLSearchParams({ page: p });
      if (queue) q.set("queue", queue);
      if (state) q.set("state", state);
      location.hash = `#/jobs?${q}`;
    };
    const find = el("input", { id: "find-id", placeholder: "job id", size: 40 });
    const qIn = el("input", { id: "filter-queue", placeholder: "queue", value: queue });
    const sIn = el("select", { id: "filter-state" }, el("option", { value: "" }, "any state"),
      STATES.map((s) => el("option", { value: s, selected: s === state }, s)));
    const pages = Math.max(1, Math.ceil(list.pagination.total / list.pagination.per_page));
    return el("section", {}, el("h2", {}, "Jobs"),
      el("form", { class: "bar", onsubmit: (ev) => { ev.preventDefault(); if (find.value.trim()) location.hash = `#/job/${encodeURIComponent(find.value.trim())}`; } },
        find, el("button", {}, "Find")),
      el("form", { class: "bar", onsubmit: (ev) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        if (qIn.value) q.set("queue", qIn.value);
        if (sIn.value) q.set("state", sIn.value);
        location.hash = `#/jobs?${q}`;
      } }, qIn, sIn, el("button", {}, "List")),
      table(JOB_HEADERS, jobRows(list.items)),
      el("div", { class: "pager" },
        el("button", { disabled: page <= 1, onclick: () => go(page - 1) }, "‹ newer"),
        el("span", {}, `page ${page} of ${pages} · ${fmtNum(list.pagination.total)} jobs`),
        el("button", { disabled: page >= pages, onclick: () => go(page + 1) }, "older ›")));
  },
  live: isJobEvent,
};

pages.job = {
  async render({ arg: id }) {
    const { job } = await api("GET", `/ojs/v1/jobs/${encodeURIComponent(id)}`);
    // Its events, in order: the job events logged from its creation on (pages of 1,000,
    // at most 20 pages), this job's only.
    const mine = [];
    let q = `since=${encodeURIComponent(job.created_at)}`;
    for (let i = 0; i < 20; i++) {
      const log = await api("GET", `/ojs/v1/events?${q}&limit=1000&types=job.*`).catch(() => null);
      if (!log) break;
      mine.push(...log.events.filter((e) => e.subject === job.id));
      if (!log.has_more) break;
      q = `after=${log.cursor}`;
    }
    const actions = [];
    if (job.state === "discarded") actions.push(action("Retry", () => api("POST", `/ojs/v1/dead-letter/${encodeURIComponent(job.id)}/retry`)));
    if (!["completed", "cancelled", "discarded"].includes(job.state)) {
      actions.push(action("Cancel", async () => {
        if (await confirmAction(`Cancel job ${job.id}?`)) await api("DELETE", `/ojs/v1/jobs/${encodeURIComponent(job.id)}`);
      }, "danger"));
    }
    const errors = job.errors || (job.error ? [job.error] : []);
    return el("section", {}, el("h2", {}, "Job ", job.id, " ", stateBadge(job.state)),
      el("div", { class: "bar" }, actions),
      el("h3", {}, "Error history"),
      table(["attempt", "type", "message", "at"], errors.map((e) =>
        el("tr", {}, el("td", {}, e.attempt ?? ""), el("td", {}, e.type), el("td", {}, e.message), el("td", {}, fmtTime(e.at || e.failed_at))))),
      el("h3", {}, "Events"),
      table(["cursor", "type", "time", "source"], mine.map((e) =>
        el("tr", {}, el("td", {}, e.cursor), el("td", {}, e.type), el("td", {}, fmtTime(e.time)), el("td", { class: "muted" }, e.source)))),
      el("h3", {}, "Envelope"),
      el("pre", { id: "envelope" }, JSON.stringify(job, null, 2)));
  },
  live: (e, route) => e.subject === route.arg,
};

pages.scheduled = {
  async render() {
    const [sched, retry] = await Promise.all([jobList("", "scheduled", 1, 100), jobList("", "retryable", 1, 100)]);
    return el("section", {}, el("h2", {}, "Scheduled and retrying"),
      el("h3", {}, `Scheduled (${fmtNum(sched.pagination.total)})`), table(JOB_HEADERS, jobRows(sched.items)),
      el("h3", {}, `Retrying (${fmtNum(retry.pagination.total)})`), table(JOB_HEADERS, jobRows(retry.items)));
  },
  live: isJobEvent,
};

// ---- workers -----------------------------------------------------------------------------

pages.workers = {
  async render() {
    const { items, summary } = await api("GET", "/ojs/v1/admin/workers");
    const enc = encodeURIComponent;
    const rows = items.map((w) => el("tr", { "data-worker": w.id },
      el("td", {}, w.id), el("td", {}, String(w.hostname ?? "")), el("td", {}, String(w.info?.pid ?? "")),
      el("td", {}, (w.info?.labels || []).join(", ")),
      el("td", { class: "status" }, stateBadge(w.state)), el("td", {}, fmtTime(w.last_heartbeat_at)),
      el("td", { class: "num" }, w.active_jobs), el("td", { class: "num" }, fmtNum(w.jobs_completed)),
      el("td", {}, w.state === "running" ? action("Quiet", () => api("POST", `/ojs/v1/admin/workers/${enc(w.id)}/quiet`)) : "",
        " ", w.state !== "terminate" ? action("Terminate", () => api("POST", `/ojs/v1/admin/workers/${enc(w.id)}/terminate`), "danger") : "")));
    return el("section", {}, el("h2", {}, `Workers (${summary.total})`),
      table(["id", "host", "pid", "labels", "state", "last beat", { label: "active", num: 1 }, { label: "completed", num: 1 }, ""], rows));
  },
  live: (e) => e.type.startsWith("worker.") || e.type === "job.started" || e.type === "job.completed",
};

// ---- dead letters ------------------------------------------------------------------------

pages.dead = {
  async render({ params }) {
    const filter = {};
    for (const k of ["queue", "type", "error_type"]) if (params.get(k)) filter[k] = params.get(k);
    const q = new URLSearchParams({ per_page: 100, ...filter });
    const list = await api("GET", `/ojs/v1/admin/dead-letter?${q}`);
    const enc = encodeURIComponent;
    const inputs = ["queue", "type", "error_type"].map((k) => el("input", { name: k, placeholder: k, value: filter[k] || "" }));
    const rows = list.items.map((j) => el("tr", { "data-job": j.id },
      el("td", {}, el("a", { href: `#/job/${enc(j.id)}` }, j.id)), el("td", {}, j.type), el("td", {}, j.queue),
      el("td", { class: "num" }, j.attempt), el("td", {}, j.error ? `${j.error.type}: ${j.error.message}` : ""),
      el("td", {}, fmtTime(j.discarded_at)),
      el("td", {}, action("Retry", () => api("POST", `/ojs/v1/dead-letter/${enc(j.id)}/retry`)), " ",
        action("Delete", async () => { if (await confirmAction(`Delete dead letter ${j.id} for good?`)) await api("DELETE", `/ojs/v1/dead-letter/${enc(j.id)}`); }, "danger"))));
    const total = list.pagination.total;
    return el("section", {}, el("h2", {}, `Dead letters (${fmtNum(total)})`),
      el("form", { class: "bar", onsubmit: (ev) => {
        ev.preventDefault();
        const f = new URLSearchParams();
        for (const i of inputs) if (i.value) f.set(i.name, i.value);
        location.hash = `#/dead?${f}`;
      } }, inputs, el("button", {}, "Filter"),
        action(`Retry all ${total}`, async () => { if (await confirmAction(`Retry all ${total} matching dead letters?`)) await api("POST", "/ojs/v1/dead-letter/retry", { ...filter, confirm: true }); }),
        action(`Delete all ${total}`, async () => { if (await confirmAction(`Delete all ${total} matching dead letters for good?`)) await api("DELETE", "/ojs/v1/dead-letter", { ...filter, confirm: true }); }, "danger")),
      table(["id", "type", "queue", { label: "attempts", num: 1 }, "last error", "discarded", ""], rows));
  },
  live: (e) => e.type === "job.discarded" || e.type === "job.enqueued",
};

// ---- cron --------------------------------------------------------------------------------

function inZone(t, zone) {
  if (!t) return "—";
  try {
    return new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short", timeZone: zone || "UTC" }).format(new Date(t)) + ` (${zone || "UTC"})`;
  } catch {
    return fmtTime(t);
  }
}

pages.cron = {
  async render() {
    const { cron_jobs: jobs } = await api("GET", "/ojs/v1/cron?limit=1000");
    const enc = encodeURIComponent;
    const rows = jobs.map((c) => el("tr", { "data-cron": c.name },
      el("td", {}, c.name), el("td", {}, el("code", {}, c.cron || c.expression || "")), el("td", {}, c.timezone || "UTC"),
      el("td", {}, c.enabled ? inZone(c.next_run_at, c.timezone) : "disabled"),
      el("td", {}, inZone(c.last_run_at, c.timezone)), el("td", { class: "num" }, fmtNum(c.run_count)),
      el("td", {}, c.type || c.job_template?.type || ""),
      el("td", {}, action(c.enabled ? "Disable" : "Enable", () => api("PATCH", `/ojs/v1/cron/${enc(c.name)}`, { enabled: !c.enabled })))));
    return el("section", {}, el("h2", {}, "Cron"),
      table(["name", "schedule", "zone", "next run", "last run", { label: "runs", num: 1 }, "job type", ""], rows));
  },
  live: (e) => e.type.startsWith("cron."),
};

// ---- workflows -----------------------------------------------------------------------------

const STATE_COLOR = { pending: "#eaecf0", waiting: "#eaecf0", available: "#d1e9ff", active: "#fef0c7", running: "#fef0c7",
  completed: "#d1fadf", failed: "#fee4e2", discarded: "#fee4e2", cancelled: "#d0d5dd", retryable: "#fdead7", scheduled: "#fdead7" };

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
    const state = node.job_state || node.state || "pending";
    g.append(svgEl("rect", { x: 0, y: 0, width: 150, height: 44, rx: 6, fill: STATE_COLOR[state] || "#eaecf0", stroke: "#98a2b3", "data-state": state }));
    g.append(svgEl("text", { x: 8, y: 18 }, String(node.type || "job").slice(0, 22)));
    g.append(svgEl("text", { x: 8, y: 34, fill: "#475467" }, state));
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
      g.append(svgEl("text", { x: pad + w + gap, y: cy + 8, fill: "#475467" }, `on ${c.role}`));
      g.append(c.g);
      cy += c.h + 26;
    }
    w += 2 * pad + (callbacks.length ? gap + Math.max(...callbacks.map((c) => c.w)) : 0);
    h = Math.max(y - 10, cy - 14) + pad;
  }
  if (depth) {
    g.prepend(svgEl("rect", { x: 0, y: 0, width: w, height: h, rx: 8, fill: "none", stroke: "#c0c6d0", "stroke-dasharray": "4 3" }));
    g.append(svgEl("text", { x: 8, y: 12, fill: "#667085" }, `${node.type} · ${node.state || ""}`));
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

pages.workflow = {
  async render({ arg: id }) {
    const { workflow: wf } = await api("GET", `/ojs/v1/workflows/${encodeURIComponent(id)}`);
    return el("section", {}, el("h2", {}, `Workflow ${wf.name || wf.id} `, stateBadge(wf.state)),
      el("p", { class: "muted" }, `${wf.type} · ${wf.id}`),
      el("div", { class: "chart" }, drawWorkflow(wf)),
      el("h3", {}, "Definition and state"), el("pre", {}, JSON.stringify(wf, null, 2)));
  },
  live: (e, route) => e.type.startsWith("workflow.") && e.subject === route.arg,
};
