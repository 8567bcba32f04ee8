// The ojsd dashboard's core: the API with the Bearer token, what the token's role allows
// (GET /ojs/v1/whoami: only an admin token gets action buttons), safe DOM building, the hash
// router, the live event stream (SSE read with fetch, so it carries the token, resuming
// from Last-Event-ID) and coalesced re-rendering. The pages are in pages.js, jobs.js and
// workflows.js.
"use strict";

const $ = (sel) => document.querySelector(sel);

/** An element with attributes and children; text is always set as text, never as HTML. */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const svgEl = (tag, attrs = {}, ...children) => {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  for (const c of children.flat()) if (c != null) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
};

const stateBadge = (s) => el("span", { class: `state ${s}` }, s);

/** A job type or queue as its client wrote it: the Faktory port files names OJS does not
 *  allow under an escaped name (`fk.x_53end_45mail` for the type `SendEmail`,
 *  `fk.-43ritical-5f-51` for the queue `Critical_Q`; PROTOCOL.md §15); others as they are. */
function writtenName(kind, name) {
  const [prefix, esc] = kind === "type" ? ["fk.x", "_"] : ["fk.", "-"];
  if (typeof name !== "string" || !name.startsWith(prefix)) return name;
  const rest = name.slice(prefix.length), bytes = [];
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === esc) {
      const b = parseInt(rest.slice(i + 1, i + 3), 16);
      if (!/^[0-9a-f]{2}$/.test(rest.slice(i + 1, i + 3))) return name;
      bytes.push(b);
      i += 2;
    } else {
      bytes.push(rest.charCodeAt(i));
    }
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(bytes));
  } catch {
    return name;
  }
}
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "—");
const fmtNum = (n) => (n == null ? "—" : Number(n).toLocaleString());

/** A duration in milliseconds in the unit a person reads best: "850 ms", "4.2 s",
 *  "1.7 min", "3.5 h" (one decimal below 10 of the unit, none above). */
function fmtMs(ms) {
  if (ms == null || !Number.isFinite(Number(ms))) return "—";
  const v = Number(ms), a = Math.abs(v);
  const num = (x) => (Math.abs(x) >= 10 ? Math.round(x) : Math.round(x * 10) / 10).toLocaleString();
  if (a < 1000) return `${Math.round(v)} ms`;
  // Rounded up to the next unit where a rounded value would read "60 s" or "60 min".
  if (a < 59950) return `${num(v / 1000)} s`;
  if (a < 3597e3) return `${num(v / 60e3)} min`;
  return `${num(v / 3600e3)} h`;
}

// ---- the API -------------------------------------------------------------------------

let password = sessionStorage.getItem("ojsd.password");

function authHeaders(extra = {}) {
  const h = { ...extra };
  if (password) h.Authorization = `Bearer ${password}`;
  return h;
}

/** Ask for the password once; resolves when the operator has signed in. */
let signingIn = null;
function askPassword(message) {
  if (signingIn) return signingIn;
  signingIn = new Promise((resolve) => {
    const dlg = $("#login");
    $("#login-error").textContent = message || "";
    $("#login-form").onsubmit = (ev) => {
      ev.preventDefault();
      password = $("#password").value;
      sessionStorage.setItem("ojsd.password", password);
      role = null; // another token may have another role

      dlg.close();
      signingIn = null;
      resolve();
    };
    if (!dlg.open) dlg.showModal();
  });
  return signingIn;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

/** A JSON request; asks for the password on 401 and tries again. */
async function api(method, path, body) {
  for (let tries = 0; tries < 5; tries++) {
    const init = { method, headers: authHeaders(body === undefined ? {} : { "Content-Type": "application/json" }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    const resp = await fetch(path, init);
    const text = await resp.text();
    const json = text ? JSON.parse(text) : null;
    if (resp.status === 401) {
      await askPassword(password ? "That password was refused." : "");
      continue;
    }
    if (!resp.ok) throw new ApiError(resp.status, json);
    return json;
  }
  throw new Error("signed out");
}

// ---- the token's role ------------------------------------------------------------------

/** The role of the token in use (admin, producer, worker, observer); null until known. */
let role = null;

/** What whoami says beside the role: the TCP port (`tcp_port`), for the first-job help. */
let whoami = {};

/** Ask the server which role the token has, and show it in the header. */
async function learnRole() {
  const me = await api("GET", "/ojs/v1/whoami");
  whoami = me;
  role = me.role;
  document.body.dataset.role = role;
  const badge = $("#role");
  badge.textContent = me.authenticated ? role : "";
  badge.hidden = !me.authenticated;
}

/** Every action of the dashboard changes what is not the token's own: admin only. */
const mayAct = () => role === "admin";

/** A confirmation dialog for destructive actions; resolves to true when confirmed. */
function confirmAction(text) {
  return new Promise((resolve) => {
    const dlg = $("#confirm");
    $("#confirm-text").textContent = text;
    dlg.onclose = () => resolve(dlg.returnValue === "yes");
    dlg.showModal();
  });
}

// ---- live events -----------------------------------------------------------------------

const listeners = new Set();
let lastEventId = null;
let eventsSeen = 0;

function setLive(on) {
  const l = $("#live");
  l.className = `live ${on ? "on" : "off"}`;
  l.textContent = on ? `live · ${eventsSeen} events` : "reconnecting…";
}

/** Follow /ojs/v1/events/stream for good, resuming from the last event after a drop. */
async function followEvents() {
  const decoder = new TextDecoder();
  for (;;) {
    try {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const resp = await fetch("/ojs/v1/events/stream", { headers });
      if (resp.status === 401) {
        await askPassword();
        continue;
      }
      if (resp.status === 403) {
        // This token's role does not read events (only observer and admin do).
        $("#live").textContent = "no live events for this token";
        await new Promise((r) => setTimeout(r, 30000));
        continue;
      }
      if (!resp.ok || !resp.body) throw new Error(`events: HTTP ${resp.status}`);
      setLive(true);
      const reader = resp.body.getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let id = null, data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (id) lastEventId = id;
          if (!data) continue;
          let event;
          try { event = JSON.parse(data); } catch { continue; }
          eventsSeen++;
          setLive(true);
          for (const f of listeners) f(event);
        }
      }
    } catch (e) {
      console.warn("event stream", e);
    }
    setLive(false);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- the router ------------------------------------------------------------------------

const pages = {}; // name -> { render(params) -> Promise<Node>, live?(event) -> bool }
let current = null;
let refreshTimer = null;

function parseHash() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const [name, ...rest] = path.split("/");
  return { name, arg: rest.map(decodeURIComponent).join("/"), params: new URLSearchParams(query || "") };
}

async function show() {
  const route = parseHash();
  const page = Object.hasOwn(pages, route.name) ? pages[route.name] : pages.notfound;
  current = { route, page };
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.getAttribute("href").slice(2).split("?")[0] === route.name);
  }
  const app = $("#app");
  try {
    if (role === null) await learnRole();
    const node = await page.render(route);
    if (current.route === route) app.replaceChildren(node);
  } catch (e) {
    app.replaceChildren(el("p", { class: "error" }, `Could not load this page: ${e.message}`));
  }
}

/** Re-render the current page, at most about twice a second however many events come. */
function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    show();
  }, 400);
}

listeners.add((event) => {
  if (current?.page.live?.(event, current.route)) refreshSoon();
});

/** A button running an action, then refreshing the page; errors are shown beside it.
 *  Nothing (no button) when the token's role may not act. */
function action(label, fn, cls) {
  if (!mayAct()) return null;
  const b = el("button", { class: cls, onclick: async () => {
    b.disabled = true;
    try {
      await fn();
      await show();
    } catch (e) {
      b.after(el("span", { class: "error" }, ` ${e.message}`));
    } finally {
      b.disabled = false;
    }
  } }, label);
  return b;
}

/** A table in a container of its own that scrolls sideways when the table is wider than
 *  the screen (a phone), so the page itself never does. */
function table(headers, rows, attrs = {}) {
  return el("div", { class: "table-wrap" }, el("table", attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : undefined }, h.label ?? h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "nothing here")))));
}

window.addEventListener("hashchange", show);
window.addEventListener("DOMContentLoaded", () => {
  show();
  followEvents();
});
