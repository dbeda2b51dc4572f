// pgrun dashboard: confirmations for actions, select-all, and live updates. The
// page is rendered on the server; on each "change" event from /events (fed by
// LISTEN on the engine's channels) this script fetches the page's live part again,
// at most once a second, and never while the operator is in the middle of
// something (a dialog, a ticked box, a focused field).
"use strict";
(function () {
  const live = document.getElementById("live");
  const dialog = document.getElementById("confirm");

  // Confirmation: every form or button with data-confirm asks first, in a dialog.
  // "{n}" in the question is the number of ticked jobs. Without this script the
  // server asks instead (a confirmation page).
  document.addEventListener("submit", function (e) {
    const form = e.target;
    const button = e.submitter;
    const question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (!question || form.dataset.confirmed === "1") {
      return;
    }
    e.preventDefault();
    const ticked = document.querySelectorAll('input[name="id"][form="' + form.id + '"]:checked').length;
    document.getElementById("confirm-text").textContent = question.replace("{n}", String(ticked));
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

  // Select all the jobs of a table.
  document.addEventListener("change", function (e) {
    if (e.target.matches("input[data-select-all]")) {
      const table = e.target.closest("table");
      table.querySelectorAll('input[name="id"]').forEach(function (box) {
        box.checked = e.target.checked;
      });
    }
  });

  if (!document.body.dataset.live || !window.EventSource) {
    return;
  }
  const dot = document.getElementById("live-dot");
  let pending = false;
  let busy = false;
  let last = 0;

  function blocked() {
    if (dialog.open) {
      return true;
    }
    if (live.querySelector('input[type="checkbox"]:checked')) {
      return true;
    }
    const a = document.activeElement;
    return !!(a && live.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName));
  }

  async function refresh() {
    if (busy || !pending) {
      return;
    }
    const wait = last + 1000 - Date.now();
    if (blocked() || wait > 0) {
      setTimeout(refresh, Math.max(wait, 500));
      return;
    }
    busy = true;
    pending = false;
    last = Date.now();
    try {
      const r = await fetch(location.href, { headers: { "X-Pgrun-Live": "1" }, credentials: "same-origin" });
      if (r.ok && !blocked()) {
        live.innerHTML = await r.text();
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      }
    } catch (err) {
      // the next event tries again
    } finally {
      busy = false;
      if (pending) {
        setTimeout(refresh, 1000);
      }
    }
  }

  // since: the change count the page was rendered under; a change the page missed
  // before the stream opened comes at once.
  const events = new EventSource("/events?since=" + encodeURIComponent(document.body.dataset.seq || "0"));
  events.addEventListener("open", function () {
    dot.classList.add("on");
  });
  events.addEventListener("error", function () {
    dot.classList.remove("on");
  });
  events.addEventListener("change", function () {
    pending = true;
    refresh();
  });
})();
