// End-to-end test of `pagoda serve` through the official openai npm client:
//   node tests/server/openai_client_test.mjs --pagoda BINARY --source REPO_ROOT [--timeout S]
// Serves the llama-tiny fixture with the byte-level tokenizer behind an API key, prints one
// PASS/FAIL/SKIP line per check and a summary, stops the server, and exits 0 only if no check
// failed. The weights are random, so the checks test structure and invariants, never text.
// The openai package is the one tools/peers pins (tools/peers/setup.sh installs it).
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { parseArgs } from "node:util";

import { bad_request_checks } from "./bad_requests.mjs";
import { chat_checks } from "./chat_checks.mjs";
import { completion_checks } from "./completion_checks.mjs";
import { CheckRunner } from "./harness.mjs";
import { lifecycle_checks } from "./lifecycle_checks.mjs";
import { http_request, response_json } from "./raw_http.mjs";
import { service_checks } from "./service_checks.mjs";
import { start_server } from "./server_process.mjs";

const kApiKey = "pagoda-test-key";
const kCheckTimeoutMs = 120000;
const kRequestTimeoutMs = 60000;

function parse_options() {
  const { values } = parseArgs({
    options: {
      pagoda: { type: "string" },
      source: { type: "string" },
      timeout: { type: "string", default: "240" },
    },
  });
  const timeout_s = Number(values.timeout);
  if (!values.pagoda || !values.source || !(timeout_s > 0)) {
    throw new Error("usage: openai_client_test.mjs --pagoda BINARY --source ROOT [--timeout S]");
  }
  return {
    pagoda: path.resolve(values.pagoda),
    source: path.resolve(values.source),
    timeout_s,
  };
}

// Resolved from tools/peers, where the version is pinned, whatever the working directory.
function load_openai(source) {
  const require = createRequire(path.join(source, "tools", "peers", "package.json"));
  try {
    return require("openai");
  } catch (error) {
    const hint = "run tools/peers/setup.sh";
    throw new Error(`cannot load openai from tools/peers/node_modules (${hint}): ${error.message}`);
  }
}

// What every check gets: the client, the served model, and raw HTTP with the API key.
function make_context({ openai, server, model, max_model_len }) {
  const base_url = `http://127.0.0.1:${server.port}`;
  const auth = { authorization: `Bearer ${kApiKey}` };
  const send = (method, route, { body, headers = auth } = {}) => {
    return http_request(base_url + route, { method, headers, body });
  };
  const post_json = async (route, body) => {
    const response = await send("POST", route, { body });
    if (response.status !== 200) {
      throw new Error(`POST ${route}: status ${response.status}: ${response.text.slice(0, 200)}`);
    }
    return response_json(response);
  };
  const client = new openai.OpenAI({
    baseURL: `${base_url}/v1`,
    apiKey: kApiKey,
    maxRetries: 0,
    timeout: kRequestTimeoutMs,
  });
  return { openai, client, model, max_model_len, auth, send, post_json, base_url };
}

// POSTs a streaming completion and resolves to the whole body once the server ends it; calls
// on_data at each piece that arrives.
function stream_text(ctx, body, on_data) {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = http.request(`${ctx.base_url}/v1/completions`, {
      method: "POST",
      agent: false,
      headers: { ...ctx.auth, "content-type": "application/json",
                 "content-length": Buffer.byteLength(payload) },
    });
    request.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (piece) => {
        text += piece;
        on_data();
      });
      response.on("end", () => resolve(text));
      response.on("error", reject);
    });
    request.on("error", reject);
    request.end(payload);
  });
}

function print_server_log(server) {
  if (server) console.log(`--- server output (last lines) ---\n${server.log_tail()}`);
}

// Fails the whole run if it has not finished in time; the exit hook then kills the server.
function arm_deadline(timeout_s, get_server) {
  const timer = setTimeout(() => {
    console.log(`FAIL the test did not finish within ${timeout_s} s`);
    print_server_log(get_server());
    process.exit(1);
  }, timeout_s * 1000);
  return () => clearTimeout(timer);
}

async function main() {
  const options = parse_options();
  let server = null;
  const disarm = arm_deadline(options.timeout_s, () => server);
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(130));

  const openai = load_openai(options.source);
  const fixture = path.join(options.source, "tests", "fixtures", "llama-tiny");
  const config = JSON.parse(fs.readFileSync(path.join(fixture, "config.json"), "utf8"));
  const tokenizer = path.join(options.source, "tests", "fixtures", "byte-tokenizer");
  try {
    // The key comes from the environment, as a deployment keeps it out of the process list.
    process.env.PAGODA_API_KEY = kApiKey;
    server = await start_server(options.pagoda, ["--model", fixture, "--tokenizer", tokenizer,
                                                 "--shutdown-grace", "0"]);
  } catch (error) {
    console.log(`FAIL pagoda serve starts: ${error.message}`);
    process.exit(1);
  }
  console.log(`PASS pagoda serve starts (port ${server.port})`);

  const ctx = make_context({
    openai,
    server,
    model: path.basename(fixture),  // the default served model name
    max_model_len: config.max_position_embeddings,
  });
  const runner = new CheckRunner({
    timeout_ms: kCheckTimeoutMs,
    blocker: () => (server.running ? null : `the server ${server.describe_exit()}`),
  });
  const checks = [
    ...service_checks(ctx),
    ...completion_checks(ctx),
    ...chat_checks(ctx),
    ...lifecycle_checks(ctx),
    ...bad_request_checks(ctx),
  ];
  for (const [name, check] of checks) await runner.run(name, check);
  await runner.run("SIGTERM ends a running stream with [DONE] and exits 0", async () => {
    // The server runs with --shutdown-grace 0: the stream is aborted at once, and still ends well.
    let stopped = null;
    const text = await stream_text(ctx, {
      model: ctx.model, prompt: "Until shutdown", n: 4, max_tokens: 200, ignore_eos: true,
      stream: true,
    }, () => (stopped ??= server.stop()));
    assert.ok(text.endsWith("data: [DONE]\n\n"), `the stream ended with ${JSON.stringify(text.slice(-80))}`);
    const { code, graceful } = await (stopped ?? server.stop());
    if (!graceful) throw new Error("still running 10 s after SIGTERM; killed");
    if (code !== 0) throw new Error(`the server ${server.describe_exit()}`);
  });
  disarm();

  if (!runner.passed) print_server_log(server);
  console.log(runner.summary());
  process.exit(runner.passed ? 0 : 1);
}

main().catch((error) => {
  console.log(`FAIL ${error.message}`);
  process.exit(1);
});
