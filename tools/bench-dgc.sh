#!/usr/bin/env bash
# bench-dgc.sh — the DGC-Pro speed-up table (`nebula-bench table dgc` runs this):
# dense training against DGC-Pro on rate-limited links between virtual nodes
# (tools/netns-cluster: 4 network namespaces, one rank each, every link shaped with
# tbf both ways). Per model: micro-batch 1 x T=64 of synthetic data, AdamW; dense =
# nebula-train's bucketed allreduce with the ring algorithm (comm.algo=ring: on shaped
# links halving-doubling reaches half the rate); DGC-Pro at its final 99.9% sparsity
# (no warm-up: the steady state), fp16 values. Each cell is the median over --reps runs
# of a run's mean step time over steps 3..N; the final loss is the first run's. On
# unshaped links (rate none) it also shows what dgc.mode = auto decides and its step
# time against dense. Root only (network namespaces); says so and exits 0 otherwise.
# The first line is the table's provenance (docs/benchmarks.md#provenance): "# provenance:
# {...}" before the CSV header, "<!-- provenance: {...} -->" before the Markdown, naming the
# 4 namespaces' hosts.
#
# Usage: tools/bench-dgc.sh [--models gpt2,...] [--rates 1gbit,100mbit,none]
#                           [--steps N] [--reps R] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table dgc: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
models=gpt2 rates=1gbit,100mbit,none steps=5 reps=1 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --models) [ $# -ge 2 ] || die "--models needs a value"; models=$2; shift 2 ;;
    --rates) [ $# -ge 2 ] || die "--rates needs a value"; rates=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --models, --rates, --steps, --reps or --csv" ;;
    esac
done
[[ $steps =~ ^[0-9]+$ && $steps -ge 3 ]] || die "--steps must be an integer >= 3 (steps 3..N are timed), not '$steps'"
[[ $reps =~ ^[0-9]+$ && $reps -ge 1 ]] || die "--reps must be a positive integer, not '$reps'"
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a rate_list <<<"$rates"
for m in "${model_list[@]}"; do
    [ -f "configs/models/$m.ini" ] || die "unknown model '$m'; expected one of: $(cd configs/models && ls -- *.ini | sed 's/\.ini$//' | tr '\n' ' ')"
done
for r in "${rate_list[@]}"; do
    [[ $r == none || $r =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "bad rate '$r'; expected none or a tc rate such as 1gbit, 100mbit"
done
[ -x build/bin/nebula-train ] || die "build/bin/nebula-train is missing; run make first"
[ "$(id -u)" -eq 0 ] || { echo "nebula-bench table dgc: needs root for network namespaces; skipped"; exit 0; }

tools/netns-cluster down >/dev/null 2>&1 || true
tools/netns-cluster up 4 >/dev/null
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'tools/netns-cluster down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
fmt=markdown; [ $csv = 1 ] && fmt=csv
tools/netns-cluster mpirun 4 "$PWD/build/bin/nebula-bench" provenance --format $fmt --command "${cmdline% }" \
    --param models="$models" --param rates="$rates" --param steps="$steps" --param reps="$reps" --param csv="$csv" \
    </dev/null 2>"$tmp/provenance.log" | grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table dgc: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
once() {  # once NAME MODEL ARGS... -> "mean_step_ms final_loss" of one run
    local name=$1 model=$2
    shift 2
    rm -rf "$tmp/$name"
    tools/netns-cluster mpirun 4 "$PWD/build/bin/nebula-train" --model "$model" --run-dir "$tmp/$name" \
        --set runtime.bind=none --set data.train=synthetic --set train.micro_batch=1 --seq-len 64 \
        --steps "$steps" --set optim.warmup_steps=0 --set train.log_interval=1 --set comm.timeout=0 "$@" \
        </dev/null >"$tmp/$name.log" 2>&1 || { echo "nebula-bench table dgc: $name failed:" >&2; tail -5 "$tmp/$name.log" >&2; return 1; }
    sed -n 's/^summary: .*final_loss=\([0-9.]*\) mean_step_ms=\([0-9.]*\).*/\2 \1/p' "$tmp/$name.log"
}
run() {  # run NAME MODEL ARGS... -> "median_step_ms first_final_loss"; the first run's log stays as NAME.log
    local name=$1 t loss first=""
    shift
    : >"$tmp/$name.times"
    for ((i = 1; i <= reps; i++)); do
        read -r t loss < <(once "$name.$i" "$@")
        echo "$t" >>"$tmp/$name.times"
        [ -n "$first" ] || { first=$loss; cp "$tmp/$name.$i.log" "$tmp/$name.log"; }
    done
    echo "$(median <"$tmp/$name.times") $first"
}
how="4 namespaces x 1 rank, tbf both ways, mean of steps 3..$steps, median of $reps"
if [ $csv = 1 ]; then
    echo "model,params,link,dense_ms_per_step,dgc_ms_per_step,speedup,dense_final_loss,dgc_final_loss,traffic_reduction,measured"
else
    echo "| model | params | link | dense ring, ms/step | DGC-Pro, ms/step | speed-up | final loss dense / DGC-Pro | traffic reduction | measured |"
    echo "|---|---:|---|---:|---:|---:|---|---:|---|"
fi
auto_rows=()
for model in "${model_list[@]}"; do
    for rate in "${rate_list[@]}"; do
        tools/netns-cluster rate "$rate" >/dev/null
        read -r dms dloss < <(run "dense-$model-$rate" "$model" --set comm.algo=ring)
        read -r gms gloss < <(run "dgc-$model-$rate" "$model" --set dgc.mode=on --set dgc.value_dtype=fp16)
        params=$(sed -n 's/^ *params .*(\([0-9]*\) floats.*/\1/p' "$tmp/dense-$model-$rate.log" | head -1)
        red=$(sed -n 's/^dgc: gradient traffic .*: \([0-9.]*\)x less/\1/p' "$tmp/dgc-$model-$rate.log")
        speed=$(echo "$dms / $gms" | bc -l)
        if [ $csv = 1 ]; then
            printf '%s,%s,%s,%.0f,%.0f,%.2f,%s,%s,%s,"%s"\n' "$model" "$params" "$rate" "$dms" "$gms" "$speed" \
                "$dloss" "$gloss" "$red" "$how"
        else
            printf '| %s | %s | %s | %.0f | %.0f | %.2fx | %s / %s | %sx | %s |\n' "$model" "$params" "$rate" "$dms" \
                "$gms" "$speed" "$dloss" "$gloss" "$red" "$how"
        fi
        if [ "$rate" = none ]; then  # unshaped: what auto decides, and what that costs against dense
            read -r ams _ < <(run "auto-$model" "$model" --set comm.algo=ring --set dgc.mode=auto \
                --set dgc.value_dtype=fp16 --set dgc.min_params=0 --steps $((steps + 4)))
            auto_rows+=("| $model | $rate | $(sed -n 's/^dgc: \(on\|off\) (auto): \(.*\)/\1: \2/p' "$tmp/auto-$model.log" | paste -sd';' | sed 's/;/; /g') | $(printf '%.0f ms vs dense %.0f ms = %.3f' "$ams" "$dms" "$(echo "$ams / $dms" | bc -l)") |")
        fi
    done
done
if [ ${#auto_rows[@]} -gt 0 ] && [ $csv = 0 ]; then
    echo
    echo "| model | link | dgc.mode = auto decided | ms/step against dense |"
    echo "|---|---|---|---:|"
    printf '%s\n' "${auto_rows[@]}"
fi
