#!/usr/bin/env python3
"""Lists the SIMD kernel loops in which one memory operand feeds several
FMA / dot instructions of the same iteration: a value the compiler re-reads
as each instruction's memory operand instead of loading it once into a
register. GCC 12 does this when a register tile is near the register count
(the avx2 attention's Dots<4, 2> re-read its four q rows for each key: 10
loads per 8 FMAs where 6 suffice; docs/kernels.md). A listed loop is a
lead to measure, not a defect by itself (an embedded broadcast {1toN} is
not counted).

  python3 tools/asm/reread_operands.py [BINARY] [--match REGEX] [--expect-none]

BINARY (an executable, object or static library) defaults to
build/release/src/cli/kvfork; --match filters function names (default: the
avx2 and avx512 kernels); --expect-none exits 1 if any loop is listed (the
kernels test runs it on the avx2 attention's register tiles).
"""

import argparse
import collections
import re
import subprocess
import sys

FUNC = re.compile(r"^([0-9a-f]+) <(.*)>:$")
INSN = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
MULADD = re.compile(r"^v(fn?madd|fn?msub|dpbf16|dpbusd|pmaddwd|pdpwssd)")
MEM = re.compile(r"(-?0x[0-9a-f]+)?\([^)]*\)")
MAX_LOOP = 120  # instructions: longer backward jumps are outer loops


def functions(binary):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                         capture_output=True, text=True, check=True).stdout
    name, body = None, []
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(2), []
            continue
        m = INSN.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if name:
        yield name, body


def loops(body):
    """Innermost-ish loops: a conditional jump back to an earlier address."""
    index = {addr: i for i, (addr, _, _) in enumerate(body)}
    for i, (addr, op, args) in enumerate(body):
        if not op.startswith("j") or op == "jmp":
            continue
        m = re.match(r"([0-9a-f]+)", args)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < addr and target in index and i - index[target] < MAX_LOOP:
            yield body[index[target]:i + 1]


GPR = re.compile(r"%(r[a-z0-9]+|e[a-z]{2}|[a-z]{2})\b")


def base_name(reg):
    """%eax, %ax -> rax; %r8d -> r8: the 64-bit register an address uses."""
    if re.fullmatch(r"r\d+[dwb]?", reg):
        return re.match(r"r\d+", reg).group(0)
    if reg.startswith("e") and len(reg) == 3:
        return "r" + reg[1:]
    if reg.startswith("r") and len(reg) == 3:
        return reg
    return "r" + reg if len(reg) == 2 else reg


def rereads(loop):
    """Memory operands read again by a multiply-add while the registers of
    their address are unchanged since the last read."""
    seen = collections.Counter()
    extra = 0
    for _, op, args in loop:
        operands = args.split(",")
        mem = MEM.search(args)
        # Constants (%rip-relative; all 0x0(%rip) in an unlinked object) and
        # embedded broadcasts are left out.
        if MULADD.match(op) and mem and "{1to" not in args and "%rip" not in mem.group(0):
            key = mem.group(0)
            extra += seen[key] > 0
            seen[key] += 1
        # A write to a general register (the last AT&T operand, not memory)
        # changes every address that uses it.
        dest = operands[-1].strip() if operands else ""
        m = GPR.fullmatch(dest) if dest.startswith("%") else None
        if m:
            reg = base_name(m.group(1))
            for key in [k for k in seen if any(base_name(r) == reg for r in GPR.findall(k))]:
                del seen[key]
    return extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default="build/release/src/cli/kvfork")
    ap.add_argument("--match", default=r"kvfork::(avx2|avx512)::")
    ap.add_argument("--expect-none", action="store_true")
    a = ap.parse_args()
    want = re.compile(a.match)
    found = 0
    for name, body in functions(a.binary):
        if not want.search(name):
            continue
        for loop in loops(body):
            ops = [op for _, op, _ in loop if MULADD.match(op)]
            extra = rereads(loop)
            if extra:
                found += 1
                print(f"{extra:3d} re-reads in a loop of {len(ops):2d} FMAs at "
                      f"{loop[0][0]:x}: {name[:140]}")
    print(f"{found} loop(s)")
    if a.expect_none and found:
        sys.exit(1)


if __name__ == "__main__":
    main()
