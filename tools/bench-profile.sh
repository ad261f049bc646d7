#!/usr/bin/env bash
# bench-profile.sh — the cost of profiler mode (docs/profile.md): the same nebula-train run
# with profile.mode = off and = on, side by side in one loop (off, on, off, on, ...), REPS
# pairs. Each run's figure is the median step_ms of its metrics.jsonl over the steps after
# the warm-up step; the result is the median of the REPS runs of each mode and their ratio.
# A fresh run directory per run, so checkpoints never resume (none are written).
# Usage: tools/bench-profile.sh [MODEL B T STEPS NP] (default gpt2 4 64 6 1); REPS (3);
# EVENTS: profile.events of the profiled runs (default: the schema's default set);
# THREADS: train.threads (default 0: the cores of each rank). The first line is the
# provenance (docs/benchmarks.md#provenance): "# provenance: {...}", gathered on NP ranks.
set -euo pipefail
cmdline=$(printf '%q ' "$0" "$@")
cd "$(dirname "$0")/.."
model=${1:-gpt2} B=${2:-4} T=${3:-64} steps=${4:-6} np=${5:-1}
reps=${REPS:-3}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
ev=(); [ -n "${EVENTS:-}" ] && ev=(--set "profile.events=$EVENTS")
# median step_ms of one run's step records after step 1
run_median() {
    /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
ms = [j["step_ms"] for j in map(json.loads, open(sys.argv[1])) if j.get("kind") == "train" and j["step"] > 1]
print(statistics.median(ms))
PY
}
mpirun --oversubscribe -np "$np" build/bin/nebula-bench provenance --format csv --command "${cmdline% }" \
    --param model="$model" --param B="$B" --param T="$T" --param steps="$steps" --param np="$np" \
    --param reps="$reps" --param events="${EVENTS:-}" --param threads="${THREADS:-0}" </dev/null
off=() on=()
echo "# nebula-train $model B=$B T=$T, $np rank(s), $steps steps per run, $reps pairs; median step_ms per run"
for r in $(seq 1 "$reps"); do
    for mode in off on; do
        dir=$tmp/$mode-$r
        extra=(); [ $mode = on ] && extra=("${ev[@]}")
        mpirun --oversubscribe -np "$np" build/bin/nebula-train --model "$model" --micro-batch "$B" --seq-len "$T" \
            --steps "$steps" --run-dir "$dir" --set data.train=synthetic-fixed --set train.log_interval=1 \
            --set train.threads="${THREADS:-0}" --set profile.mode=$mode "${extra[@]}" </dev/null >"$dir.log" 2>&1 \
            || { echo "run failed:"; tail -5 "$dir.log"; exit 1; }
        m=$(run_median "$dir/metrics.jsonl")
        if [ $mode = off ]; then off+=("$m"); else on+=("$m"); fi
        printf '%-4s rep %d  %9.2f ms\n' $mode "$r" "$m"
    done
done
/usr/bin/python3 - "${#off[@]}" "${off[@]}" "${on[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); off = list(map(float, sys.argv[2:2 + n])); on = list(map(float, sys.argv[2 + n:]))
a, b = statistics.median(off), statistics.median(on)
print(f"median step_ms: off {a:.2f}, on {b:.2f}; on / off = {b / a:.4f} (overhead {100 * (b / a - 1):+.2f}%)")
PY
