#!/usr/bin/env python3
"""Summarizes a log of `kvfork bench kernels` runs alternated round by round
(alternate_rounds.sh): for each row, every binary's times in round order, its
minimum with that round's share of the limit, and its median.

  python3 bench/kernels/summarize_rounds.py LOG
"""
import collections
import re
import sys

rows = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
current = None
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"== round (\d+) (\w+)", line)
    if m:
        current = m.group(2)
        if current not in order:
            order.append(current)
        continue
    parts = re.split(r"\s{2,}", line.strip())
    if len(parts) < 3:
        continue
    # name, layers, ms, ..., share of the limit last
    rows[parts[0]][current].append((float(parts[2]), parts[-1]))
for name, by_binary in rows.items():
    out = f"{name:18s}"
    for b in order:
        runs = by_binary[b]
        ranked = sorted(runs)
        out += (f" | {b}: {' '.join('%.2f' % ms for ms, _ in runs)}"
                f" (min {ranked[0][0]:.2f} {ranked[0][1]} med {ranked[len(ranked) // 2][0]:.2f})")
    print(out)
