// Checks of POST /v1/completions through the openai client: the response and its usage, prompt
// forms, streaming, sampling controls, logprobs, echo and stop conditions.
import assert from "node:assert/strict";

import { sse_data } from "../../tools/peers/sse.mjs";
import { Skip } from "./harness.mjs";
import {
  assert_logprob,
  assert_usage,
  byte_count,
  completion_text,
  read_stream,
} from "./responses.mjs";

// Greedy outputs of these prompts are searched for a usable stop string; several, so that one
// output without a suitable substring does not skip the check.
const kStopPrompts = ["Once upon a time", "The quick brown fox", "pagoda serves tokens", "0 1 2 3"];

function complete(ctx, params) {
  return ctx.client.completions.create({ model: ctx.model, ...params });
}

async function greedy_text(ctx, prompt, max_tokens) {
  const response = await complete(ctx, { prompt, max_tokens, temperature: 0, ignore_eos: true });
  return response.choices[0].text;
}

async function sampled_text(ctx, seed) {
  const params = { prompt: "Roll the dice", max_tokens: 16, temperature: 1.0, ignore_eos: true };
  const response = await complete(ctx, { ...params, seed });
  return response.choices[0].text;
}

function streamed(ctx, params) {
  return complete(ctx, { ...params, stream: true }).then(read_stream);
}

async function check_response_shape(ctx) {
  const prompt = "Grüße from pagoda ✓";
  const response = await complete(ctx, { prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.match(response.id, /^cmpl-/);
  assert.equal(response.object, "text_completion");
  const age_s = Date.now() / 1000 - response.created;
  assert.ok(Number.isInteger(response.created) && Math.abs(age_s) < 3600,
            `created is ${response.created}, not the time in seconds`);
  assert.equal(response.model, ctx.model);
  assert.equal(response.choices.length, 1);
  const [choice] = response.choices;
  assert.equal(choice.index, 0);
  assert.equal(typeof choice.text, "string");
  assert.equal(choice.logprobs ?? null, null, "logprobs sent without being asked for");
  assert.equal(choice.finish_reason, "length");
  // One token per UTF-8 byte: the multi-byte characters count once per byte.
  assert_usage(response.usage, byte_count(prompt), 8);
}

async function check_default_max_tokens(ctx) {
  const response = await complete(ctx, { prompt: "How long?", ignore_eos: true });
  assert.equal(response.choices[0].finish_reason, "length");
  assert_usage(response.usage, byte_count("How long?"), 16);
}

async function check_token_id_prompt(ctx) {
  const ids = [...Buffer.from("Hello")];
  const params = { prompt: ids, max_tokens: 8, temperature: 0, ignore_eos: true };
  const response = await complete(ctx, params);
  assert_usage(response.usage, ids.length, 8);
  assert.equal(response.choices[0].text, await greedy_text(ctx, "Hello", 8),
               "the ids of a text must continue like the text");
}

// Choices come ordered by prompt, then by sample: index = prompt_index * n + i.
async function check_prompt_lists(ctx) {
  const prompts = ["Hello", "abc"];
  const max_tokens = 6;
  const expected = await Promise.all(prompts.map((prompt) => greedy_text(ctx, prompt, max_tokens)));
  const params = { max_tokens, temperature: 0, ignore_eos: true };
  const n = 2;
  for (const prompt of [prompts, prompts.map((text) => [...Buffer.from(text)])]) {
    const response = await complete(ctx, { ...params, prompt, n });
    const texts = texts_by_index(response.choices);
    assert.deepEqual(texts, expected.flatMap((text) => Array(n).fill(text)));
    const prompt_tokens = prompts.reduce((sum, text) => sum + byte_count(text), 0);
    assert_usage(response.usage, prompt_tokens, prompts.length * n * max_tokens);
  }
}

// The texts of `choices` in index order, after checking the indexes run 0, 1, ... without gaps.
function texts_by_index(choices) {
  const sorted = [...choices].sort((a, b) => a.index - b.index);
  assert.deepEqual(sorted.map((choice) => choice.index), sorted.map((_, i) => i), "choice indexes");
  return sorted.map((choice) => choice.text);
}

async function check_n_choices(ctx) {
  const params = { prompt: "Pick three", n: 3, max_tokens: 8, temperature: 1.0, ignore_eos: true };
  const response = await complete(ctx, params);
  assert.equal(texts_by_index(response.choices).length, 3);
  for (const choice of response.choices) assert.equal(choice.finish_reason, "length");
  assert_usage(response.usage, byte_count(params.prompt), 3 * 8);
}

async function check_seed(ctx) {
  const first = await sampled_text(ctx, 1234);
  assert.equal(await sampled_text(ctx, 1234), first, "the same seed sampled a different text");
  // 16 tokens sampled at temperature 1 from this model repeat by chance far too rarely for four
  // seeds in a row to do it.
  const others = [];
  for (const seed of [1, 2, 3, 4]) others.push(await sampled_text(ctx, seed));
  assert.ok(others.some((text) => text !== first), "five seeds all sampled the same text");
}

async function check_top_k_one(ctx) {
  const params = { prompt: "Only the best", max_tokens: 12, ignore_eos: true };
  const sampled = await complete(ctx, { ...params, temperature: 1.0, top_k: 1, seed: 5 });
  assert.equal(sampled.choices[0].text, await greedy_text(ctx, params.prompt, params.max_tokens));
}

async function check_sampling_fields(ctx) {
  const response = await complete(ctx, {
    prompt: "Every knob",
    max_tokens: 8,
    ignore_eos: true,
    temperature: 0.8,
    top_p: 0.9,
    top_k: 40,
    min_p: 0.05,
    presence_penalty: 0.5,
    frequency_penalty: 0.5,
    repetition_penalty: 1.2,
    seed: 3,
  });
  assert.equal(response.choices[0].finish_reason, "length");
  assert_usage(response.usage, byte_count("Every knob"), 8);
}

// The sampling fields are read as a prompts file's are: prompt_logprobs too, in vLLM's layout
// (null first, then a map from token id to log-probability, rank and text); `user` is accepted.
async function check_prompt_logprobs(ctx) {
  const params = { prompt: "Count me", max_tokens: 2, ignore_eos: true, prompt_logprobs: 2 };
  const response = await complete(ctx, { ...params, user: "test" });
  const logprobs = response.choices[0].prompt_logprobs;
  assert.equal(logprobs.length, byte_count(params.prompt));
  assert.equal(logprobs[0], null);
  for (let i = 1; i < logprobs.length; ++i) {
    const entries = Object.entries(logprobs[i]);
    assert.ok(entries.length >= 2 && entries.length <= 3, JSON.stringify(logprobs[i]));
    for (const [id, entry] of entries) {
      assert.ok(Number.isInteger(Number(id)));
      assert.ok(entry.logprob <= 0 && entry.rank >= 1 && typeof entry.decoded_token === "string");
    }
    const ranked = entries.map(([, e]) => e).filter((e) => e.rank <= 2);
    assert.equal(ranked.length, 2);
  }
  assert_usage(response.usage, byte_count(params.prompt), 2);
}

// EOS may come only after min_tokens tokens, so min_tokens = max_tokens always runs to the limit.
async function check_min_tokens(ctx) {
  const params = { prompt: "At least eight", max_tokens: 8, min_tokens: 8, temperature: 1.0 };
  for (const seed of [1, 2, 3]) {
    const response = await complete(ctx, { ...params, seed });
    assert.equal(response.choices[0].finish_reason, "length");
    assert_usage(response.usage, byte_count(params.prompt), 8);
  }
}

async function check_stream_matches(ctx) {
  const params = { prompt: "Stream", max_tokens: 12, temperature: 0, seed: 11, ignore_eos: true };
  const whole = await complete(ctx, params);
  const stream_options = { include_usage: true };
  const { choices, usage, chunks } = await streamed(ctx, { ...params, stream_options });
  assert.deepEqual([...choices.keys()], [0]);
  assert.equal(completion_text(choices.get(0)), whole.choices[0].text);
  assert.equal(choices.get(0).finish_reason, "length");
  assert_usage(usage, byte_count(params.prompt), 12);
  assert.match(chunks[0].id, /^cmpl-/);
  for (const chunk of chunks) {
    assert.equal(chunk.object, "text_completion");
    assert.equal(chunk.id, chunks[0].id, "chunks of one response have different ids");
    assert.equal(chunk.model, ctx.model);
  }
}

// The openai client hides the framing; this reads the bytes the server sends.
async function check_stream_wire_format(ctx) {
  const body = { model: ctx.model, prompt: "wire", max_tokens: 4, ignore_eos: true, stream: true };
  const response = await ctx.send("POST", "/v1/completions", { body });
  assert.equal(response.status, 200, response.text.slice(0, 200));
  assert.match(response.headers["content-type"] ?? "", /^text\/event-stream/);
  const lines = response.text.split("\n").map((line) => line.replace(/\r$/, ""));
  const framing = lines.filter((line) => line !== "" && !line.startsWith("data: "));
  assert.deepEqual(framing, [], "lines that are not `data: ` lines");
  assert.match(response.text, /data: \[DONE\]\r?\n\r?\n$/, "the stream does not end with [DONE]");
  const events = [];
  for await (const data of sse_data([Buffer.from(response.text)])) events.push(data);
  assert.equal(events.indexOf("[DONE]"), events.length - 1, "[DONE] is not the last event");
  assert.ok(events.length >= 2, "no chunks before [DONE]");
  for (const data of events.slice(0, -1)) assert.equal(JSON.parse(data).object, "text_completion");
}

// Checks choice.logprobs of the completions API for `count` tokens with the top `k` alternatives.
// greedy: the chosen tokens were the most likely ones.
function assert_completion_logprobs(logprobs, { count, k, greedy }) {
  assert.ok(logprobs, "no logprobs");
  const { tokens, token_logprobs, top_logprobs, text_offset } = logprobs;
  const lists = { tokens, token_logprobs, top_logprobs, text_offset };
  for (const [name, list] of Object.entries(lists)) {
    assert.ok(Array.isArray(list), `logprobs.${name} is not a list`);
    assert.equal(list.length, count, `logprobs.${name} length`);
  }
  tokens.forEach((token, i) => {
    assert.equal(typeof token, "string", `tokens[${i}]`);
    assert_logprob(token_logprobs[i], `token_logprobs[${i}]`);
    const alternatives = Object.entries(top_logprobs[i]);
    // A dict keeps one of several tokens that print alike, such as single bytes of multi-byte
    // characters that all print as U+FFFD.
    const merged = alternatives.some(([text]) => text.includes("\uFFFD"));
    const size = alternatives.length;
    assert.ok(size === k || (merged && size >= 1 && size < k),
              `top_logprobs[${i}] has ${size} entries, not ${k}`);
    for (const [text, value] of alternatives) assert_logprob(value, `top_logprobs[${i}][${text}]`);
    const best = Math.max(...alternatives.map(([, value]) => value));
    if (greedy && !token.includes("\uFFFD")) {
      assert.ok(Math.abs(best - token_logprobs[i]) < 1e-4,
                `greedy token ${i} has logprob ${token_logprobs[i]}, the best has ${best}`);
    }
  });
  text_offset.forEach((offset, i) => {
    assert.ok(Number.isInteger(offset) && offset >= (i > 0 ? text_offset[i - 1] : 0),
              `text_offset ${JSON.stringify(text_offset)} does not grow`);
  });
}

async function check_logprobs(ctx) {
  const params = { prompt: "Weigh each word", max_tokens: 6, temperature: 0, ignore_eos: true };
  const response = await complete(ctx, { ...params, logprobs: 3 });
  assert_usage(response.usage, byte_count(params.prompt), 6);
  assert_completion_logprobs(response.choices[0].logprobs, { count: 6, k: 3, greedy: true });
}

async function check_stream_logprobs(ctx) {
  const params = { prompt: "Weigh as you go", max_tokens: 8, temperature: 0, ignore_eos: true };
  const whole = (await complete(ctx, { ...params, logprobs: 2 })).choices[0].logprobs;
  const { choices } = await streamed(ctx, { ...params, logprobs: 2 });
  const parts = choices.get(0).chunks.map((choice) => choice.logprobs).filter(Boolean);
  const streamed_tokens = parts.flatMap((part) => part.tokens);
  // Every token's logprobs, also those of tokens whose text is held back for a while.
  assert.equal(streamed_tokens.length, whole.tokens.length, "tokens with streamed logprobs");
  assert.deepEqual(streamed_tokens, whole.tokens);
  parts.flatMap((part) => part.token_logprobs).forEach((value, i) => {
    assert.ok(Math.abs(value - whole.token_logprobs[i]) < 1e-4,
              `token ${i}: streamed logprob ${value}, not ${whole.token_logprobs[i]}`);
  });
}

async function check_echo(ctx) {
  const prompt = "Echo this: ";
  const params = { prompt, max_tokens: 6, temperature: 0, ignore_eos: true };
  const response = await complete(ctx, { ...params, echo: true });
  const { text } = response.choices[0];
  assert.ok(text.startsWith(prompt), `text ${JSON.stringify(text)} does not start with the prompt`);
  assert.equal(text.slice(prompt.length), await greedy_text(ctx, prompt, 6));
  assert_usage(response.usage, byte_count(prompt), 6);
}

// A two-character stop string whose first occurrence in `text` is not at its start, and the text
// before it; null if there is none. Characters are whole code points; U+FFFD (bytes that are not,
// or not yet, a character) and control characters are avoided.
function pick_stop_string(text) {
  const chars = Array.from(text);
  for (let i = 1; i + 1 < chars.length; i++) {
    const stop = chars[i] + chars[i + 1];
    if (/[\uFFFD\p{Cc}]/u.test(stop)) continue;
    const at = text.indexOf(stop);
    if (at >= 1) return { stop, before: text.slice(0, at) };
  }
  return null;
}

// A printable ASCII character (one byte, so one token) that first occurs after the start of
// `text`, as a stop token id, and the text before it; null if there is none. The character before
// it must not be U+FFFD, which could be an incomplete character that the stop token completes in
// the text without the stop.
function pick_stop_token(text) {
  for (let i = 1; i < text.length; i++) {
    const char = text[i];
    if (char < " " || char > "~" || text.indexOf(char) !== i || text[i - 1] === "\uFFFD") continue;
    return { stop_token_id: char.charCodeAt(0), before: text.slice(0, i) };
  }
  return null;
}

// Runs the stop prompts greedily until pick(text) finds a case; returns {params, text, ...case}.
// The outputs are kept, so the stop checks share their requests.
function stop_case_finder(ctx) {
  const outputs = new Map();
  return async (pick) => {
    for (const prompt of kStopPrompts) {
      const params = { prompt, max_tokens: 32, temperature: 0, ignore_eos: true };
      if (!outputs.has(prompt)) outputs.set(prompt, (await complete(ctx, params)).choices[0].text);
      const found = pick(outputs.get(prompt));
      if (found) return { params, text: outputs.get(prompt), ...found };
    }
    throw new Skip(`no greedy output of ${kStopPrompts.length} prompts has a usable stop`);
  };
}

async function check_stop_string(ctx, find_stop_case) {
  const { params, stop, before } = await find_stop_case(pick_stop_string);
  for (const stop_field of [stop, ["never appears \u00a7\u00a7", stop]]) {
    const response = await complete(ctx, { ...params, stop: stop_field });
    const what = `stop ${JSON.stringify(stop_field)}`;
    assert.equal(response.choices[0].text, before, what);
    assert.equal(response.choices[0].finish_reason, "stop", what);
  }
}

async function check_stop_string_streamed(ctx, find_stop_case) {
  const { params, stop, before } = await find_stop_case(pick_stop_string);
  const { choices, usage } = await streamed(ctx, { ...params, stop });
  assert.equal(completion_text(choices.get(0)), before, `stop ${JSON.stringify(stop)}`);
  assert.equal(choices.get(0).finish_reason, "stop");
  assert.equal(usage, null, "a usage chunk came without stream_options.include_usage");
}

async function check_stop_token(ctx, find_stop_case) {
  const { params, stop_token_id, before } = await find_stop_case(pick_stop_token);
  const response = await complete(ctx, { ...params, stop_token_ids: [stop_token_id] });
  const what = `stop_token_ids [${stop_token_id}]: the text ends before the stop token`;
  assert.equal(response.choices[0].text, before, what);
  assert.equal(response.choices[0].finish_reason, "stop");
}

export function completion_checks(ctx) {
  const find_stop_case = stop_case_finder(ctx);
  return [
    ["completions: response shape and usage", check_response_shape],
    ["completions: max_tokens defaults to 16", check_default_max_tokens],
    ["completions: a prompt of token ids continues like its text", check_token_id_prompt],
    ["completions: prompt lists x n choices, index = prompt * n + i", check_prompt_lists],
    ["completions: n choices", check_n_choices],
    ["completions: a seed repeats its sample, other seeds differ", check_seed],
    ["completions: top_k 1 samples the greedy tokens", check_top_k_one],
    ["completions: every sampling field is accepted", check_sampling_fields],
    ["completions: prompt log-probabilities", check_prompt_logprobs],
    ["completions: min_tokens holds EOS back", check_min_tokens],
    ["completions: streamed text and usage equal the non-streamed", check_stream_matches],
    ["completions: stream framing is data: lines ending in [DONE]", check_stream_wire_format],
    ["completions: logprobs", check_logprobs],
    ["completions: streamed logprobs equal the non-streamed", check_stream_logprobs],
    ["completions: echo puts the prompt first", check_echo],
    ["completions: a stop string ends the text before it", check_stop_string],
    ["completions: a streamed stop string ends the text before it", check_stop_string_streamed],
    ["completions: stop_token_ids end the text before the token", check_stop_token],
  ].map(([name, check]) => [name, () => check(ctx, find_stop_case)]);
}
