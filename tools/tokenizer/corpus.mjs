// The tokenizer test corpus, shared by make_goldens.mjs and bench.mjs.
// Deterministic: the random text comes from mulberry32, which
// tests/tokenizer/corpus_rng.h reimplements so the C++ test rebuilds the
// same text from the seed checked in with the goldens.

export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

// Code point ranges random text draws from, with weights (out of their sum).
// Kept in sync with kRandomRanges in tests/tokenizer/corpus_rng.h.
export const RANDOM_RANGES = [
  [0x20, 0x7e, 60],   // printable ASCII
  [0x0a, 0x0a, 4],    // newline
  [0x09, 0x09, 2],    // tab
  [0x20, 0x20, 14],   // extra spaces: runs of whitespace
  [0xa1, 0xff, 4],    // Latin-1
  [0x400, 0x44f, 4],  // Cyrillic
  [0x4e00, 0x4fff, 6],// CJK
  [0x600, 0x64a, 2],  // Arabic
  [0x1f600, 0x1f64f, 2], // emoji
  [0x30, 0x39, 2],    // digits
];

// Text of about `bytes` UTF-8 bytes from seed.
export function randomText(seed, bytes) {
  const next = mulberry32(seed);
  const total = RANDOM_RANGES.reduce((s, r) => s + r[2], 0);
  let out = [];
  let n = 0;
  while (n < bytes) {
    let pick = next() % total;
    let r = 0;
    while (pick >= RANDOM_RANGES[r][2]) pick -= RANDOM_RANGES[r++][2];
    const [lo, hi] = RANDOM_RANGES[r];
    const cp = lo + (next() % (hi - lo + 1));
    const ch = String.fromCodePoint(cp);
    out.push(ch);
    n += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return out.join("");
}

const PROSE = `It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. The quick brown fox jumps over the lazy dog! "Quoted," she said -- and then: (parenthesised) [bracketed] {braced}... Mr. O'Neil's dog isn't here; they'd've gone.`;
const CODE = `#include <stdio.h>\n\nint main(int argc, char** argv) {\n\tfor (int i = 0; i < argc; ++i) {\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\t}\n        return 0;   // trailing\n}\n\n\n\ndef f(x):\n    return x ** 2  \n\t\t\n`;

export function fixedCases(specialTokens) {
  const cases = [
    "", " ", "  ", "\n", "\n\n", "\t", " \t \n ", "a", "A", "Hello", " Hello", "Hello world",
    PROSE, CODE,
    "                                                                x",
    "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "line one\r\nline two\r\n\r\n   indented\n\t\ttabbed   \n",
    "多くの人にとって、東京は日本の首都です。我爱北京天安门。",
    "中文混合English文本，标点！？",
    "한국어 텍스트입니다.",
    "مرحبا بالعالم، هذا نص عربي.",
    "Привет, мир! Ёжик в тумане.",
    "Ünïcödé naïve café résumé Å Ω ß ﬁ",
    "e\u0301 composed? \u00e9 vs e\u0301, A\u030a vs \u00c5, \u1e9b\u0323",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇯🇵🇺🇸",
    "👩🏻‍💻👨🏿‍🚀",
    "math ∑∫√∞ ≤≥ ≠ → ⇒ 𝔸𝕏",
    "zero\u200bwidth\u200cjoin\u200dnbsp\u00a0end\u3000ideo",
    "nel\u0085sep\u2028para\u2029",
    "The year 2024 had 366 days; π≈3.14159265358979; 1,000,000.00 $5 -42 +7 1e10 0x1F",
    "a1b22c333d4444",
  ];
  let digits = "";
  for (let i = 1; i <= 20; ++i) {
    digits += String((i % 10));
    cases.push(digits);
    cases.push(`n=${digits}.`);
    cases.push(` ${digits} `);
  }
  for (const c of ["s", "t", "re", "ve", "m", "ll", "d"]) {
    const variants = new Set();
    for (let mask = 0; mask < 1 << c.length; ++mask) {
      let v = "";
      for (let i = 0; i < c.length; ++i) v += mask & (1 << i) ? c[i].toUpperCase() : c[i];
      variants.add(v);
    }
    for (const v of variants) {
      cases.push(`he'${v} go`);
      cases.push(`HE'${v}`);
      cases.push(`'${v}`);
      cases.push(`x ’${v} y`);
    }
  }
  for (const tok of specialTokens) {
    cases.push(tok);
    cases.push(`text${tok}text`);
    cases.push(`a ${tok} b\n${tok}${tok}\n`);
  }
  cases.push(specialTokens.join(" "));
  cases.push(`<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>`);
  cases.push(`<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>`);
  cases.push("<|im_start <|im_end| <| |> < |im_start|> <|begin_of_text");
  return cases;
}
