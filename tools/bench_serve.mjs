// Load generator for pagoda serve, or any OpenAI-compatible server, after vLLM's serving
// benchmark: streams completions of random prompts and prints throughput and latency tables.
//   node tools/bench_serve.mjs --base-url http://127.0.0.1:PORT/v1 [--api-key KEY] [--model NAME]
//       [--num-prompts N] [--concurrency C] [--request-rate R] [--input-len I] [--output-len O]
//       [--seed S] [--token-ids V]
// Prompts are random lowercase words, I bytes each: I tokens with a byte-level tokenizer, fewer
// with a subword one; with --token-ids V, I random token ids below V. Each request asks for exactly O tokens (ignore_eos); the token counts in the
// table are the server's own usage counts. Requests arrive as a Poisson process of R per second
// (default: all at once), and at most C are in flight (default: no limit).
// TTFT: time to the first streamed chunk. ITL: time between chunks. TPOT: (E2E - TTFT) per output
// token after the first. E2E: time to the end of the stream.
import { parseArgs } from "node:util";

import { sse_data } from "./peers/sse.mjs";

const kUsage =
  "usage: node tools/bench_serve.mjs --base-url URL [--api-key KEY] [--model NAME] " +
  "[--num-prompts N] [--concurrency C] [--request-rate R] [--input-len I] [--output-len O] " +
  "[--seed S] [--token-ids V]";

function parse_options() {
  const { values } = parseArgs({
    options: {
      "base-url": { type: "string" },
      "api-key": { type: "string" },
      model: { type: "string" },
      "num-prompts": { type: "string", default: "100" },
      concurrency: { type: "string" },
      "request-rate": { type: "string", default: "inf" },
      "input-len": { type: "string", default: "128" },
      "output-len": { type: "string", default: "64" },
      seed: { type: "string", default: "0" },
      "token-ids": { type: "string" },
    },
  });
  if (!values["base-url"]) throw new Error(kUsage);
  return {
    base_url: values["base-url"].replace(/\/+$/, ""),
    api_key: values["api-key"],
    model: values.model,
    num_prompts: count_option(values, "num-prompts", 1),
    concurrency: values.concurrency ? count_option(values, "concurrency", 1) : Infinity,
    request_rate: rate_option(values["request-rate"]),
    input_len: count_option(values, "input-len", 1),
    output_len: count_option(values, "output-len", 1),
    seed: count_option(values, "seed", 0),
    // Prompts as I random token ids below this bound instead of text: exactly I prompt tokens
    // whatever the tokenizer.
    token_ids: values["token-ids"] ? count_option(values, "token-ids", 2) : 0,
  };
}

function count_option(values, name, min) {
  const value = Number(values[name]);
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`--${name} is ${values[name]}; it must be an integer of at least ${min}`);
  }
  return value;
}

function rate_option(text) {
  const value = text === "inf" ? Infinity : Number(text);
  if (!(value > 0)) throw new Error(`--request-rate is ${text}; it must be positive or inf`);
  return value;
}

// Uniform numbers in [0, 1) from a 32-bit xorshift generator, so a seed gives the same prompts
// and arrival times on every run.
function make_random(seed) {
  let state = (Math.imul(seed + 1, 0x9e3779b1) >>> 0) || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

function random_ids(random, length, bound) {
  return Array.from({ length }, () => 1 + Math.floor(random() * (bound - 1)));
}

function random_prompt(random, length) {
  let text = "";
  while (text.length < length) {
    const letters = 2 + Math.floor(random() * 7);
    for (let i = 0; i < letters; i++) text += String.fromCharCode(97 + Math.floor(random() * 26));
    text += " ";
  }
  return text.slice(0, length);
}

async function first_model(options) {
  const response = await fetch(`${options.base_url}/models`, { headers: headers_of(options) });
  if (!response.ok) throw new Error(`GET /models: status ${response.status}`);
  const { data } = await response.json();
  if (!data?.length) throw new Error("GET /models lists no model");
  return data[0].id;
}

function headers_of({ api_key }) {
  const headers = { "content-type": "application/json" };
  if (api_key) headers.authorization = `Bearer ${api_key}`;
  return headers;
}

// Sends one streamed completion and times it. Never rejects: a failure comes back as {error}.
// Every chunk with a choice counts as a token arrival, as in vLLM's benchmark.
async function timed_request(options, prompt, max_tokens) {
  const body = {
    model: options.model,
    prompt,
    max_tokens,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
  };
  const start = performance.now();
  const result = { ttft: 0, itl: [], e2e: 0, prompt_tokens: 0, output_tokens: 0, error: null };
  try {
    const response = await fetch(`${options.base_url}/completions`, {
      method: "POST",
      headers: headers_of(options),
      body: JSON.stringify(body),
    });
    if (!response.ok) throw new Error(`status ${response.status}: ${await response.text()}`);
    let last = start;
    let arrivals = 0;
    for await (const data of sse_data(response.body)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message ?? data);
      if (chunk.usage) {
        result.prompt_tokens = chunk.usage.prompt_tokens;
        result.output_tokens = chunk.usage.completion_tokens;
      }
      if (!chunk.choices?.length) continue;
      const now = performance.now();
      if (arrivals++ === 0) result.ttft = now - start;
      else result.itl.push(now - last);
      last = now;
    }
    if (arrivals === 0) throw new Error("the stream had no chunks");
    result.e2e = performance.now() - start;
  } catch (error) {
    result.error = error.message;
  }
  return result;
}

// Wraps async tasks so that at most `limit` run at once; the others wait in arrival order.
function make_limiter(limit) {
  let running = 0;
  const waiting = [];
  const start_next = () => {
    if (running >= limit || waiting.length === 0) return;
    const { task, resolve } = waiting.shift();
    running++;
    task().then(resolve).finally(() => {
      running--;
      start_next();
    });
  };
  return (task) => new Promise((resolve) => {
    waiting.push({ task, resolve });
    start_next();
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Sends every prompt, spacing arrivals by exponential gaps of mean 1 / request_rate seconds.
async function run_load(options, prompts, random) {
  const limited = make_limiter(options.concurrency);
  const results = [];
  for (const prompt of prompts) {
    results.push(limited(() => timed_request(options, prompt, options.output_len)));
    if (options.request_rate !== Infinity) {
      await sleep((-Math.log(1 - random()) / options.request_rate) * 1000);
    }
  }
  return Promise.all(results);
}

// Linear interpolation between the closest ranks, as numpy's default percentile does.
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.min(low + 1, sorted.length - 1);
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - low);
}

function latency_row(name, values) {
  if (values.length === 0) return `| ${name} | - | - | - |`;
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.reduce((sum, value) => sum + value, 0) / sorted.length;
  const cells = [mean, percentile(sorted, 50), percentile(sorted, 99)];
  return `| ${name} | ${cells.map((value) => value.toFixed(2)).join(" | ")} |`;
}

function print_report(options, results, duration_s) {
  const done = results.filter((result) => !result.error);
  const input_tokens = done.reduce((sum, result) => sum + result.prompt_tokens, 0);
  const output_tokens = done.reduce((sum, result) => sum + result.output_tokens, 0);
  const rate = options.request_rate === Infinity ? "all at once" : `${options.request_rate}/s`;
  const limit = options.concurrency === Infinity ? "none" : options.concurrency;
  const rows = [
    ["model", options.model],
    ["request rate / concurrency limit", `${rate} / ${limit}`],
    ["successful requests", done.length],
    ["failed requests", results.length - done.length],
    ["duration (s)", duration_s.toFixed(2)],
    ["total input tokens", input_tokens],
    ["total output tokens", output_tokens],
    ["request throughput (req/s)", (done.length / duration_s).toFixed(2)],
    ["output token throughput (tok/s)", (output_tokens / duration_s).toFixed(2)],
    ["total token throughput (tok/s)", ((input_tokens + output_tokens) / duration_s).toFixed(2)],
  ];
  console.log("| metric | value |\n|---|---:|");
  for (const [name, value] of rows) console.log(`| ${name} | ${value} |`);
  if (done.length === 0) return;
  const tpot = done
    .filter((result) => result.output_tokens > 1)
    .map((result) => (result.e2e - result.ttft) / (result.output_tokens - 1));
  console.log("\n| latency (ms) | mean | median | p99 |\n|---|---:|---:|---:|");
  console.log(latency_row("TTFT", done.map((result) => result.ttft)));
  console.log(latency_row("TPOT", tpot));
  console.log(latency_row("ITL", done.flatMap((result) => result.itl)));
  console.log(latency_row("E2E", done.map((result) => result.e2e)));
}

async function main() {
  const options = parse_options();
  options.model ??= await first_model(options);
  // One small request first, so that a wrong URL, key or model fails once and clearly.
  const probe = await timed_request(options, "hello", 1);
  if (probe.error) throw new Error(`the first request failed: ${probe.error}`);
  const random = make_random(options.seed);
  const prompts = Array.from({ length: options.num_prompts }, () => {
    return options.token_ids ? random_ids(random, options.input_len, options.token_ids)
                             : random_prompt(random, options.input_len);
  });
  const start = performance.now();
  const results = await run_load(options, prompts, random);
  print_report(options, results, (performance.now() - start) / 1000);
  const failure = results.find((result) => result.error);
  if (failure) {
    console.error(`first failure: ${failure.error}`);
    process.exitCode = 1;
  }
}

main().catch((error) => {
  console.error(error.message);
  process.exit(2);
});
