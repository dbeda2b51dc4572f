// pgrun dashboard: keyboard shortcuts, listed in the help dialog (#help, opened
// with ?), in the footer and in docs/ui.md. They are off while the focus is in a
// field (Escape leaves it), with Ctrl, Alt or Meta held, and while a dialog is open.
//   /        focus the filter box
//   j, k     highlight the next or previous row of a list; Enter opens it
//   g o, g j, g e   go to the overview, the jobs, the errors
//   p, space pause or resume live updates (live.js)
//   .        show a list's new rows (live.js's banner)
//   ?        the help dialog
"use strict";
(function () {
  const live = document.getElementById("live");
  const help = document.getElementById("help");
  if (!live || !help) {
    return;
  }
  const places = { o: "/", j: "/jobs", e: "/errors" };
  // sequence is how long the second key of "g o" may wait for the first.
  const sequence = 1500;
  let gAt = 0;
  let current = null; // the highlighted row, and how to find it again after a re-render
  let currentKey = null;
  let currentIndex = -1;

  // typing: the focus is where keys write (a box ticked by a click is not).
  function typing(el) {
    if (!el) {
      return false;
    }
    if (el.nodeName === "INPUT") {
      return !/^(checkbox|radio|button|submit|reset|image|file|range|color)$/.test(el.type);
    }
    return el.isContentEditable || el.nodeName === "SELECT" || el.nodeName === "TEXTAREA";
  }

  // rows are the list rows that open something: a row with a link.
  function rows() {
    return Array.prototype.filter.call(live.querySelectorAll("table.list tbody tr"), function (tr) {
      return tr.querySelector("a[href]") !== null;
    });
  }

  // keyOf names a row by its first data- attribute (data-job="5"), which survives
  // a live re-render; a row without one is found again by its position.
  function keyOf(tr) {
    const a = Array.prototype.find.call(tr.attributes, function (x) {
      return x.name.indexOf("data-") === 0;
    });
    return a ? "tr[" + a.name + '="' + CSS.escape(a.value) + '"]' : null;
  }

  // mark puts the highlight on tr (none for null).
  function mark(tr) {
    if (current && current !== tr) {
      current.classList.remove("kb-current");
      current.removeAttribute("aria-current");
    }
    current = tr;
    if (tr) {
      tr.classList.add("kb-current");
      tr.setAttribute("aria-current", "true");
    }
  }

  function highlight(tr) {
    mark(tr);
    currentKey = keyOf(tr);
    currentIndex = rows().indexOf(tr);
    tr.scrollIntoView({ block: "nearest" });
  }

  function move(by) {
    const all = rows();
    if (all.length === 0) {
      return;
    }
    let i = current ? all.indexOf(current) : -1;
    i = i < 0 ? (by > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, i + by));
    highlight(all[i]);
  }

  // A live re-render resets the rows' classes: the highlight goes back on its row.
  document.addEventListener("pgrun:rendered", function () {
    if (currentIndex < 0) {
      return;
    }
    const all = rows();
    let tr = currentKey ? live.querySelector(currentKey) : null;
    if (!tr || all.indexOf(tr) < 0) {
      tr = all[Math.min(currentIndex, all.length - 1)] || null;
    }
    current = null; // its node may be gone
    mark(tr);
  });

  function filterBox() {
    return live.querySelector('[data-search], form.filters input:not([type="hidden"]), form.filters select');
  }

  function click(id) {
    const el = document.getElementById(id);
    const shown = el && !el.hidden && !el.closest("[hidden]");
    if (shown) {
      el.click();
    }
    return !!shown;
  }

  document.addEventListener("keydown", function (e) {
    const t = e.target;
    if (typing(t)) {
      if (e.key === "Escape" && !t.closest("dialog")) {
        t.blur();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented || document.querySelector("dialog[open]")) {
      return;
    }
    // On a link or a button, Enter and space do what they do there.
    const onControl = t !== document.body && !!t.closest && t.closest("a[href], button, input, summary, [tabindex]") !== null;
    let done = true;
    const g = Date.now() - gAt < sequence;
    gAt = 0;
    if (g && places[e.key]) {
      location.assign(places[e.key]);
    } else if (e.key === "g") {
      gAt = Date.now();
    } else if (e.key === "/") {
      const box = filterBox();
      if (box) {
        box.focus();
        if (box.select) {
          box.select();
        }
      } else {
        done = false;
      }
    } else if (e.key === "j") {
      move(1);
    } else if (e.key === "k") {
      move(-1);
    } else if (e.key === "Enter" && current && !onControl && document.contains(current)) {
      const a = current.querySelector("a[href]");
      if (a) {
        a.click();
      }
    } else if (e.key === "?") {
      help.showModal();
    } else if (e.key === "p" || (e.key === " " && !onControl)) {
      done = click("live-pause");
    } else if (e.key === ".") {
      done = click("live-show");
    } else {
      done = false;
    }
    if (done) {
      e.preventDefault();
    }
  });
})();
