// Follow a job, a run or a project through server-sent events (docs/streams.md).
// An element with data-follow="<events path>" keeps its [data-status] text and <progress>
// current; on a final status (or any run/feed change) it re-reads itself from data-refresh
// (the same server-rendered page) and swaps in the fresh copy. No polling.
(function () {
  // the final statuses of jobs and runs, from the server's state machines (dash.html)
  var FINAL = (document.currentScript.dataset.final || "").split(" ");
  function refresh(el) {
    if (el._busy) { el._again = true; return; }
    el._busy = true;
    fetch(el.dataset.refresh, {credentials: "same-origin", headers: {"X-Dashboard": "1"}})
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById(el.id);
        if (fresh) { el.innerHTML = fresh.innerHTML; el.dataset.state = fresh.dataset.state || ""; }
        var balance = doc.getElementById("balance"), mine = document.getElementById("balance");
        if (balance && mine) { mine.textContent = balance.textContent; }
        el._busy = false;
        if (el._again) { el._again = false; refresh(el); }
        if (window.htmx) { htmx.process(el); }
      })
      .catch(function () { el._busy = false; });
  }
  function follow(el) {
    var source = new EventSource(el.dataset.follow);
    var ends = el.dataset.ends !== "never";
    source.addEventListener("status", function (e) {
      var s = JSON.parse(e.data);
      if (el.dataset.job && s.request_id !== el.dataset.job) { return; }
      var label = el.querySelector("[data-status]");
      if (label) { label.textContent = s.status; }
      if (FINAL.indexOf(s.status) >= 0) {
        if (ends) { source.close(); }
        refresh(el);
      } else if (!el.dataset.job) { refresh(el); }
    });
    source.addEventListener("progress", function (e) {
      var p = JSON.parse(e.data), bar = el.querySelector("progress");
      if (bar && p.max) { bar.max = p.max; bar.value = p.value; bar.textContent = Math.round(100 * p.value / p.max) + "%"; }
    });
    ["run", "feed", "reset"].forEach(function (name) {
      source.addEventListener(name, function (e) {
        var d = JSON.parse(e.data);
        if (name === "run" && ends && FINAL.indexOf(d.status) >= 0) { source.close(); }
        if (name !== "feed") { refresh(el); }
      });
    });
    el.dataset.following = "1";
  }
  function copy(btn) {
    var target = document.getElementById(btn.dataset.copy);
    navigator.clipboard.writeText(target.textContent.trim()).then(function () { btn.textContent = "Copied"; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-follow]").forEach(follow);
    document.body.addEventListener("click", function (e) {
      var btn = e.target.closest("[data-copy]");
      if (btn) { copy(btn); }
    });
  });
})();
// Studio's upload form returns to Studio with the form as it is now (choices and prompt);
// the tokens stay out of that address.
document.addEventListener("submit", function (e) {
  var up = e.target, studio = document.getElementById("studio-form");
  if (up.id !== "studio-upload-form" || !studio || !up.elements.next) { return; }
  var params = new URLSearchParams();
  new FormData(studio).forEach(function (v, k) {
    if (k !== "csrf_token" && k !== "form_token" && typeof v === "string") { params.append(k, v); }
  });
  up.elements.next.value = "/studio?" + params.toString();
});
// Times come as <time datetime="ISO">… UTC</time>: show them in the reader's own time zone.
(function () {
  var fmt = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "short"});
  function local(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) { t.title = t.textContent; t.textContent = fmt.format(d); t.dataset.local = "1"; }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { local(document); });
  new MutationObserver(function (changes) {
    changes.forEach(function (c) { c.addedNodes.forEach(function (n) { if (n.querySelectorAll) { local(n); } }); });
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
