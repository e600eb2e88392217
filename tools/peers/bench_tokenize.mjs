// Encoding speed of Hugging Face's JavaScript tokenizers on the test corpus, the same texts
// bench/tokenizer_bench.cc encodes:  node tools/peers/bench_tokenize.mjs OUT_DIR
// Prints MB/s per tokenizer and writes OUT_DIR/bench-js.json for the C++ benchmark's table.
import fs from "fs";
import path from "path";
import { TOKENIZERS, load } from "./tokenize.mjs";

const out = process.argv[2];
if (!out) throw new Error("usage: node bench_tokenize.mjs OUT_DIR");
const results = {};
for (const name of TOKENIZERS) {
  const { tokenizer } = load(name);
  const texts = fs
    .readFileSync(path.join(out, `tokenize-${name}.jsonl`), "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line).text);
  const bytes = texts.reduce((sum, t) => sum + Buffer.byteLength(t, "utf8"), 0);
  for (const t of texts) tokenizer.encode(t);  // warm the caches, as the C++ side does
  const rounds = 5;
  const start = process.hrtime.bigint();
  for (let r = 0; r < rounds; r++) for (const t of texts) tokenizer.encode(t);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  results[name] = (bytes * rounds) / seconds / 1e6;
  console.log(`${name}: ${results[name].toFixed(2)} MB/s`);
}
fs.writeFileSync(path.join(out, "bench-js.json"), JSON.stringify(results));
