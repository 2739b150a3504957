/* ChatBridge's chat page. One rule every fragment may rely on: after htmx swaps content in
 * (from the socket or a request), the first element in it marked data-autofocus receives
 * focus, so a server-rendered fragment says where a person's attention goes next (an error,
 * the next question's heading), never a committing control; data-autofocus="if-lost" only
 * when the focus was lost with what the swap replaced. Focus never leaves the composer while
 * the person is typing in it.
 *
 * The rest of this file makes the page follow the conversation: the transcript stays at the
 * latest content unless the person scrolled up ("Jump to latest" then), the composer keeps
 * its text until the server echoes that very message (a draft survives a reload), messages
 * sent while a turn runs are queued on request, the reply being written can be stopped, the
 * tab title follows the conversation, and a polite live region announces what arrived.
 *
 * Words a person sees or hears go through Django's JavaScript catalog (gettext, ngettext,
 * interpolate; the chat page loads it first, domain djangojs); without it they stay in English.
 * Numbers are written in the page's language (<html lang>). */
(function () {
  "use strict";

  var gettext = window.gettext || function (s) { return s; };
  var ngettext = window.ngettext || function (one, many, n) { return n === 1 ? one : many; };
  var interpolate = window.interpolate || function (fmt, obj) {
    return fmt.replace(/%\((\w+)\)s/g, function (m, key) { return String(obj[key]); });
  };

  var box = null; // the composer's textarea

  function typing() {
    return box !== null && document.activeElement === box && box.value.trim() !== "";
  }

  function focusElement(target) {
    if (!target.hasAttribute("tabindex") && !/^(A|BUTTON|INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus({ preventScroll: false });
  }

  function focusMarked(root) {
    if (!root || !root.querySelector) return;
    var target = root.matches && root.matches("[data-autofocus]") ? root : root.querySelector("[data-autofocus]");
    if (!target) return;
    var onlyIfLost = target.getAttribute("data-autofocus") === "if-lost";
    /* Only the first counts: the others would steal the focus at a later swap. */
    root.querySelectorAll("[data-autofocus]").forEach(function (marked) { marked.removeAttribute("data-autofocus"); });
    target.removeAttribute("data-autofocus");
    if (typing()) return; // the person is writing a message: leave them there
    // "if-lost": only when the focus was in what the swap replaced (e.g. an answered question).
    if (onlyIfLost && document.activeElement && document.activeElement !== document.body) return;
    focusElement(target);
    anchor = target;
  }

  // Every swap, whatever its kind: an out-of-band outerHTML swap fires its htmx events on the
  // element it replaced (detached by then), so watch what is added to the document instead.
  // The callback runs once htmx has swapped and settled the whole message.
  new MutationObserver(function (records) {
    records.forEach(function (record) {
      record.addedNodes.forEach(function (node) { if (node.nodeType === 1) focusMarked(node); });
    });
  }).observe(document.documentElement, { childList: true, subtree: true });

  // A fragment's own autofocus (htmx focuses [autofocus] as it swaps) must not take the focus
  // from a person typing in the composer either: it goes back once the message is swapped in.
  var typingBefore = false;
  document.addEventListener("htmx:wsBeforeMessage", function () { typingBefore = typing(); });
  document.addEventListener("htmx:wsAfterMessage", function () {
    if (typingBefore && document.activeElement !== box) box.focus({ preventScroll: true });
    typingBefore = false;
  });

  /* Marks in the page as it was loaded (a reload shows past confirmations, open questions)
   * are history: the rule is for content swapped in, and the page's own autofocus stands. */
  document.querySelectorAll("[data-autofocus]").forEach(function (marked) { marked.removeAttribute("data-autofocus"); });

  /* The pages' policy runs no inline code (no hx-on, no on* attributes): what fragments used
   * to say inline is here. */
  // Esc in a sidebar form (rename, delete) is its Cancel.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || !event.target.closest) return;
    var form = event.target.closest("form.conv-form");
    var cancel = form && form.querySelector(".conv-cancel");
    if (!cancel) return;
    event.preventDefault();
    cancel.click();
  });
  // The empty state goes with the first message sent (the focus, if it was in it, to the composer).
  document.addEventListener("htmx:load", function (event) {
    var elt = event.detail && event.detail.elt;
    var empty = document.getElementById("empty-chat");
    if (!empty || !elt || !elt.matches) return;
    if (!elt.matches("article.msg.user") && !elt.querySelector("article.msg.user")) return;
    var had = empty.contains(document.activeElement);
    empty.remove();
    if (had && box) box.focus();
  });

  // ---- the chat page only from here on ----------------------------------------------------
  var main = document.querySelector("main.chat[data-conversation]");
  if (!main) return;
  var conversation = main.getAttribute("data-conversation");
  var transcript = document.getElementById("transcript");
  var composer = main.querySelector("form.composer");
  box = document.getElementById("message-box");
  var note = document.getElementById("composer-note");
  var choice = document.getElementById("composer-choice");
  var choiceText = document.getElementById("composer-choice-text");
  var sendAnyway = document.getElementById("send-anyway");
  var answerFirst = document.getElementById("answer-first");
  var stopButton = document.getElementById("stop-reply");
  var jump = document.getElementById("jump-latest");
  var announcer = document.getElementById("announcer");
  var limit = parseInt(box.getAttribute("data-limit") || "4000", 10);
  var draftKey = "chatbridge:draft:" + conversation;
  var anchor = null; // a question heading just focused: following never scrolls past its top

  // ---- announcements (the one polite live region; #errors is the assertive one) ----------
  var announceTimer = null;
  function announce(text) {
    announcer.textContent = "";
    clearTimeout(announceTimer);
    announceTimer = setTimeout(function () { announcer.textContent = text; }, 50);
  }

  // ---- following the conversation ----------------------------------------------------------
  var following = true;
  var autoScrolling = false;
  function bottom() {
    var page = document.scrollingElement || document.documentElement;
    return page.scrollHeight - window.innerHeight;
  }
  function atBottom() { return window.scrollY >= bottom() - 40; }

  function toLatest() {
    var y = bottom();
    if (anchor && document.contains(anchor)) {
      var top = anchor.getBoundingClientRect().top + window.scrollY - 16;
      if (top < y) y = Math.max(top, window.scrollY);
    }
    autoScrolling = true;
    window.scrollTo({ top: y, behavior: "instant" });
    requestAnimationFrame(function () { autoScrolling = false; });
  }

  // The pill keeps its room in the composer's head when hidden (live.css): showing or hiding
  // it never changes the composer's height, so nothing on the page moves under a pointer.
  function showJump(show) { jump.hidden = !show; }

  // Following starts again only once the person is back at the latest. A move up that is not
  // the page getting shorter (the browser then keeps it at its foot) is the person leaving it,
  // however near the foot it still is: the next piece of a reply must not pull them back.
  var lastY = window.scrollY;
  window.addEventListener("scroll", function () {
    var y = window.scrollY, up = y < lastY && y < bottom() - 1;
    lastY = y;
    if (autoScrolling) return;
    following = atBottom() && !up;
    if (following) { showJump(false); anchor = null; }
  }, { passive: true });
  // A person scrolling up stops the following at once (before any scroll event settles).
  window.addEventListener("wheel", function (event) {
    if (event.deltaY < 0 && bottom() > 0) following = false;
  }, { passive: true });
  window.addEventListener("keydown", function (event) {
    var inside = event.target.closest && event.target.closest("textarea, input, select, [role=grid], .seat-grid");
    if (/^(PageUp|Home|ArrowUp)$/.test(event.key) && !inside && bottom() > 0) following = false;
  });

  jump.addEventListener("click", function () {
    following = true;
    anchor = null;
    showJump(false);
    toLatest();
    box.focus({ preventScroll: true });
  });

  function contentChanged() {
    if (following) toLatest();
    showJump(!atBottom());
  }

  // ---- the composer -------------------------------------------------------------------------
  function length(text) { return Array.from(text).length; } // characters, as the server counts
  function number(n) {
    try { return n.toLocaleString(document.documentElement.lang || "en"); } catch (e) { return n.toLocaleString("en"); }
  }
  function grow() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight + 2, 200) + "px";
  }
  function state() {
    var status = document.getElementById("chat-status");
    var get = function (name) { return status ? status.getAttribute(name) : null; };
    return {
      phase: get("data-phase") || "idle",
      running: get("data-running") === "true",
      questions: parseInt(get("data-questions") || "0", 10) + parseInt(get("data-approvals") || "0", 10),
    };
  }

  var pending = null; // {id, text}: sent, not echoed yet
  var stopTimer = null;
  var queueNext = false; // "Send anyway" was chosen for the next send

  function updateComposer() {
    var n = length(box.value);
    var left = limit - n;
    if (left < 0) {
      note.textContent = interpolate(
        gettext("Your message is %(length)s characters long; the limit is %(limit)s. Remove %(over)s to send it."),
        { length: number(n), limit: number(limit), over: number(-left) }, true);
      note.className = "composer-note over";
    } else if (left <= 500) {
      note.textContent = interpolate(
        ngettext("%(count)s character left", "%(count)s characters left", left), { count: number(left) }, true);
      note.className = "composer-note";
    } else {
      note.textContent = "";
      note.className = "composer-note";
    }
    var s = state();
    var waiting = s.running && s.questions > 0 && box.value.trim() !== "";
    if (waiting) {
      choiceText.textContent = gettext(
        "A question above is waiting for your answer. Send your message anyway (it is sent when the current reply ends), or answer first.");
    }
    choice.hidden = !waiting;
    // Stop shows while a reply is being written, once it takes a moment (no flicker).
    clearTimeout(stopTimer);
    if (s.phase !== "streaming") stopButton.hidden = true;
    else if (stopButton.hidden) stopTimer = setTimeout(function () { stopButton.hidden = state().phase !== "streaming"; }, 300);
  }

  function saveDraft() {
    try {
      if (box.value) sessionStorage.setItem(draftKey, box.value);
      else sessionStorage.removeItem(draftKey);
    } catch (e) { /* storage may be unavailable */ }
  }

  try {
    var draft = sessionStorage.getItem(draftKey);
    if (draft && !box.value) box.value = draft;
  } catch (e) { /* storage may be unavailable */ }

  box.addEventListener("input", function () { grow(); updateComposer(); saveDraft(); });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return String(Date.now()) + Math.random().toString(16).slice(2);
  }

  composer.addEventListener("htmx:wsConfigSend", function (event) {
    var text = box.value;
    var queued = queueNext;
    queueNext = false;
    if (text.trim() === "") { event.preventDefault(); return; }
    if (length(text) > limit) {
      event.preventDefault();
      updateComposer();
      announce(note.textContent);
      return;
    }
    var s = state();
    if (s.running && s.questions > 0 && !queued) { // a question is open: the person chooses
      event.preventDefault();
      updateComposer();
      announce(choiceText.textContent);
      return;
    }
    // A reply is being written: the message waits for it (shown as queued until it starts).
    if (s.running) queued = true;
    if (pending && pending.text === text) { event.preventDefault(); return; } // sent already
    following = true; // a person who sends wants to see their message and what follows
    anchor = null;
    pending = { id: newId(), text: text };
    pending.timer = setTimeout(function () { pending = null; }, 15000); // no echo: may resend
    event.detail.parameters.client_id = pending.id;
    if (queued) event.detail.parameters.queue = true;
  });

  sendAnyway.addEventListener("click", function () {
    queueNext = true;
    composer.requestSubmit();
    box.focus();
  });
  answerFirst.addEventListener("click", function () {
    var question = main.querySelector(".elicit-card .elicit-message") || main.querySelector(".elicit-card, .approval-card");
    if (question) focusElement(question);
  });

  function echoed(article) {
    var id = article.getAttribute("data-client-id");
    if (!pending || id !== pending.id) return;
    clearTimeout(pending.timer);
    if (box.value === pending.text) {
      box.value = "";
      grow();
      saveDraft();
    }
    pending = null;
    updateComposer();
  }

  // ---- the tab title -----------------------------------------------------------------------
  function retitle() {
    var heading = document.getElementById("chat-title");
    var title = heading ? heading.textContent.trim() : "";
    var parts = [];
    if (state().questions > 0) parts.push(gettext("Your answer is needed"));
    if (title) parts.push(title);
    parts.push("ChatBridge");
    document.title = parts.join(" · ");
  }

  // ---- focus after each step -----------------------------------------------------------------
  var decided = null; // the call id just approved or denied: its tool card gets the focus
  main.addEventListener("submit", function (event) {
    var form = event.target;
    var command = form.querySelector("input[name=command]");
    if (command && (command.value === "approve" || command.value === "deny")) {
      var call = form.querySelector("input[name=call_id]");
      decided = call ? call.value : null;
    }
  }, true);

  function lostFocus() {
    var active = document.activeElement;
    // A tool card or an answered question holds the focus only because what had it was swapped
    // away: at the end of the turn it may move on to the composer.
    return !active || active === document.body || !document.contains(active) ||
      (active.classList && (active.classList.contains("elicit-done") || active.classList.contains("tool-card")));
  }

  var wasRunning = state().running;
  function afterState() {
    var s = state();
    if (decided) {
      var card = document.getElementById("tool-" + decided);
      if (card && lostFocus()) focusElement(card);
      if (card) decided = null;
    }
    if (wasRunning && !s.running && lostFocus()) box.focus({ preventScroll: true });
    if (stopButton.hidden === false && s.phase !== "streaming" && document.activeElement === stopButton) {
      box.focus({ preventScroll: true });
    }
    wasRunning = s.running;
    updateComposer();
    retitle();
  }

  // ---- watching what arrives ---------------------------------------------------------------
  function markStopped(article) {
    if (article.querySelector(".msg-note")) return;
    var stopped = document.createElement("p");
    stopped.className = "msg-note";
    stopped.textContent = gettext("Stopped");
    article.appendChild(stopped);
  }

  function arrived(node) {
    if (node.nodeType !== 1) return;
    if (node.closest("#errors") && pending) { // refused: the text stays, and may be sent again
      clearTimeout(pending.timer);
      pending = null;
    }
    if (node.matches("article.msg.user[id^='msg-']")) {
      var waiting = document.getElementById("queued-" + node.id.slice(4));
      if (waiting) waiting.remove();
      echoed(node);
    } else if (node.matches("article.msg.queued")) {
      echoed(node);
      announce(gettext("Your message is queued; it is sent when the current reply ends."));
    } else if (node.matches("article.msg.assistant") && !node.querySelector(".streaming")) {
      if (node.hasAttribute("data-stopped")) {
        markStopped(node);
        announce(gettext("The reply was stopped."));
      } else {
        announce(gettext("The assistant replied."));
      }
    }
    var card = node.matches(".elicit-card") ? node : node.querySelector && node.querySelector(".elicit-card");
    if (card) {
      var headline = card.querySelector(".elicit-message");
      announce(interpolate(gettext("A question: %(question)s"),
        { question: headline ? headline.textContent.trim() : card.getAttribute("aria-label") || "" }, true));
    }
    if (node.matches(".approval-card") || (node.querySelector && node.querySelector(".approval-card"))) {
      announce(gettext("A tool needs your approval."));
    }
  }

  new MutationObserver(function (records) {
    var changed = false;
    records.forEach(function (record) {
      if (record.type === "childList") record.addedNodes.forEach(arrived);
      if (composer.contains(record.target) || announcer.contains(record.target)) return;
      changed = true;
    });
    var added = function (id) {
      return records.some(function (r) {
        return Array.prototype.some.call(r.addedNodes, function (n) { return n.id === id; });
      });
    };
    // A new state, or the approvals redrawn after Approve or Deny (focus to the tool card).
    if (added("chat-status") || added("approvals")) afterState();
    if (added("chat-title")) retitle();
    if (changed) contentChanged();
  }).observe(main, { childList: true, subtree: true, characterData: true });

  // ---- on load: at the latest message, the composer ready ------------------------------------
  if ("scrollRestoration" in history) history.scrollRestoration = "manual";
  transcript.querySelectorAll("article.msg[data-stopped]").forEach(markStopped);
  grow();
  updateComposer();
  retitle();
  toLatest();
  window.addEventListener("load", function () { if (following) toLatest(); });
})();
