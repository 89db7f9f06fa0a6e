// The sampling page: POST /v1/completions with "stream": true and append each
// server-sent chunk as it arrives (EventSource cannot POST, so the body is read
// as a stream and split into "data: ..." events here).
"use strict";
(function () {
  const form = document.getElementById("sampler");
  const completion = document.getElementById("completion");
  const shownPrompt = document.getElementById("shown-prompt");
  const status = document.getElementById("status");
  const generate = document.getElementById("generate");
  const stopButton = document.getElementById("stop");
  let controller = null;

  function number(id, integer) {
    const raw = document.getElementById(id).value.trim();
    if (raw === "") return null;
    return integer ? parseInt(raw, 10) : parseFloat(raw);
  }

  function handle(event) {
    if (!event.startsWith("data: ")) return false;
    const data = event.slice(6);
    if (data === "[DONE]") return true;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    completion.textContent += chunk.choices[0].text;
    return false;
  }

  form.addEventListener("submit", async function (e) {
    e.preventDefault();
    const body = {
      model: document.getElementById("model").value,
      prompt: document.getElementById("prompt").value,
      temperature: number("temperature", false),
      top_p: number("top_p", false),
      max_tokens: number("max_tokens", true),
      seed: number("seed", true),
      stream: true,
    };
    const topK = number("top_k", true);
    if (topK !== null) body.top_k = topK;
    shownPrompt.textContent = body.prompt;
    completion.textContent = "";
    status.textContent = "generating…";
    delete status.dataset.state;
    status.className = "muted";
    generate.disabled = true;
    stopButton.disabled = false;
    controller = new AbortController();
    try {
      // The key (when the server asks for one) stays in this page: never stored.
      const headers = { "Content-Type": "application/json" };
      const key = document.getElementById("api_key");
      if (key && key.value) headers.Authorization = "Bearer " + key.value;
      const response = await fetch("/v1/completions", {
        method: "POST", headers: headers,
        body: JSON.stringify(body), signal: controller.signal,
      });
      if (!response.ok) {
        const error = await response.json();
        throw new Error(error.error.message);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "", finished = false;
      while (!finished) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while (!finished && (cut = buffer.indexOf("\n\n")) >= 0) {
          finished = handle(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
        }
      }
      status.textContent = "done";
      status.dataset.state = "done";
    } catch (error) {
      status.textContent = error.name === "AbortError" ? "stopped" : "error: " + error.message;
      status.className = error.name === "AbortError" ? "muted" : "error";
      status.dataset.state = "error";
    } finally {
      generate.disabled = false;
      stopButton.disabled = true;
      controller = null;
    }
  });

  stopButton.addEventListener("click", function () { if (controller) controller.abort(); });
})();
