/* Small progressive enhancements; every page works without them. */
(function () {
  "use strict";

  // <span data-width="37"> is 37 % wide, <span data-left="50"> starts half way: the
  // Content-Security-Policy allows no style attributes in the markup, but allows this.
  function placeBars(root) {
    root.querySelectorAll("[data-width], [data-left]").forEach(function (element) {
      var width = parseFloat(element.dataset.width);
      var left = parseFloat(element.dataset.left);
      if (!isNaN(width)) { element.style.width = Math.max(0, Math.min(width, 100)) + "%"; }
      if (!isNaN(left)) { element.style.left = Math.max(0, Math.min(left, 100)) + "%"; }
    });
  }
  placeBars(document);
  // Partials swapped in by HTMX (the estimate, panels) bring their own bars.
  document.addEventListener("htmx:load", function (event) { placeBars(event.detail.elt); });

  // <form data-latest-answer hx-sync="this:queue last">: only the answer to the latest
  // trigger is swapped in. A trigger while a request is in flight queues behind it (no
  // abort, so no htmx:sendAbort error in the console) and makes the answer in flight
  // stale: it is dropped, so an older choice never comes back into the fields it redraws.
  var asked = new WeakMap();
  document.addEventListener("htmx:confirm", function (event) {
    var element = event.detail.elt;
    if (element.hasAttribute("data-latest-answer")) {
      asked.set(element, (asked.get(element) || 0) + 1);
    }
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    var element = event.detail.elt;
    if (element.hasAttribute("data-latest-answer")) {
      event.detail.xhr.portalAsked = asked.get(element);
    }
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var element = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (element && element.hasAttribute("data-latest-answer") &&
        event.detail.xhr.portalAsked !== asked.get(element)) {
      event.detail.shouldSwap = false;
    }
  });

  // <form data-confirm="Are you sure?"> asks before it is sent.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // <button data-copy="#selector"> copies that element's text. Where the browser refuses
  // (no clipboard permission, an insecure address), the text is selected instead, for
  // Ctrl-C: nothing is left unanswered in the console. The off-screen buffer of the
  // fallback is placed by a class (portal.css), not by a style the policy would refuse.
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "copy-buffer";
    document.body.appendChild(area);
    area.select();
    var copied = false;
    try { copied = document.execCommand("copy"); } finally { document.body.removeChild(area); }
    return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function selectText(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (button) {
      var source = document.querySelector(button.dataset.copy);
      if (!source) { return; }
      var label = button.textContent;
      copyText(source.textContent.trim()).then(function () {
        button.textContent = button.dataset.copied || "✓";
        window.setTimeout(function () { button.textContent = label; }, 1500);
      }, function () { selectText(source); });
      return;
    }
    // Close an open user menu, or the folded navigation (phones), when clicking elsewhere.
    document.querySelectorAll("details.usermenu[open], details.navmenu[open]").forEach(function (menu) {
      var inside = menu.contains(event.target) || (menu.id === "navmenu" && event.target.closest("#mainnav"));
      if (!inside) { menu.removeAttribute("open"); }
    });
  });
})();
