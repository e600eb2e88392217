// Requests the server must refuse with a 4xx status and an OpenAI error object, sent as raw HTTP
// so that bodies, headers and methods can be broken; then a check that the server still serves.
import assert from "node:assert/strict";

import { response_json } from "./raw_http.mjs";
import { assert_usage, byte_count } from "./responses.mjs";

const kCompletions = "/v1/completions";
const kChat = "/v1/chat/completions";

// Each case: name, path, body, and the status to expect: a number, or "4xx" where the server may
// choose among several. Cases default to POST with the API key, and to requiring an error object;
// json: false where the server may drop the connection mid-body (an oversized body).
function bad_requests(ctx) {
  const completion = { model: ctx.model, prompt: "hi", max_tokens: 2 };
  const chat = { model: ctx.model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 };
  const bad_completion = (name, fields, expect = 400) => {
    return { name, path: kCompletions, body: { ...completion, ...fields }, expect };
  };
  const bad_chat = (name, fields, expect = 400) => {
    return { name, path: kChat, body: { ...chat, ...fields }, expect };
  };
  const { prompt: _prompt, ...no_prompt } = completion;
  const { messages: _messages, ...no_messages } = chat;
  const too_long = "x".repeat(20 * ctx.max_model_len);
  // 100 000 levels of nesting in 200 KB: the server must refuse it before anything walks it.
  const deep = "[".repeat(100000) + "]".repeat(100000);
  const with_deep = (body, field) => JSON.stringify(body).replace(`"${field}":"DEEP"`, `"${field}":${deep}`);
  return [
    { name: "a typed field nested 100 000 deep", path: kCompletions,
      body: with_deep({ ...completion, max_tokens: "DEEP" }, "max_tokens"), expect: 400 },
    { name: "chat content nested 100 000 deep", path: kChat,
      body: with_deep({ ...chat, messages: [{ role: "user", content: "DEEP" }] }, "content"),
      expect: 400 },
    { name: "/tokenize of messages nested 100 000 deep", path: "/tokenize", headers: {},
      body: with_deep({ messages: [{ role: "user", content: "DEEP" }] }, "content"), expect: 400 },
    { name: "max_tokens near 2^63", path: kCompletions,
      body: '{"prompt": "hi", "max_tokens": 9223372036854775800}', expect: 400 },
    { name: "max_completion_tokens near 2^63", path: kChat,
      body: '{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9223372036854775800}',
      expect: 400 },
    { name: "a number too large for a double", path: kCompletions,
      body: '{"prompt": "hi", "temperature": 1e309}', expect: 400 },
    { name: "malformed JSON", path: kCompletions, body: '{"model": "x", "prompt": ', expect: 400 },
    { name: "an empty body", path: kCompletions, body: "", expect: 400 },
    { name: "a JSON array body", path: kCompletions, body: "[1, 2]", expect: 400 },
    { name: "a JSON string body", path: kCompletions, body: '"hello"', expect: 400 },
    bad_completion("a model that is a number", { model: 7 }),
    bad_completion("a prompt that is an object", { prompt: { text: "hi" } }),
    bad_completion("a prompt mixing strings and ids", { prompt: ["a", 1] }),
    bad_completion("an empty prompt", { prompt: "" }),
    { name: "a missing prompt", path: kCompletions, body: no_prompt, expect: 400 },
    bad_chat("messages that are a string", { messages: "hello" }),
    { name: "missing messages", path: kChat, body: no_messages, expect: 400 },
    bad_chat("a message without a role", { messages: [{ content: "hi" }] }),
    bad_chat("a message whose content is a number", { messages: [{ role: "user", content: 5 }] }),
    bad_completion("max_tokens that is a word", { max_tokens: "many" }),
    bad_completion("fractional max_tokens", { max_tokens: 2.5 }),
    bad_completion("negative max_tokens", { max_tokens: -1 }),
    bad_completion("max_tokens 0", { max_tokens: 0 }),
    bad_chat("negative max_completion_tokens", { max_completion_tokens: -5 }),
    bad_completion("temperature that is a word", { temperature: "hot" }),
    bad_completion("temperature -1", { temperature: -1 }),
    bad_completion("temperature -1 when streaming", { temperature: -1, stream: true }),
    bad_completion("top_p that is a list", { top_p: [0.5] }),
    bad_completion("top_p 0", { top_p: 0 }),
    bad_completion("top_p 2", { top_p: 2 }),
    bad_completion("top_k -2", { top_k: -2 }),
    bad_completion("min_p 1.5", { min_p: 1.5 }),
    bad_completion("presence_penalty 3", { presence_penalty: 3 }),
    bad_completion("repetition_penalty 0", { repetition_penalty: 0 }),
    bad_completion("n that is a word", { n: "two" }),
    bad_completion("n 0", { n: 0 }),
    bad_completion("n 1000", { n: 1000 }, "4xx"),
    bad_completion("stop that is a number", { stop: 5 }),
    bad_completion("a stop list holding a number", { stop: ["a", 5] }),
    bad_completion("logprobs that is a word", { logprobs: "three" }),
    bad_completion("logprobs 100", { logprobs: 100 }, "4xx"),
    bad_chat("chat logprobs that is an object", { logprobs: {} }),
    bad_chat("top_logprobs 100", { logprobs: true, top_logprobs: 100 }, "4xx"),
    bad_completion("stream that is an object", { stream: {} }),
    bad_completion("seed that is a word", { seed: "lucky" }),
    bad_completion("min_tokens over max_tokens", { min_tokens: 5 }),
    bad_completion("a stop token id outside the vocabulary", { stop_token_ids: [999] }),
    bad_completion("a token id outside the vocabulary", { prompt: [999] }),
    bad_completion("a negative token id", { prompt: [-1] }),
    bad_completion("an unknown field", { a_future_field: { x: [1] } }),
    bad_completion("an unsupported OpenAI field", { logit_bias: { "5": 10 } }),
    bad_chat("an unknown chat field", { response_format: { type: "json_object" } }),
    bad_completion("prompt_logprobs that is a word", { prompt_logprobs: "all" }),
    bad_completion("prompt_logprobs 100", { prompt_logprobs: 100 }, "4xx"),
    bad_completion("a prompt over max_model_len", { prompt: too_long }),
    bad_completion("an unknown model", { model: "no-such-model" }, 404),
    bad_chat("an unknown chat model", { model: "no-such-model" }, 404),
    { name: "a missing API key", path: kCompletions, body: completion, headers: {}, expect: 401 },
    {
      name: "a wrong API key",
      path: kCompletions,
      body: completion,
      headers: { authorization: "Bearer wrong-key" },
      expect: 401,
    },
    { name: "GET /v1/models without the key", method: "GET", path: "/v1/models", headers: {},
      expect: 401 },
    {
      name: "a body over 1 MiB",
      path: kCompletions,
      body: JSON.stringify({ ...completion, prompt: "a".repeat(2 << 20) }),
      expect: "4xx",
      json: false,
    },
    { name: "a gzip-encoded body", path: kCompletions, body: completion,
      headers: { ...ctx.auth, "content-encoding": "gzip" }, expect: 415 },
    { name: "GET on a POST route", method: "GET", path: kCompletions, expect: "4xx" },
    { name: "POST on a GET route", path: "/v1/models", body: {}, expect: "4xx" },
    { name: "an unknown route", method: "GET", path: "/v1/no-such-route", expect: 404 },
    { name: "/tokenize without prompt or messages", path: "/tokenize", body: {}, expect: 400 },
    { name: "/tokenize with add_special_tokens that is a word (it once gave 500)", path: "/tokenize",
      body: { prompt: "hi", add_special_tokens: "yes" }, expect: 400 },
    { name: "/detokenize of a string", path: "/detokenize", body: { tokens: "abc" }, expect: 400 },
    { name: "/detokenize of an id outside the vocabulary", path: "/detokenize",
      body: { tokens: [999] }, expect: 400 },
    { name: "/detokenize of an id beyond 32 bits (it once wrapped to a valid id)",
      path: "/detokenize", body: '{"tokens": [4294967393]}', expect: 400 },
  ];
}

async function check_refused(ctx, request) {
  const { method = "POST", path, body, headers = ctx.auth, expect, json = true } = request;
  const response = await ctx.send(method, path, { body, headers });
  const { status } = response;
  const matches = expect === "4xx" ? status >= 400 && status < 500 : status === expect;
  assert.ok(matches, `status ${status}, expected ${expect}: ${response.text.slice(0, 200)}`);
  if (!json) return;
  const { error } = response_json(response);
  assert.ok(typeof error?.message === "string" && error.message.length > 0,
            `no error.message in ${response.text.slice(0, 200)}`);
  assert.equal(typeof error.type, "string", "error.type");
  // An error quotes at most a short piece of what it refuses.
  assert.ok(error.message.length < 1000, `a ${error.message.length}-byte error message`);
}

// One bad request never takes the server down.
async function check_still_serving(ctx) {
  const health = await ctx.send("GET", "/health", { headers: {} });
  assert.equal(health.status, 200, "GET /health");
  const prompt = "Still there?";
  const response = await ctx.client.completions.create({
    model: ctx.model,
    prompt,
    max_tokens: 4,
    ignore_eos: true,
  });
  assert.equal(response.choices[0].finish_reason, "length");
  assert_usage(response.usage, byte_count(prompt), 4);
}

export function bad_request_checks(ctx) {
  const refusals = bad_requests(ctx).map((request) => [
    `refuses ${request.name} with ${request.expect}`,
    () => check_refused(ctx, request),
  ]);
  const recovery = ["serves normally after all the bad requests", () => check_still_serving(ctx)];
  return [...refusals, recovery];
}
