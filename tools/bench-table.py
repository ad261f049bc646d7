#!/usr/bin/env python3
"""bench-table.py — the allreduce table of docs/benchmarks.md from one or more `nebula-bench comm --out` files.

    tools/bench-table.py build/bench/comm-np4-run*.json > table.md

Each run's time is already the median of its rounds; with several runs this takes the
median across runs per (size, algorithm), and reports auto's choice as the most common
one. The last column is auto's time over OpenMPI's MPI_Allreduce time (below 1 = faster).
"""
import collections
import json
import statistics
import sys


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return str(n)


def main(paths):
    if not paths:
        sys.exit("usage: bench-table.py RUN.json [RUN.json ...]")
    times = collections.defaultdict(list)
    picks = collections.defaultdict(collections.Counter)
    wrong = 0
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for row in doc["rows"]:
            times[(row["bytes"], row["algo"])].append(row["time_us"])
            wrong += row["wrong"]
            if row["algo"] == "auto":
                picks[row["bytes"]][row["picked"]] += 1
    algos = ["ompi", "mpi", "flat", "hier", "auto"]
    sizes = sorted({b for b, _ in times})
    print(f"Median of {len(paths)} run(s); times in µs (each run: median of its rounds, slowest rank).")
    print()
    print("| size | " + " | ".join("MPI_Allreduce (ompi)" if a == "ompi" else a for a in algos)
          + " | auto picked | auto / ompi |")
    print("|" + "---:|" * (len(algos) + 1) + ":---|---:|")
    worst = 0.0
    for b in sizes:
        med = {a: statistics.median(times[(b, a)]) for a in algos if times.get((b, a))}
        ratio = med["auto"] / med["ompi"] if "auto" in med and "ompi" in med else float("nan")
        worst = max(worst, ratio)
        pick = picks[b].most_common(1)[0][0] if picks[b] else "-"
        cells = " | ".join(f"{med[a]:.1f}" if a in med else "-" for a in algos)
        print(f"| {human(b)} | {cells} | {pick} | {ratio:.2f} |")
    print()
    print(f"Worst auto / ompi ratio: {worst:.2f}; wrong elements in all runs: {wrong}.")


if __name__ == "__main__":
    main(sys.argv[1:])
