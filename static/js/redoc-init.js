/* Starts Redoc with the site's settings (REDOC_UI_SETTINGS) from the page's data
   attributes: the Content-Security-Policy allows no inline script. */
(function () {
  "use strict";
  var container = document.getElementById("redoc-container");
  if (container && window.Redoc) {
    window.Redoc.init(container.dataset.specUrl, JSON.parse(container.dataset.settings), container);
  }
})();
