// The references `kvfork bench tokenizer` measures side by side with ours:
// @lenml/tokenizers (HF tokenizers' algorithm in JS) and llama.cpp's tokenizer
// through node-llama-cpp (a vocab-only GGUF). For each, times the load, then
// encodes every document of the corpus file (documents separated by \x1e) on
// one thread: one warm-up pass over the first ~1 MB (enough for V8's JIT and
// llama.cpp's caches), then whole timed passes, `reps` of them, but no new
// pass once `budget` seconds of timed passes are spent (at least one pass
// always runs), so a slow reference on a loaded machine still finishes.
// Prints one JSON line:
//   {"lenml": {"load_seconds": L, "seconds": [...], "cpu_seconds": [...],
//              "tokens": N}, "llama_cpp": {...}}
//
//   node tools/tokenizer/bench.mjs CORPUS MODEL_DIR|- GGUF REPS BUDGET_SECONDS
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(path.join(root, "tools/node/package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const [corpusPath, modelDir, ggufPath, repsArg, budgetArg] = process.argv.slice(2);
const reps = Number(repsArg ?? 3);
const budget = Number(budgetArg ?? 60);
const docs = readFileSync(corpusPath, "utf8").split("\x1e");

const now = () => Number(process.hrtime.bigint()) / 1e9;
// CPU seconds of this process (user + system): on a loaded machine it shows
// the cost apart from the time spent waiting for a core.
const cpuNow = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

function time(encode) {
  let warm = 0;
  for (const d of docs) {
    if (warm > 1 << 20) break;
    encode(d);
    warm += d.length;
  }
  const seconds = [];
  const cpu_seconds = [];
  let tokens = 0;
  let spent = 0;
  for (let r = 0; r < reps && (r === 0 || spent < budget); ++r) {
    let n = 0;
    const t0 = now();
    const c0 = cpuNow();
    for (const d of docs) n += encode(d);
    const s = now() - t0;
    cpu_seconds.push(cpuNow() - c0);
    seconds.push(s);
    spent += s;
    tokens = n;
  }
  return { seconds, cpu_seconds, tokens };
}

const result = {};
let t0;
// MODEL_DIR "-": a GGUF-only tokenizer (SentencePiece), llama.cpp alone.
if (modelDir !== "-") {
  t0 = now();
  const lenml = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
  });
  const lenmlLoad = now() - t0;
  result.lenml = {
    load_seconds: lenmlLoad,
    ...time((d) => lenml.encode(d, { add_special_tokens: false }).length),
  };
}

const { getLlama } = await import(
  path.join(root, "tools/node/node_modules/node-llama-cpp/dist/index.js"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
t0 = now();
const model = await llama.loadModel({ modelPath: ggufPath, vocabOnly: true });
const llamaLoad = now() - t0;
result.llama_cpp = {
  load_seconds: llamaLoad,
  ...time((d) => model.tokenize(d, true).length),
};
await model.dispose();
console.log(JSON.stringify(result));
