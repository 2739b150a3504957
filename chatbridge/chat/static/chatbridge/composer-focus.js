/* composer-focus.js: a focused control is never hidden under the chat's sticky composer (WCAG
 * 2.2 SC 2.4.11, Focus Not Obscured). The composer covers the foot of the window; its height
 * is the page's scroll-padding (--composer-h, kept here), which the browser's own scrolling to
 * a focused control honours, and a control focused in view but under the composer is lifted
 * above it. Never while a pointer presses (its click would be lost). No words of its own. */
(function () {
  "use strict";
  var composer = document.querySelector("main form.composer");
  if (!composer) return;
  var root = document.documentElement;
  function measure() { root.style.setProperty("--composer-h", composer.offsetHeight + "px"); }
  function lift(target) {
    if (!target || !target.getBoundingClientRect || composer.contains(target)) return;
    if (target.closest("dialog[open]")) return; // above everything already
    var box = target.getBoundingClientRect();
    var cover = composer.getBoundingClientRect();
    var under = box.bottom > cover.top && box.top < cover.bottom &&
      box.right > cover.left && box.left < cover.right;
    if (!under) return;
    window.scrollBy({ top: Math.min(box.bottom - cover.top + 8, box.top - 8), behavior: "instant" });
  }
  measure();
  if (window.ResizeObserver) new ResizeObserver(measure).observe(composer);
  // Never while a pointer presses: a control focused by mousedown that moved before mouseup
  // would lose its click. It is lifted once the press is over, if still focused.
  var pressing = false;
  document.addEventListener("pointerdown", function () { pressing = true; }, true);
  function released() {
    pressing = false;
    setTimeout(function () { lift(document.activeElement); }, 0);
  }
  document.addEventListener("pointerup", released, true);
  document.addEventListener("pointercancel", released, true);
  document.addEventListener("focusin", function (event) {
    if (pressing) return;
    lift(event.target);
    requestAnimationFrame(function () { if (document.activeElement === event.target) lift(event.target); });
  });
})();
