// pgrun dashboard: the colour theme. This script is loaded in <head> without
// defer, so the theme is on <html> before the first paint and a dark page never
// flashes white (the Content-Security-Policy allows no inline script, so it is a
// file of its own, kept tiny). The choice, "light", "dark" or "system", is kept
// in localStorage; "system" follows prefers-color-scheme, also when it changes.
// app.css holds the colours of both themes as custom properties.
"use strict";
(function () {
  const key = "pgrun.theme";
  const root = document.documentElement;
  const system = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function stored() {
    try {
      const c = localStorage.getItem(key);
      return c === "light" || c === "dark" ? c : "system";
    } catch (err) {
      return "system"; // storage refused (a privacy setting)
    }
  }
  let choice = stored();

  function apply() {
    const dark = choice === "dark" || (choice === "system" && !!system && system.matches);
    root.dataset.theme = dark ? "dark" : "light";
    root.dataset.themeChoice = choice;
    const select = document.getElementById("theme-choice");
    if (select) {
      select.value = choice;
    }
  }
  apply();
  if (system) {
    system.addEventListener("change", apply);
  }
  // Another tab changed the choice.
  window.addEventListener("storage", function (e) {
    if (e.key === key || e.key === null) {
      choice = stored();
      apply();
    }
  });

  // The header's select shows only with this script, which makes it work.
  document.addEventListener("DOMContentLoaded", function () {
    const select = document.getElementById("theme-choice");
    if (!select) {
      return;
    }
    select.closest("label").hidden = false;
    apply();
    select.addEventListener("change", function () {
      choice = select.value;
      try {
        if (choice === "system") {
          localStorage.removeItem(key);
        } else {
          localStorage.setItem(key, choice);
        }
      } catch (err) {
        // not kept for the next page; this one switches all the same
      }
      apply();
    });
  });
})();
