// The references `kvfork bench tokenizer` measures side by side with ours:
// @lenml/tokenizers (HF tokenizers' algorithm in JS) and llama.cpp's tokenizer
// through node-llama-cpp (a vocab-only GGUF). Encodes each document of the
// corpus file (documents separated by \x1e) on one thread, `reps` times after
// one warm-up pass, and prints one JSON line:
//   {"lenml": {"seconds": [...], "tokens": N}, "llama_cpp": {...}}
//
//   node tools/tokenizer/bench.mjs CORPUS MODEL_DIR GGUF REPS
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(path.join(root, "tools/node/package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const [corpusPath, modelDir, ggufPath, repsArg] = process.argv.slice(2);
const reps = Number(repsArg ?? 3);
const docs = readFileSync(corpusPath, "utf8").split("\x1e");

function time(encode) {
  let tokens = 0;
  for (const d of docs) tokens += encode(d);  // warm-up
  const seconds = [];
  for (let r = 0; r < reps; ++r) {
    const t0 = process.hrtime.bigint();
    for (const d of docs) encode(d);
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return { seconds, tokens };
}

const result = {};
const lenml = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
});
result.lenml = time((d) => lenml.encode(d, { add_special_tokens: false }).length);

const { getLlama } = await import(
  path.join(root, "tools/node/node_modules/node-llama-cpp/dist/index.js"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: ggufPath, vocabOnly: true });
result.llama_cpp = time((d) => model.tokenize(d, true).length);
await model.dispose();
console.log(JSON.stringify(result));
