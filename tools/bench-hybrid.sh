#!/usr/bin/env bash
# bench-hybrid.sh — the process-grid table (`nebula-bench table hybrid` runs this): one
# model trained on 4 ranks as 2 virtual nodes x 2 ranks (tools/netns-cluster: 2 network
# namespaces, the ranks of one node on shared memory, the link between the nodes shaped
# with tbf both ways or left unshaped) as dp4, tp2 x dp2, pp2 x dp2 and tp2 x pp2. The
# grid puts tp inside a node and pp, then dp, across (docs/hybrid.md). Every layout trains
# the same global batch (--global-batch sequences of --seq-len tokens, micro-batch 1,
# synthetic data, AdamW). The data-parallel baseline is dp4 (bucketed allreduces, every
# rank holding the whole model and its optimizer state) or dp4z, the same with ZeRO-1
# (zero.stage = 1: the moments sharded, for a model whose four replicas do not fit in
# memory; the grids train without it, their model split already).
#
# Per row: the step time (a run's mean step, its first step left out; the median of
# --reps runs) and the tokens per second it makes; the bytes that crossed between the
# nodes per step, measured at the switch (every frame each node sent, all protocol
# overhead included) as (bytes of an N-step run - bytes of a 2-step run) / (N - 2), so
# start-up and the final checkpoint cancel; rank 0's memory table (parameters, also as a
# count of floats, gradients, optimizer state, activations, MiB) and the largest peak RSS
# of the 4 ranks; for the pipelines, the measured bubble (the mean over steps 2..N of
# the trainer's 1 - busy / the pipeline's makespan) beside 1F1B's (p - 1) / (m + p - 1).
# The first line is the table's provenance (docs/benchmarks.md#provenance). Root only
# (network namespaces); says so and exits 0 otherwise.
#
# Usage: tools/bench-hybrid.sh [--models bert-large,gpt2-medium] [--rates 1gbit,none]
#            [--layouts dp4,tp2dp2,pp2dp2,tp2pp2]  (and dp4z) [--steps N] [--reps R] [--seq-len T]
#            [--global-batch G] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table hybrid: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
models=bert-large,gpt2-medium rates=1gbit,none layouts=dp4,tp2dp2,pp2dp2,tp2pp2 steps=5 reps=1 seq=64 gb=8 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --models | --rates | --layouts | --steps | --reps | --seq-len | --global-batch)
        [ $# -ge 2 ] || die "$1 needs a value"
        case $1 in
        --models) models=$2 ;; --rates) rates=$2 ;; --layouts) layouts=$2 ;; --steps) steps=$2 ;;
        --reps) reps=$2 ;; --seq-len) seq=$2 ;; --global-batch) gb=$2 ;;
        esac
        shift 2 ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --models, --rates, --layouts, --steps, --reps, --seq-len, --global-batch or --csv" ;;
    esac
done
[[ $steps =~ ^[0-9]+$ && $steps -ge 3 ]] || die "--steps must be an integer >= 3 (bytes: the N-step run less a 2-step one), not '$steps'"
[[ $reps =~ ^[0-9]+$ && $reps -ge 1 ]] || die "--reps must be a positive integer, not '$reps'"
[[ $seq =~ ^[0-9]+$ && $seq -ge 1 ]] || die "--seq-len must be a positive integer, not '$seq'"
[[ $gb =~ ^[0-9]+$ && $gb -ge 4 && $((gb % 4)) -eq 0 ]] ||
    die "--global-batch must be a multiple of 4 (every layout splits it over its data-parallel ranks and 2 stages), not '$gb'"
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a rate_list <<<"$rates"
IFS=, read -r -a layout_list <<<"$layouts"
for m in "${model_list[@]}"; do
    [ -f "configs/models/$m.ini" ] || die "unknown model '$m'; expected one of: $(cd configs/models && ls -- *.ini | sed 's/\.ini$//' | tr '\n' ' ')"
    case $m in gpt2* | bert*) ;; *) die "model '$m' trains data-parallel only; the grid takes the transformers (gpt2*, bert*)" ;; esac
done
for r in "${rate_list[@]}"; do
    [[ $r == none || $r =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "bad rate '$r'; expected none or a tc rate such as 1gbit, 100mbit"
done
grid_args() {  # LAYOUT -> the --set arguments of its grid
    case $1 in
    dp4) echo "--set zero.stage=0 --set comm.algo=hier" ;;
    dp4z) echo "--set zero.stage=1 --set comm.algo=hier" ;;
    tp2dp2) echo "--set parallel.tp=2" ;;
    pp2dp2) echo "--set parallel.pp=2" ;;
    tp2pp2) echo "--set parallel.tp=2 --set parallel.pp=2" ;;
    *) return 1 ;;
    esac
}
for l in "${layout_list[@]}"; do
    grid_args "$l" >/dev/null || die "unknown layout '$l'; expected dp4, dp4z, tp2dp2, pp2dp2 or tp2pp2"
done
[ -x build/bin/nebula-train ] || die "build/bin/nebula-train is missing; run make first"
[ "$(id -u)" -eq 0 ] || { echo "nebula-bench table hybrid: needs root for network namespaces; skipped"; exit 0; }

tools/netns-cluster down >/dev/null 2>&1 || true
tools/netns-cluster up 2 >/dev/null
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'tools/netns-cluster down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
fmt=markdown; [ $csv = 1 ] && fmt=csv
tools/netns-cluster mpirun 4 "$PWD/build/bin/nebula-bench" provenance --format $fmt --command "${cmdline% }" \
    --param models="$models" --param rates="$rates" --param layouts="$layouts" --param steps="$steps" \
    --param reps="$reps" --param seq_len="$seq" --param global_batch="$gb" --param csv="$csv" \
    </dev/null 2>"$tmp/provenance.log" | grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table hybrid: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
once() {  # once NAME MODEL N GRID... -> bytes that crossed the switch; the log in NAME.log
    local name=$1 model=$2 n=$3 b0 b1
    shift 3
    rm -rf "$tmp/$name"
    b0=$(tools/netns-cluster bytes)
    tools/netns-cluster mpirun 4 "$PWD/build/bin/nebula-train" --model "$model" --run-dir "$tmp/$name" \
        --set runtime.bind=none --set data.train=synthetic --set train.micro_batch=1 --seq-len "$seq" \
        --set train.global_batch="$gb" --steps "$n" --set optim.warmup_steps=0 --set train.log_interval=1 \
        --set comm.timeout=0 --set ckpt.every_steps=0 --set profile.mode=off "$@" \
        </dev/null >"$tmp/$name.log" 2>&1 || { echo "nebula-bench table hybrid: $name failed:" >&2; tail -5 "$tmp/$name.log" >&2; return 1; }
    b1=$(tools/netns-cluster bytes)
    echo $((b1 - b0))
}
mem() {  # mem LOG KEY -> MiB of that line of rank 0's memory table (its first number)
    awk -v k="$2" '$1 == k { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' "$1"
}
bubble() {  # bubble RUN_DIR -> "measured 1f1b" of a pipeline (steps 2..N), "- -" without one
    /usr/bin/python3 -c "
import json, sys
r = [j for j in map(json.loads, open(sys.argv[1])) if j.get('kind') == 'train' and j.get('step', 0) >= 2 and 'bubble' in j]
print(f\"{sum(j['bubble'] for j in r) / len(r):.3f} {r[0]['bubble_1f1b']:.3f}\" if r else '- -')" "$1/metrics.jsonl"
}
rss() {  # rss RUN_DIR -> the largest rss_mb any rank reported
    /usr/bin/python3 -c "
import json, sys
v = [x for j in map(json.loads, open(sys.argv[1])) if j.get('kind') == 'ranks' for x in j.get('rss_mb', [])]
print(f'{max(v):.0f}' if v else 'nan')" "$1/metrics.jsonl"
}
how_rest="step: mean of steps 2..$steps, median of $reps; bytes at the switch: (run $steps - run 2) / $((steps - 2)); memory: rank 0, RSS: max of 4"
if [ $csv = 1 ]; then
    echo "model,link,layout,ms_per_step,tok_per_s,internode_mb_per_step,params_floats,params_mib,grads_mib,optimizer_mib,activations_mib,peak_rss_mb,bubble,bubble_1f1b,final_loss,measured"
else
    echo "| model | link | layout | ms/step | tok/s | inter-node MB/step | params / grads / optimizer / activations, MiB per rank | peak RSS, MB | bubble / 1F1B's | final loss | measured |"
    echo "|---|---|---|---:|---:|---:|---|---:|---|---:|---|"
fi
summary=()
for model in "${model_list[@]}"; do
    for rate in "${rate_list[@]}"; do
        tools/netns-cluster rate "$rate" >/dev/null
        how="2 netns nodes x 2 ranks, $([ "$rate" = none ] && echo unshaped || echo "tbf $rate both ways"); $how_rest"
        base="" base_name="" best="" best_ms=""
        for layout in "${layout_list[@]}"; do
            read -r -a grid <<<"$(grid_args "$layout")"
            short=$(once "$model-$rate-$layout-short" "$model" 2 "${grid[@]}")
            : >"$tmp/times"
            long=""
            for ((i = 1; i <= reps; i++)); do
                b=$(once "$model-$rate-$layout-$i" "$model" "$steps" "${grid[@]}")
                [ -n "$long" ] || long=$b
                sed -n 's/^summary: .*mean_step_ms=\([0-9.]*\).*/\1/p' "$tmp/$model-$rate-$layout-$i.log" >>"$tmp/times"
            done
            log=$tmp/$model-$rate-$layout-1.log
            ms=$(median <"$tmp/times")
            loss=$(sed -n 's/^summary: .*final_loss=\([0-9.]*\).*/\1/p' "$log")
            mb=$(echo "($long - $short) / ($steps - 2) / 1000000" | bc -l)
            tok=$(echo "$gb * $seq * 1000 / $ms" | bc -l)
            p=$(mem "$log" params) g=$(mem "$log" grads) o=$(mem "$log" optimizer) a=$(mem "$log" activations)
            pf=$(sed -n 's/^ *params .*(\([0-9]*\) floats.*/\1/p' "$log" | head -1)
            r=$(rss "$tmp/$model-$rate-$layout-1")
            read -r bm bf < <(bubble "$tmp/$model-$rate-$layout-1")
            name=$layout; [ "$layout" = dp4z ] && name="dp4, ZeRO-1"
            if [ $csv = 1 ]; then
                printf '%s,%s,%s,%.0f,%.0f,%.2f,%s,%s,%s,%s,%s,%s,%s,%s,%s,"%s"\n' "$model" "$rate" "$layout" "$ms" "$tok" \
                    "$mb" "$pf" "$p" "$g" "$o" "$a" "$r" "${bm/-/}" "${bf/-/}" "$loss" "$how"
            else
                bub="-"; [ "$bm" = - ] || bub="$bm / $bf"
                printf '| %s | %s | %s | %.0f | %.0f | %.1f | %s / %s / %s / %s | %s | %s | %s | %s |\n' "$model" "$rate" \
                    "$name" "$ms" "$tok" "$mb" "$p" "$g" "$o" "$a" "$r" "$bub" "$loss" "$how"
            fi
            if [ "$layout" = dp4 ] || [ "$layout" = dp4z ]; then base=$ms base_name=$name
            elif [ -z "$best" ] || [ "$(echo "$ms < $best_ms" | bc -l)" = 1 ]; then best=$layout best_ms=$ms; fi
        done
        if [ -n "$base" ] && [ -n "$best" ]; then
            summary+=("$model at $rate: the fastest grid, $best, $(printf '%.0f' "$best_ms") ms/step against $base_name's $(printf '%.0f' "$base") ms: $(printf '%.2f' "$(echo "$base / $best_ms" | bc -l)")x")
        fi
    done
done
if [ ${#summary[@]} -gt 0 ] && [ $csv = 0 ]; then
    echo
    printf -- '- %s\n' "${summary[@]}"
fi
