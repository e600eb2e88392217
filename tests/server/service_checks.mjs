// Checks of the routes around generation: /health, /v1/models, /tokenize, /detokenize, and how
// the openai client surfaces the server's errors.
import assert from "node:assert/strict";

async function check_health(ctx) {
  const response = await ctx.send("GET", "/health", { headers: {} });
  assert.equal(response.status, 200, "GET /health without an API key");
}

async function check_models(ctx) {
  const page = await ctx.client.models.list();
  assert.equal(page.object, "list");
  const model = page.data.find((entry) => entry.id === ctx.model);
  assert.ok(model, `${ctx.model} is not in ${JSON.stringify(page.data)}`);
  assert.equal(model.object, "model");
  assert.equal(model.owned_by, "pagoda");
  assert.equal(model.max_model_len, ctx.max_model_len);
}

async function check_tokenize_round_trip(ctx) {
  const text = "Grüße, 世界! ✓";
  const tokens = await ctx.post_json("/tokenize", { prompt: text });
  assert.deepEqual(tokens.tokens, [...Buffer.from(text)], "a byte tokenizer's ids are the bytes");
  assert.equal(tokens.count, tokens.tokens.length);
  assert.equal(tokens.max_model_len, ctx.max_model_len);
  const detokenized = await ctx.post_json("/detokenize", { tokens: tokens.tokens });
  assert.equal(detokenized.prompt, text);
}

// What a caller of the openai client sees of an error: the exception class of its status, and the
// server's message.
async function assert_client_error(request, error_class, status) {
  const error = await request.then(
    () => assert.fail(`succeeded; expected ${status}`),
    (thrown) => thrown,
  );
  assert.ok(error instanceof error_class, `threw ${error?.constructor?.name}: ${error?.message}`);
  assert.equal(error.status, status);
  assert.ok(typeof error.error?.message === "string" && error.error.message.length > 0,
            "the error has no message");
}

async function check_client_errors(ctx) {
  const { openai, client } = ctx;
  const params = { model: ctx.model, prompt: "hi", max_tokens: 2 };
  await assert_client_error(client.completions.create({ ...params, model: "no-such-model" }),
                            openai.NotFoundError, 404);
  await assert_client_error(client.completions.create({ ...params, temperature: -1 }),
                            openai.BadRequestError, 400);
  const keyless = client.withOptions({ apiKey: "wrong-key" });
  await assert_client_error(keyless.completions.create(params), openai.AuthenticationError, 401);
}

export function service_checks(ctx) {
  return [
    ["GET /health answers 200 without the API key", check_health],
    ["GET /v1/models lists the served model", check_models],
    ["/tokenize and /detokenize round-trip a text", check_tokenize_round_trip],
    ["client: errors arrive as its exception classes with the server's message",
     check_client_errors],
  ].map(([name, check]) => [name, () => check(ctx)]);
}
