/* connection.js: the socket's state, shown to the person; answers given offline are sent once it is back.
 *
 * The state comes from the htmx ws extension's events (htmx:wsConnecting, htmx:wsOpen,
 * htmx:wsClose) and is written to #connection-state (role=status): "Connected",
 * "Reconnecting…" (the socket just dropped; the extension is reconnecting), "Offline — your
 * answers will be sent when the connection is back" (a reconnect failed, or the browser is
 * offline). While not connected, #chat-status is emptied: the server sends the true status
 * again when the socket is back. A socket that never opened asks the server (the URL in
 * #connection-state's data-probe) whether it serves sockets at all; if it does not (Django's
 * runserver without daphne first in INSTALLED_APPS), the page says so instead of "Offline",
 * and the console says how to fix it.
 *
 * A message over the server's limit (#connection-state's data-max-bytes, 64 KiB) makes the
 * server close the socket: 1009 from the server itself, 4009 from ChatBridge on a server
 * started without the limit. The page says so in #errors (the draft and the forms keep what
 * was typed), forgets the answers too large to be sent again, and connects again.
 *
 * The extension queues what a ws-send form sends while the socket is not open, and sends the
 * queue once, in order, when it opens again (the same queue across reconnects). Here an answer
 * given meanwhile is shown as pending on its form, and a second click on the same form while
 * offline replaces the queued answer instead of adding another: one answer per question is sent.
 *
 * An answer that left on a socket that then dropped, with its question still open, may have
 * been lost with it: it is sent again when the socket is back. The server takes a second copy
 * of an answer quietly (same elicit id), so nothing is applied twice.
 *
 * Words a person sees go through Django's JavaScript catalog (gettext, interpolate; the chat
 * page loads it first, domain djangojs); without it they stay in English. The console help
 * for developers (UNSERVED_HELP) is not translated. */
(function () {
  "use strict";

  var gettext = window.gettext || function (s) { return s; };
  var interpolate = window.interpolate || function (fmt, obj) {
    return fmt.replace(/%\((\w+)\)s/g, function (m, key) { return String(obj[key]); });
  };

  // Keyed by state name (the keys are logic, the values words).
  var TEXT = {
    connecting: gettext("Connecting…"),
    connected: gettext("Connected"),
    reconnecting: gettext("Reconnecting…"),
    offline: gettext("Offline — your answers will be sent when the connection is back"),
    closed: gettext("Disconnected — reload the page to connect again"),
    unserved: gettext("This server does not serve the chat's connection")
  };
  var UNSERVED_HELP = "ChatBridge: this server answers pages but not the chat's WebSocket. Serve " +
    "the project with daphne or uvicorn and chatbridge.serving.get_asgi_application, or put " +
    "\"daphne\" first in INSTALLED_APPS for manage.py runserver (docs/install.md).";
  var probed = false;
  // Close codes after which the extension reconnects by itself (others end the socket).
  var RECONNECTS = [1006, 1011, 1012, 1013];
  // The server refused a message too large: this page connects again itself.
  var TOO_LARGE = [1009, 4009];
  var state = "connecting";
  var opened = false;
  var failures = 0;
  var leaving = false;
  // Answers sent and not yet seen answered: {callId, elicitId, message, label}.
  var unconfirmed = [];

  // Reconnect soon after a drop, then back off to at most 5 s: the extension's default
  // (full jitter up to 64 s) leaves a person waiting long after the server is back.
  function reconnectDelay(retry) {
    var ceiling = Math.min(500 * Math.pow(2, retry), 5000);
    return ceiling / 2 + Math.random() * ceiling / 2;
  }
  if (window.htmx) htmx.config.wsReconnectDelay = reconnectDelay;

  function setState(name) {
    var changed = name !== state;
    state = name;
    document.documentElement.setAttribute("data-connection", name);
    var element = document.getElementById("connection-state");
    if (element && (changed || element.textContent !== TEXT[name])) {
      element.textContent = TEXT[name];
      element.setAttribute("data-state", name);
    }
    if (name !== "connected" && name !== "connecting") {
      // Do not claim "Waiting for your answer…" as if all were well; the server says again
      // what it is doing once the socket is back.
      var status = document.getElementById("chat-status");
      if (status && status.textContent) status.textContent = "";
    }
  }

  function isAnswer(form) {
    var command = form && form.querySelector && form.querySelector("input[name=command]");
    return Boolean(command) && command.value !== "user_message";
  }

  function labelOf(submitter) {
    if (!submitter) return "";
    return (submitter.getAttribute("aria-label") || submitter.textContent || "").trim();
  }

  function sendingText(label) {
    return label ? interpolate(gettext("Sending your answer (%(label)s)…"), {label: label}, true)
      : gettext("Sending your answer…");
  }

  function pendingNote(form) {
    var note = form.querySelector(".answer-pending-note");
    if (!note) {
      note = document.createElement("p");
      note.className = "answer-pending-note";
      form.appendChild(note);
    }
    return note;
  }

  // Each try of a socket that never opened says "Connecting…", except on a server known not
  // to serve sockets: its words stay until a socket opens (the extension goes on trying).
  document.addEventListener("htmx:wsConnecting", function () {
    if (!opened && state !== "unserved") setState("connecting");
  });

  function fieldValue(form, name) {
    var input = form.querySelector("input[name=" + name + "]");
    return input ? input.value : "";
  }

  // The question's form as shown now, if it is still open (no error shown against it).
  function openForm(entry) {
    var card = document.getElementById("elicit-" + entry.callId);
    var form = card && card.querySelector("form");
    if (!form || fieldValue(form, "elicit_id") !== entry.elicitId) return null;
    return form.querySelector("[role=alert], .field-error, [aria-invalid=true]") ? null : form;
  }

  function settle() {
    unconfirmed = unconfirmed.filter(function (entry) {
      var form = openForm(entry);
      if (form && !form.querySelector(".answer-pending-note")) {
        pendingNote(form).textContent = sendingText(entry.label);
      }
      return Boolean(form);
    });
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    opened = true;
    failures = 0;
    setState("connected");
    settle();
    var wrapper = event.detail && event.detail.socketWrapper;
    if (!wrapper) return;
    unconfirmed.forEach(function (entry) {  // sent on the socket that dropped: maybe lost
      wrapper.sendImmediately(entry.message, null);
    });
  });

  document.addEventListener("htmx:wsAfterMessage", function (event) {
    var message = event.detail && typeof event.detail.message === "string" ? event.detail.message : "";
    if (message.indexOf('role="alert"') >= 0) {
      // The server answered with an error: what was sent got its reply; nothing to send again.
      unconfirmed.forEach(function (entry) {
        var note = document.querySelector("#elicit-" + CSS.escape(entry.callId) + " .answer-pending-note");
        if (note) note.remove();
      });
      unconfirmed = [];
      return;
    }
    settle();
  });

  // The socket has never opened: does this server serve sockets at all? Asked once.
  function probe() {
    var element = document.getElementById("connection-state");
    var url = element && element.getAttribute("data-probe");
    if (probed || opened || !url || !window.fetch) return;
    probed = true;
    fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (answer) {
        if (answer && answer.sockets === false && !opened) {
          setState("unserved");
          if (window.console) console.error(UNSERVED_HELP);
        }
      })
      .catch(function () {});  // the server is down: "Offline" says it
  }

  function maxBytes() {
    var element = document.getElementById("connection-state");
    return Number(element && element.getAttribute("data-max-bytes")) || 65536;
  }

  function byteLength(text) {
    return window.TextEncoder ? new TextEncoder().encode(text).length : text.length;
  }

  // The server closed the socket over a message too large: say so, and keep no answer that
  // would only be refused again when the socket is back.
  function tooLarge() {
    var limit = maxBytes();
    var errors = document.getElementById("errors");
    if (errors) {
      var alert = document.createElement("p");
      alert.className = "error";
      alert.setAttribute("role", "alert");
      var words = gettext("That was too large to send: a message may be at most %(size)s KiB, and nothing of it was kept. Shorten it and send it again.");
      alert.textContent = interpolate(words, {size: Math.floor(limit / 1024)}, true);
      errors.replaceChildren(alert);
    }
    unconfirmed = unconfirmed.filter(function (entry) {
      if (byteLength(entry.message) <= limit) return true;
      var note = document.querySelector("#elicit-" + CSS.escape(entry.callId) + " .answer-pending-note");
      if (note) note.remove();
      return false;
    });
  }

  document.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail && event.detail.event ? event.detail.event.code : 1006;
    if (leaving) return;  // the page is being left: nothing to tell
    if (state === "unserved") return;  // it will not connect: said already
    if (!opened) probe();
    var wrapper = event.detail && event.detail.socketWrapper;
    if (TOO_LARGE.indexOf(code) >= 0) tooLarge();
    if ((code === 1001 || TOO_LARGE.indexOf(code) >= 0) && wrapper && wrapper.reconnect) {
      // The server is going away (a restart), or refused what was sent: the extension does not
      // reconnect after these.
      setTimeout(function () { if (!leaving) wrapper.reconnect(); }, reconnectDelay(0));
    } else if (RECONNECTS.indexOf(code) < 0) {  // refused or closed for good: no reconnect
      setState("closed");
      return;
    }
    failures += 1;
    setState(failures > 1 || navigator.onLine === false ? "offline" : "reconnecting");
  });

  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("beforeunload", function () { leaving = true; });
  window.addEventListener("pageshow", function () { leaving = false; });

  window.addEventListener("offline", function () {
    if (state !== "connected" && state !== "unserved") setState("offline");
  });

  // A form sends while the socket is not open: the extension queues the message. Show it as
  // pending, and keep only the latest answer of the form in the queue.
  document.addEventListener("htmx:wsConfigSend", function (event) {
    var form = event.target;
    if (state === "connected" || !isAnswer(form)) return;
    var wrapper = event.detail.socketWrapper;
    var queue = wrapper && wrapper.queue;
    if (queue) {
      for (var i = queue.length - 1; i >= 0; i--) {
        if (queue[i].sendElt === form) queue.splice(i, 1);
      }
    }
    var submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    var label = labelOf(submitter);
    form.classList.add("answer-pending");
    form.setAttribute("data-pending-label", label);
    pendingNote(form).textContent = label
      ? interpolate(gettext("Your answer (%(label)s) will be sent when the connection is back."), {label: label}, true)
      : gettext("Your answer will be sent when the connection is back.");
  });

  // The message left (at once, or from the queue when the socket opened again).
  document.addEventListener("htmx:wsAfterSend", function (event) {
    var form = event.target;
    if (!form || !form.querySelector || fieldValue(form, "command") !== "elicit_response") return;
    var label = form.getAttribute("data-pending-label") || "";
    unconfirmed = unconfirmed.filter(function (entry) { return entry.elicitId !== fieldValue(form, "elicit_id"); });
    unconfirmed.push({
      callId: fieldValue(form, "call_id"),
      elicitId: fieldValue(form, "elicit_id"),
      message: event.detail.message,
      label: label
    });
    if (form.classList.contains("answer-pending")) {
      form.classList.remove("answer-pending");
      pendingNote(form).textContent = sendingText(label);
    }
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { setState(state); });
  } else {
    setState(state);
  }
})();
