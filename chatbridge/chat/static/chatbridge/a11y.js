/* a11y.js: keyboard behaviour of the chat's widgets, keyed on data attributes so it works for
 * fragments htmx swaps in later (every listener is delegated from the document).
 *
 * Roving focus: a container marked data-roving is ONE Tab stop. The server renders its first
 * usable button with tabindex="0" and the others with tabindex="-1"; here the arrow keys move
 * the focus (and the tabindex="0") between its enabled buttons, and Enter or Space presses the
 * focused one, as buttons do.
 *   data-roving="list": ←/↑ previous, →/↓ next, Home first, End last.
 *   data-roving="grid": rows are the children marked data-roving-row. ←/→ previous/next seat
 *     in reading order, ↑/↓ the same column (data-col) in the nearest row where it is free,
 *     Home/End first/last of the row, Ctrl+Home/Ctrl+End first/last of the grid.
 * Disabled buttons (taken seats) are skipped.
 *
 * No words of its own: the labels come translated from the server's templates. Any added here
 * must go through Django's JavaScript catalog (gettext), as in chat.js. */
(function () {
  "use strict";

  function items(container) {
    return Array.prototype.filter.call(container.querySelectorAll("button"), function (b) {
      return !b.disabled && !b.hidden && b.closest("[data-roving]") === container;
    });
  }

  function move(container, from, to) {
    if (!to || to === from) { return; }
    items(container).forEach(function (b) { b.tabIndex = b === to ? 0 : -1; });
    to.focus();
    if (to.scrollIntoView) { to.scrollIntoView({ block: "nearest", inline: "nearest" }); }
  }

  function rowOf(button) { return button.closest("[data-roving-row]"); }

  function inRow(container, row) {
    return items(container).filter(function (b) { return rowOf(b) === row; });
  }

  function vertical(container, current, step) {
    var rows = Array.prototype.slice.call(container.querySelectorAll("[data-roving-row]"));
    var col = current.dataset.col;
    for (var i = rows.indexOf(rowOf(current)) + step; i >= 0 && i < rows.length; i += step) {
      var match = inRow(container, rows[i]).filter(function (b) { return b.dataset.col === col; });
      if (match.length) { return match[0]; }
    }
    return null;
  }

  function target(container, current, event) {
    var all = items(container);
    var index = all.indexOf(current);
    var grid = container.dataset.roving === "grid";
    switch (event.key) {
      case "ArrowLeft": return all[index - 1];
      case "ArrowRight": return all[index + 1];
      case "ArrowUp": return grid ? vertical(container, current, -1) : all[index - 1];
      case "ArrowDown": return grid ? vertical(container, current, 1) : all[index + 1];
      case "Home":
        if (grid && !event.ctrlKey) { return inRow(container, rowOf(current))[0]; }
        return all[0];
      case "End":
        if (grid && !event.ctrlKey) { var row = inRow(container, rowOf(current)); return row[row.length - 1]; }
        return all[all.length - 1];
      default: return undefined;
    }
  }

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.metaKey || event.defaultPrevented) { return; }
    var current = event.target;
    if (!current || current.tagName !== "BUTTON") { return; }
    var container = current.closest("[data-roving]");
    if (!container) { return; }
    var to = target(container, current, event);
    if (to === undefined) { return; }
    event.preventDefault();  /* the arrow keys move the focus, not the page */
    move(container, current, to);
  });

  /* Focus is never dropped to the top of the page: when the control that had it is swapped
   * away (an answered question, an approved call) and nothing marked data-autofocus took it,
   * it goes to the tool card the control belonged to (an approval's card leads to its call's
   * card). A person who clicks away from a control on purpose keeps that choice. */
  var lastCard = null;
  function cardOf(element) {
    var card = element && element.closest && element.closest(".tool-card[id], .approval-card[id]");
    if (!card) { return null; }
    return card.id.indexOf("approval-") === 0 ? "tool-" + card.id.slice("approval-".length) : card.id;
  }
  document.addEventListener("focusin", function (event) { lastCard = cardOf(event.target); });
  document.addEventListener("focusout", function (event) {
    var left = event.target;
    setTimeout(function () {  /* still in the page: blurred on purpose, not swapped away */
      if (left.isConnected && (!document.activeElement || document.activeElement === document.body)) { lastCard = null; }
    }, 0);
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    var active = document.activeElement;
    if (!lastCard || (active && active !== document.body)) { return; }
    if (document.querySelector("dialog[open]")) { return; }
    var card = document.getElementById(lastCard);
    if (!card) { return; }
    if (!card.hasAttribute("tabindex")) { card.setAttribute("tabindex", "-1"); }
    card.focus({ preventScroll: true });
  });

  /* A click or a focus by other means (a pointer) makes that button the container's Tab stop. */
  document.addEventListener("focusin", function (event) {
    var current = event.target;
    if (!current || current.tagName !== "BUTTON" || current.disabled) { return; }
    var container = current.closest("[data-roving]");
    if (!container || current.tabIndex === 0) { return; }
    items(container).forEach(function (b) { b.tabIndex = b === current ? 0 : -1; });
  });
})();
