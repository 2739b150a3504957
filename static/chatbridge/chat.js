/* ChatBridge's chat page. One rule every fragment may rely on: after htmx swaps content in
 * (from the socket or a request), the first element in it marked data-autofocus receives
 * focus, so a server-rendered fragment says where a person's attention goes next (an error,
 * the next question's heading), never a committing control. */
(function () {
  "use strict";

  function focusMarked(root) {
    if (!root || !root.querySelector) return;
    var target = root.matches && root.matches("[data-autofocus]") ? root : root.querySelector("[data-autofocus]");
    if (!target) return;
    /* Only the first counts: the others would steal the focus at the next swap. */
    root.querySelectorAll("[data-autofocus]").forEach(function (marked) { marked.removeAttribute("data-autofocus"); });
    target.removeAttribute("data-autofocus");
    if (!target.hasAttribute("tabindex") && !/^(A|BUTTON|INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus({ preventScroll: false });
  }

  // An out-of-band swap's detail.target is the element it replaced (detached after an outerHTML
  // swap); the event itself fires on the new content.
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    focusMarked(event.target instanceof Element && event.target.isConnected ? event.target : event.detail.target);
  });
  document.addEventListener("htmx:afterSwap", function (event) { focusMarked(event.detail.target); });
  /* Marks in the page as it was loaded (a reload shows past confirmations, open questions)
   * are history: the rule is for content swapped in, and the page's own autofocus stands. */
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-autofocus]").forEach(function (marked) { marked.removeAttribute("data-autofocus"); });
  });
})();
