// kachedb-radix explain --serve: the playground's form (spec/explain/serve.py inlines it
// after page.js). Each operation goes to the server, which applies it to the reference
// and answers with the page's data, drawn by window.kachedbExplain.load().
"use strict";
(function () {
  const form = document.getElementById("play-form");
  if (!form) return;
  const $ = (id) => document.getElementById(id);
  const error = $("play-error");
  // Which fields an operation reads, and what its number means.
  const NUMBER = { release: "lease", evict: "blocks", leave: "reader", reset: "pool blocks" };
  function fields() {
    const op = $("play-op").value;
    const tokens = op === "match" || op === "insert";
    for (const id of ["play-input", "play-tokens", "play-namespace"]) $(id).disabled = !tokens;
    $("play-pin").disabled = !tokens;
    $("play-number-label").hidden = !(op in NUMBER);
    $("play-number").disabled = !(op in NUMBER);
    $("play-number-label").firstChild.textContent = NUMBER[op] || "number";
    $("play-block-label").hidden = op !== "reset";
    $("play-block").disabled = op !== "reset";
    // A pool is 1 to MAX_POOL blocks; a count, a lease or a reader any whole number.
    $("play-number").min = op === "reset" ? "1" : "0";
    if (op === "reset") $("play-number").max = $("play-number").dataset.maxPool;
    else $("play-number").removeAttribute("max");
    checkTokens();
  }
  // The checks the browser can make before anything is sent (the server makes them again):
  // a prompt is typed, token ids are whole numbers (digits, apart by spaces or commas), at
  // most MAX_TOKENS tokens (UTF-8 bytes as text). A field the browser refuses says why
  // where the server's refusals are said.
  function checkTokens() {
    const field = $("play-tokens"), text = field.value, most = +field.dataset.maxTokens;
    let problem = "";
    if (!field.disabled && text) {
      if ($("play-input").value === "ids") {
        const words = text.split(/[ ,]+/).filter(Boolean);
        const bad = words.find((word) => !/^[0-9]+$/.test(word));
        const count = words.length;
        if (bad !== undefined) problem = "'" + bad.slice(0, 40) + "' is not a token id (a whole number)";
        else if (count > most) problem = count + " tokens: the playground takes at most " + most;
      } else {
        const count = new TextEncoder().encode(text).length;
        if (count > most) problem = count + " tokens: the playground takes at most " + most;
      }
    }
    field.setCustomValidity(problem);
  }
  function refuse(message) {
    error.textContent = message;
    error.hidden = false;
  }
  form.addEventListener("invalid", (event) => {
    const field = event.target;
    const name = field.getAttribute("aria-label") || (field.labels[0] ? field.labels[0].textContent.trim() : "");
    refuse((name ? name + ": " : "") + field.validationMessage);
  }, true);
  $("play-tokens").addEventListener("input", checkTokens);
  $("play-input").addEventListener("change", checkTokens);
  async function send(path, body) {
    const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const answer = await response.json();
    if (!response.ok) {
      refuse(answer.error || "the server refused the request");
      return;
    }
    error.hidden = true;
    window.kachedbExplain.load(answer);
    document.body.dataset.live = String(answer.frames.length);
    $("play-events").value = answer.eventsScheme || "";
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send("/api/step", JSON.stringify({
      op: $("play-op").value, input: $("play-input").value, tokens: $("play-tokens").value,
      namespace: $("play-namespace").value, pin: $("play-pin").checked, number: $("play-number").value,
      block_size: $("play-block").value,
    }));
  });
  $("play-undo").addEventListener("click", () => send("/api/undo", "{}"));
  $("play-load").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) send("/api/load", await file.text());
  });
  $("play-events").addEventListener("change", () => send("/api/events", JSON.stringify({ scheme: $("play-events").value })));
  $("play-op").addEventListener("change", fields);
  fields();
  const initial = JSON.parse(document.getElementById("explain-data").textContent);
  window.kachedbExplain.load(initial);
  document.body.dataset.live = String(initial.frames.length);
  $("play-events").value = initial.eventsScheme || "";
})();
