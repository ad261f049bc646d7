#!/usr/bin/env bash
# bench-trace.sh — the cost of the communication timeline (docs/profile.md, "Communication
# timeline"): the same nebula-train run with trace.enable = false and = true (every step
# traced: trace.steps = all), side by side in one loop (off, on, off, on, ...), REPS pairs.
# Each run's figure is the median step_ms of its metrics.jsonl over the steps after the
# warm-up step (writing trace.json happens after the last step, outside every step_ms); the
# result is the median of the REPS runs of each mode, their ratio and the overhead in %.
# The profiler is off in both (profile.mode = off), so only the trace differs.
# A fresh run directory per run, so checkpoints never resume (none are written).
# Usage: tools/bench-trace.sh [MODEL B T STEPS NP RPN] (default gpt2 4 64 6 2 1: 2 ranks as
# 2 virtual nodes of 1, so the buckets go through the hierarchical path's inter-node step);
# REPS (3); ALGO: comm.algo (default auto); BUCKET: train.bucket_bytes (default the schema's);
# THREADS: train.threads (default 0: the cores of each rank).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2} B=${2:-4} T=${3:-64} steps=${4:-6} np=${5:-2} rpn=${6:-1}
reps=${REPS:-3}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
extra=(--set comm.algo="${ALGO:-auto}")
[ -n "${BUCKET:-}" ] && extra+=(--set train.bucket_bytes="$BUCKET")
# median step_ms of one run's step records after step 1
run_median() {
    /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
ms = [j["step_ms"] for j in map(json.loads, open(sys.argv[1])) if j.get("kind") == "train" and j["step"] > 1]
print(statistics.median(ms))
PY
}
off=() on=()
echo "# nebula-train $model B=$B T=$T, $np rank(s), $rpn per node, $steps steps per run, $reps pairs; median step_ms per run"
for r in $(seq 1 "$reps"); do
    for mode in off on; do
        dir=$tmp/$mode-$r
        trace=false; [ $mode = on ] && trace=true
        mpirun --oversubscribe -np "$np" build/bin/nebula-train --model "$model" --micro-batch "$B" --seq-len "$T" \
            --steps "$steps" --run-dir "$dir" --ranks-per-node "$rpn" --set data.train=synthetic-fixed \
            --set train.log_interval=1 --set train.threads="${THREADS:-0}" --set profile.mode=off --set dgc.mode=off \
            --set trace.enable=$trace --set trace.steps=all "${extra[@]}" </dev/null >"$dir.log" 2>&1 \
            || { echo "run failed:"; tail -5 "$dir.log"; exit 1; }
        m=$(run_median "$dir/metrics.jsonl")
        if [ $mode = off ]; then off+=("$m"); else on+=("$m"); fi
        printf '%-4s rep %d  %9.2f ms\n' $mode "$r" "$m"
        if [ $mode = on ] && [ ! -s "$dir/trace.json" ]; then echo "the traced run wrote no trace.json"; exit 1; fi
    done
done
/usr/bin/python3 - "${#off[@]}" "${off[@]}" "${on[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); off = list(map(float, sys.argv[2:2 + n])); on = list(map(float, sys.argv[2 + n:]))
a, b = statistics.median(off), statistics.median(on)
print(f"median step_ms: off {a:.2f}, on {b:.2f}; on / off = {b / a:.4f} (tracing overhead {100 * (b / a - 1):+.2f}%)")
PY
