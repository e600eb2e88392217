// How a running `pagoda serve` takes a burst of clients: N streaming completions opened at the same
// moment, each on its own connection. Prints when the clients were connected, when each had its
// response headers (the server took the request; also counted from the client's own connect,
// which leaves out the time this script spends opening sockets), and when each stream ended.
//
//   node tools/bench_connections.mjs --url http://127.0.0.1:8000 [--clients 1000] [--max-tokens 4]
//                                    [--api-key KEY]
import net from "node:net";
import { parseArgs } from "node:util";

const { values: options } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8000" },
    clients: { type: "string", default: "1000" },
    "max-tokens": { type: "string", default: "4" },
    "api-key": { type: "string", default: process.env.PAGODA_API_KEY ?? "" },
    prompt: { type: "string", default: "In the beginning" },
  },
});
const url = new URL(options.url);
const clients = Number(options.clients);
const body = JSON.stringify({
  prompt: options.prompt,
  max_tokens: Number(options["max-tokens"]),
  stream: true,
  ignore_eos: true,
});
const request = [
  "POST /v1/completions HTTP/1.1",
  `Host: ${url.host}`,
  "Content-Type: application/json",
  `Content-Length: ${Buffer.byteLength(body)}`,
  ...(options["api-key"] ? [`Authorization: Bearer ${options["api-key"]}`] : []),
  "Connection: close",
  "",
  body,
].join("\r\n");

// One client: resolves to {connected, headers, done} in ms since the burst began, or {error}.
function client(start) {
  return new Promise((resolve) => {
    const times = {};
    let text = "";
    const socket = net.connect(Number(url.port), url.hostname);
    socket.setEncoding("utf8");
    socket.on("connect", () => {
      times.connected = performance.now() - start;
      socket.write(request);
    });
    socket.on("data", (piece) => {
      text += piece;
      if (times.headers === undefined && text.includes("\r\n\r\n")) {
        times.headers = performance.now() - start;
        times.wait = times.headers - times.connected;
        times.status = Number(text.split(" ")[1]);
      }
    });
    socket.on("error", (error) => resolve({ error: error.code ?? error.message }));
    socket.on("close", () => {
      times.done = performance.now() - start;
      times.complete = text.includes("data: [DONE]");
      resolve(times);
    });
  });
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const start = performance.now();
const results = await Promise.all(Array.from({ length: clients }, () => client(start)));
const failed = results.filter((result) => result.error || result.status !== 200 || !result.complete);
const ok = results.filter((result) => !failed.includes(result));
const row = (name, key) => {
  const values = ok.map((result) => result[key]);
  if (!values.length) return `| ${name} | – | – | – |`;
  const f = (x) => x.toFixed(1);
  return `| ${name} | ${f(percentile(values, 50))} | ${f(percentile(values, 99))} | ${f(Math.max(...values))} |`;
};
console.log(`${clients} clients at once, ${ok.length} streams complete, ${failed.length} failed`);
if (failed.length) {
  const reasons = {};
  for (const result of failed) {
    const reason = result.error ?? (result.status !== 200 ? `status ${result.status}` : "cut short");
    reasons[reason] = (reasons[reason] ?? 0) + 1;
  }
  console.log(`failures: ${JSON.stringify(reasons)}`);
}
console.log("| ms since the burst | p50 | p99 | max |");
console.log("|---|---|---|---|");
console.log(row("connected", "connected"));
console.log(row("response headers", "headers"));
console.log(row("headers after own connect", "wait"));
console.log(row("stream ended", "done"));
process.exit(failed.length ? 1 : 0);
