"""`kvfork generate` and `kvfork bench model` open a .gguf model: a make-model
directory exported by `kvfork export-gguf` generates the same greedy ids from
the .gguf as from the directory (qwen3 and llama, f32 and bf16); the
tokenizer of a .gguf comes from --tokenizer or the HF directory beside it,
and without either the error says to pass --tokenizer (the GGUF tokenizer
is joined at cli/model_tokenizer.h)."""

import os
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(SRC, ".cache"))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
TOKENIZERS = {"qwen3": os.path.join(CACHE, "npm/tokenizer-qwen3/package/models"),
              "llama": os.path.join(CACHE, "npm/tokenizer-llama3/package/models")}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, ok=True, timeout=300):
    p = subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)
    if ok and p.returncode != 0:
        fail(f"{' '.join(args)} exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return p


def generate(model, extra=()):
    p = run(["generate", "--model", model, "--prompt", "The quick brown fox", "--max-tokens", "12",
             "--ignore-eos", "--threads", "2"] + list(extra))
    return p.stdout


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ["qwen3", "llama"]:
            for dtype in ["f32", "bf16"]:
                where = f"{arch} {dtype}"
                model = os.path.join(tmp, f"{arch}-{dtype}")
                run(["make-model", "--arch", arch, "--shape", "tiny", "--seed", "5", "--dtype",
                     dtype, "--tokenizer", TOKENIZERS[arch], "--out", model])
                gguf = os.path.join(model, "model.gguf")
                run(["export-gguf", "--model", model, "--out", gguf, "--dtype", dtype])
                want = generate(model)
                if not want.strip():
                    fail(f"{where}: the directory generated nothing")
                got = generate(gguf)
                if got != want:
                    fail(f"{where}: .gguf generated {got!r}, the directory {want!r}")
                print(f"{where}: same text from the directory and the .gguf: {want.strip()!r}")

        # A .gguf alone: --tokenizer names the tokenizer, else a clear error.
        alone = os.path.join(tmp, "alone")
        os.makedirs(alone)
        shutil.copy(os.path.join(tmp, "qwen3-bf16", "model.gguf"), alone)
        gguf = os.path.join(alone, "model.gguf")
        got = generate(gguf, ["--tokenizer", os.path.join(tmp, "qwen3-bf16")])
        if got != generate(os.path.join(tmp, "qwen3-bf16")):
            fail("--tokenizer with a lone .gguf changed the output")
        p = run(["generate", "--model", gguf, "--prompt", "hi"], ok=False)
        if p.returncode == 0 or "--tokenizer" not in p.stderr or "model.gguf" not in p.stderr:
            fail(f"a lone .gguf without --tokenizer: exit {p.returncode}, stderr {p.stderr[-500:]}")
        p = run(["generate", "--model", os.path.join(alone, "absent.gguf"), "--prompt", "hi"],
                ok=False)
        if p.returncode == 0 or "absent.gguf" not in p.stderr:
            fail(f"a missing .gguf: exit {p.returncode}, stderr {p.stderr[-500:]}")

        # bench model reads the .gguf's weights.
        out = os.path.join(tmp, "bench.json")
        p = run(["bench", "model", "--shape", "qwen3-0.6b", "--model", gguf, "--threads", "2",
                 "--prompt-tokens", "16", "--decode-tokens", "4", "--prefill-runs", "1", "--json",
                 out])
        if not any(line.startswith("decode") for line in p.stdout.splitlines()):
            fail(f"bench model on a .gguf printed no decode row: {p.stdout[-2000:]}")
    print("PASS")


if __name__ == "__main__":
    main()
