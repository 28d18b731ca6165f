// loopguard dashboard. Reads /v1/stats, /v1/tasks, /v1/loops, /v1/tasks/{id} and its history,
// and builds the page with DOM calls only: task texts come from agents and are never parsed as
// HTML. With a token set on the service, the token typed in is kept in this tab's
// sessionStorage and sent as `Authorization: Bearer` (docs/SERVICE.md#dashboard).
"use strict";

const TOKEN_KEY = "loopguard.token";
const REFRESH_MS = 3000;
const TASKS_LIMIT = 100;
const LOOPS_LIMIT = 30;

const ui = {
  token: sessionStorage.getItem(TOKEN_KEY),
  selected: null,
  autoSelected: false,
  busy: false,
  needToken: false,
  // A selected task that answered 404: not asked for again until it is listed again.
  gone: null,
  openTexts: new Set(),
};

class Unauthorized extends Error {}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

/** An element with attributes/properties and children (strings become text nodes). */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "title") el.title = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

async function api(path) {
  const headers = { accept: "application/json" };
  if (ui.token) headers.authorization = "Bearer " + ui.token;
  const resp = await fetch(path, { headers, cache: "no-store" });
  if (resp.status === 401) throw new Unauthorized();
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

// ---- formatting -------------------------------------------------------------------------

function ago(rfc3339) {
  if (!rfc3339) return "";
  const secs = Math.max(0, (Date.now() - Date.parse(rfc3339)) / 1000);
  if (secs < 5) return "just now";
  if (secs < 60) return `${Math.round(secs)} s ago`;
  if (secs < 3600) return `${Math.round(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.round(secs / 3600)} h ago`;
  return `${Math.round(secs / 86400)} d ago`;
}

function clock(rfc3339) {
  if (!rfc3339) return "";
  const d = new Date(rfc3339);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
}

function duration(secs) {
  if (secs < 90) return `${Math.round(secs)} s`;
  if (secs < 5400) return `${Math.round(secs / 60)} min`;
  if (secs < 172800) return `${(secs / 3600).toFixed(1)} h`;
  return `${(secs / 86400).toFixed(1)} d`;
}

const pct = (x) => (x === null || x === undefined ? "—" : `${(x * 100).toFixed(x < 0.1 ? 1 : 0)}%`);

function ms(x) {
  if (x === null || x === undefined) return "—";
  if (x < 10) return x.toFixed(1);
  return Math.round(x).toString();
}

function rate(x) {
  if (x >= 100) return Math.round(x).toString();
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

const words = (s) => String(s || "").replace(/_/g, " ");
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function kindBadge(kind, counted) {
  if (!kind || kind === "none") return h("span", { class: "badge b-none" }, "no loop");
  return h("span", { class: counted === false ? "badge b-kind-soft" : "badge b-kind" }, words(kind));
}

const statusBadge = (status) => h("span", { class: `badge b-${status}` }, status);
const actionBadge = (action) => h("span", { class: `badge b-act-${action}` }, words(action));

// ---- figures ----------------------------------------------------------------------------

function setFigure(id, value, unit, detail, alert) {
  const card = $(id);
  const v = card.querySelector(".value");
  v.replaceChildren(value, unit ? h("span", { class: "unit" }, unit) : "");
  card.querySelector(".detail").textContent = detail;
  card.classList.toggle("alert", !!alert);
}

function renderStats(s, tasksTotal) {
  const m = s.last_minute;
  const all = s.since_start;
  const span = `last ${Math.round(m.secs)} s`;
  setFigure("fig-rate", rate(m.events_per_sec), "/s", `${m.events} events, ${span} · ${all.events} since start`);
  setFigure(
    "fig-model",
    pct(m.model_share ?? all.model_share),
    "",
    m.events ? `${m.events_needing_model} of ${m.events} events, ${span}` : `${all.events_needing_model} of ${all.events} since start`,
  );
  setFigure(
    "fig-judge",
    pct(m.judge_share ?? all.judge_share),
    "",
    (m.events ? `${m.events_needing_judge} of ${m.events} events, ${span}` : `${all.events_needing_judge} of ${all.events} since start`) +
      (s.judge_configured ? "" : " · no judge configured"),
  );
  const lat = m.evaluate_requests ? m.latency_ms : all.latency_ms;
  setFigure(
    "fig-latency",
    lat.p50 === null ? "—" : `${ms(lat.p50)} / ${ms(lat.p95)}`,
    lat.p50 === null ? "" : "ms",
    m.evaluate_requests
      ? `${m.evaluate_requests} requests, ${span} · p99 ${ms(lat.p99)} ms`
      : `${all.evaluate_requests} requests since start`,
  );
  setFigure(
    "fig-loops",
    String(m.loops),
    "",
    `${span} · ${all.loops} since start · ${plural(s.pivots_issued, "pivot")} · ${plural(s.gates_triggered, "gate")}`,
    m.loops > 0,
  );
  setFigure(
    "fig-tasks",
    tasksTotal === null ? "—" : String(tasksTotal),
    "",
    `${s.tasks_in_memory} in memory` +
      (s.loop_memory_records === null ? "" : ` · ${plural(s.loop_memory_records, "loop")} remembered`),
  );
  const model = $("model");
  model.textContent = s.model_ready ? "model ready" : "model loading";
  model.className = "pill " + (s.model_ready ? "pill-ok" : "pill-warn");
  $("uptime").textContent = `up ${duration(s.uptime_secs)}`;
}

// ---- tasks ------------------------------------------------------------------------------

function renderTasks(list) {
  const body = $("tasks").querySelector("tbody");
  body.replaceChildren(
    ...list.tasks.map((t) => {
      const last = t.last_loop;
      return h(
        "tr",
        {
          class: t.task_id === ui.selected ? "selected" : "",
          "data-task": t.task_id,
          onclick: () => select(t.task_id, true),
        },
        h("td", { class: "id", title: t.task_id }, t.task_id),
        h("td", { class: "badges" }, statusBadge(t.status)),
        h("td", { class: "num" + (t.loop_count > 0 ? " hot" : "") }, t.loop_count),
        h("td", { class: "num" }, t.pivot_count),
        h("td", { class: "num" }, t.events_total),
        h("td", { class: "badges" }, last ? kindBadge(last.kind) : h("span", { class: "muted" }, "—")),
        h("td", { class: "when", title: t.updated_at }, ago(t.updated_at)),
      );
    }),
  );
  $("tasks").hidden = list.tasks.length === 0;
  $("tasks-empty").hidden = list.tasks.length > 0;
  const shown = list.tasks.length;
  $("tasks-note").textContent =
    list.total > shown ? `${shown} most recently updated of ${list.total}` : `${list.total} in all`;
}

// ---- recent loops -----------------------------------------------------------------------

function resolutionLine(r) {
  if (!r) return h("span", { class: "badge b-res-open" }, "unresolved");
  return h(
    "span",
    {},
    h("span", { class: `badge b-res-${r.result}` }, words(r.result)),
    r.note ? ` ${r.note}` : "",
    h("span", { class: "muted", title: r.resolved_at }, ` · ${ago(r.resolved_at)}`),
  );
}

function renderLoops(result) {
  const list = $("loops");
  const empty = $("loops-empty");
  if (result.disabled) {
    list.replaceChildren();
    empty.hidden = false;
    empty.textContent = "The loop memory is disabled ([memory] enabled = false).";
    $("loops-note").textContent = "";
    return;
  }
  const loops = result.loops;
  list.replaceChildren(
    ...loops.map((l) =>
      h(
        "li",
        {},
        h(
          "div",
          { class: "loop-top" },
          kindBadge(l.kind),
          h("button", { class: "task", type: "button", title: "Show this task", onclick: () => select(l.task_id, true) }, l.task_id),
          l.tool ? h("span", { class: "badge b-type" }, l.tool) : "",
          l.gated ? h("span", { class: "badge b-gate", title: "The gate paused the task for a human" }, "gate") : "",
          h("span", { class: "when", title: l.seen_at }, ago(l.seen_at)),
        ),
        h("div", { class: "loop-text", title: l.text }, l.text),
        h("div", { class: "loop-res" }, resolutionLine(l.resolution)),
      ),
    ),
  );
  empty.hidden = loops.length > 0;
  empty.textContent = "No loops yet.";
  $("loops-note").textContent = result.total > loops.length ? `${loops.length} newest of ${result.total}` : `${result.total} remembered`;
}

// ---- one task ---------------------------------------------------------------------------

function auditItem(r) {
  const cls = { pivot_issued: "pivot", gate_triggered: "gate", loop_counter_reset: "reset" }[r.event] || "other";
  let what;
  switch (r.event) {
    case "pivot_issued":
      what = [`Pivot directive issued`, h("span", { class: "muted" }, ` · pivot ${r.pivot_count}, after ${r.entropy_count_at_trigger} loops`)];
      break;
    case "gate_triggered":
      what = [`Gate: paused for a human`, h("span", { class: "muted" }, ` · loop count ${r.loop_count}`)];
      break;
    case "loop_counter_reset":
      what = [
        `Loop counter reset (${words(r.reason)})`,
        h("span", { class: "muted" }, ` · by ${r.by}, was ${r.previous_count}${r.note ? ` · ${r.note}` : ""}`),
      ];
      break;
    case "budget_exhausted":
      what = [`Budget exhausted`, h("span", { class: "muted" }, ` · ${r.events} events`)];
      break;
    case "agent_changed":
      what = [`Agent changed`, h("span", { class: "muted" }, ` · ${r.from || "?"} → ${r.to}`)];
      break;
    default:
      what = [words(r.event)];
  }
  return h(
    "li",
    { class: `audit ${cls}`, "data-audit": r.event },
    h("div", { class: "seq muted small", title: r.ts }, clock(r.ts)),
    h("div", { class: "mark" }),
    h("div", { class: "what" }, ...what),
  );
}

function verdictItem(v, shown, taskId) {
  const key = `${taskId}#${v.seq}`;
  const text = shown || v.text || "";
  const long = text.length > 360 || text.split("\n").length > 5;
  const open = ui.openTexts.has(key);
  const textEl = text ? h("div", { class: "text" + (open ? " open" : "") }, text) : null;
  const more =
    long && textEl
      ? h(
          "button",
          {
            class: "more",
            type: "button",
            onclick: (e) => {
              const nowOpen = textEl.classList.toggle("open");
              if (nowOpen) ui.openTexts.add(key);
              else ui.openTexts.delete(key);
              e.target.textContent = nowOpen ? "less" : "more";
            },
          },
          open ? "less" : "more",
        )
      : null;
  const hasSim = v.similarity !== null && v.similarity !== undefined;
  const sim = hasSim
    ? h("span", { class: "sim", title: "cosine similarity to the matched event" }, "cos ", h("b", {}, v.similarity.toFixed(2)))
    : v.loop && v.matched_seq !== null && v.matched_seq !== undefined
      ? h("span", { class: "exact", title: "the same text or call, without the model" }, "exact")
      : null;
  const matched =
    v.matched_seq === null || v.matched_seq === undefined
      ? null
      : h(
          "div",
          { class: "matched" },
          h("b", {}, `matches #${v.matched_seq}`),
          v.matched_text ? h("span", { class: "mt" }, v.matched_text) : "",
        );
  const classes = ["ev"];
  if (v.loop) classes.push("loop");
  if (v.loop && !v.counted) classes.push("uncounted");
  return h(
    "li",
    { class: classes.join(" "), "data-seq": v.seq, "data-kind": v.kind },
    h("div", { class: "seq" }, h("span", { class: "n" }, `#${v.seq}`), h("span", { class: "t", title: v.ts }, clock(v.ts))),
    h("div", { class: "dot" }),
    h(
      "div",
      { class: "body" },
      h(
        "div",
        { class: "line1" },
        h("span", { class: "badge b-type" }, words(v.event_type)),
        kindBadge(v.kind, v.counted),
        v.rule ? h("span", { class: "badge b-rule", title: "the detection rule behind this verdict" }, v.rule) : null,
        sim,
        v.loop && !v.counted ? h("span", { class: "count" }, "not counted") : null,
        v.task_id !== taskId ? h("span", { class: "agent" }, `subtask ${v.task_id}`) : null,
        v.agent_id ? h("span", { class: "agent" }, `· ${v.agent_id}`) : null,
        h(
          "span",
          { class: "right" },
          h("span", { class: "count" }, `loop count ${v.loop_count}`),
          actionBadge(v.action),
        ),
      ),
      textEl,
      more,
      matched,
      artifactsEl(v.artifacts),
      v.reason ? h("div", { class: "reason" }, v.reason) : null,
    ),
  );
}

// What each artifact a collaboration message carried did since its latest version ("main.py:
// +3 −1 (def update)"): the progress, or its absence, that a collaboration verdict rests on.
function artifactsEl(artifacts) {
  if (!artifacts || artifacts.length === 0) return null;
  const one = (a) => {
    const name = a.name || "a code block";
    switch (a.change) {
      case "new":
        return `${name}: new (${a.lines} lines)`;
      case "unchanged":
        return `${name}: unchanged`;
      case "earlier":
        return `${name}: back to an earlier version`;
      default: {
        const parts = a.parts && a.parts.length ? ` (${a.parts.join("; ")})` : "";
        return `${name}: +${a.added} −${a.removed}${parts}`;
      }
    }
  };
  return h("div", { class: "artifacts", title: "the artifacts this message carried and how each changed" }, artifacts.map(one).join(" · "));
}

function renderTask(task, history) {
  const head = $("task-head");
  const kinds = Object.entries(task.kind_counts || {});
  head.replaceChildren(
    h("div", { class: "title" }, h("span", { class: "tid" }, task.root_task_id), statusBadge(task.status)),
    h(
      "div",
      { class: "stats" },
      h("span", { class: task.loop_count > 0 ? "hot" : "" }, h("b", {}, task.loop_count), "loop count"),
      h("span", {}, h("b", {}, task.pivot_count), "pivots"),
      h("span", {}, h("b", {}, task.events_total), "events"),
      task.current_step ? h("span", {}, h("b", {}, task.current_step), "step") : null,
      h("span", { class: "muted", title: task.updated_at }, `updated ${ago(task.updated_at)}`),
    ),
    kinds.length ? h("div", { class: "chips" }, kinds.map(([k, n]) => h("span", { class: "badge b-kind" }, `${words(k)} × ${n}`))) : null,
  );
  // The window holds the events as compared, tool results included; the verdicts hold the rest.
  const shown = new Map(task.window.map((w) => [w.seq, w.text]));
  const verdicts = [...task.last_verdicts].reverse();
  const oldest = verdicts.length ? verdicts[verdicts.length - 1].seq : 0;
  const audits = new Map();
  for (const r of history.records) {
    if (r.event === "loop_detected" || r.seq < oldest) continue;
    if (!audits.has(r.seq)) audits.set(r.seq, []);
    audits.get(r.seq).push(r);
  }
  const items = [];
  for (const v of verdicts) {
    for (const r of (audits.get(v.seq) || []).slice().reverse()) items.push(auditItem(r));
    items.push(verdictItem(v, shown.get(v.seq), task.root_task_id));
  }
  $("timeline").replaceChildren(...items);
  $("task-empty").hidden = items.length > 0;
  $("task-empty").textContent = "No verdicts yet.";
  $("task-note").textContent = verdicts.length ? `last ${verdicts.length} verdicts, newest first` : "";
  $("task-legend").hidden = items.length === 0;
}

function renderTaskMissing(id) {
  $("task-head").replaceChildren(h("div", { class: "title" }, h("span", { class: "tid" }, id)));
  $("timeline").replaceChildren();
  $("task-empty").hidden = false;
  $("task-empty").textContent = "This task is gone (deleted, or expired after server.task_ttl_secs idle).";
  $("task-legend").hidden = true;
  $("task-note").textContent = "";
}

async function loadTask() {
  const id = ui.selected;
  if (!id || ui.gone === id) return;
  const path = `/v1/tasks/${encodeURIComponent(id)}`;
  try {
    const [task, history] = await Promise.all([api(path), api(`${path}/history?limit=500`)]);
    if (ui.selected === id) renderTask(task, history);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) {
      ui.gone = id;
      if (ui.selected === id) renderTaskMissing(id);
    } else throw e;
  }
}

function select(id, byUser) {
  ui.selected = id;
  ui.gone = null;
  // In one column the timeline is below the lists: bring it into view.
  if (byUser && window.matchMedia("(max-width: 1100px)").matches) {
    $("task").scrollIntoView({ behavior: "smooth", block: "start" });
  }
  ui.autoSelected = true;
  const wanted = `#task=${encodeURIComponent(id)}`;
  if (location.hash !== wanted) history.replaceState(null, "", wanted);
  for (const tr of $("tasks").querySelectorAll("tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.task === id);
  }
  loadTask().catch(failed);
}

// ---- the loop ---------------------------------------------------------------------------

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = "pill " + cls;
}

function failed(e) {
  if (e instanceof Unauthorized) {
    askToken(ui.token ? "That token was refused." : null);
    return;
  }
  setConn(e instanceof ApiError ? `error: ${e.message}` : "connection lost, retrying", "pill-bad");
}

async function refresh() {
  if (ui.busy || ui.needToken) return;
  ui.busy = true;
  try {
    const [stats, tasks, loops] = await Promise.all([
      api("/v1/stats"),
      api(`/v1/tasks?limit=${TASKS_LIMIT}`),
      api(`/v1/loops?limit=${LOOPS_LIMIT}`).catch((e) => {
        if (e instanceof ApiError && e.status === 404) return { disabled: true };
        throw e;
      }),
    ]);
    renderStats(stats, tasks.total);
    renderTasks(tasks);
    renderLoops(loops);
    if (ui.gone && tasks.tasks.some((t) => t.task_id === ui.gone)) ui.gone = null;
    if (!ui.selected && !ui.autoSelected && tasks.tasks.length) {
      // Start on the task that most needs a look: the latest with a loop, else the latest.
      const first = tasks.tasks.find((t) => t.loop_count > 0 || t.status !== "active") || tasks.tasks[0];
      ui.autoSelected = true;
      select(first.task_id);
    } else {
      await loadTask();
    }
    setConn(`live · ${new Date().toLocaleTimeString([], { hourCycle: "h23" })}`, "pill-ok");
    $("signout").hidden = !ui.token;
  } catch (e) {
    failed(e);
  } finally {
    ui.busy = false;
  }
}

function askToken(error) {
  ui.needToken = true;
  $("login").hidden = false;
  $("login-error").hidden = !error;
  $("login-error").textContent = error || "";
  setConn("token needed", "pill-warn");
  $("token").focus();
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  ui.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.needToken = false;
  $("login").hidden = true;
  $("token").value = "";
  refresh();
});

$("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  ui.token = null;
  askToken(null);
});

function fromHash() {
  const m = /^#task=(.+)$/.exec(location.hash);
  if (m) {
    ui.selected = decodeURIComponent(m[1]);
    ui.autoSelected = true;
  }
}

window.addEventListener("hashchange", () => {
  fromHash();
  if (ui.selected) select(ui.selected);
});

// The example shows this server's own address.
for (const pre of document.querySelectorAll("#tasks-empty pre")) {
  pre.textContent = pre.textContent.replace("localhost:8080", location.host);
}

fromHash();
refresh();
setInterval(() => {
  if (!document.hidden) refresh();
}, REFRESH_MS);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});
