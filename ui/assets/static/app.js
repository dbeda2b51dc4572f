// pgrun dashboard: confirmations for actions and select-all. Live updates are in
// live.js, the keyboard shortcuts in keys.js, the colour theme in theme.js.
"use strict";
(function () {
  const dialog = document.getElementById("confirm");

  const text = document.getElementById("confirm-text");
  const buttons = dialog.querySelector(".buttons");
  let working = false; // a filter-wide action is running: the dialog shows its progress

  // ticked counts the job boxes of form that are ticked. form.elements holds the
  // boxes outside the form that name it (form="selection"); form.id would not do:
  // the boxes are named "id", and a form's named controls shadow its properties.
  function ticked(form) {
    return Array.prototype.filter.call(form.elements, function (el) {
      return el.name === "id" && el.checked;
    }).length;
  }

  // Confirmation: every form or button with data-confirm asks first, in a dialog.
  // "{n}" in the question is the number of ticked jobs. A form with data-matching
  // acts on every job the page's filter matches: the server counts them first and
  // words the question (runMatching). Without this script the server asks instead
  // (a confirmation page).
  document.addEventListener("submit", function (e) {
    const form = e.target;
    const button = e.submitter;
    if (form.dataset.confirmed === "1") {
      return;
    }
    if (form.dataset.matching !== undefined) {
      e.preventDefault();
      runMatching(form, button);
      return;
    }
    const question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (!question) {
      return;
    }
    e.preventDefault();
    text.textContent = question.replace("{n}", String(ticked(form)));
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue !== "ok") {
        return;
      }
      form.dataset.confirmed = "1";
      const c = form.querySelector('input[name="confirmed"]');
      if (c) {
        c.value = "yes";
      }
      if (button) {
        form.requestSubmit(button);
      } else {
        form.requestSubmit();
      }
    };
    dialog.showModal();
  });

  // post sends form's fields, with extra ones, to url and returns the JSON answer;
  // an answer that is not OK throws its error.
  async function post(url, form, extra) {
    const body = new URLSearchParams(new FormData(form));
    Object.keys(extra).forEach(function (k) {
      body.set(k, extra[k]);
    });
    const r = await fetch(url, { method: "POST", body: body, credentials: "same-origin" });
    let data = null;
    try {
      data = await r.json();
    } catch (err) {
      data = { error: r.status + " " + r.statusText };
    }
    if (!r.ok || data.error) {
      throw new Error(data.error || r.status + " " + r.statusText);
    }
    return data;
  }

  // runMatching runs a filter-wide action: the server counts what the filter matches
  // (a dry run) and asks; once confirmed, the action goes batch by batch, each batch
  // one request, with its progress in the dialog; then the page reloads with the
  // outcome, which the last batch left for it.
  async function runMatching(form, button) {
    const url = (button && button.getAttribute("formaction")) || form.getAttribute("action");
    let ask;
    try {
      ask = await post(url, form, { mode: "ask" });
    } catch (err) {
      text.textContent = "Failed: " + err.message;
      dialog.returnValue = "";
      dialog.onclose = null;
      dialog.showModal();
      return;
    }
    text.textContent = ask.question;
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue === "ok") {
        act(url, form, ask);
      }
    };
    dialog.showModal();
  }

  async function act(url, form, ask) {
    working = true;
    buttons.hidden = true;
    const bar = document.createElement("progress");
    bar.max = Math.max(ask.matched, 1);
    bar.value = 0;
    text.textContent = "Starting…";
    text.after(bar);
    dialog.onclose = null;
    dialog.showModal();
    let tally = null;
    try {
      do {
        const data = await post(url, form, {
          confirmed: "yes", mode: "batch", upto: String(ask.upto),
          after: String(tally ? tally.last_id : 0), so_far: tally ? JSON.stringify(tally) : "",
        });
        tally = data.tally;
        bar.value = Math.min(tally.matched, bar.max);
        text.textContent = data.progress;
      } while (!tally.done);
      location.reload();
    } catch (err) {
      text.textContent = "Failed: " + err.message + (tally ? " (" + tally.changed + " done before that)" : "");
      bar.remove();
      buttons.hidden = false;
      working = false;
      dialog.onclose = function () {
        location.reload();
      };
    }
  }

  // Escape does not close the dialog while an action runs: its progress stays.
  dialog.addEventListener("cancel", function (e) {
    if (working) {
      e.preventDefault();
    }
  });

  // The header box ticks every job of its table: the jobs on this page, not every
  // job the filter matches (the filter-wide actions do that). It says so, and the
  // selection form counts what is ticked.
  function label() {
    document.querySelectorAll("input[data-select-all]").forEach(function (box) {
      const rows = box.closest("table").querySelectorAll('input[name="id"]').length;
      box.title = "Tick the " + rows + " jobs on this page";
    });
    document.querySelectorAll("[data-ticked]").forEach(function (span) {
      const form = span.closest("form");
      const n = form ? ticked(form) : 0;
      span.textContent = "Ticked on this page: " + (n === 0 ? "none" : n) + " of " + span.dataset.rows;
    });
  }
  label();

  document.addEventListener("change", function (e) {
    if (e.target.matches("input[data-select-all]")) {
      const table = e.target.closest("table");
      table.querySelectorAll('input[name="id"]').forEach(function (box) {
        box.checked = e.target.checked;
      });
    }
    if (e.target.matches('input[type="checkbox"]')) {
      label();
    }
  });

  // live.js re-rendered part of the page: its boxes and counts are new.
  document.addEventListener("pgrun:rendered", label);
})();
