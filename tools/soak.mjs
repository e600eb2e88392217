// A bounded soak of `pagoda serve` on loopback: rounds of many concurrent streams, a share of whose
// clients disconnect mid-stream, with bad requests mixed in, on a KV pool small enough that the
// scheduler preempts. After every round it checks that each completed stream is exact (equal to its
// prompt's greedy output run alone, near-ties excused), that /metrics is back to zero, and that the
// server's threads and file descriptors are back where they were; at the end, that RSS stayed flat.
//
//   node tools/soak.mjs --pagoda build/release/src/pagoda [--rounds 6] [--clients 256]
//                       [--disconnect 0.2] [--tokens 48] [--num-blocks 160] [-- extra serve flags]
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import { parseArgs } from "node:util";

const { values: options, positionals: extra } = parseArgs({
  allowPositionals: true,
  options: {
    pagoda: { type: "string", default: "build/release/src/pagoda" },
    rounds: { type: "string", default: "6" },
    clients: { type: "string", default: "256" },
    disconnect: { type: "string", default: "0.2" },
    tokens: { type: "string", default: "48" },
    "num-blocks": { type: "string", default: "160" },
  },
});
const rounds = Number(options.rounds);
const clients = Number(options.clients);
const disconnect_share = Number(options.disconnect);
const max_tokens = Number(options.tokens);
const kPrompts = 32;      // distinct prompts, each with its reference output
const kNearTie = 1e-3;    // log-probability gap under which batching may flip a greedy choice
const kRssGrowth = 1.15;  // the last round's RSS may exceed the first's by this factor at most

function free_port() {
  return new Promise((resolve) => {
    const probe = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const port = await free_port();
const server = spawn(options.pagoda, ["serve", "--port", String(port), "--max-model-len", "256", "--num-blocks",
                                      options["num-blocks"], "--log-level", "warn", ...extra],
                     { stdio: ["ignore", "ignore", "pipe"] });
let server_log = "";
server.stderr.on("data", (piece) => (server_log = (server_log + piece).slice(-20000)));
process.on("exit", () => server.kill("SIGKILL"));
for (let i = 0; !server_log.includes("listening on"); i++) {
  if (i > 600 || server.exitCode !== null) throw new Error(`the server did not start:\n${server_log}`);
  await new Promise((resolve) => setTimeout(resolve, 100));
}

function request(method, path, body, { on_response } = {}) {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
    const req = http.request({ host: "127.0.0.1", port, method, path, agent: false,
                               headers: payload === undefined ? {} : {
                                 "content-type": "application/json",
                                 "content-length": Buffer.byteLength(payload) } });
    req.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      on_response?.(req, response);
      response.on("data", (piece) => (text += piece));
      response.on("end", () => resolve({ status: response.statusCode, text }));
      response.on("error", () => resolve({ status: response.statusCode, text, cut: true }));
      response.on("aborted", () => resolve({ status: response.statusCode, text, cut: true }));
    });
    req.on("error", (error) => resolve({ status: 0, text: "", error: error.code }));
    req.end(payload);
  });
}

const prompt_of = (i) => `And it came to pass in the ${i + 1}th year, that`;
const params = { max_tokens, temperature: 0, ignore_eos: true };

// References: each prompt alone, with the top two log-probabilities of each step.
const references = [];
for (let i = 0; i < kPrompts; i++) {
  const { status, text } = await request("POST", "/v1/completions",
                                         { prompt: prompt_of(i), ...params, logprobs: 2 });
  if (status !== 200) throw new Error(`reference ${i}: ${status} ${text}`);
  const choice = JSON.parse(text).choices[0];
  references.push(choice);
}

function stream_text(sse) {
  let text = "";
  for (const line of sse.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    for (const choice of JSON.parse(line.slice(6)).choices ?? []) text += choice.text ?? "";
  }
  return text;
}

// Whether `text` matches the reference, or parts from it only after a step whose two best tokens
// were within kNearTie.
function exact_or_excused(text, reference) {
  if (text === reference.text) return "exact";
  let offset = 0;
  const steps = reference.logprobs;
  for (let k = 0; k < steps.tokens.length; k++) {
    const top = Object.values(steps.top_logprobs[k]).sort((a, b) => b - a);
    if (top.length >= 2 && top[0] - top[1] < kNearTie) return "excused";
    offset += steps.tokens[k].length;
    if (!text.startsWith(reference.text.slice(0, offset))) return "wrong";
  }
  return "wrong";
}

const bad_bodies = [
  '{"prompt": "x", "max_tokens": 9223372036854775800}',
  "[".repeat(5000) + "]".repeat(5000),
  '{"prompt": "x", "temperature": 1e309}',
  '{"prompt": "x", "n": 100000}',
  '{"prompt": ',
];

function process_stats() {
  const status = fs.readFileSync(`/proc/${server.pid}/status`, "utf8");
  const field = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)[1]);
  return { rss_kb: field("VmRSS"), threads: field("Threads"),
           fds: fs.readdirSync(`/proc/${server.pid}/fd`).length };
}

async function metrics_idle() {
  for (let i = 0; i < 200; i++) {
    const { text } = await request("GET", "/metrics");
    const value = (name) => Number(new RegExp(`^${name} (\\S+)`, "m").exec(text)?.[1]);
    const state = ["pagoda:num_requests_running", "pagoda:num_requests_waiting",
                   "pagoda:kv_cache_usage_perc"].map(value);
    if (state.every((x) => x === 0)) return { ok: true, preemptions: value("pagoda:num_preemptions_total") };
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { ok: false };
}

const baseline = process_stats();
const failures = [];
const rss = [];
console.log("| round | streams done | cut by client | exact | excused | wrong | bad requests 4xx | preemptions | threads | fds | RSS MiB |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (let round = 1; round <= rounds; round++) {
  const jobs = [];
  let cut = 0;
  for (let c = 0; c < clients; c++) {
    const index = (c * 7 + round) % kPrompts;
    const leaves = Math.random() < disconnect_share;
    jobs.push(request("POST", "/v1/completions", { prompt: prompt_of(index), ...params, stream: true }, {
      on_response: (req, response) => {
        if (!leaves) return;
        response.once("data", () => setTimeout(() => req.destroy(), Math.random() * 50));
      },
    }).then((result) => ({ ...result, index, leaves })));
    if (c % 16 === 0) {
      const body = bad_bodies[(c / 16) % bad_bodies.length];
      jobs.push(request("POST", "/v1/completions", body).then((result) => ({ ...result, bad: true })));
    }
  }
  const results = await Promise.all(jobs);
  const counts = { exact: 0, excused: 0, wrong: 0, done: 0, bad4xx: 0 };
  for (const result of results) {
    if (result.bad) {
      if (result.status >= 400 && result.status < 500) counts.bad4xx++;
      else failures.push(`round ${round}: a bad request got ${result.status}`);
      continue;
    }
    if (result.leaves && (result.cut || result.error || !result.text.includes("[DONE]"))) {
      cut++;
      continue;
    }
    if (result.status !== 200 || !result.text.endsWith("data: [DONE]\n\n")) {
      failures.push(`round ${round}: a stream ended with ${result.status} ${result.error ?? ""} ${result.text.slice(-100)}`);
      continue;
    }
    counts.done++;
    counts[exact_or_excused(stream_text(result.text), references[result.index])]++;
  }
  if (counts.wrong) failures.push(`round ${round}: ${counts.wrong} streams differ from their reference`);
  const idle = await metrics_idle();
  if (!idle.ok) failures.push(`round ${round}: /metrics did not return to zero`);
  await new Promise((resolve) => setTimeout(resolve, 300));  // lingering closes finish
  const stats = process_stats();
  rss.push(stats.rss_kb);
  if (stats.threads !== baseline.threads) failures.push(`round ${round}: ${stats.threads} threads, ${baseline.threads} before`);
  if (stats.fds > baseline.fds + 2) failures.push(`round ${round}: ${stats.fds} file descriptors, ${baseline.fds} before`);
  console.log(`| ${round} | ${counts.done} | ${cut} | ${counts.exact} | ${counts.excused} | ${counts.wrong} | ${counts.bad4xx} | ${idle.preemptions} | ${stats.threads} | ${stats.fds} | ${(stats.rss_kb / 1024).toFixed(0)} |`);
}
// The first round warms the allocator and the prefix cache; growth after it would be a leak.
if (rss.length >= 3 && rss.at(-1) > rss[1] * kRssGrowth) {
  failures.push(`RSS grew from ${(rss[1] / 1024).toFixed(0)} MiB (round 2) to ${(rss.at(-1) / 1024).toFixed(0)} MiB`);
}
server.kill("SIGTERM");
const code = await new Promise((resolve) => server.on("exit", (c) => resolve(c)));
if (code !== 0) failures.push(`the server exited with ${code} on SIGTERM`);
console.log(failures.length ? `FAIL\n${failures.join("\n")}` : "PASS");
process.exit(failures.length ? 1 : 0);
