#!/usr/bin/env python3
"""bench-table.py — the allreduce table of docs/benchmarks.md from one or more `nebula-bench comm --out` files.

    tools/bench-table.py build/bench/comm-np4-run*.json > table.md

Each run's time is already the median of its rounds; with several runs this takes the
median across runs per (size, algorithm), and reports auto's choice as the most common
one. The last column is auto's time over OpenMPI's MPI_Allreduce time (below 1 = faster).

The first line is the table's provenance (docs/benchmarks.md#provenance) as a Markdown
comment, `<!-- provenance: {...} -->`: the runs' own (their "provenance" object: the
build, hosts, libraries and CPU they ran on; a warning names any field in which the runs
differ), with this table's date, command line and inputs ("config": {"inputs": ...},
"sources": each input's path, date and command).
"""
import collections
import datetime
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys

# the fields a run's provenance shares with the others when all ran on the same build and machines
SHARED = ("nebula_version", "git_revision", "hosts", "ranks", "mpi_library", "blas", "onednn", "cpu_model",
          "cpu_isa")


def local_provenance():
    """This machine's provenance from nebula-bench (inputs without one: older files)."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "nebula-bench")
    try:
        return json.loads(subprocess.run([exe, "provenance"], capture_output=True, text=True, check=True,
                                         timeout=120).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"bench-table.py: no provenance in the inputs and none from {exe} ({e}): fields unknown",
              file=sys.stderr)
        return {k: "unknown" for k in SHARED if k not in ("hosts", "ranks")} | {
            "hosts": [{"host": socket.gethostname() or "unknown", "ranks": 1}], "ranks": 1}


def table_provenance(paths, docs):
    """The runs' provenance with this table's date, command and inputs."""
    runs = [d["provenance"] for d in docs if isinstance(d.get("provenance"), dict)]
    for key in SHARED:
        seen = {json.dumps(r.get(key), sort_keys=True) for r in runs}
        if len(seen) > 1:
            print(f"bench-table.py: the runs differ in provenance.{key}; the table keeps the first run's",
                  file=sys.stderr)
    prov = dict(runs[0]) if runs else local_provenance()
    prov["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    prov["command"] = shlex.join(sys.argv)
    prov["config"] = {"inputs": " ".join(paths)}
    prov["sources"] = [{"path": p, "date": d.get("provenance", {}).get("date", "unknown"),
                        "command": d.get("provenance", {}).get("command", "unknown")} for p, d in zip(paths, docs)]
    return prov


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
    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    text = json.dumps(table_provenance(paths, docs), separators=(",", ":"), ensure_ascii=False)
    print("<!-- provenance: " + text.replace("-->", "--\\u003e") + " -->")
    for doc in docs:
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
