// Devicedeck dashboard behaviour that HTML alone cannot give: times in UTC or the reader's
// time zone (a switch remembered per browser), the live-connection indicator, a brief mark on events that just arrived, copy
// buttons that work over plain HTTP too, and "/" to jump to the search box. Loaded as a file (the CSP allows no inline script).
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
  // Times are shown in UTC or in the browser's zone, as the reader chose; the choice is kept in
  // this browser. The server writes UTC, which is what a reader without the script sees.
  var ZONE_KEY = "devicedeck.zone";

  function storedZone() {
    try {
      return window.localStorage.getItem(ZONE_KEY) === "local" ? "local" : "utc";
    } catch (e) {
      return "utc";
    }
  }

  var zone = storedZone();
  var formats = {};

  function formatter(style) {
    var key = style + "/" + zone;
    if (!formats[key]) {
      var options = { timeZone: zone === "utc" ? "UTC" : undefined, hourCycle: "h23" };
      if (style === "clock") {
        options.hour = "2-digit";
        options.minute = "2-digit";
      } else if (style === "day") {
        options.weekday = "short";
        options.day = "2-digit";
      } else {
        options.year = "numeric";
        options.month = "2-digit";
        options.day = "2-digit";
        options.hour = "2-digit";
        options.minute = "2-digit";
        options.second = "2-digit";
        options.timeZoneName = "short";
      }
      formats[key] = new Intl.DateTimeFormat(undefined, options);
    }
    return formats[key];
  }

  function zoneName() {
    if (zone === "utc") {
      return "UTC";
    }
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  }

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
    var scope = root || document;
    var full = formatter("full");
    var nodes = scope.querySelectorAll("time[data-relative], time[data-absolute]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) {
        continue;
      }
      if (node.hasAttribute("data-absolute")) {
        node.textContent = full.format(date);
        node.title = describe(date, now);
      } else {
        node.textContent = describe(date, now);
        node.title = full.format(date);
      }
    }
    // Chart axes and tooltips: data-time holds the moment, data-suffix what follows it.
    var marked = scope.querySelectorAll("[data-time]");
    for (var j = 0; j < marked.length; j++) {
      var element = marked[j];
      var moment = new Date(element.getAttribute("data-time"));
      if (isNaN(moment.getTime())) {
        continue;
      }
      var style = element.getAttribute("data-time-style") || "full";
      element.textContent = formatter(style).format(moment) + (element.getAttribute("data-suffix") || "");
    }
    var labels = scope.querySelectorAll("[data-zone-label]");
    for (var k = 0; k < labels.length; k++) {
      labels[k].textContent = "Times in " + zoneName();
    }
    var button = document.getElementById("zone-switch");
    if (button) {
      button.setAttribute("aria-pressed", zone === "local" ? "true" : "false");
      var name = button.querySelector(".zone-name");
      if (name) {
        name.textContent = zone === "utc" ? "UTC" : "local";
      }
      button.title = "Times are in " + zoneName() + "; switch to " +
        (zone === "utc" ? "this browser's time zone" : "UTC") + " (remembered in this browser)";
    }
  }

  function switchZone() {
    zone = zone === "utc" ? "local" : "utc";
    try {
      window.localStorage.setItem(ZONE_KEY, zone);
    } catch (e) {
      // A browser that refuses storage (some private windows) still switches this page.
    }
    formatTimes(document);
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

  // Copying a command. The Clipboard API exists only on HTTPS and localhost pages; a dashboard
  // served over plain HTTP elsewhere selects the command and asks the browser to copy the
  // selection, and when even that is refused, leaves it selected and says to press Ctrl+C.
  // Either way the card says what happened.
  function copyCommand(button) {
    var text = button.getAttribute("data-copy");
    var card = button.closest(".commands");
    var status = card ? card.querySelector(".copy-status") : null;
    var code = button.parentNode.querySelector(".cmd");

    function report(message, label) {
      if (status) {
        status.textContent = message;
      }
      button.textContent = label;
      window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
    }

    function copySelection() {
      var copied = false;
      if (code) {
        var range = document.createRange();
        range.selectNodeContents(code);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        try {
          copied = document.execCommand("copy");
        } catch (e) {
          copied = false;
        }
      }
      if (copied) {
        report("Copied: " + text, "Copied");
      } else {
        report("The command is selected: press Ctrl+C (\u2318C on a Mac) to copy it.", "Selected");
      }
    }

    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        report("Copied: " + text, "Copied");
      }, copySelection);
    } else {
      copySelection();
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
    // On a phone the filters would fill the first screen: they start folded away there.
    if (window.matchMedia && window.matchMedia("(max-width: 600px)").matches) {
      var folds = document.querySelectorAll("details.filters-fold");
      for (var f = 0; f < folds.length; f++) {
        var active = folds[f].querySelector("input[value]:not([value='']):not([type=hidden]), select:not([name=limit]) option[selected]:not([value=''])");
        if (!active) {
          folds[f].open = false;
        }
      }
    }
    var zoneButton = document.getElementById("zone-switch");
    if (zoneButton) {
      zoneButton.addEventListener("click", switchZone);
    }

    document.body.addEventListener("htmx:sseOpen", function () { setLive("open", "Live"); });
    document.body.addEventListener("htmx:sseError", function () { setLive("error", "Reconnecting…"); });
    document.body.addEventListener("htmx:sseMessage", function () {
      setLive("pulse", "Live");
      window.clearTimeout(pulseTimer);
      pulseTimer = window.setTimeout(function () { setLive("open", "Live"); }, 700);
    });

    // Keystrokes in one text box within a few seconds of each other are one edit: the first
    // adds a history entry, the rest replace it (the server answers HX-Replace-Url).
    var typing = { input: null, at: 0 };
    document.body.addEventListener("htmx:configRequest", function (event) {
      var trigger = event.detail.triggeringEvent;
      var input = trigger && trigger.type === "input" ? trigger.target : null;
      if (!input || input.tagName !== "INPUT") {
        typing = { input: null, at: 0 };
        return;
      }
      var now = Date.now();
      if (typing.input === input && now - typing.at < 5000) {
        event.detail.headers["Devicedeck-History"] = "replace";
      }
      typing = { input: input, at: now };
    });

    document.body.addEventListener("htmx:beforeSwap", function (event) {
      if (event.detail.elt && event.detail.elt.id === "live") {
        liveSwapAt = Date.now();
      }
    });

    // Copy buttons next to ready-made commands.
    document.addEventListener("click", function (event) {
      var button = event.target.closest ? event.target.closest("[data-copy]") : null;
      if (button) {
        copyCommand(button);
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
