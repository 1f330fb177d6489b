// The copy button of a session block copies the commands only, so that what is pasted runs: a
// Python session (">>> " prompts, "... " continuations, output lines) gives its code with the
// prompts stripped and the output dropped; a shell session (a `console` block: "$ " prompts, which
// the highlighter marks as prompts, and output) gives its commands without the "$ ". Other blocks keep the theme's own copy. One
// delegated listener in the capture phase runs before the theme's, and survives page changes.
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
  function commandsOf(text) {
    var out = [];
    text.replace(/\n$/, "").split("\n").forEach(function (line) {
      if (line.indexOf("$ ") === 0) out.push(line.slice(2));
    });
    return out.join("\n") + "\n";
  }
  window.fuelCyCodeOf = codeOf;  // for the site's browser test
  window.fuelCyCommandsOf = commandsOf;
  // without the asynchronous clipboard (a page served over plain http), a selected textarea
  function write(text) {
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).catch(function () {});
      return;
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing copied: the text stays selectable */ }
    document.body.removeChild(area);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-clipboard-target]");
    if (!button) return;
    var target = button.getAttribute("data-clipboard-target");
    var code = target && document.querySelector(target);
    if (!code) return;
    var text;
    if (/^>>>( |$)/m.test(code.textContent)) text = codeOf(code.textContent);
    // (a console block's prompts are the highlighter's prompt spans, class "gp")
    else if (code.querySelector("span.gp") && /^\$ /m.test(code.textContent)) text = commandsOf(code.textContent);
    else return;
    event.preventDefault();
    event.stopImmediatePropagation();
    button.setAttribute("data-copied", text);
    write(text);
  }, true);
})();
