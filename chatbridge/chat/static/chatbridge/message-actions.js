/* message-actions.js: what a person does with a message (the buttons of message_actions.html):
 * copy it, copy a code block of a reply, edit one of their messages and send it again, and
 * the page's side of a conversation's fork (an earlier version folded away).
 *
 * - Copy: the message's text (as shown) to the clipboard; the polite live region #announcer
 *   says "Copied" (or that the browser refused: then the text is selected to copy by hand).
 * - Copy code: a button added to each code block of a reply, here, as replies arrive.
 * - Edit: shows the message's edit form (server-rendered, hidden, empty: filled here with the
 *   message as shown) in place of its text; Esc or Cancel closes it and gives the focus back
 *   to Edit. Sending it is the form's ws-send.
 * - A fork: the server's marker (fork_marker.html) names the abandoned messages and tool
 *   cards; they are moved, in order, into a closed "Earlier version" disclosure, as the page
 *   renders them on load.
 *
 * Words go through Django's JavaScript catalog (gettext), with the English as fallback. */
(function () {
  "use strict";

  var gettext = window.gettext || function (s) { return s; };

  function announce(text) {
    var region = document.getElementById("announcer");
    if (!region) return;
    region.textContent = "";
    setTimeout(function () { region.textContent = text; }, 50);
  }

  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copy(text, source) {
    var refused = function () {
      if (source) selectText(source);
      announce(gettext("Copying was refused by the browser; the text is selected: copy it with the keyboard."));
    };
    if (!navigator.clipboard || !window.isSecureContext) { refused(); return; }
    navigator.clipboard.writeText(text).then(function () {
      announce(gettext("Copied"));
    }, refused);
  }

  // ---- code blocks: a Copy code button each, added once the reply is whole ------------
  // Inside the block, in its corner (words.css): adding it moves nothing on the page.
  function decorate() {
    var blocks = document.querySelectorAll(".bubble.markdown:not(.streaming) pre");
    Array.prototype.forEach.call(blocks, function (pre) {
      if (pre.querySelector(".code-copy") || !pre.closest(".msg")) return;
      var button = document.createElement("button");
      button.type = "button";
      button.className = "code-copy";
      button.textContent = gettext("Copy code");
      pre.appendChild(button);
    });
  }

  // ---- forks: the abandoned items into an "Earlier version" disclosure ------------------
  function fold(marker) {
    var ids = (marker.dataset.abandoned || "").split(" ").filter(Boolean);
    var found = ids.map(function (id) { return document.getElementById(id); }).filter(Boolean);
    marker.remove();
    if (!found.length) return;
    var details = document.createElement("details");
    details.className = "earlier-version";
    var summary = document.createElement("summary");
    summary.textContent = gettext("Earlier version");
    details.appendChild(summary);
    found[0].parentNode.insertBefore(details, found[0]);
    found.forEach(function (el) { details.appendChild(el); });
  }

  // After any swap, the whole page (a swap's target may be the element it replaced).
  function settle() {
    Array.prototype.forEach.call(document.querySelectorAll("template.fork-marker"), fold);
    decorate();
  }

  // ---- edit: the message's form in place of its text ------------------------------------
  function editParts(el) {
    var msg = el.closest(".msg");
    if (!msg) return null;
    return {
      msg: msg,
      open: msg.querySelector("[data-edit]"),
      form: msg.querySelector(".edit-form"),
      text: msg.querySelector(".bubble"),
    };
  }

  function showEdit(p) {
    var box = p.form.querySelector("textarea");
    box.value = p.text.innerText.trim();  // the message as shown (no copy of it in the page)
    p.form.hidden = false;
    p.text.hidden = true;
    p.open.setAttribute("aria-expanded", "true");
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  }

  function hideEdit(p) {
    p.form.hidden = true;
    p.text.hidden = false;
    p.open.setAttribute("aria-expanded", "false");
    p.open.focus();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button") : null;
    if (!button) return;
    if (button.matches("[data-copy]")) {
      var source = document.getElementById(button.dataset.copy);
      if (source) copy(source.innerText.trim(), source);
    } else if (button.matches(".code-copy")) {
      var code = button.parentNode.querySelector("code") || button.parentNode;
      copy(code.innerText.replace(/\n$/, ""), code);
    } else if (button.matches("[data-edit]")) {
      var p = editParts(button);
      if (p && p.form) showEdit(p);
    } else if (button.matches("[data-edit-cancel]")) {
      var q = editParts(button);
      if (q && q.form) hideEdit(q);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || !event.target.closest) return;
    var form = event.target.closest(".edit-form");
    if (!form) return;
    var p = editParts(form);
    if (p) { event.preventDefault(); hideEdit(p); }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("edit-form")) return;
    var p = editParts(form);  // sent: the new version arrives as a new message
    if (p) { p.form.hidden = true; p.text.hidden = false; p.open.setAttribute("aria-expanded", "false"); }
  });

  document.body.addEventListener("htmx:oobAfterSwap", settle);
  document.body.addEventListener("htmx:afterSwap", settle);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", settle);
  } else {
    settle();
  }
})();
