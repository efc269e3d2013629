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
    if (el.dataset.following) { return; }
    var source = new EventSource(el.dataset.follow);
    var ends = el.dataset.ends !== "never";
    source.addEventListener("status", function (e) {
      var s = JSON.parse(e.data);
      if (el.dataset.job && s.request_id !== el.dataset.job) { return; }
      var label = el.querySelector("[data-status]");
      if (label) { label.textContent = s.status; label.className = "status-" + s.status; }
      var queue = el.querySelector("[data-queue]");
      if (queue && s.status !== "queued") { queue.remove(); }
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
    navigator.clipboard.writeText(target.textContent.trim()).then(function () {
      btn.textContent = "Copied";
      setTimeout(function () { btn.textContent = btn.dataset.label || "Copy"; }, 2000);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-follow]").forEach(follow);
    // content htmx swaps in (Studio's output pane) is followed too
    document.body.addEventListener("htmx:load", function (e) {
      var root = e.detail.elt;
      if (root.matches && root.matches("[data-follow]")) { follow(root); }
      if (root.querySelectorAll) { root.querySelectorAll("[data-follow]").forEach(follow); }
    });
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
// Studio: Ctrl/Cmd+Enter generates; an input slot takes a file dropped on it, pasted, or
// picked: it is uploaded to the project's assets (the Assets page's route, same checks) and
// the form comes back with it chosen in that slot and a preview.
(function () {
  function studio() { return document.getElementById("studio-form"); }
  document.addEventListener("keydown", function (e) {
    var form = studio();
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && form && form.elements.form_token) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  function upload(slot, file) {
    var form = studio(), zone = document.getElementById("drop-" + slot);
    if (!form || !zone || !file) { return; }
    var said = zone.querySelector("[data-upload-status]");
    said.textContent = "Uploading " + (file.name || "the pasted file") + "…";
    var params = new URLSearchParams();
    new FormData(form).forEach(function (v, k) {
      if (k !== "csrf_token" && k !== "form_token" && k !== "input_" + slot && typeof v === "string") { params.append(k, v); }
    });
    params.append("slot", slot);
    var body = new FormData();
    body.append("csrf_token", form.elements.csrf_token.value);
    body.append("next", "/studio/form?" + params.toString());
    body.append("file", file, file.name || "pasted");
    fetch("/assets/upload", {method: "POST", body: body, credentials: "same-origin", headers: {"X-Dashboard": "1"}})
      .then(function (r) { return r.text().then(function (html) { return {ok: r.ok, status: r.status, html: html}; }); })
      .then(function (res) {
        var doc = new DOMParser().parseFromString(res.html, "text/html");
        var fresh = doc.getElementById("studio-area"), area = document.getElementById("studio-area");
        if (fresh && area) {
          area.replaceWith(fresh);
          if (window.htmx) { htmx.process(fresh); }
          return;
        }
        var alert = doc.querySelector("[role=alert]");
        said.textContent = "The upload was refused: " + (alert ? alert.textContent.trim() : "HTTP " + res.status) + ".";
      })
      .catch(function () { said.textContent = "The upload did not reach the server. Check the connection and try again."; });
  }
  document.addEventListener("change", function (e) {
    var input = e.target;
    if (input.dataset && input.dataset.slot && input.files && input.files[0]) { upload(input.dataset.slot, input.files[0]); }
  });
  ["dragenter", "dragover"].forEach(function (name) {
    document.addEventListener(name, function (e) {
      var zone = e.target.closest && e.target.closest("[data-drop]");
      if (zone) { e.preventDefault(); zone.classList.add("over"); }
    });
  });
  document.addEventListener("dragleave", function (e) {
    var zone = e.target.closest && e.target.closest("[data-drop]");
    if (zone) { zone.classList.remove("over"); }
  });
  document.addEventListener("drop", function (e) {
    var zone = e.target.closest && e.target.closest("[data-drop]");
    if (!zone) { return; }
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files.length) { upload(zone.dataset.drop, e.dataTransfer.files[0]); }
  });
  document.addEventListener("paste", function (e) {
    var files = e.clipboardData && e.clipboardData.files;
    if (!files || !files.length || !studio()) { return; }
    var kind = files[0].type.split("/")[0], focused = e.target.closest && e.target.closest("[data-drop]");
    var zone = focused || Array.prototype.find.call(document.querySelectorAll("[data-drop] input[type=file]"), function (i) {
      return i.accept.indexOf(kind + "/") >= 0;
    });
    if (zone) { e.preventDefault(); upload(zone.dataset.drop || zone.dataset.slot, files[0]); }
  });
})();
// An answer htmx cannot show (a server error, no connection) is said in Studio's pane.
(function () {
  function say(text) {
    var pane = document.getElementById("pane-body");
    if (!pane) { return; }
    var box = document.createElement("div");
    box.className = "error"; box.setAttribute("role", "alert");
    box.textContent = text;
    pane.replaceChildren(box);
  }
  document.addEventListener("htmx:responseError", function (e) {
    if (e.detail.elt && e.detail.elt.id === "studio-form") {
      say("The server could not take this job (HTTP " + e.detail.xhr.status + "). Nothing was charged; try again in a minute.");
    }
  });
  document.addEventListener("htmx:sendError", function (e) {
    if (e.detail.elt && e.detail.elt.id === "studio-form") { say("The request did not reach the server. Check the connection and generate again."); }
  });
})();
// "Use the API": one language shown at a time (tabs); the copy buttons are handled above.
document.addEventListener("click", function (e) {
  var tab = e.target.closest && e.target.closest("[data-tab]");
  if (!tab) { return; }
  tab.parentElement.querySelectorAll("[data-tab]").forEach(function (t) {
    var on = t === tab;
    t.setAttribute("aria-selected", on ? "true" : "false");
    document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
  });
});
// A session that expired answers an htmx request with the login page (after the redirect):
// go there instead of showing it inside the pane.
document.addEventListener("htmx:beforeSwap", function (e) {
  var url = e.detail.xhr && e.detail.xhr.responseURL;
  if (url && new URL(url).origin === location.origin && new URL(url).pathname === "/login") {
    e.detail.shouldSwap = false;
    window.location.href = url;
  }
});
