// Regenerates tests/data/tokenizer/goldens_<model>.json: token ids of the
// corpus (corpus.mjs) as @lenml/tokenizers (Hugging Face tokenizers' algorithm
// in JS) produces them, with add_special_tokens false. The ~1 MB random text is
// checked in as its seed plus one FNV-1a hash of the ids per chunk.
//
//   node tools/tokenizer/make_goldens.mjs        (from the repo root, Node 20)
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fixedCases, randomText } from "./corpus.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(path.join(root, "tools/node/package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

export const RANDOM_SEED = 20240601;
export const RANDOM_CHUNKS = 64;
export const RANDOM_CHUNK_BYTES = 16384;

export function loadReference(dir) {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
}

// FNV-1a (32-bit) over the ids' little-endian bytes; tests/tokenizer repeats it.
export function hashIds(ids) {
  let h = 0x811c9dc5;
  for (const id of ids) {
    for (let k = 0; k < 4; ++k) {
      h ^= (id >>> (8 * k)) & 0xff;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h >>> 0;
}

function main() {
  const models = {
    qwen3: path.join(root, ".cache/npm/tokenizer-qwen3/package/models"),
    llama3: path.join(root, ".cache/npm/tokenizer-llama3/package/models"),
  };
  for (const [name, dir] of Object.entries(models)) {
    const tok = loadReference(dir);
    const tj = JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
    const specials = tj.added_tokens.map((t) => t.content);
    const cases = fixedCases(specials).map((text) => ({
      text,
      ids: Array.from(tok.encode(text, { add_special_tokens: false })),
    }));
    const chunks = [];
    for (let c = 0; c < RANDOM_CHUNKS; ++c) {
      const text = randomText(RANDOM_SEED + c, RANDOM_CHUNK_BYTES);
      const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
      chunks.push({ num_ids: ids.length, fnv1a: hashIds(ids) });
    }
    const out = {
      reference: "@lenml/tokenizers@3.7.2 under Node " + process.version,
      tokenizer: path.relative(root, dir),
      cases,
      random: { seed: RANDOM_SEED, chunk_bytes: RANDOM_CHUNK_BYTES, chunks },
    };
    const file = path.join(root, `tests/data/tokenizer/goldens_${name}.json`);
    writeFileSync(file, JSON.stringify(out) + "\n");
    console.log(`${file}: ${cases.length} cases, ${chunks.length} random chunks`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) main();
