// llama.cpp reference for kvfork's parity test: loads a GGUF with
// node-llama-cpp (CPU, prebuilt binaries), evaluates a prompt of token ids,
// and prints JSON {vocab_size, prompt_logits: [[...]...], greedy: [ids],
// step_logits: [[...]...]}:
//   prompt_logits[i]  raw logits after prompt token i (every prompt position),
//   greedy            the next --steps tokens by argmax of the raw logits
//                     (computed here, so no sampler or stop logic intervenes),
//   step_logits[k]    the logits after feeding greedy[k] (steps - 1 rows),
//                     from which greedy[k + 1] was chosen.
// Usage: node logits.mjs --model FILE.gguf --tokens 1,2,3 [--steps 32]
//        [--threads 2] [--out FILE.json] [--logits-out FILE.f32]
// With --logits-out the logits go there instead, as raw little-endian f32
// rows [prompt positions + steps - 1, vocab_size] (prompt rows first), and the
// JSON holds only vocab_size, num_rows and greedy: a few hundred MB of JSON
// numbers for a 150k vocabulary is what this avoids.
// Run with cwd (or NODE_PATH) at tools/node so node_modules resolves.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

function parseArgs(argv) {
  const args = { steps: 32, threads: 2 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (i + 1 >= argv.length) throw new Error(`flag --${key} needs a value`);
    args[key] = argv[i + 1];
  }
  if (!args.model) throw new Error("--model FILE.gguf is required");
  if (!args.tokens) throw new Error("--tokens 1,2,3 is required");
  args.tokens = String(args.tokens).split(",").map((t) => {
    const n = Number(t);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--tokens: bad token id "${t}"`);
    return n;
  });
  args.steps = Number(args.steps);
  if (!Number.isInteger(args.steps) || args.steps < 1) throw new Error("--steps must be a whole number >= 1");
  args.threads = Number(args.threads);
  return args;
}

// node-llama-cpp resolves from tools/node/node_modules whatever the cwd.
async function loadNodeLlamaCpp() {
  const toolsDir = process.env.KVFORK_SOURCE_DIR
    ? path.join(process.env.KVFORK_SOURCE_DIR, "tools/node")
    : path.resolve(path.dirname(new URL(import.meta.url).pathname), "../../../tools/node");
  const require = createRequire(path.join(toolsDir, "package.json"));
  const entry = require.resolve("node-llama-cpp");
  return import(entry);
}

// node-llama-cpp hands each row over as a Map from token id to logit (it has
// no raw logits accessor). Copying it straight into a Float32Array row, with
// forEach (no [key, value] pair per entry) and a byte per token to prove every
// id came, keeps this side's cost small next to the Map node-llama-cpp builds.
function copyLogits(map, row, what) {
  const vocabSize = row.length;
  if (map.size !== vocabSize)
    throw new Error(`${what}: ${map.size} logits for a vocabulary of ${vocabSize}`);
  const seen = new Uint8Array(vocabSize);
  map.forEach((v, tok) => {
    if (!(tok >= 0 && tok < vocabSize)) throw new Error(`${what}: token id ${tok} out of range`);
    row[tok] = v;
    seen[tok] = 1;
  });
  const missing = seen.indexOf(0);
  if (missing !== -1) throw new Error(`${what}: no logit for token ${missing}`);
  return row;
}

function argmax(a) {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

async function main() {
  const args = parseArgs(process.argv);
  const { getLlama, LlamaLogLevel } = await loadNodeLlamaCpp();
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error,
                                 maxThreads: args.threads });
  const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
  const total = args.tokens.length + args.steps + 1;
  const context = await model.createContext({
    contextSize: Math.max(64, total),
    batchSize: Math.max(64, total),
    threads: { ideal: args.threads, min: args.threads },
    flashAttention: false,
    // f32 KV: llama.cpp's default f16 cache alone moves logits by ~1e-3
    // relative, which would hide real differences behind rounding.
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
    sequences: 1,
  });
  const seq = context.getSequence();
  const want = { generateNext: { logits: true } };
  const res = await seq.controlledEvaluate(args.tokens.map((t) => [t, want]));
  // logits: true returns every token's logit, so the map's size is the vocabulary.
  const vocabSize = res[0]?.next?.logits?.size;
  if (!vocabSize) throw new Error("llama.cpp returned no logits for the first prompt position");
  // Rows [prompt positions + steps - 1, vocab], prompt rows first, filled in
  // place: the file --logits-out writes, or the JSON's rows.
  const numRows = args.tokens.length + args.steps - 1;
  const all = new Float32Array(numRows * vocabSize);
  const rowAt = (i) => all.subarray(i * vocabSize, (i + 1) * vocabSize);
  res.forEach((r, i) => {
    if (!r?.next?.logits) throw new Error(`no logits for prompt position ${i}`);
    copyLogits(r.next.logits, rowAt(i), `prompt position ${i}`);
  });
  const greedy = [];
  let last = rowAt(args.tokens.length - 1);
  for (let k = 0; k < args.steps; k++) {
    const tok = argmax(last);
    greedy.push(tok);
    if (k + 1 === args.steps) break;
    const r = await seq.controlledEvaluate([[tok, want]]);
    if (!r[0]?.next?.logits) throw new Error(`no logits at greedy step ${k}`);
    last = copyLogits(r[0].next.logits, rowAt(args.tokens.length + k), `greedy step ${k}`);
  }
  let out;
  if (args["logits-out"]) {
    fs.writeFileSync(args["logits-out"], new Uint8Array(all.buffer));
    out = JSON.stringify({ vocab_size: vocabSize, num_rows: numRows,
                           num_prompt_rows: args.tokens.length, greedy });
  } else {
    const rows = (from, to) => Array.from({ length: to - from }, (_, i) => Array.from(rowAt(from + i)));
    out = JSON.stringify({ vocab_size: vocabSize,
                           prompt_logits: rows(0, args.tokens.length), greedy,
                           step_logits: rows(args.tokens.length, numRows) });
  }
  if (args.out) fs.writeFileSync(args.out, out);
  else process.stdout.write(out + "\n");
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`logits.mjs: ${e?.stack ?? e}\n`);
  process.exit(1);
});
