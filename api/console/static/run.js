// factoryctl console: the live run page. Follows /console/runs/{id}/events (Server-Sent Events) and adds
// state changes, log lines, the agent's transcript (messages, tool calls folded with their results,
// usage) and the destinations the worker's egress proxy refused to the page. Harness output is untrusted:
// text goes in with textContent only.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("run");
  if (!root || root.dataset.live !== "true" || !window.EventSource) return;
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "ERROR", "CANCELLED"]);
  const pill = document.getElementById("run-state");
  const timeline = document.getElementById("timeline");
  const log = document.getElementById("log");
  const empty = document.getElementById("log-empty");
  const count = document.getElementById("log-count");
  const live = document.getElementById("live");
  let lines = log ? Number(log.dataset.lines || log.children.length) : 0;  // the page shows the newest only

  const when = (iso) => (iso || "").replace("T", " ").replace(/\.\d+Z$|Z$/, " UTC");
  const el = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const stateClass = (state) => "pill state state-" + String(state).replace(/[^A-Z]/g, "");

  const source = new EventSource(root.dataset.events);
  const stop = () => {
    source.close();
    if (live) live.hidden = true;
  };
  // The server answers 204 when the run is over and nothing follows (docs/events.md): the browser then
  // closes the source by itself; so does a stream whose session ended (the sign-in page is not a stream).
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) stop();
  });

  source.addEventListener("state", (message) => {
    const event = JSON.parse(message.data);
    const data = event.data || {};
    const state = String(data.state || "");
    if (pill) { pill.textContent = state; pill.className = stateClass(state); }
    if (timeline) {
      const item = el("li");
      item.append(el("span", stateClass(state), state), " ", el("span", "muted small", when(event.created_at)));
      const status = data.status_message && data.status_message.message;
      if (status) item.append(el("div", "small", String(status)));
      timeline.append(item);
    }
    // Started, Finished and Duration fill in as the run starts and ends (docs/console.md, "Live pages").
    const at = String(event.created_at || "");
    const started = document.getElementById("run-started");
    if (started && at && state === "INPROGRESS" && !started.dataset.at) {
      started.dataset.at = at;
      started.replaceChildren(window.factoryTimes.element(at));
    }
    if (TERMINAL.has(state) && at) {
      const finished = document.getElementById("run-finished");
      if (finished) finished.replaceChildren(window.factoryTimes.element(at));
      const duration = document.getElementById("run-duration");
      if (duration && started && started.dataset.at) {
        duration.textContent = window.factoryTimes.duration(Date.parse(started.dataset.at), Date.parse(at));
      }
    }
    if (TERMINAL.has(state)) {
      const cancel = document.getElementById("cancel-form");
      if (cancel) cancel.hidden = true;
      stop();
    }
  });

  source.addEventListener("log", (message) => {
    const data = JSON.parse(message.data).data || {};
    if (!log) return;
    const stream = String(data.stream || "");
    const line = el("div", "line stream-" + stream.replace(/[^a-z]/g, ""));
    line.append(el("span", "stream", stream), el("span", "text", String(data.text || "")));
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(line);
    if (atBottom) log.scrollTop = log.scrollHeight;
    lines += 1;
    if (empty) empty.hidden = true;
    if (count) count.textContent = lines + (lines === 1 ? " line" : " lines");
  });

  const transcript = document.getElementById("transcript");
  const transcriptCard = document.getElementById("transcript-card");
  const usage = document.getElementById("run-usage");
  const say = (node) => {
    if (!transcript) return;
    const atBottom = transcript.scrollTop + transcript.clientHeight >= transcript.scrollHeight - 4;
    transcript.append(node);
    if (atBottom) transcript.scrollTop = transcript.scrollHeight;
    if (transcriptCard) transcriptCard.hidden = false;
  };
  const pretty = (value) => {
    try { return JSON.stringify(value, null, 2); } catch (_) { return String(value); }
  };

  source.addEventListener("message", (message) => {
    const data = JSON.parse(message.data).data || {};
    const role = String(data.role || "assistant");
    const node = el("div", "msg role-" + role.replace(/[^a-z]/g, ""));
    node.append(el("span", "role", role), el("div", "text", String(data.text || "")));
    say(node);
  });

  source.addEventListener("tool_call", (message) => {
    const data = JSON.parse(message.data).data || {};
    const node = el("details", "tool");
    node.dataset.toolId = String(data.id || "");
    const summary = el("summary");
    summary.append(el("span", "toolname", String(data.name || "")));
    node.append(summary, el("pre", "input", pretty(data.input)));
    say(node);
  });

  source.addEventListener("tool_result", (message) => {
    const data = JSON.parse(message.data).data || {};
    const id = String(data.id || "");
    let node = null;
    if (transcript) {
      for (const candidate of transcript.querySelectorAll("details.tool")) {
        if (candidate.dataset.toolId === id && !candidate.querySelector("pre.output")) node = candidate;
      }
    }
    if (!node) {
      node = el("details", "tool");
      node.append(el("summary", "", "(result)"));
      say(node);
    }
    const ok = Boolean(data.ok);
    node.querySelector("summary").append(" ", el("span", ok ? "pill ok" : "pill warn", ok ? "ok" : "error"));
    node.append(el("pre", "output", String(data.output || "")));
  });

  source.addEventListener("usage", (message) => {
    const data = JSON.parse(message.data).data || {};
    if (!usage) return;
    const tokens = Number(usage.dataset.tokens || 0) + Number(data.input_tokens || 0) + Number(data.output_tokens || 0);
    usage.dataset.tokens = String(tokens);
    let text = tokens.toLocaleString("en-US") + " tokens";
    if (typeof data.cost_usd === "number") usage.dataset.cost = String(Number(usage.dataset.cost || 0) + data.cost_usd);
    if (usage.dataset.cost !== "") text += " · $" + Number(usage.dataset.cost).toFixed(4);
    usage.textContent = text;
  });

  const refused = document.getElementById("refused");
  source.addEventListener("egress_refused", (message) => {
    const data = JSON.parse(message.data).data || {};
    if (!refused) return;
    const host = String(data.host || "");
    const item = el("li");
    item.append(el("code", "", (host.includes(":") ? "[" + host + "]" : host) + (data.port ? ":" + data.port : "")));
    item.append(el("div", "muted small", String(data.reason || "")));
    refused.append(item);
    const card = document.getElementById("refused-card");
    if (card) card.hidden = false;
  });

  source.addEventListener("truncated", () => {
    if (log) log.append(el("div", "line stream-system", "… the event log is full; later lines are in the logs API"));
  });
});
