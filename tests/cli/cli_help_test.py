"""The CLI explains itself (issue 29, section 3), on the real binary:

- `kvfork <command> --help`, `-h` and `kvfork help <command>` print the same
  list for every command and benchmark (taken from `kvfork --help` and
  `kvfork bench --help`, so a new one is checked too), exit 0, and every
  flag line has a one-line description;
- `kvfork serve` without --model, a misspelled flag and a bad number print
  the error and then the command's usage on stderr, exit non-zero;
- progress: make-model, a model load (generate), export-gguf and quantize
  report on a terminal (a pseudo-terminal as stderr), with sizes, and end
  with a newline; with stderr a pipe they print no progress at all.
"""

import json
import os
import pty
import re
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(SRC, ".cache"))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
TOKENIZER = os.path.join(CACHE, "npm/tokenizer-qwen3/package/models")

# "  --name PLACEHOLDER   description (default x)": a head, two or more
# spaces, then text.
FLAG_LINE = re.compile(r"^  (--[a-z0-9-]+)( [A-Z.]+)?\s{2,}(\S.*)$")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def run(args, timeout=120):
    return subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)


def listed(text, header):
    """Names in the two-column list after `header` ("commands:")."""
    names, inside = [], False
    for line in text.splitlines():
        if line.strip() == header:
            inside = True
        elif inside and line.startswith("  "):
            names.append(line.split()[0])
        elif inside and names:
            break
    return names


def check_usage(name, text):
    """Every line of the flags section names a flag and describes it."""
    if not text.startswith("usage: kvfork " + name):
        fail(f"{name} --help does not start with its usage line:\n{text[:300]}")
        return []
    lines = text.split("\nflags:\n", 1)
    if len(lines) != 2:
        fail(f"{name} --help has no flags section:\n{text}")
        return []
    flags = []
    for line in lines[1].splitlines():
        m = FLAG_LINE.match(line)
        if not m:
            fail(f"{name} --help: a flag line without a description: {line!r}")
            continue
        flags.append(m.group(1))
        desc = m.group(3)
        # A value flag shows its default, or says it is required, or (empty
        # default) what giving none means: "(none...".
        if m.group(2) and not re.search(r"\((default |required\)|none)", desc):
            fail(f"{name} --help: {m.group(1)} takes a value but shows no default: {line!r}")
    if "--help" not in flags:
        fail(f"{name} --help does not list --help")
    return flags


def check_help_everywhere():
    top = run(["--help"])
    if top.returncode != 0:
        fail(f"kvfork --help exited {top.returncode}")
    if run(["help"]).stdout != top.stdout or run(["-h"]).stdout != top.stdout:
        fail("`kvfork help` / `kvfork -h` differ from `kvfork --help`")
    bare = run([])
    if bare.returncode == 0 or "commands:" not in bare.stderr:
        fail(f"`kvfork` alone: exit {bare.returncode}, stderr {bare.stderr[:200]!r}")
    commands = listed(top.stdout, "commands:")
    for want in ["serve", "generate", "bench", "make-model", "export-gguf", "quantize",
                 "perplexity", "tokenize"]:
        if want not in commands:
            fail(f"kvfork --help does not list {want}: {commands}")
    bench = run(["bench", "--help"])
    benchmarks = listed(bench.stdout, "benchmarks:")
    if bench.returncode != 0 or len(benchmarks) < 5:
        fail(f"kvfork bench --help: exit {bench.returncode}, benchmarks {benchmarks}")
    if run(["help", "bench"]).stdout != bench.stdout:
        fail("`kvfork help bench` differs from `kvfork bench --help`")
    for wrong in (["bench"], ["bench", "nosuch"]):
        r = run(wrong)
        if r.returncode == 0 or "benchmarks:" not in r.stderr:
            fail(f"kvfork {' '.join(wrong)}: exit {r.returncode}, stderr {r.stderr[:200]!r}")
    unknown = run(["frobnicate"])
    if unknown.returncode == 0 or "unknown command 'frobnicate'" not in unknown.stderr:
        fail(f"an unknown command: exit {unknown.returncode}, {unknown.stderr[:200]!r}")

    targets = [[c] for c in commands if c != "bench"] + [["bench", b] for b in benchmarks]
    for target in targets:
        name = " ".join(target)
        outs = {}
        for form in (target + ["--help"], target + ["-h"], ["help"] + target):
            r = run(form)
            if r.returncode != 0:
                fail(f"kvfork {' '.join(form)} exited {r.returncode}: {r.stderr[-500:]}")
            outs[" ".join(form)] = r.stdout
        if len(set(outs.values())) != 1:
            fail(f"the help forms of {name} differ")
        text = next(iter(outs.values()))
        if target == ["bench", "serve"]:
            # The serving benchmark is a Python driver: argparse's help.
            if "--threads" not in text or "--servers" not in text:
                fail(f"kvfork bench serve --help lists no flags:\n{text[:500]}")
            continue
        flags = check_usage(name, text)
        print(f"{name}: {len(flags)} flags, each described")
    serve = run(["serve", "--help"]).stdout
    for want in ["--model VALUE", "(required)", "--port N", "(default 8080)", "--no-prefix-cache",
                 "--special-tokens-in-content VALUE", "(default text)"]:
        if want not in serve:
            fail(f"serve --help lacks {want!r}")


def check_errors():
    r = run(["serve"])
    if r.returncode == 0:
        fail("kvfork serve without --model exited 0")
    first = r.stderr.splitlines()[0] if r.stderr else ""
    if "missing required flag --model" not in first or "usage: kvfork serve" not in r.stderr \
            or "--port N" not in r.stderr:
        fail(f"kvfork serve without --model: the error, then the usage, expected:\n{r.stderr[:800]}")
    if r.stdout:
        fail(f"kvfork serve without --model wrote to stdout: {r.stdout[:200]!r}")

    r = run(["generate", "--model", "/nonexistent", "--prompt", "hi", "--max-tokns", "3"])
    if r.returncode == 0 or "unknown flag --max-tokns (did you mean --max-tokens?)" not in r.stderr \
            or "usage: kvfork generate" not in r.stderr:
        fail(f"a misspelled flag: exit {r.returncode}, stderr:\n{r.stderr[:800]}")
    # The flags are checked before anything is loaded: the model path is not the error.
    if "/nonexistent" in r.stderr:
        fail("a misspelled flag: the model was opened before the flags were checked")

    for args, error in [
            (["perplexity", "--model", "m", "--file", "f", "--ctx", "big"],
             "flag --ctx: 'big' is not an integer"),
            (["make-model", "--out", "/tmp/x", "--seed"], "flag --seed needs a value"),
            (["bench", "kernels", "--quikc"], "unknown flag --quikc (did you mean --quick?)"),
            (["quantize", "--model", "m", "--out", "o"], "missing required flag --type"),
            (["tokenize"], "missing required flag --model")]:
        r = run(args)
        usage = "usage: kvfork " + (" ".join(args[:2]) if args[0] == "bench" else args[0])
        if r.returncode == 0 or error not in r.stderr or usage not in r.stderr:
            fail(f"kvfork {' '.join(args)}: exit {r.returncode}, want {error!r} then {usage!r}:\n"
                 f"{r.stderr[:600]}")


def run_on_pty(args, timeout=300):
    """Runs with stderr on a pseudo-terminal; returns (exit code, stderr bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([KVFORK] + args, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=timeout), out.decode("utf-8", "replace")


def check_progress(tmp):
    model = os.path.join(tmp, "tiny")
    make = ["make-model", "--arch", "qwen3", "--shape", "tiny", "--seed", "1", "--out", model]
    if os.path.isdir(TOKENIZER):
        make += ["--tokenizer", TOKENIZER]
    else:
        make += ["--vocab-size", "512"]
    gguf = os.path.join(tmp, "tiny.gguf")
    q8 = os.path.join(tmp, "tiny-q8.gguf")
    steps = [
        ("make-model", make, "writing " + model),
        ("export-gguf", ["export-gguf", "--model", model, "--out", gguf], "writing " + gguf),
        ("quantize", ["quantize", "--model", model, "--type", "q8_0", "--out", q8],
         "quantizing to " + q8),
    ]
    if os.path.isdir(TOKENIZER):
        steps.append(("model load", ["generate", "--model", model, "--prompt-ids", "1,2,3",
                                     "--max-tokens", "2", "--threads", "1"], "loading " + model))
    for name, args, label in steps:
        # On a pipe first (make-model must run before the others use its output).
        r = run(args, timeout=300)
        if r.returncode != 0:
            fail(f"{name} exited {r.returncode}: {r.stderr[-800:]}")
            return
        if "\r" in r.stderr or label in r.stderr:
            fail(f"{name} printed progress to a pipe: {r.stderr[:300]!r}")
        code, tty = run_on_pty(args)
        if code != 0:
            fail(f"{name} on a terminal exited {code}: {tty[-800:]}")
            continue
        # The terminal turns "\n" into "\r\n"; the report rewrites with "\r".
        lines = [l for l in tty.replace("\r\n", "\n").split("\n") if label in l]
        if not lines:
            fail(f"{name}: no progress on a terminal:\n{tty[:500]!r}")
            continue
        final = lines[-1].split("\r")[-1]
        if not re.search(r"\d+(\.\d+)? (B|KiB|MiB|GiB) / \d+(\.\d+)? (B|KiB|MiB|GiB)\s+100%", final):
            fail(f"{name}: the last report is not a complete size: {final!r}")
        print(f"{name} on a terminal: {final.strip()!r}")


def check_batch_fields(tmp):
    """A --batch line with a field generate does not read (logprobs, say) is
    an error naming it, as is one with both prompt and prompt_ids; the same
    line without it runs."""
    model = os.path.join(tmp, "tiny")
    if not os.path.isdir(model):
        return
    good = {"id": "a", "prompt_ids": [1, 2, 3], "max_tokens": 2}
    cases = [(dict(good, logprobs=5), 'unknown field "logprobs"'),
             (dict(good, prompt="hi"), 'both "prompt" and "prompt_ids"'),
             (good, None)]
    for line, want in cases:
        batch = os.path.join(tmp, "batch.jsonl")
        with open(batch, "w", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        r = run(["generate", "--model", model, "--batch", batch, "--output",
                 os.path.join(tmp, "out.jsonl"), "--threads", "1"], timeout=300)
        if want is None:
            if r.returncode != 0:
                fail(f"generate --batch {line} exited {r.returncode}: {r.stderr[-400:]}")
        elif r.returncode == 0 or want not in r.stderr:
            fail(f"generate --batch {line}: want a failure naming {want!r}, got "
                 f"{r.returncode}: {r.stderr[-400:]}")
    print("generate --batch: unknown and conflicting fields refused")


def main():
    check_help_everywhere()
    check_errors()
    with tempfile.TemporaryDirectory() as tmp:
        check_progress(tmp)
        check_batch_fields(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
