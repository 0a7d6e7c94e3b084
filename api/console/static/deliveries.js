// factoryctl console: the webhook page's delivery rows. Keeps the state pill of each run a delivery started
// live: while some shown run is unfinished, asks the page's run-states URL for those runs every 3 s and
// updates their pills; stops when all are finished (docs/console.md, "Webhook page").
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("deliveries");
  if (!table || !window.fetch) return;
  const url = table.dataset.runStates;
  const stateClass = (state) => "pill state state-" + String(state).replace(/[^A-Z]/g, "");
  const live = () => Array.from(table.querySelectorAll("[data-run-state][data-live='true']"));

  const poll = async () => {
    const pills = live();
    if (!pills.length) return;
    const query = new URLSearchParams();
    for (const pill of pills) query.append("run_id", pill.dataset.runState);
    try {
      const resp = await fetch(url + "?" + query.toString(), { credentials: "same-origin" });
      if (!resp.ok) return;  // signed out or gone: the page stays as it was rendered
      const body = await resp.json();
      const terminal = new Set(body.terminal || []);
      for (const pill of pills) {
        const state = (body.states || {})[pill.dataset.runState];
        if (!state) continue;
        pill.textContent = state;
        pill.className = stateClass(state);
        if (terminal.has(state)) delete pill.dataset.live;
      }
    } catch (err) {
      // a network blip: try again on the next tick
    }
    if (live().length) window.setTimeout(poll, 3000);
  };
  if (live().length) window.setTimeout(poll, 3000);
});
