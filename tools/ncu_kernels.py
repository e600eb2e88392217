#!/usr/bin/env python3
"""Kernel time of two profiled runs side by side, per kernel and grid, largest difference first.

Usage: python3 tools/ncu_kernels.py A.csv B.csv [ROWS]
Each CSV is what `ncu --csv --page raw --print-units base --metrics gpu__time_duration.sum ...`
prints (kernels in CUDA graphs are profiled one by one). Prints a markdown table: kernel (its name
cut to 80 characters, and its grid), launches and milliseconds in A and in B, and B - A. Then, for
each run, its forwards (a forward starts at an embedding kernel): grouped by the embedding's grid
(its rows) and kernel count, how many and the median of their kernels' summed time.
"""
import collections
import csv
import statistics
import sys


def launches(path):
    """(kernel name, grid, ms) of each profiled launch, in order."""
    rows = list(csv.reader(open(path, newline="")))
    start = next(i for i, row in enumerate(rows) if "Kernel Name" in row)
    header = rows[start]
    name = header.index("Kernel Name")
    grid = header.index("Grid Size") if "Grid Size" in header else None
    duration = next(i for i, h in enumerate(header) if h.startswith("gpu__time_duration"))
    out = []
    for row in rows[start + 1:]:
        try:
            ns = float(row[duration].replace(",", ""))
        except (IndexError, ValueError):
            continue  # a units row or a truncated line
        out.append((row[name], "" if grid is None else row[grid], ns / 1e6))
    return out


def load(path):
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, ms in launches(path):
        key = name[:80] + (f" {grid}" if grid else "")
        kernels[key][0] += 1
        kernels[key][1] += ms
    return kernels


def forwards(path):
    found = []  # [grid of its embedding, kernels, ms] of each forward
    for name, grid, ms in launches(path):
        if "embedding_kernel" in name:
            found.append([grid, 0, 0.0])
        if found:
            found[-1][1] += 1
            found[-1][2] += ms
    groups = collections.defaultdict(list)
    for grid, count, ms in found:
        groups[(grid, count)].append(ms)
    print(f"\n{path}: forwards\n")
    print("| embedding grid (rows) | kernels | forwards | median ms |")
    print("|---|---:|---:|---:|")
    for (grid, count), times in sorted(groups.items()):
        print(f"| {grid} | {count} | {len(times)} | {statistics.median(times):.3f} |")


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
    for path in sys.argv[1:3]:
        forwards(path)


if __name__ == "__main__":
    main()
