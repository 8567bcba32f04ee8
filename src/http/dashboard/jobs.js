// The job pages: the list (by queue and state, find by id), one job (its actions, progress,
// error history with times and backtraces, its events with heartbeats collapsed, the
// envelope) and the scheduled and retrying jobs. Uses app.js and pages.js (STATES, ...).
"use strict";

function jobRows(jobs, withActions = false) {
  return jobs.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, el("a", { href: `#/job/${encodeURIComponent(j.id)}` }, j.id)),
    el("td", {}, writtenName("type", j.type)), el("td", {}, writtenName("queue", j.queue)), el("td", {}, stateBadge(j.state)),
    el("td", { class: "num" }, j.attempt),
    el("td", {}, fmtTime(j.next_retry_at || j.scheduled_at || j.enqueued_at || j.created_at)),
    el("td", { class: "muted" }, j.error ? `${j.error.type}: ${j.error.message}` : ""),
    withActions ? el("td", {}, runNowAction(j)) : null));
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

/** What makes a waiting job run now: "Retry now" for a retrying job, "Run now" for a
 *  scheduled one (POST /ojs/v1/admin/jobs/{id}/retry), "Retry" for a dead one. */
function runNowAction(j) {
  const enc = encodeURIComponent;
  if (j.state === "retryable") return action("Retry now", () => api("POST", `/ojs/v1/admin/jobs/${enc(j.id)}/retry`));
  if (j.state === "scheduled") return action("Run now", () => api("POST", `/ojs/v1/admin/jobs/${enc(j.id)}/retry`));
  if (j.state === "discarded") return action("Retry", () => api("POST", `/ojs/v1/dead-letter/${enc(j.id)}/retry`));
  return null;
}

/** The job's events in order, each run of consecutive `job.heartbeat`s as one row. */
function eventRows(events) {
  const rows = [];
  for (let i = 0; i < events.length;) {
    const e = events[i];
    let n = 1;
    if (e.type === "job.heartbeat") while (events[i + n]?.type === "job.heartbeat") n++;
    if (n > 1) {
      const last = events[i + n - 1];
      rows.push(el("tr", { class: "heartbeats" }, el("td", {}, `${e.cursor}–${last.cursor}`),
        el("td", {}, `${fmtNum(n)} heartbeats`),
        el("td", {}, `first ${fmtTime(e.time)} · last ${fmtTime(last.time)}`),
        el("td", { class: "muted" }, e.data?.worker_id ?? e.source)));
    } else {
      rows.push(el("tr", { "data-type": e.type }, el("td", {}, e.cursor), el("td", {}, e.type), el("td", {}, fmtTime(e.time)),
        el("td", { class: "muted" }, e.source)));
    }
    i += n;
  }
  return rows;
}

/** The latest progress the job's worker reported (PROGRESS, as `job.progress` events). */
function progressView(events, job) {
  const last = events.filter((e) => e.type === "job.progress").pop();
  if (!last) return null;
  const d = last.data || {};
  const pct = Math.max(0, Math.min(100, Number(d.progress_percent ?? d.percent ?? 0)));
  const msg = d.progress_message ?? d.message ?? "";
  const stale = d.attempt != null && job.attempt != null && d.attempt !== job.attempt;
  return el("div", { id: "progress", class: "progress" },
    el("progress", { max: 100, value: pct, "aria-label": "progress" }),
    el("span", { class: "pct" }, `${Math.round(pct * 10) / 10}%`),
    msg ? el("span", { class: "msg" }, msg) : null,
    el("span", { class: "muted" }, ` · ${fmtTime(last.time)}${stale ? ` (attempt ${d.attempt})` : ""}`));
}

/** One error of the history: when, what, and its backtrace folded away. */
function errorRow(e) {
  const bt = Array.isArray(e.backtrace) ? e.backtrace : (typeof e.backtrace === "string" ? [e.backtrace] : []);
  return el("tr", { class: "error-entry" },
    el("td", { class: "num" }, e.attempt ?? ""),
    el("td", { class: "when" }, fmtTime(e.occurred_at || e.at || e.timestamp || e.failed_at)),
    el("td", {}, e.type ?? e.code ?? ""),
    el("td", {}, e.message ?? "",
      bt.length ? el("details", { class: "backtrace" }, el("summary", {}, `backtrace (${bt.length} line${bt.length > 1 ? "s" : ""})`),
        el("pre", {}, bt.map(String).join("\n"))) : null));
}

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
    const actions = [runNowAction(job)];
    if (!["completed", "cancelled", "discarded"].includes(job.state)) {
      actions.push(action("Cancel", async () => {
        if (await confirmAction(`Cancel job ${job.id}?`)) await api("DELETE", `/ojs/v1/jobs/${encodeURIComponent(job.id)}`);
      }, "danger"));
    }
    const errors = job.errors || (job.error ? [job.error] : []);
    const when = job.state === "retryable" ? `retry due ${fmtTime(job.next_retry_at || job.scheduled_at)}`
      : job.state === "scheduled" ? `due ${fmtTime(job.scheduled_at)}` : null;
    return el("section", {}, el("h2", {}, "Job ", job.id, " ", stateBadge(job.state)),
      el("p", { class: "muted" }, `${writtenName("type", job.type)} · queue ${writtenName("queue", job.queue)} · attempt ${job.attempt ?? 0}`, when ? ` · ${when}` : ""),
      el("div", { class: "bar" }, actions),
      progressView(mine, job),
      el("h3", {}, "Error history"),
      table([{ label: "attempt", num: 1 }, "time", "type", "message"], errors.map(errorRow), { id: "errors" }),
      el("h3", {}, "Events"),
      table(["cursor", "type", "time", "source"], eventRows(mine), { id: "events" }),
      el("h3", {}, "Envelope"),
      el("pre", { id: "envelope" }, JSON.stringify(job, null, 2)));
  },
  live: (e, route) => e.subject === route.arg,
};

pages.scheduled = {
  async render() {
    const [sched, retry] = await Promise.all([jobList("", "scheduled", 1, 100), jobList("", "retryable", 1, 100)]);
    return el("section", {}, el("h2", {}, "Scheduled and retrying"),
      el("h3", {}, `Scheduled (${fmtNum(sched.pagination.total)})`), table([...JOB_HEADERS, ""], jobRows(sched.items, true)),
      el("h3", {}, `Retrying (${fmtNum(retry.pagination.total)})`), table([...JOB_HEADERS, ""], jobRows(retry.items, true)));
  },
  live: isJobEvent,
};

