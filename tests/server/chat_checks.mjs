// Checks of POST /v1/chat/completions through the openai client: the response, streamed deltas,
// logprobs, and the chat template's prompt as /tokenize and usage count it.
import assert from "node:assert/strict";

import {
  assert_logprob,
  assert_usage,
  byte_count,
  chat_content,
  read_stream,
} from "./responses.mjs";

const kMessages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say something ✓" },
];

// The prompt the byte tokenizer's chat template renders (tests/fixtures/byte-tokenizer), with the
// generation prompt; its tokens are its UTF-8 bytes.
export function chat_prompt(messages) {
  return messages.map(({ role, content }) => `<${role}>${content}\n`).join("") + "<assistant>";
}

export function chat(ctx, params) {
  return ctx.client.chat.completions.create({ model: ctx.model, ...params });
}

async function check_response_shape(ctx) {
  const params = { messages: kMessages, temperature: 0, ignore_eos: true };
  const response = await chat(ctx, { ...params, max_completion_tokens: 6 });
  assert.ok(typeof response.id === "string" && response.id.length > 0, "no id");
  assert.equal(response.object, "chat.completion");
  assert.ok(Number.isInteger(response.created), `created is ${response.created}`);
  assert.equal(response.model, ctx.model);
  assert.equal(response.choices.length, 1);
  const [choice] = response.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, "assistant");
  assert.equal(typeof choice.message.content, "string");
  assert.equal(choice.finish_reason, "length");
  assert_usage(response.usage, byte_count(chat_prompt(kMessages)), 6);
}

async function check_streamed_deltas(ctx) {
  const params = { messages: kMessages, max_tokens: 8, temperature: 0, ignore_eos: true };
  const whole = await chat(ctx, params);
  const stream = await chat(ctx, {
    ...params,
    n: 2,
    stream: true,
    stream_options: { include_usage: true },
  });
  const { choices, usage, chunks } = await read_stream(stream);
  assert.deepEqual([...choices.keys()].sort(), [0, 1]);
  for (const [index, choice] of choices) {
    const first = choice.chunks[0].delta;
    assert.equal(first.role, "assistant", `the first delta of choice ${index} has no role`);
    assert.equal(first.content ?? "", "", `the first delta of choice ${index} has content`);
    assert.equal(chat_content(choice), whole.choices[0].message.content, `choice ${index}`);
    assert.equal(choice.finish_reason, "length");
  }
  assert_usage(usage, byte_count(chat_prompt(kMessages)), 2 * 8);
  for (const chunk of chunks) {
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.id, chunks[0].id, "chunks of one response have different ids");
  }
}

// One entry of choice.logprobs.content, or of its top_logprobs: a token, its log-probability and
// its bytes.
function assert_token_logprob(entry, what) {
  assert.equal(typeof entry.token, "string", `${what}.token`);
  assert_logprob(entry.logprob, `${what}.logprob`);
  const bytes = entry.bytes;
  assert.ok(Array.isArray(bytes) && bytes.length > 0, `${what}.bytes is not a list of bytes`);
  for (const byte of bytes) {
    assert.ok(Number.isInteger(byte) && byte >= 0 && byte < 256, `${what}.bytes has ${byte}`);
  }
}

async function check_logprobs(ctx) {
  const params = { messages: kMessages, max_tokens: 5, temperature: 0, ignore_eos: true };
  const response = await chat(ctx, { ...params, logprobs: true, top_logprobs: 3 });
  const { content } = response.choices[0].logprobs ?? {};
  assert.ok(Array.isArray(content) && content.length === 5, "logprobs.content is not 5 entries");
  content.forEach((entry, i) => {
    assert_token_logprob(entry, `content[${i}]`);
    assert.equal(entry.top_logprobs?.length, 3, `content[${i}].top_logprobs length`);
    entry.top_logprobs.forEach((top, j) => {
      assert_token_logprob(top, `content[${i}].top_logprobs[${j}]`);
      if (j > 0) assert.ok(top.logprob <= entry.top_logprobs[j - 1].logprob, "top_logprobs order");
    });
    // Greedy: the chosen token is the most likely one.
    assert.deepEqual(entry.bytes, entry.top_logprobs[0].bytes, `content[${i}] is not the best`);
    assert.ok(Math.abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-4);
  });
  const text = new TextDecoder().decode(Uint8Array.from(content.flatMap((entry) => entry.bytes)));
  // A token that is part of a character may list the bytes of U+FFFD, and decoders differ in how
  // many U+FFFD they make of invalid bytes: only text without U+FFFD is compared.
  if (!text.includes("\uFFFD")) assert.equal(text, response.choices[0].message.content);
}

async function check_tokenize_messages(ctx) {
  const body = { messages: kMessages, add_generation_prompt: true };
  const response = await ctx.post_json("/tokenize", body);
  assert.deepEqual(response.tokens, [...Buffer.from(chat_prompt(kMessages))]);
  assert.equal(response.count, response.tokens.length);
}

export function chat_checks(ctx) {
  return [
    ["chat: response shape, usage and max_completion_tokens", check_response_shape],
    ["chat: streamed deltas (n = 2) equal the non-streamed content", check_streamed_deltas],
    ["chat: logprobs and top_logprobs", check_logprobs],
    ["chat: /tokenize of messages gives the chat template's prompt", check_tokenize_messages],
  ].map(([name, check]) => [name, () => check(ctx)]);
}
