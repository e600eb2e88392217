// Plain HTTP requests to the server, for what the openai client cannot send: broken bodies, missing
// keys, wrong methods and the server's own routes (/health, /tokenize, /metrics).
import http from "node:http";

// Sends one request on a fresh connection and resolves to {status, headers, text}. body: a string
// or Buffer sent as is, or any other value sent as JSON; either way it is labelled JSON unless
// headers say otherwise. A server may answer an oversized body before reading all of it and then
// close the connection; the answer still counts if it arrived. Rejects when no answer arrives
// (connection refused, or reset first) or the connection stays silent for timeout_ms.
export function http_request(url, { method = "GET", headers = {}, body, timeout_ms = 30000 } = {}) {
  const payload = encode_body(body);
  const all_headers = { ...headers };
  if (payload !== undefined) {
    all_headers["content-type"] ??= "application/json";
    all_headers["content-length"] = String(payload.length);
  }
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method, headers: all_headers, agent: false });
    let response = null;
    const chunks = [];
    const settle = () =>
      resolve({
        status: response.statusCode,
        headers: response.headers,
        text: Buffer.concat(chunks).toString("utf8"),
      });
    request.on("response", (incoming) => {
      response = incoming;
      incoming.on("data", (chunk) => chunks.push(chunk));
      incoming.on("error", settle);
      incoming.on("close", settle);
    });
    request.on("error", (error) => (response ? settle() : reject(error)));
    request.setTimeout(timeout_ms, () => {
      request.destroy(new Error(`${method} ${url}: silent for ${timeout_ms / 1000} s`));
    });
    request.end(payload);
  });
}

function encode_body(body) {
  if (body === undefined) return undefined;
  if (Buffer.isBuffer(body)) return body;
  return Buffer.from(typeof body === "string" ? body : JSON.stringify(body), "utf8");
}

// Parses a response body as JSON, naming the status and the start of the body when it is not.
export function response_json({ status, text }) {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`status ${status}: body is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
  }
}
