#!/usr/bin/env bash
# bench-hetero.sh — the heterogeneous-ranks table (`nebula-bench table hetero` runs this):
# 4 ranks on this machine, each capped to a share of a CPU by a cgroup of its own
# (tools/cpu-quota: CFS bandwidth, so a rank at 20% computes at 20% whatever it runs),
# trained on the same global batch for the same number of steps under uniform data
# parallelism (sched.mode = off) and under each scheduler mode. Columns: the wall time
# to the run's samples (the sum of every step's time: the modes' measuring steps
# included), the steady step (median of the steps after the last change of shares), its
# ratio to uniform, and the ideal step of the sum of speeds (the global batch over the
# sum of the ranks' measured samples per second: every rank busy all the time) with the
# measured step's excess over it. Model: GPT-2 tiny widened to --layers x --width,
# synthetic data, one thread per rank. Medians of --reps runs. Root only (cgroups);
# says so and exits 0 otherwise. The first line is the table's provenance.
#
# Usage: tools/bench-hetero.sh [--quotas 50,50,20,20] [--modes balanced,performance]
#                              [--steps N] [--interval K] [--reps R] [--layers L]
#                              [--width C] [--global-batch GB] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table hetero: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
quotas=50,50,20,20 modes=balanced,performance steps=30 interval=5 reps=3 layers=4 width=256 gb=64 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --quotas) [ $# -ge 2 ] || die "--quotas needs a value"; quotas=$2; shift 2 ;;
    --modes) [ $# -ge 2 ] || die "--modes needs a value"; modes=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --interval) [ $# -ge 2 ] || die "--interval needs a value"; interval=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2; shift 2 ;;
    --layers) [ $# -ge 2 ] || die "--layers needs a value"; layers=$2; shift 2 ;;
    --width) [ $# -ge 2 ] || die "--width needs a value"; width=$2; shift 2 ;;
    --global-batch) [ $# -ge 2 ] || die "--global-batch needs a value"; gb=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --quotas, --modes, --steps, --interval, --reps, --layers, --width, --global-batch or --csv" ;;
    esac
done
[[ $quotas =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]] || die "--quotas must be 4 comma-separated percentages of a CPU, not '$quotas'"
IFS=, read -r -a mode_list <<<"$modes"
for m in "${mode_list[@]}"; do
    case $m in balanced | performance | economy) ;; *) die "unknown mode '$m'; expected balanced, performance or economy" ;; esac
done
for v in steps interval reps layers width gb; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v/gb/global-batch} must be a positive integer, not '${!v}'"
done
[ "$steps" -gt $((2 * interval)) ] || die "--steps must exceed 2 x --interval (the steady steps follow the measurements)"
[ $((gb % 16)) -eq 0 ] || die "--global-batch must be a multiple of 16 (4 ranks x micro-batch 4), not $gb"
[ -x build/bin/nebula-train ] || die "build/bin/nebula-train is missing; run make first"
[ "$(id -u)" -eq 0 ] || { echo "nebula-bench table hetero: needs root for cgroups; skipped"; exit 0; }
tools/cpu-quota --check >/dev/null 2>&1 || { echo "nebula-bench table hetero: $(tools/cpu-quota --check 2>&1); skipped"; exit 0; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NEBULA_QUOTA_TAG=bench$$
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'tools/cpu-quota --cleanup; rm -rf "$tmp"' EXIT
fmt=markdown; [ $csv = 1 ] && fmt=csv
mpirun --oversubscribe -np 4 build/bin/nebula-bench provenance --format $fmt --command "${cmdline% }" \
    --param quotas="$quotas" --param modes="$modes" --param steps="$steps" --param interval="$interval" \
    --param reps="$reps" --param layers="$layers" --param width="$width" --param global_batch="$gb" \
    </dev/null 2>"$tmp/provenance.log" | grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table hetero: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }
once() {  # once NAME ARGS... -> "total_s steady_ms ideal_ms shares" of one run (metrics.jsonl)
    local name=$1
    shift
    rm -rf "${tmp:?}/$name"
    mpirun --oversubscribe -np 4 --bind-to none tools/cpu-quota "$quotas" -- build/bin/nebula-train \
        --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/$name" --set data.train=synthetic --set data.val= \
        --set model.n_layer="$layers" --set model.n_embd="$width" --set train.global_batch="$gb" --set train.micro_batch=4 \
        --set train.threads=1 --set runtime.bind=none --steps "$steps" --set optim.warmup_steps=0 --set train.log_interval=1 \
        --set train.eval_interval=0 --set ckpt.every_steps=0 --set profile.mode=off --set monitor.attention_interval=0 \
        --set sched.interval="$interval" "$@" </dev/null >"$tmp/$name.log" 2>&1 ||
        { echo "nebula-bench table hetero: $name failed:" >&2; tail -5 "$tmp/$name.log" >&2; return 1; }
    /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$gb" <<'PY'
import json, statistics, sys
recs = list(map(json.loads, open(sys.argv[1])))
train = [j for j in recs if j["kind"] == "train"]
sched = [j for j in recs if j["kind"] == "sched"]
last = max([j["step"] for j in sched], default=0)
steady = [j["step_ms"] for j in train if j["step"] > last + 1] or [j["step_ms"] for j in train[len(train) // 2:]]
speeds = sched[-1].get("speeds") if sched else None
ideal = float(sys.argv[2]) * 1e3 / sum(speeds) if speeds else float("nan")
shares = "/".join(map(str, sched[-1]["shares"])) if sched else "uniform"
print(f"{sum(j['step_ms'] for j in train) / 1e3:.3f} {statistics.median(steady):.2f} {ideal:.2f} {shares}")
PY
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
run() {  # run NAME ARGS... -> "total_s steady_ms ideal_ms shares": medians of reps, the first run's shares
    local name=$1 i t s id sh first=""
    shift
    : >"$tmp/$name.t" && : >"$tmp/$name.s" && : >"$tmp/$name.i"
    for ((i = 1; i <= reps; i++)); do
        read -r t s id sh < <(once "$name.$i" "$@")
        echo "$t" >>"$tmp/$name.t"; echo "$s" >>"$tmp/$name.s"; echo "$id" >>"$tmp/$name.i"
        [ -n "$first" ] || first=$sh
    done
    echo "$(median <"$tmp/$name.t") $(median <"$tmp/$name.s") $(median <"$tmp/$name.i") $first"
}
how="4 ranks capped at ${quotas//,/\/}% of a CPU (cgroup CFS quota), 1 thread each; $steps steps of $gb samples; medians of $reps runs"
if [ $csv = 1 ]; then
    echo "mode,time_to_samples_s,vs_uniform,steady_ms_per_step,steady_vs_uniform,ideal_ms_per_step,over_ideal,final_shares,measured"
else
    echo "| mode | time to $((steps * gb)) samples, s | vs uniform | steady ms/step | vs uniform | sum-of-speeds ideal, ms/step | over the ideal | final shares | measured |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
fi
read -r ut us _ _ < <(run uniform)
row() {  # row MODE total steady ideal shares
    local rt rs over
    rt=$(echo "$2 / $ut" | bc -l) rs=$(echo "$3 / $us" | bc -l)
    over=nan
    [ "$4" = nan ] || over=$(printf '%.1f' "$(echo "($3 / $4 - 1) * 100" | bc -l)")
    if [ $csv = 1 ]; then
        printf '%s,%.2f,%.3f,%.1f,%.3f,%s,%s,%s,"%s"\n' "$1" "$2" "$rt" "$3" "$rs" "$4" "$over" "$5" "$how"
    else
        [ "$over" = nan ] || over=$(printf '%+.0f%%' "$over")  # the percentage, signed
        printf '| %s | %.2f | %.2f | %.1f | %.2f | %s | %s | %s | %s |\n' "$1" "$2" "$rt" "$3" "$rs" "$4" "$over" "$5" "$how"
    fi
}
row "uniform (sched.mode = off)" "$ut" "$us" nan uniform
for m in "${mode_list[@]}"; do
    extra=()
    [ "$m" = economy ] && extra=(--set sched.target=1e9)
    read -r t s id sh < <(run "$m" --set sched.mode="$m" "${extra[@]}")
    row "$m" "$t" "$s" "$id" "$sh"
done
