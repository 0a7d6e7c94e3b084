// factoryctl console: small progressive enhancement; every page works without it.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
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
