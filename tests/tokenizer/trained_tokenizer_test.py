"""The trained model's tokenizer (tools/train/bpe.py wrote it) read by kvfork unchanged:
`kvfork tokenize` ids equal the trainer's own encoding (tools/train/bpe.py, an
independent implementation: Python's re with the Unicode classes spelled out, and the
plain lowest-rank-first merge loop) on the checked-in held-out sample and on texts that
reach the pre-tokenizer's corners. Decoding gives the text back."""

import os
import subprocess
import sys
import unicodedata

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
MODEL = os.path.join(SRC, "models/trained/bible-fortune-4m")
SAMPLE = os.path.join(SRC, "tests/data/trained_model/heldout_sample.txt")
sys.path.insert(0, os.path.join(SRC, "tools/train"))
import bpe  # noqa: E402

CORNERS = [
    "",
    "And God said, Let there be light: and there was light.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\r\nCRLF\r\n\r\n  \n\nblank lines\n",
    "numbers 1234567890 and 3:16, 1,000.50",
    "contractions: I'LL, we've, she'd, it's, THEY'RE, don't",
    "punctuation!!! ... --- (parens) [brackets] {braces} \"quotes\" 'single'",
    "Unicode: café, naïve, Zürich, Ελληνικά, русский, 日本語, 🙂 emoji",
    "decomposed e\u0301 and A\u030a (NFC composes them)",
    "<|im_start|>user\nWhat does John 3:16 say?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>glued<|im_end|>to specials",
    "\u00a0no-break\u2003em space\u3000ideographic",
]


def kvfork_ids(text):
    r = subprocess.run([KVFORK, "tokenize", "--model", MODEL, "--ids", "-"],
                       input=text.encode("utf-8"), capture_output=True, timeout=120)
    if r.returncode != 0:
        print("FAIL: kvfork tokenize: " + r.stderr.decode(errors="replace"))
        sys.exit(1)
    return [int(x) for x in r.stdout.split()]


def main():
    tok = bpe.Tokenizer.from_json(os.path.join(MODEL, "tokenizer.json"))
    with open(SAMPLE, encoding="utf-8") as f:
        sample = f.read()
    failures = 0
    for i, text in enumerate([sample] + CORNERS):
        ours, theirs = tok.encode(text), kvfork_ids(text)
        if ours != theirs:
            at = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                      min(len(ours), len(theirs)))
            print(f"FAIL text {i}: trainer {len(ours)} ids, kvfork {len(theirs)}; first "
                  f"difference at {at}: {ours[at:at + 5]} vs {theirs[at:at + 5]}")
            failures += 1
        if tok.decode(ours) != unicodedata.normalize("NFC", text):
            print(f"FAIL text {i}: decode does not give the (NFC) text back")
            failures += 1
    n = len(tok.encode(sample))
    if failures:
        sys.exit(1)
    print(f"OK: {len(CORNERS) + 1} texts, held-out sample {len(sample)} chars = {n} tokens, "
          "ids identical")


if __name__ == "__main__":
    main()
