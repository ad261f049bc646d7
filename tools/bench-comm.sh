#!/usr/bin/env bash
# make bench: the allreduce table of docs/benchmarks.md (configs/bench-comm.ini) at NP=4 ranks as 2
# virtual nodes x 2, RUNS times (default 3; the machine is shared and noisy), then the
# Markdown table of medians across runs: build/bench/comm-np4.md.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
RUNS=${RUNS:-3}
mkdir -p build/bench
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
runs=()
for r in $(seq 1 "$RUNS"); do
    out="build/bench/comm-np$NP-run$r"
    mpirun --oversubscribe -np "$NP" build/bin/nebula-bench comm --config configs/bench-comm.ini \
        --out "$out.json" "$@" | tee "$out.txt"
    runs+=("$out.json")
done
/usr/bin/python3 tools/bench-table.py "${runs[@]}" | tee "build/bench/comm-np$NP.md"
