/* ChatBridge guest-UI host (seed 004): talks to sandboxed guest iframes with postMessage.
 * Accepts messages only from the iframe of a live question; relays submissions to the server
 * through the question's form (the server validates them against the schema). */
(function () {
  "use strict";

  function readJson(card, index) {
    var blocks = card.querySelectorAll('script[type="application/json"]');
    try { return JSON.parse(blocks[index].textContent); } catch (e) { return null; }
  }

  function contextFor(card) {
    var values = readJson(card, 4) || {};
    var submitted = null;
    if (values.__json__) { try { submitted = JSON.parse(values.__json__); } catch (e) { submitted = null; } }
    var errors = readJson(card, 3) || {};
    var schema = readJson(card, 1) || {};
    delete schema["x-model-context"];
    return {
      message: readJson(card, 0) || "",
      schema: schema,
      context: readJson(card, 2) || {},
      errors: errors,
      error: Object.keys(errors).length ? Object.keys(errors).map(function (k) {
        return k + ": " + errors[k].join(" ");
      }).join("; ") : null,
      submitted: submitted
    };
  }

  function setUp(card) {
    if (card.dataset.guestReady) { return; }
    card.dataset.guestReady = "1";
    var dialog = card.querySelector("dialog.guest-dialog");
    if (dialog && !dialog.open && dialog.showModal) { dialog.showModal(); }
    var reopen = card.querySelector(".guest-open");
    if (reopen && dialog) { reopen.addEventListener("click", function () { if (!dialog.open) { dialog.showModal(); } }); }
  }

  function relay(card, params) {
    var action = ["accept", "decline", "cancel"].indexOf(params.action) >= 0 ? params.action : "cancel";
    var field = card.querySelector('input[name="__json__"]');
    var button = card.querySelector("button.guest-relay");
    if (!field || !button) { return; }
    field.value = JSON.stringify(params.content && typeof params.content === "object" ? params.content : {});
    button.value = action;
    button.click();
  }

  window.addEventListener("message", function (event) {
    var cards = document.querySelectorAll(".guest-ui");
    for (var i = 0; i < cards.length; i++) {
      var frame = cards[i].querySelector("iframe.guest-frame");
      if (!frame || event.source !== frame.contentWindow) { continue; }
      var message = event.data || {};
      var method = message.method || message.type;
      if (method === "ui-lifecycle-iframe-ready") {
        frame.contentWindow.postMessage({
          jsonrpc: "2.0", method: "ui/notifications/elicitation-context", params: contextFor(cards[i])
        }, "*");
      } else if (method === "ui/submit-elicitation") {
        relay(cards[i], message.params || {});
      }
      return;
    }
    /* Anything else (another window, a stale iframe) is ignored. */
  });

  function scan() { document.querySelectorAll(".guest-ui").forEach(setUp); }
  document.addEventListener("DOMContentLoaded", scan);
  document.addEventListener("htmx:oobAfterSwap", scan);
  document.addEventListener("htmx:wsAfterMessage", scan);
})();
