"""The committed trained model (models/trained/bible-fortune-4m) still loads, and its greedy
continuations of fixed prompts (plain text and a ChatML turn, run together in one batch)
are byte-identical to the stored goldens, on every ISA level this CPU runs
(KVFORK_CPU_ISA=scalar|avx2|avx512|amx). Any change that moves a logit enough to flip one
greedy token fails here.

tests/data/trained_model/golden.jsonl holds the reference; an ISA whose bits legitimately
differ (its kernels reduce in another order) has its own golden.<isa>.jsonl, used instead.
  trained_model_golden_test.py --update   rewrites them from this machine (every ISA it has)
"""

import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
MODEL = os.path.join(SRC, "models/trained/bible-fortune-4m")
DATA = os.path.join(SRC, "tests/data/trained_model")
ISAS = ["scalar", "avx2", "avx512", "amx"]
MAX_TOKENS = 48
PROMPTS = [
    {"id": "genesis", "prompt": "In the beginning God"},
    {"id": "psalm", "prompt": "Psalms 23\n\n1 The LORD is my shepherd;"},
    {"id": "fortune", "prompt": "The best thing about"},
    {"id": "chat-verse", "prompt": "<|im_start|>user\nWhat does John 3:16 say?<|im_end|>\n"
                                   "<|im_start|>assistant\n"},
    {"id": "chat-fortune", "prompt": "<|im_start|>user\nTell me a fortune.<|im_end|>\n"
                                     "<|im_start|>assistant\n"},
]


def generate(isa, workdir):
    """Returns the output lines for one ISA, or None when the CPU lacks it."""
    batch = os.path.join(workdir, "prompts.jsonl")
    out = os.path.join(workdir, f"out.{isa}.jsonl")
    with open(batch, "w", encoding="utf-8") as f:
        for p in PROMPTS:
            f.write(json.dumps(dict(p, max_tokens=MAX_TOKENS, temperature=0)) + "\n")
    env = dict(os.environ, KVFORK_CPU_ISA=isa)
    r = subprocess.run([KVFORK, "generate", "--model", MODEL, "--batch", batch, "--output", out,
                        "--threads", "2"], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode == 2 and "does not support" in r.stderr:
        return None
    if r.returncode != 0:
        print(f"FAIL: kvfork generate (KVFORK_CPU_ISA={isa}) exited {r.returncode}:\n{r.stderr}")
        sys.exit(1)
    with open(out, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return [{k: o[k] for k in ("id", "text", "token_ids", "finish_reason")} for o in lines]


def golden_path(isa):
    own = os.path.join(DATA, f"golden.{isa}.jsonl")
    return own if os.path.exists(own) else os.path.join(DATA, "golden.jsonl")


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    update = "--update" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as work:
        results = {isa: generate(isa, work) for isa in ISAS}
    ran = [isa for isa in ISAS if results[isa] is not None]
    if update:
        best = results[ran[-1]]
        write(os.path.join(DATA, "golden.jsonl"), best)
        for isa in ran:
            own = os.path.join(DATA, f"golden.{isa}.jsonl")
            if results[isa] != best:
                write(own, results[isa])
            elif os.path.exists(own):
                os.remove(own)
        print("updated goldens for " + ", ".join(ran))
        return
    failures = 0
    for isa in ran:
        want = read(golden_path(isa))
        got = results[isa]
        for w, g in zip(want, got):
            if w != g:
                print(f"FAIL {isa} {w['id']}:\n  golden {json.dumps(w['text'])}\n"
                      f"  got    {json.dumps(g['text'])}")
                failures += 1
        if len(want) != len(got):
            print(f"FAIL {isa}: {len(got)} outputs, golden has {len(want)}")
            failures += 1
    skipped = [isa for isa in ISAS if results[isa] is None]
    if failures:
        sys.exit(1)
    print(f"OK: {len(PROMPTS)} greedy continuations identical to the goldens on "
          + ", ".join(ran) + (f" (CPU lacks {', '.join(skipped)})" if skipped else ""))


if __name__ == "__main__":
    main()
