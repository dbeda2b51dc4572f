// pgrun dashboard: live updates that respect the reader. The page is rendered on
// the server; on each "change" event from /events (LISTEN on the engine's channels,
// debounced by the server) this script fetches the page's live part again, at most
// once a second, and patches it into the page element by element (morph), so that
// what the reader holds stays put:
//   - the focused field is never replaced, and keeps its text, caret and selection;
//     any other focused control is found again after the patch;
//   - on the lists (jobs, runs, dead letters) new rows do not push the shown ones
//     down: a banner counts them ("3 new jobs — show") and waits for a click or ".";
//     the shown rows update their cells in place;
//   - the header's Pause button (or p, or space) stops re-rendering; the page counts
//     the changes that came meanwhile, and Resume re-renders once;
//   - a page marked data-live-off (a finished job's) does not subscribe at all.
"use strict";
(function () {
  const live = document.getElementById("live");
  const body = document.body;
  if (!live || !body.dataset.live || !window.EventSource) {
    return;
  }
  const dot = document.getElementById("live-dot");
  const pauseButton = document.getElementById("live-pause");
  const status = document.getElementById("live-status");
  const banner = document.getElementById("live-banner");
  const show = document.getElementById("live-show");
  const confirm = document.getElementById("confirm");

  // The pages whose rows are a list that grows: new rows wait behind the banner.
  const listPages = ["jobs", "runs", "dead"];
  const isList = listPages.indexOf(body.dataset.page) >= 0;
  // A list's rows are marked data-job, data-run or, in any other list, data-row;
  // the mark is also the banner's noun ("3 new jobs").
  const rowKinds = ["job", "run", "row"];
  const rowSelector = rowKinds.map(function (k) {
    return "table.list tr[data-" + k + "]";
  }).join(", ");
  // The attributes that name an element among its siblings, for the patch.
  const keyAttrs = ["data-key", "data-row", "data-job", "data-run", "data-queue", "data-node",
    "data-worker", "data-host", "data-control", "data-check"];
  const pauseKey = "pgrun.live.paused";
  // minInterval is the least time between two re-renders (the server's events are
  // a second apart too).
  const minInterval = 1000;

  let events = null;
  let paused = storedPause();
  let missed = 0; // change events while paused
  let pending = false; // a change not yet rendered
  let full = false; // the next render replaces the lists too (show, resume)
  let busy = false;
  let last = 0;
  let timer = 0;

  function storedPause() {
    try {
      return localStorage.getItem(pauseKey) === "1";
    } catch (err) {
      return false;
    }
  }

  // ---- the patch ----

  function keyOf(node) {
    if (node.nodeType !== 1) {
      return null;
    }
    if (node.id) {
      return node.nodeName + "#" + node.id;
    }
    for (let i = 0; i < keyAttrs.length; i++) {
      const v = node.getAttribute(keyAttrs[i]);
      if (v !== null) {
        return node.nodeName + "[" + keyAttrs[i] + "=" + v + "]";
      }
    }
    return null;
  }

  // typing: the element takes typed text or a choice; while focused it is the
  // reader's, and the patch leaves it whole.
  function typing(el) {
    return el === document.activeElement && /^(INPUT|SELECT|TEXTAREA)$/.test(el.nodeName);
  }

  // readerOwns: attributes the reader sets by using the page, which a re-render
  // keeps (an opened <details>). Typed values, ticks and choices need nothing: a
  // changed value attribute does not touch a control the reader has changed.
  function readerOwns(el, name) {
    return name === "open" && el.nodeName === "DETAILS";
  }

  function syncAttributes(from, to) {
    Array.prototype.slice.call(from.attributes).forEach(function (a) {
      if (!to.hasAttributeNS(a.namespaceURI, a.localName) && !readerOwns(from, a.name)) {
        from.removeAttributeNS(a.namespaceURI, a.localName);
      }
    });
    Array.prototype.slice.call(to.attributes).forEach(function (a) {
      if (!readerOwns(from, a.name) && from.getAttributeNS(a.namespaceURI, a.localName) !== a.value) {
        from.setAttributeNS(a.namespaceURI, a.name, a.value);
      }
    });
  }

  // morph makes from look like to, keeping from's nodes wherever they match.
  function morph(from, to) {
    if (from.nodeType === 3 || from.nodeType === 8) {
      if (from.nodeValue !== to.nodeValue) {
        from.nodeValue = to.nodeValue;
      }
      return;
    }
    if (typing(from)) {
      return;
    }
    syncAttributes(from, to);
    morphChildren(from, to);
  }

  // morphChildren matches to's children with from's: by key (keyOf) where they
  // have one, else by position and kind; what matches is patched in place, what is
  // new is inserted, and the rest removed.
  function morphChildren(from, to) {
    const keyed = new Map();
    const wanted = new Set();
    for (let c = from.firstChild; c; c = c.nextSibling) {
      const k = keyOf(c);
      if (k !== null && !keyed.has(k)) {
        keyed.set(k, c);
      }
    }
    for (let n = to.firstChild; n; n = n.nextSibling) {
      const k = keyOf(n);
      if (k !== null) {
        wanted.add(k);
      }
    }
    let cursor = from.firstChild;
    // skip passes over the old keyed nodes that have no place in the new list.
    function skip() {
      while (cursor && keyOf(cursor) !== null && !wanted.has(keyOf(cursor))) {
        const gone = cursor;
        cursor = cursor.nextSibling;
        from.removeChild(gone);
      }
    }
    for (let n = to.firstChild, next; n; n = next) {
      next = n.nextSibling;
      skip();
      const k = keyOf(n);
      let match = null;
      if (k !== null) {
        match = keyed.get(k) || null;
        keyed.delete(k);
      } else if (cursor && keyOf(cursor) === null && cursor.nodeType === n.nodeType && cursor.nodeName === n.nodeName) {
        match = cursor;
      }
      if (!match) {
        from.insertBefore(n, cursor);
        continue;
      }
      if (match === cursor) {
        cursor = cursor.nextSibling;
      } else {
        from.insertBefore(match, cursor);
      }
      morph(match, n);
    }
    while (cursor) {
      const gone = cursor;
      cursor = cursor.nextSibling;
      from.removeChild(gone);
    }
  }

  // ---- focus ----

  // where describes the focused element well enough to find it again should the
  // patch have replaced it: its id, else its key, name, action or link within the
  // nearest ancestor that has a name of its own (a keyed row, a form).
  function where() {
    const el = document.activeElement;
    if (!el || el === body || !live.contains(el)) {
      return null;
    }
    const at = { el: el, selector: null, start: null, end: null, dir: null };
    try {
      if (typeof el.selectionStart === "number") {
        at.start = el.selectionStart;
        at.end = el.selectionEnd;
        at.dir = el.selectionDirection;
      }
    } catch (err) {
      // a field without a selection (number, checkbox)
    }
    if (el.id) {
      at.selector = "#" + CSS.escape(el.id);
      return at;
    }
    let own = null;
    ["data-key", "name", "data-action", "formaction", "href"].some(function (a) {
      const v = el.getAttribute(a);
      if (v !== null) {
        own = el.nodeName.toLowerCase() + "[" + a + '="' + CSS.escape(v) + '"]';
        if (a === "name" && (el.type === "checkbox" || el.type === "radio" || el.type === "submit")) {
          own += '[value="' + CSS.escape(el.value) + '"]';
        }
      }
      return v !== null;
    });
    if (!own) {
      return at;
    }
    const scope = el.parentElement.closest(rowSelector + ", [id], tr[data-queue], tr[data-node], form[action]");
    let prefix = "";
    if (scope && live.contains(scope)) {
      const k = scope.id ? "#" + CSS.escape(scope.id) : null;
      const attr = ["data-row", "data-job", "data-run", "data-queue", "data-node", "action"].find(function (a) {
        return scope.hasAttribute(a);
      });
      prefix = k || scope.nodeName.toLowerCase() + "[" + attr + '="' + CSS.escape(scope.getAttribute(attr)) + '"]';
      prefix += " ";
    }
    at.selector = prefix + own;
    return at;
  }

  function refocus(at) {
    if (!at || (document.activeElement === at.el && live.contains(at.el))) {
      return;
    }
    let el = live.contains(at.el) ? at.el : null;
    if (!el && at.selector) {
      el = Array.prototype.find.call(live.querySelectorAll(at.selector), function (c) {
        return c.type !== "hidden" && !c.disabled;
      }) || null;
    }
    if (!el) {
      return;
    }
    el.focus({ preventScroll: true });
    if (at.start !== null) {
      try {
        el.setSelectionRange(at.start, at.end, at.dir || "none");
      } catch (err) {
        // the field no longer takes a selection
      }
    }
  }

  // ---- the lists ----

  function rowsOf(root) {
    const rows = new Map();
    root.querySelectorAll(rowSelector).forEach(function (tr) {
      rowKinds.some(function (k) {
        const v = tr.getAttribute("data-" + k);
        if (v !== null) {
          rows.set(k + ":" + v, tr);
          return true;
        }
        return false;
      });
    });
    return rows;
  }

  // noun is what the rows are ("job"), from their keys ("job:42").
  function noun(rows) {
    const first = rows.keys().next().value;
    return first ? first.slice(0, first.indexOf(":")) : "row";
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  // list patches a list page without moving its rows: each shown row still in the
  // fresh render is patched in place; a row the fresh render lacks is dimmed (it
  // left the list, or new rows pushed it off this page); new rows are counted in
  // the banner. With nothing new and nothing gone the whole part is patched.
  function list(fresh) {
    const shown = rowsOf(live);
    const got = rowsOf(fresh);
    let added = 0;
    got.forEach(function (tr, key) {
      if (!shown.has(key)) {
        added++;
      }
    });
    let left = 0;
    shown.forEach(function (tr, key) {
      if (!got.has(key)) {
        left++;
      }
    });
    if (added === 0 && left === 0) {
      whole(fresh);
      return;
    }
    shown.forEach(function (tr, key) {
      const n = got.get(key);
      if (n) {
        morph(tr, n);
        tr.classList.remove("live-gone");
      } else {
        tr.classList.add("live-gone");
        tr.title = "No longer on this page as it is now: show the new rows to refresh it";
      }
    });
    // No shown row in the fresh page: the new ones may be more than a page. Rows
    // that left are named only when none came: new ones push rows off the page.
    const more = added > 0 && added === got.size && shown.size > 0 ? "+" : "";
    const word = noun(got.size ? got : shown);
    if (added) {
      show.textContent = added + more + " new " + word + (added === 1 && !more ? "" : "s") + " — show";
    } else {
      show.textContent = plural(left, word) + " no longer on this page — show";
    }
    banner.hidden = false;
  }

  // whole patches the entire live part.
  function whole(fresh) {
    morphChildren(live, fresh);
    banner.hidden = true;
  }

  // ---- refreshing ----

  function blocked() {
    return confirm && confirm.open; // an action's question or progress is showing
  }

  function later(ms) {
    clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  }

  async function refresh() {
    if (busy || !pending || (paused && !full)) {
      return;
    }
    const wait = last + minInterval - Date.now();
    if (blocked() || (wait > 0 && !full)) {
      later(Math.max(wait, 300));
      return;
    }
    busy = true;
    pending = false;
    last = Date.now();
    const replace = full;
    full = false;
    try {
      const r = await fetch(location.href, { headers: { "X-Pgrun-Live": "1" }, credentials: "same-origin" });
      if (!r.ok) {
        throw new Error(r.status + " " + r.statusText);
      }
      const t = document.createElement("template");
      t.innerHTML = await r.text();
      if (blocked() || (paused && !replace)) {
        pending = true;
        full = full || replace;
        return;
      }
      const at = where();
      if (isList && !replace) {
        list(t.content);
      } else {
        whole(t.content);
      }
      refocus(at);
      body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
      document.dispatchEvent(new CustomEvent("pgrun:rendered"));
      if (live.querySelector("[data-live-off]")) {
        stop();
      }
    } catch (err) {
      // the next event tries again
    } finally {
      busy = false;
      if (pending && (!paused || full)) {
        later(full ? 0 : minInterval);
      }
    }
  }

  // now renders the whole live part at once (a click on the banner, Resume).
  function now() {
    pending = true;
    full = true;
    refresh();
  }

  // ---- pause ----

  function say() {
    pauseButton.textContent = paused ? "Resume" : "Pause";
    pauseButton.setAttribute("aria-pressed", String(paused));
    pauseButton.title = (paused ? "Resume" : "Pause") + " live updates (p or space)";
    status.hidden = !paused;
    status.textContent = paused ? "Paused · " + (missed === 0 ? "no changes" : plural(missed, "change")) + " since" : "";
    if (events) {
      body.dataset.liveState = paused ? "paused" : "on";
    }
    body.dataset.missed = String(missed);
  }

  function setPaused(p, keep) {
    if (p === paused) {
      return;
    }
    paused = p;
    if (keep) {
      try {
        if (p) {
          localStorage.setItem(pauseKey, "1");
        } else {
          localStorage.removeItem(pauseKey);
        }
      } catch (err) {
        // not kept for the next page
      }
    }
    const changes = missed;
    if (!p) {
      missed = 0;
    }
    say();
    if (!p && (changes > 0 || pending)) {
      now();
    }
  }

  pauseButton.addEventListener("click", function () {
    setPaused(!paused, true);
  });
  // Another tab paused or resumed.
  window.addEventListener("storage", function (e) {
    if (e.key === pauseKey || e.key === null) {
      setPaused(storedPause(), false);
    }
  });
  show.addEventListener("click", now);

  // ---- the stream ----

  function stop() {
    if (events) {
      events.close();
      events = null;
    }
    clearTimeout(timer);
    pending = false;
    dot.classList.remove("on");
    const off = live.querySelector("[data-live-off]");
    dot.textContent = "not live";
    dot.title = off ? off.getAttribute("data-live-off") : "live updates are off";
    pauseButton.hidden = true;
    status.hidden = true;
    banner.hidden = true;
    body.dataset.liveState = "off";
  }

  if (live.querySelector("[data-live-off]")) {
    stop();
    return;
  }
  // since: the change count the page was rendered under; a change the page missed
  // before the stream opened comes at once.
  events = new EventSource("/events?since=" + encodeURIComponent(body.dataset.seq || "0"));
  pauseButton.hidden = false;
  say();
  events.addEventListener("open", function () {
    dot.classList.add("on");
  });
  events.addEventListener("error", function () {
    dot.classList.remove("on");
  });
  events.addEventListener("change", function () {
    if (paused) {
      missed++;
      say();
      return;
    }
    pending = true;
    refresh();
  });
})();
