// factoryctl console: the live runs list (docs/console.md, "Live pages"). Follows /console/runs/events (the
// team's run state changes as Server-Sent Events): a shown run's state pill, updated time and duration
// change in place; a run the page does not show (a new one) reloads the list from the server, with the
// page's own filters, at most once a second. Only the newest page is live.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("runs-list");
  if (!list || list.dataset.live !== "true" || !window.EventSource) return;
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "ERROR", "CANCELLED"]);
  const times = window.factoryTimes;
  const badge = document.getElementById("runs-live");
  const source = new EventSource(list.dataset.events);
  source.addEventListener("open", () => { if (badge) badge.hidden = false; });
  source.addEventListener("error", () => {
    if (badge && source.readyState !== EventSource.OPEN) badge.hidden = true;
  });

  let reloading = null;
  const reload = () => {
    if (reloading) return;
    reloading = setTimeout(async () => {
      try {
        const response = await fetch(location.href, { credentials: "same-origin" });
        if (!response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("runs-list");
        const current = document.getElementById("runs-list");
        if (fresh && current) {
          current.replaceChildren(...fresh.childNodes);
          times.refresh();
        }
      } finally {
        reloading = null;
      }
    }, 1000);
  };

  source.addEventListener("state", (message) => {
    const event = JSON.parse(message.data);
    const state = String(event.state || "").replace(/[^A-Z]/g, "");
    const cell = [...document.querySelectorAll("#runs-list td[data-run-id]")]
      .find((candidate) => candidate.dataset.runId === event.run_id);
    if (!cell) { reload(); return; }
    const row = cell.closest("tr");
    const pill = row.querySelector("[data-role=state]");
    if (pill) { pill.textContent = state; pill.className = "pill state state-" + state; }
    const updated = row.querySelector("[data-role=updated]");
    if (updated && event.created_at) updated.replaceChildren(times.element(event.created_at));
    if (state === "INPROGRESS" && !cell.dataset.started) cell.dataset.started = event.created_at;
    const took = row.querySelector("[data-role=duration]");
    if (took && TERMINAL.has(state) && cell.dataset.started) {
      took.textContent = times.duration(Date.parse(cell.dataset.started), Date.parse(event.created_at));
    }
  });
});
