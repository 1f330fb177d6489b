// The copy button of a Python session block (">>> " prompts, "... " continuations, output lines)
// copies the code only, prompts stripped and output dropped, so that what is pasted runs as a
// script. Other blocks keep the theme's own copy. One delegated listener in the capture phase
// runs before the theme's, and survives page changes.
(function () {
  "use strict";
  function codeOf(text) {
    var out = [];
    text.replace(/\n$/, "").split("\n").forEach(function (line) {
      if (line.indexOf(">>> ") === 0 || line === ">>>") out.push(line.slice(4));
      else if (line.indexOf("... ") === 0 || line === "...") out.push(line.slice(4));
    });
    return out.join("\n") + "\n";
  }
  window.fuelCyCodeOf = codeOf;  // for the site's browser test
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-clipboard-target]");
    if (!button) return;
    var target = button.getAttribute("data-clipboard-target");
    var code = target && document.querySelector(target);
    if (!code || !/^>>>( |$)/m.test(code.textContent)) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    var text = codeOf(code.textContent);
    button.setAttribute("data-copied", text);
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).catch(function () {});
  }, true);
})();
