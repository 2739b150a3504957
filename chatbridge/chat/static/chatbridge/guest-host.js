/* ChatBridge's host for the guest UIs of delegated questions. Each .guest-ui card holds one
 * sandboxed iframe; only messages whose source is the iframe of a live card are answered,
 * everything else is ignored. The guest may speak either protocol:
 *
 * MCP Apps (spec 2026-01-26), JSON-RPC 2.0 over postMessage:
 *   View → host: ui/initialize (→ hostContext: theme, toolInfo), ui/notifications/initialized,
 *     tools/call _ui_question (→ the open question, the last refusal), tools/call _ui_answer
 *     (relayed through the question's form), ping.
 *   host → View: ui/notifications/tool-input (the call's arguments) after initialized;
 *     ui/notifications/host-context-changed (theme) when the page's colour scheme changes.
 *   View → host: ui/notifications/request-teardown (Esc in the view): a modal picker's dialog
 *     closes and focus returns to its "Open the picker again" button, as Esc on the page does.
 *   View → host: ui/notifications/size-changed {height}: the frame takes that height (within
 *     the window), so nothing in the view is cut off.
 *   The theme is the page's (prefers-color-scheme) unless the question's context names one.
 * Seed 004 (DESIGN §7), the rich-elicitation messages:
 *   guest → host: ui-lifecycle-iframe-ready (as {type} or {method}); ui/submit-elicitation
 *     {action: accept|decline|cancel, content} (relayed through the question's form).
 *   host → guest: ui/notifications/elicitation-context {message, schema, context, error,
 *     errors, submitted} on ready.
 * Either way the server validates each answer and, refusing one, re-renders the card with the
 * reason (the same words every transport uses), which the new guest reads as its question's
 * error; nothing here decides whether an answer is valid.
 *
 * Words a guest may show a person go through Django's JavaScript catalog (gettext; the chat
 * page loads it first, domain djangojs). Protocol names and the errors meant for a guest's
 * developer (an unknown tool or method) stay as they are. */
(function () {
  "use strict";

  var gettext = window.gettext || function (s) { return s; };

  var PROTOCOL = "2026-01-26";

  function readJson(card, index) {
    var blocks = card.querySelectorAll('script[type="application/json"]');
    try { return JSON.parse(blocks[index].textContent); } catch (e) { return null; }
  }

  function question(card) {
    var values = readJson(card, 4) || {};
    var submitted = null;
    if (values.__json__) { try { submitted = JSON.parse(values.__json__); } catch (e) { submitted = null; } }
    var schema = readJson(card, 1) || {};
    delete schema["x-model-context"];
    var message = readJson(card, 0) || "";
    var refused = readJson(card, 6) || "";
    return {
      content: [{ type: "text", text: message }],
      structuredContent: {
        message: message,
        schema: schema,
        context: readJson(card, 2) || {},
        error: refused || null,
        submitted: submitted
      }
    };
  }

  /* Seed 004's ui/notifications/elicitation-context: the question, its context, the refusal
   * of the last answer (error; errors by field) and the values refused. */
  function elicitationContext(card) {
    var asked = question(card).structuredContent;
    return {
      message: asked.message,
      schema: asked.schema,
      context: Object.assign({}, asked.context, { theme: theme(card) }),
      error: asked.error,
      errors: readJson(card, 3) || {},
      submitted: asked.submitted
    };
  }

  var darkScheme = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  /* The theme the guest should use: the question's own, else the page's colour scheme. */
  function theme(card) {
    var context = readJson(card, 2) || {};
    if (context.theme === "dark" || context.theme === "light") { return context.theme; }
    return darkScheme && darkScheme.matches ? "dark" : "light";
  }

  function hostContext(card) {
    return {
      theme: theme(card),
      displayMode: "inline",
      availableDisplayModes: ["inline"],
      platform: "web",
      locale: document.documentElement.lang || navigator.language, // the page's language
      toolInfo: { id: card.dataset.call, tool: { name: card.dataset.tool, inputSchema: { type: "object" } } }
    };
  }

  function setUp(card) {
    if (card.dataset.guestReady) { return; }
    card.dataset.guestReady = "1";
    var dialog = card.querySelector("dialog.guest-dialog");
    if (dialog && !dialog.open && dialog.showModal) { dialog.showModal(); }
    var reopen = card.querySelector(".guest-open");
    if (reopen && dialog) {
      reopen.addEventListener("click", function () { if (!dialog.open) { dialog.showModal(); } });
      /* However it closes (Esc on the page, Esc in the guest), focus goes back to the button
       * that opens it again. */
      dialog.addEventListener("close", function () { if (reopen.isConnected) { reopen.focus(); } });
    }
  }

  /* The frame grows to the height its view reports (a long refusal must not push the view's
   * buttons out of sight), within the window; past that the view scrolls. */
  function fit(frame, height) {
    if (typeof height !== "number" || !isFinite(height) || height <= 0) { return; }
    var room = Math.floor(window.innerHeight * 0.85) - 32;
    var base = parseFloat(getComputedStyle(frame).minHeight) || 0;
    frame.style.height = Math.max(base, Math.min(Math.ceil(height) + 2, room)) + "px";
  }

  function closeDialog(card) {
    var dialog = card.querySelector("dialog.guest-dialog");
    if (dialog && dialog.open) { dialog.close(); }
  }

  function relay(card, args) {
    var action = ["accept", "decline", "cancel"].indexOf(args.action) >= 0 ? args.action : "cancel";
    var field = card.querySelector('input[name="__json__"]');
    var button = card.querySelector("button.guest-relay");
    if (!field || !button) { return false; }
    field.value = JSON.stringify(args.content && typeof args.content === "object" ? args.content : {});
    button.value = action;
    button.click();
    return true;
  }

  function handle(card, frame, message) {
    var view = frame.contentWindow;
    function reply(result) { view.postMessage({ jsonrpc: "2.0", id: message.id, result: result }, "*"); }
    function fail(code, text) { view.postMessage({ jsonrpc: "2.0", id: message.id, error: { code: code, message: text } }, "*"); }
    var params = message.params || {};
    switch (message.method) {
      case "ui/initialize":
        reply({
          protocolVersion: PROTOCOL,
          hostInfo: { name: "ChatBridge", version: "1.0.0" },
          hostCapabilities: { serverTools: {} },
          hostContext: hostContext(card)
        });
        return;
      case "ui/notifications/initialized":
        view.postMessage({
          jsonrpc: "2.0", method: "ui/notifications/tool-input", params: { arguments: readJson(card, 5) || {} }
        }, "*");
        return;
      case "ping":
        reply({});
        return;
      case "ui/notifications/size-changed":
        fit(frame, params.height);
        return;
      case "ui/notifications/request-teardown":
        closeDialog(card);  /* the view stays loaded: the picker can be opened again */
        return;
      case "tools/call":
        if (params.name === "_ui_question") { reply(question(card)); return; }
        if (params.name === "_ui_answer") {
          /* No reply: the server answers by re-rendering the card (refused) or closing it. */
          if (!relay(card, params.arguments || {})) { fail(-32603, gettext("The question is closed.")); }
          return;
        }
        fail(-32601, "This host offers the app no tool " + JSON.stringify(params.name) + ".");
        return;
      default:
        if (message.id !== undefined && message.method) { fail(-32601, "Method not found"); }
    }
  }

  /* Seed 004: true when ``message`` was one of its messages (and has been handled). */
  function handleSeed004(card, frame, message) {
    var method = message.method || message.type;
    if (method === "ui-lifecycle-iframe-ready") {
      frame.contentWindow.postMessage({
        jsonrpc: "2.0", method: "ui/notifications/elicitation-context", params: elicitationContext(card)
      }, "*");
      return true;
    }
    if (method === "ui/submit-elicitation") {
      relay(card, message.params || {});
      return true;
    }
    return false;
  }

  window.addEventListener("message", function (event) {
    var cards = document.querySelectorAll(".guest-ui");
    for (var i = 0; i < cards.length; i++) {
      var frame = cards[i].querySelector("iframe.guest-frame");
      if (!frame || event.source !== frame.contentWindow) { continue; }
      var message = event.data;
      if (!message || typeof message !== "object" || handleSeed004(cards[i], frame, message)) { return; }
      if (message.jsonrpc === "2.0" && typeof message.method === "string") {
        handle(cards[i], frame, message);
      }
      return;
    }
    /* Anything else (another window, a stale iframe) is ignored. */
  });

  if (darkScheme && darkScheme.addEventListener) {
    darkScheme.addEventListener("change", function () {
      document.querySelectorAll(".guest-ui").forEach(function (card) {
        var frame = card.querySelector("iframe.guest-frame");
        if (!frame || !frame.contentWindow) { return; }
        frame.contentWindow.postMessage({
          jsonrpc: "2.0", method: "ui/notifications/host-context-changed", params: { theme: theme(card) }
        }, "*");
      });
    });
  }

  function scan() { document.querySelectorAll(".guest-ui").forEach(setUp); }
  document.addEventListener("DOMContentLoaded", scan);
  document.addEventListener("htmx:oobAfterSwap", scan);
  document.addEventListener("htmx:wsAfterMessage", scan);
})();
