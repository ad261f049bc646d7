#!/usr/bin/env bash
# bench-dgc.sh — DGC-Pro against dense training on rate-limited links between
# virtual nodes (tools/netns-cluster: 4 network namespaces, one rank each, links
# shaped with tbf both ways). Model: GPT-2 124M (124M parameters, AdamW), micro-batch
# 1 x T=64, synthetic data; dense = nebula-train's bucketed allreduce with the ring
# algorithm (comm.algo=ring: on shaped links halving-doubling reaches half the rate);
# DGC-Pro at its final 99.9% sparsity (no warm-up: the steady state), fp16 values.
# Reports the mean step time of steps 3..N of each run, the speed-up, and the final
# loss both ways; on unshaped links (rate none) also what dgc.mode = auto decides and
# its step time against dense. Root only (namespaces).
# Usage: tools/bench-dgc.sh [RATE...] (default: 1gbit 100mbit none); STEPS (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench-dgc: needs root for network namespaces; skipped"; exit 0; }
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1gbit 100mbit none)
steps=${STEPS:-5}
tools/netns-cluster down >/dev/null 2>&1 || true
tools/netns-cluster up 4 >/dev/null
trap 'tools/netns-cluster down >/dev/null 2>&1' EXIT
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
auto_rows=()
run() {  # run NAME RATE ARGS... -> "mean_step_ms final_loss"
    local name=$1 rate=$2
    shift 2
    rm -rf "$tmp/$name"
    tools/netns-cluster mpirun 4 "$PWD/build/bin/nebula-train" --model gpt2 --run-dir "$tmp/$name" \
        --set runtime.bind=none --set data.train=synthetic --set train.micro_batch=1 --seq-len 64 \
        --steps "$steps" --set optim.warmup_steps=0 --set train.log_interval=1 --set comm.timeout=0 "$@" \
        </dev/null >"$tmp/$name.log" 2>&1 || { echo "bench-dgc: $name at $rate failed:" >&2; tail -5 "$tmp/$name.log" >&2; return 1; }
    sed -n 's/^summary: .*final_loss=\([0-9.]*\) mean_step_ms=\([0-9.]*\).*/\2 \1/p' "$tmp/$name.log"
}
echo "| link (4 nodes x 1 rank) | dense ring, ms/step | DGC-Pro, ms/step | speed-up | final loss dense / DGC-Pro | DGC traffic reduction |"
echo "|---|---:|---:|---:|---|---:|"
for rate in "${rates[@]}"; do
    tools/netns-cluster rate "$rate" >/dev/null
    read -r dms dloss < <(run dense-$rate "$rate" --set comm.algo=ring)
    read -r gms gloss < <(run dgc-$rate "$rate" --set dgc.mode=on --set dgc.values=fp16)
    red=$(sed -n 's/^dgc: gradient traffic .*: \([0-9.]*\)x less/\1/p' "$tmp/dgc-$rate.log")
    printf "| %s | %.0f | %.0f | %.2fx | %s / %s | %sx |\n" "$rate" "$dms" "$gms" "$(echo "$dms / $gms" | bc -l)" \
        "$dloss" "$gloss" "$red"
    if [ "$rate" = none ]; then  # unshaped: what auto decides, and what that costs against dense
        read -r ams _ < <(run auto-$rate "$rate" --set comm.algo=ring --set dgc.mode=auto --set dgc.values=fp16 --steps $((steps + 4)))
        auto_rows+=("| $rate | $(sed -n 's/^dgc: \(on\|off\) (auto): \(.*\)/\1: \2/p' "$tmp/auto-$rate.log") | $(printf '%.0f ms vs dense %.0f ms = %.3f' "$ams" "$dms" "$(echo "$ams / $dms" | bc -l)") |")
    fi
done
if [ ${#auto_rows[@]} -gt 0 ]; then
    echo
    echo "| link | dgc.mode = auto decided | ms/step against dense |"
    echo "|---|---|---:|"
    printf '%s\n' "${auto_rows[@]}"
fi
rm -rf "$tmp"
