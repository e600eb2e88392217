// Reading and checking what the server answers through the openai client, shared by the checks.
import assert from "node:assert/strict";

// Collects a stream's chunks by choice, checking the order every streamed response keeps: a
// choice sends nothing after its finish_reason, and the usage chunk, when there is one, comes last
// and has no choices. Resolves to {choices, usage, chunks}: choices maps each index to
// {chunks, finish_reason}, the choice objects of that index in order.
export async function read_stream(stream) {
  const choices = new Map();
  const chunks = [];
  let usage = null;
  for await (const chunk of stream) {
    chunks.push(chunk);
    assert.equal(usage, null, "a chunk came after the usage chunk");
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, [], "the usage chunk has choices");
      usage = chunk.usage;
      continue;
    }
    for (const choice of chunk.choices) {
      const seen = choices.get(choice.index) ?? { chunks: [], finish_reason: null };
      choices.set(choice.index, seen);
      assert.equal(seen.finish_reason, null, `choice ${choice.index} went on after finishing`);
      seen.chunks.push(choice);
      seen.finish_reason = choice.finish_reason ?? null;
    }
  }
  return { choices, usage, chunks };
}

// The text of a streamed completion choice.
export function completion_text({ chunks }) {
  return chunks.map((choice) => choice.text ?? "").join("");
}

// The content of a streamed chat choice.
export function chat_content({ chunks }) {
  return chunks.map((choice) => choice.delta?.content ?? "").join("");
}

export function byte_count(text) {
  return Buffer.byteLength(text, "utf8");
}

// usage as the server must count it: the byte-level tokenizer makes one token per UTF-8 byte.
export function assert_usage(usage, prompt_tokens, completion_tokens) {
  assert.ok(usage, "no usage");
  assert.equal(usage.prompt_tokens, prompt_tokens, "usage.prompt_tokens");
  assert.equal(usage.completion_tokens, completion_tokens, "usage.completion_tokens");
  assert.equal(usage.total_tokens, prompt_tokens + completion_tokens, "usage.total_tokens");
}

// A log-probability: a finite number, at most 0.
export function assert_logprob(value, what) {
  assert.ok(Number.isFinite(value) && value <= 0, `${what} is ${value}, not a log-probability`);
}
