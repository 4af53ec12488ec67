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
    $("play-number-label").firstChild.textContent = (NUMBER[op] || "number") + " ";
    $("play-block-label").hidden = op !== "reset";
  }
  async function send(path, body) {
    const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const answer = await response.json();
    if (!response.ok) {
      error.textContent = answer.error || "the server refused the request";
      error.hidden = false;
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
