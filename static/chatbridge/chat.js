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
    target.removeAttribute("data-autofocus");
    if (!target.hasAttribute("tabindex") && !/^(A|BUTTON|INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus({ preventScroll: false });
  }

  /* An out-of-band swap reports the new content as the event's target (its detail.target is
   * the element replaced, detached after an outerHTML swap). */
  document.addEventListener("htmx:oobAfterSwap", function (event) { focusMarked(event.target); });
  document.addEventListener("htmx:afterSwap", function (event) { focusMarked(event.detail.target); });
})();
