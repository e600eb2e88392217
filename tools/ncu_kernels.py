#!/usr/bin/env python3
"""Kernel time of two profiled runs side by side, per kernel and grid, largest difference first.

Usage: python3 tools/ncu_kernels.py A.csv B.csv [ROWS]
Each CSV is what `ncu --csv --page raw --print-units base --metrics gpu__time_duration.sum ...`
prints (kernels in CUDA graphs are profiled one by one). Prints a markdown table: kernel (its name
cut to 80 characters, and its grid), launches and milliseconds in A and in B, and B - A.
"""
import collections
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path, newline="")))
    start = next(i for i, row in enumerate(rows) if "Kernel Name" in row)
    header = rows[start]
    name = header.index("Kernel Name")
    grid = header.index("Grid Size") if "Grid Size" in header else None
    duration = next(i for i, h in enumerate(header) if h.startswith("gpu__time_duration"))
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for row in rows[start + 1:]:
        try:
            ns = float(row[duration].replace(",", ""))
        except (IndexError, ValueError):
            continue  # a units row or a truncated line
        key = row[name][:80] + ("" if grid is None else f" {row[grid]}")
        kernels[key][0] += 1
        kernels[key][1] += ns / 1e6
    return kernels


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    shown = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    total = lambda k: (sum(v[0] for v in k.values()), sum(v[1] for v in k.values()))
    (count_a, ms_a), (count_b, ms_b) = total(a), total(b)
    print(f"A: {count_a} launches, {ms_a:.3f} ms; B: {count_b} launches, {ms_b:.3f} ms; "
          f"B - A: {ms_b - ms_a:+.3f} ms\n")
    print("| kernel (grid) | A launches | A ms | B launches | B ms | B - A ms |")
    print("|---|---:|---:|---:|---:|---:|")
    none = [0, 0.0]
    keys = sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, none)[1] - a.get(k, none)[1]))
    for key in keys[:shown]:
        (na, ta), (nb, tb) = a.get(key, none), b.get(key, none)
        print(f"| {key} | {na} | {ta:.3f} | {nb} | {tb:.3f} | {tb - ta:+.3f} |")


if __name__ == "__main__":
    main()
