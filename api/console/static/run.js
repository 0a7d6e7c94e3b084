// factoryctl console: the live run page. Follows /console/runs/{id}/events (Server-Sent Events) and adds
// state changes and log lines to the page. Harness output is untrusted: text goes in with textContent only.
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

  source.addEventListener("truncated", () => {
    if (log) log.append(el("div", "line stream-system", "… the event log is full; later lines are in the logs API"));
  });
});
