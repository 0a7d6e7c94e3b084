// factoryctl console: small progressive enhancement; every page works without it.
"use strict";

// Relative times (docs/console.md, "Times"): the words of api/console/times.py, kept current every 30 s.
// <time datetime="…" data-relative> elements added later (by run.js, runs.js) are refreshed too.
window.factoryTimes = (() => {
  const relative = (at, now) => {
    const seconds = (now - at) / 1000;
    const ahead = seconds < 0;
    const span = Math.abs(seconds);
    let amount;
    if (span < 45) return "just now";
    if (span < 3600) amount = Math.max(1, Math.round(span / 60)) + " min";
    else if (span < 86400) amount = Math.round(span / 3600) + " h";
    else if (span < 30 * 86400) {
      const days = Math.round(span / 86400);
      amount = days + (days === 1 ? " day" : " days");
    } else return new Date(at).toISOString().slice(0, 10);
    return ahead ? "in " + amount : amount + " ago";
  };
  const exact = (at) => new Date(at).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  const duration = (start, end) => {
    const seconds = Math.max(0, (end - start) / 1000);
    if (seconds < 10) return seconds.toFixed(1) + " s";
    if (seconds < 60) return Math.round(seconds) + " s";
    let minutes = Math.floor(Math.round(seconds) / 60);
    const secs = Math.round(seconds) % 60;
    if (minutes < 60) return secs ? minutes + " min " + secs + " s" : minutes + " min";
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return minutes ? hours + " h " + minutes + " min" : hours + " h";
  };
  // A <time> element for an ISO timestamp, as the server renders one.
  const element = (iso) => {
    const at = Date.parse(iso);
    const node = document.createElement("time");
    node.dateTime = new Date(at).toISOString().slice(0, 19) + "Z";
    node.title = exact(at);
    node.dataset.relative = "";
    node.textContent = relative(at, Date.now());
    return node;
  };
  const refresh = () => {
    const now = Date.now();
    for (const node of document.querySelectorAll("time[data-relative]")) {
      const at = Date.parse(node.dateTime);
      if (!Number.isNaN(at)) node.textContent = relative(at, now);
    }
  };
  return { relative, exact, duration, element, refresh };
})();

document.addEventListener("DOMContentLoaded", () => {
  window.factoryTimes.refresh();
  setInterval(window.factoryTimes.refresh, 30000);
  // Copy buttons: <button data-copy="#element-id">
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async () => {
      const source = document.querySelector(button.dataset.copy);
      if (!source) return;
      await navigator.clipboard.writeText(source.textContent.trim());
      const label = button.textContent;
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = label; }, 1500);
    });
  }
  // A value shown once (<section data-shown-once>) is the response to a POST: make this history entry a
  // plain GET of the page, so that a reload neither shows the value again nor submits the form again.
  // data-shown-once="/console/…" names that page when the form posted to another URL (rotate-secret).
  const shownOnce = document.querySelector("[data-shown-once]");
  if (shownOnce) history.replaceState(null, "", shownOnce.dataset.shownOnce || location.href);
  // Confirmations: <form data-confirm="Delete webhook x?">
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
