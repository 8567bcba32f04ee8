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
  // Scaled down to the width there is (a phone) through its viewBox.
  const svg = svgEl("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": title });
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

/** Shown while the server holds no job and no queue: how to push a first one, over HTTP
 *  against this very server and over TCP (the port from whoami). */
function firstJobHelp() {
  const base = location.origin;
  const tls = location.protocol === "https:";
  const host = location.hostname.includes(":") ? `[${location.hostname}]` : location.hostname;
  const auth = whoami.authenticated ? ` -H "Authorization: Bearer $OJSD_TOKEN"` : "";
  const body = JSON.stringify({ type: "email.send", args: ["ana@example.com"], options: { queue: "default" } });
  const curlCmd = `curl -X POST ${base}/ojs/v1/jobs -H 'Content-Type: application/json'${auth} -d '${body}'`;
  const port = whoami.tcp_port;
  const line = `PUSH ${JSON.stringify({ type: "email.send", args: ["ana@example.com"] })}`;
  const connect = tls ? `openssl s_client -quiet -connect ${host}:${port}` : `nc ${host} ${port}`;
  const tcpCmd = `printf 'HELLO {"v":2}\\r\\n${line}\\r\\nEND\\r\\n' | ${connect}`;
  return el("div", { id: "first-job", class: "help" },
    el("h3", {}, "No jobs yet: push your first one"),
    el("p", {}, "Over HTTP (the OJS binding), against this server:"),
    el("pre", { id: "first-job-curl" }, curlCmd),
    port ? el("p", {}, "Or over the TCP protocol, in one line:") : null,
    port ? el("pre", { id: "first-job-tcp" }, tcpCmd) : null,
    whoami.authenticated ? el("p", { class: "muted" }, "This server needs a token: set OJSD_TOKEN for curl; over TCP, HELLO carries its pwdhash (PROTOCOL.md §2).") : null,
    el("p", { class: "muted" }, "It shows up here at once; a worker then takes it with FETCH default (or POST /ojs/v1/workers/fetch)."));
}

pages.overview = {
  async render() {
    const [ov, queues] = await Promise.all([api("GET", "/ojs/v1/admin/overview"), api("GET", "/ojs/v1/admin/queues?per_page=1000")]);
    const totals = Object.fromEntries(STATES.map((s) => [s, 0]));
    for (const q of queues.items) for (const s of STATES) totals[s] += q.counts[s] || 0;
    const empty = !queues.items.length && STATES.every((s) => !totals[s]);
    const perSec = (n) => n / (ov.bucket_ms / 1000);
    return el("section", {},
      el("h2", {}, "Overview"),
      empty ? firstJobHelp() : null,
      el("div", { class: "cards", id: "totals" }, STATES.map((s) =>
        el("div", { class: "card", "data-state": s }, el("div", { class: "n" }, fmtNum(totals[s])), el("div", { class: "l" }, s)))),
      el("div", { class: "cards" },
        el("div", { class: "card", id: "pickup-p50" }, el("div", { class: "n" }, fmtMs(ov.pickup.p50_ms)), el("div", { class: "l" }, "pickup p50 (1 min)")),
        el("div", { class: "card", id: "pickup-p99" }, el("div", { class: "n" }, fmtMs(ov.pickup.p99_ms)), el("div", { class: "l" }, "pickup p99 (1 min)")),
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
      el("td", { class: "status" }, el("span", { class: `state ${q.paused ? "paused" : "active-q"}` }, q.paused ? "paused" : "active")),
      ...["available", "active", "scheduled", "retryable", "completed", "discarded"].map((s) =>
        el("td", { class: `num count-${s}` }, fmtNum(q.counts[s]))),
      el("td", { class: "num latency" }, stats[i] ? fmtMs(stats[i].latency_ms) : "—"),
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
        { label: "retryable", num: 1 }, { label: "completed", num: 1 }, { label: "discarded", num: 1 },
        { label: "latency", num: 1 }, { label: "done / failed per min", num: 1 }, ""], rows));
  },
  live: (e) => isJobEvent(e) || e.type.startsWith("queue."),
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
      el("td", {}, el("a", { href: `#/job/${enc(j.id)}` }, j.id)), el("td", {}, writtenName("type", j.type)), el("td", {}, writtenName("queue", j.queue)),
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
    const rows = jobs.map((c) => {
      // The next few runs the server computed (next_runs), else the next one alone.
      const runs = c.next_runs || (c.next_run_at ? [c.next_run_at] : []);
      return el("tr", { "data-cron": c.name },
        el("td", {}, c.name, c.description ? el("div", { class: "muted" }, c.description) : null),
        el("td", {}, el("code", {}, c.cron || c.expression || "")), el("td", {}, c.timezone || "UTC"),
        el("td", { class: "cron-queue" }, el("a", { href: `#/jobs?queue=${enc(c.options?.queue || "default")}` }, c.options?.queue || "default")),
        el("td", {}, c.type || c.job_template?.type || ""),
        el("td", { class: "next-runs" }, c.enabled && runs.length
          ? el("ol", {}, runs.map((t) => el("li", {}, inZone(t, c.timezone))))
          : el("span", { class: "muted" }, c.enabled ? "never again" : "disabled")),
        el("td", {}, inZone(c.last_run_at, c.timezone)), el("td", { class: "num" }, fmtNum(c.run_count)),
        el("td", {}, action(c.enabled ? "Disable" : "Enable", () => api("PATCH", `/ojs/v1/cron/${enc(c.name)}`, { enabled: !c.enabled }))));
    });
    return el("section", {}, el("h2", {}, "Cron"),
      table(["name", "schedule", "zone", "queue", "job type", "next runs", "last run", { label: "runs", num: 1 }, ""], rows));
  },
  live: (e) => e.type.startsWith("cron."),
};

// ---- not found ---------------------------------------------------------------------------

pages.notfound = {
  async render({ name }) {
    return el("section", { id: "not-found" }, el("h2", {}, "Page not found"),
      el("p", {}, "There is no page ", el("code", {}, `#/${name}`), " in this dashboard."),
      el("p", {}, el("a", { href: "#/overview" }, "Go to the overview"), " or pick a page above."));
  },
};
