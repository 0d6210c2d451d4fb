// Devicedeck dashboard behaviour that HTML alone cannot give: relative times in the reader's
// time zone, the live-connection indicator, a brief mark on events that just arrived, and "/"
// to jump to the search box. Loaded as a file (the CSP allows no inline script).
(function () {
  "use strict";

  var UNITS = [
    ["day", 86400],
    ["hour", 3600],
    ["minute", 60],
    ["second", 1],
  ];
  var relative = typeof Intl !== "undefined" && Intl.RelativeTimeFormat
    ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" })
    : null;
  var absolute = typeof Intl !== "undefined"
    ? new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" })
    : null;

  function describe(date, now) {
    var seconds = Math.round((date.getTime() - now) / 1000);
    if (Math.abs(seconds) < 5) {
      return "just now";
    }
    for (var i = 0; i < UNITS.length; i++) {
      var size = UNITS[i][1];
      if (Math.abs(seconds) >= size || size === 1) {
        var value = Math.round(seconds / size);
        return relative ? relative.format(value, UNITS[i][0]) : Math.abs(value) + " " + UNITS[i][0] + "s ago";
      }
    }
    return "";
  }

  function formatTimes(root) {
    var now = Date.now();
    var nodes = (root || document).querySelectorAll("time[data-relative]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) {
        continue;
      }
      node.textContent = describe(date, now);
      if (absolute) {
        node.title = absolute.format(date);
      }
    }
  }

  // Events newer than any on the page when it loaded get a short highlight when they arrive.
  var newestSeen = 0;

  function newestIn(root) {
    var newest = 0;
    var rows = root.querySelectorAll("[data-event-id]");
    for (var i = 0; i < rows.length; i++) {
      newest = Math.max(newest, parseInt(rows[i].getAttribute("data-event-id"), 10) || 0);
    }
    return newest;
  }

  function markArrivals(root) {
    var rows = root.querySelectorAll("[data-event-id]");
    var newest = newestSeen;
    for (var i = 0; i < rows.length; i++) {
      var id = parseInt(rows[i].getAttribute("data-event-id"), 10) || 0;
      if (id > newestSeen) {
        rows[i].classList.add("is-new");
      }
      newest = Math.max(newest, id);
    }
    newestSeen = newest;
  }

  function setLive(state, text) {
    var status = document.getElementById("live-status");
    if (!status) {
      return;
    }
    status.setAttribute("data-state", state);
    var label = status.querySelector(".live-text");
    if (label && label.textContent !== text) {
      label.textContent = text;
    }
  }

  var pulseTimer = null;
  // When the live refresher last got an answer: only its swaps mark arrivals (a filter that
  // brings newer events into view is not news).
  var liveSwapAt = 0;

  function onReady() {
    newestSeen = newestIn(document);
    formatTimes(document);
    window.setInterval(function () { formatTimes(document); }, 15000);

    document.body.addEventListener("htmx:sseOpen", function () { setLive("open", "Live"); });
    document.body.addEventListener("htmx:sseError", function () { setLive("error", "Reconnecting…"); });
    document.body.addEventListener("htmx:sseMessage", function () {
      setLive("pulse", "Live");
      window.clearTimeout(pulseTimer);
      pulseTimer = window.setTimeout(function () { setLive("open", "Live"); }, 700);
    });

    document.body.addEventListener("htmx:beforeSwap", function (event) {
      if (event.detail.elt && event.detail.elt.id === "live") {
        liveSwapAt = Date.now();
      }
    });

    document.addEventListener("keydown", function (event) {
      if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) {
        return;
      }
      var active = document.activeElement;
      if (active && (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA")) {
        return;
      }
      var search = document.querySelector("[data-hotkey='/']");
      if (search) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    });

    if (window.htmx) {
      window.htmx.onLoad(function (element) {
        if (element === document.body) {
          return;
        }
        formatTimes(element);
        if (Date.now() - liveSwapAt < 2000) {
          markArrivals(element);
        } else {
          newestSeen = Math.max(newestSeen, newestIn(element));
        }
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", onReady);
  } else {
    onReady();
  }
})();
