/* words.js: the tool card's Abort asks before it acts. "Abort" shows an inline confirmation
 * ("Yes, abort" / "Keep going"); focus goes to "Keep going" (never to the committing control),
 * Esc or "Keep going" closes it and returns focus to "Abort". No window.confirm.
 *
 * No words of its own: the labels come translated from the server's templates, and the
 * controls are found by class, never by their text. Any words added here must go through
 * Django's JavaScript catalog (gettext), as in chat.js. */
(function () {
  "use strict";

  function parts(el) {
    var actions = el.closest(".tool-actions");
    if (!actions) return null;
    return { open: actions.querySelector(".abort-open"), confirm: actions.querySelector(".abort-confirm") };
  }

  function show(p) {
    p.confirm.hidden = false;
    p.open.hidden = true;
    p.open.setAttribute("aria-expanded", "true");
    var keep = p.confirm.querySelector(".abort-keep");
    if (keep) keep.focus();
  }

  function hide(p) {
    p.confirm.hidden = true;
    p.open.hidden = false;
    p.open.setAttribute("aria-expanded", "false");
    p.open.focus();
  }

  document.addEventListener("click", function (event) {
    var target = event.target instanceof Element ? event.target : null;
    if (!target) return;
    var opener = target.closest(".abort-open");
    if (opener) { var p = parts(opener); if (p && p.confirm) show(p); return; }
    var keep = target.closest(".abort-keep");
    if (keep) { var q = parts(keep); if (q) hide(q); }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var target = event.target instanceof Element ? event.target : null;
    var confirm = target && target.closest(".abort-confirm");
    if (!confirm || confirm.hidden) return;
    var p = parts(confirm);
    if (!p) return;
    event.preventDefault();
    event.stopPropagation();
    hide(p);
  }, true);
})();
