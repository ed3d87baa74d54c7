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

  // <form data-confirm="Are you sure?"> asks before it is sent.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // <button data-copy="#selector"> copies that element's text.
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } finally { document.body.removeChild(area); }
    return Promise.resolve();
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
      });
      return;
    }
    // Close an open user menu, or the folded navigation (phones), when clicking elsewhere.
    document.querySelectorAll("details.usermenu[open], details.navmenu[open]").forEach(function (menu) {
      var inside = menu.contains(event.target) || (menu.id === "navmenu" && event.target.closest("#mainnav"));
      if (!inside) { menu.removeAttribute("open"); }
    });
  });
})();
