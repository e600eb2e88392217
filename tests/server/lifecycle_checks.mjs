// Checks of requests in flight and what /metrics says about them: many streams at once, a stream
// the client abandons, and the metric series themselves.
import assert from "node:assert/strict";
import http from "node:http";

import { chat, chat_prompt } from "./chat_checks.mjs";
import { note } from "./harness.mjs";
import { assert_usage, byte_count, chat_content, read_stream } from "./responses.mjs";

const kConcurrentClients = 64;
const kConcurrentTokens = 16;
const kAbortedChoices = 64;
// Batch size changes the order of float sums, so a greedy step whose two best tokens are closer
// than this in log-probability may pick either; streams that part at such a step are excused.
const kNearTie = 1e-4;

const kCounters = [
  "pagoda:prefix_cache_queries_total",
  "pagoda:prefix_cache_hits_total",
  "pagoda:num_preemptions_total",
  "pagoda:prompt_tokens_total",
  "pagoda:generation_tokens_total",
];
const kGauges = [
  "pagoda:num_requests_running",
  "pagoda:num_requests_waiting",
  "pagoda:kv_cache_usage_perc",
];
const kHistograms = [
  "pagoda:time_to_first_token_seconds",
  "pagoda:inter_token_latency_seconds",
  "pagoda:e2e_request_latency_seconds",
];

// Samples of the Prometheus text format: {name, labels, value}, one per line that is not a comment.
function parse_metrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const match = /^([A-Za-z_:][\w:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (match) samples.push({ name: match[1], labels: match[2] ?? "", value: Number(match[3]) });
  }
  return samples;
}

// The sum of a metric over its label sets; undefined when it has no sample.
function metric(samples, name) {
  const matching = samples.filter((sample) => sample.name === name);
  return matching.length ? matching.reduce((sum, sample) => sum + sample.value, 0) : undefined;
}

async function read_metrics(ctx) {
  const response = await ctx.send("GET", "/metrics");
  assert.equal(response.status, 200, `GET /metrics: ${response.text.slice(0, 200)}`);
  return parse_metrics(response.text);
}

// Polls /metrics until no request runs or waits and no KV cache block is in use; returns those
// samples, or fails with the last values seen after timeout_ms.
async function wait_until_idle(ctx, timeout_ms) {
  const deadline = Date.now() + timeout_ms;
  for (;;) {
    const samples = await read_metrics(ctx);
    const state = Object.fromEntries(kGauges.map((name) => [name, metric(samples, name)]));
    if (Object.values(state).every((value) => value === 0)) return samples;
    if (Date.now() > deadline) {
      assert.fail(`not idle ${timeout_ms / 1000} s after the abort: ${JSON.stringify(state)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// Whether a greedy chat response met a step where its two best tokens were nearly tied.
function has_near_tie(response) {
  const steps = response.choices[0].logprobs?.content ?? [];
  return steps.some(({ top_logprobs: top }) => top?.length >= 2 &&
                                               top[0].logprob - top[1].logprob < kNearTie);
}

// Each stream must come out as its request does when sent alone: its own prompt's tokens, all of
// them, in order. The requests alone ask for logprobs only to recognise near-ties.
async function check_concurrent_streams(ctx) {
  const conversations = Array.from({ length: kConcurrentClients }, (_, i) => [
    { role: "user", content: `Client ${i} asks for ${kConcurrentTokens} tokens, please.` },
  ]);
  const params = { max_tokens: kConcurrentTokens, temperature: 0, ignore_eos: true };
  const references = [];
  for (const messages of conversations) {
    references.push(await chat(ctx, { ...params, messages, logprobs: true, top_logprobs: 2 }));
  }
  const stream_options = { include_usage: true };
  const streams = await Promise.all(conversations.map(async (messages) => {
    return read_stream(await chat(ctx, { ...params, messages, stream: true, stream_options }));
  }));
  const problems = [];
  let excused = 0;
  streams.forEach(({ choices, usage }, i) => {
    const choice = choices.get(0);
    assert.equal(choice?.finish_reason, "length", `stream ${i} finish_reason`);
    assert_usage(usage, byte_count(chat_prompt(conversations[i])), kConcurrentTokens);
    const [got, alone] = [chat_content(choice), references[i].choices[0].message.content];
    if (got === alone) return;
    if (has_near_tie(references[i])) excused++;
    else problems.push(`stream ${i}: ${JSON.stringify(got)}; alone: ${JSON.stringify(alone)}`);
  });
  if (excused > 0) note(`${excused} stream(s) parted from their request alone at a near-tie`);
  if (problems.length > 0) {
    const shown = problems.slice(0, 5).join("\n");
    assert.fail(`${problems.length} streams differ from their request alone:\n${shown}`);
  }
}

// Many choices make the aborted request long enough that the server cannot finish it in the
// moment between the client's last read and its disconnect being noticed.
async function check_abort_frees(ctx) {
  const [n, max_tokens] = [kAbortedChoices, 200];
  const generated_before = metric(await read_metrics(ctx), "pagoda:generation_tokens_total");
  const params = { prompt: "Abort me", n, max_tokens, temperature: 0, ignore_eos: true };
  const stream = await ctx.client.completions.create({ model: ctx.model, ...params, stream: true });
  let chunks = 0;
  for await (const chunk of stream) {
    const finish_reason = chunk.choices[0]?.finish_reason ?? null;
    assert.equal(finish_reason, null, "the stream ended before the abort");
    if (++chunks === 3) break;
  }
  stream.controller.abort();
  const samples = await wait_until_idle(ctx, 10000);
  const generated = metric(samples, "pagoda:generation_tokens_total") - generated_before;
  assert.ok(generated < n * max_tokens, `the aborted request generated all ${generated} tokens`);
}

// A client that goes away before a whole (not streamed) response is ready aborts its request too.
async function check_disconnect_aborts(ctx) {
  const [n, max_tokens] = [kAbortedChoices, 200];
  const generated_before = metric(await read_metrics(ctx), "pagoda:generation_tokens_total");
  const body = JSON.stringify({ model: ctx.model, prompt: "Leave me", n, max_tokens,
                                temperature: 0, ignore_eos: true });
  await new Promise((resolve) => {
    const request = http.request(`${ctx.base_url}/v1/completions`, {
      method: "POST",
      agent: false,
      headers: { ...ctx.auth, "content-type": "application/json",
                 "content-length": Buffer.byteLength(body) },
    });
    request.on("error", () => {});
    request.on("close", resolve);
    request.end(body);
    setTimeout(() => request.destroy(), 300);
  });
  const samples = await wait_until_idle(ctx, 10000);
  const generated = metric(samples, "pagoda:generation_tokens_total") - generated_before;
  assert.ok(generated < n * max_tokens, `the abandoned request generated all ${generated} tokens`);
}

// Runs after the other checks, so every series has seen requests.
async function check_metrics(ctx) {
  const samples = await read_metrics(ctx);
  const names = new Set(samples.map((sample) => sample.name));
  const histogram_series = kHistograms.flatMap((name) => ["_bucket", "_sum", "_count"].map(
      (suffix) => name + suffix));
  const expected = [...kCounters, ...kGauges, ...histogram_series];
  const missing = expected.filter((name) => !names.has(name));
  assert.deepEqual(missing, [], "missing series");
  const usage = metric(samples, "pagoda:kv_cache_usage_perc");
  assert.ok(usage >= 0 && usage <= 1, `kv_cache_usage_perc is ${usage}`);
  const hits = metric(samples, "pagoda:prefix_cache_hits_total");
  assert.ok(hits <= metric(samples, "pagoda:prefix_cache_queries_total"), "more hits than queries");
  for (const name of ["pagoda:prompt_tokens_total", "pagoda:generation_tokens_total"]) {
    assert.ok(metric(samples, name) > 0, `${name} is ${metric(samples, name)}`);
  }
  for (const name of kHistograms) {
    const count = metric(samples, `${name}_count`);
    const infinite = samples
      .filter((sample) => sample.name === `${name}_bucket` && /le="\+Inf"/.test(sample.labels))
      .reduce((sum, sample) => sum + sample.value, 0);
    assert.ok(count > 0, `${name}_count is ${count}`);
    assert.equal(infinite, count, `${name}_bucket{le="+Inf"} is not ${name}_count`);
  }
}

export function lifecycle_checks(ctx) {
  return [
    [`${kConcurrentClients} concurrent streams each equal their request alone`,
     check_concurrent_streams],
    ["an aborted stream frees its sequences and KV cache blocks", check_abort_frees],
    ["a whole response's client that goes away aborts its request", check_disconnect_aborts],
    ["GET /metrics has the documented series with sane values", check_metrics],
  ].map(([name, check]) => [name, () => check(ctx)]);
}
