#!/usr/bin/env bash
# bench-model.sh — nebula-bench model beside PyTorch, same model, shape and threads,
# in one run on the same cores: PyTorch as installed and with OMP_WAIT_POLICY=PASSIVE.
# Repeats REPS times (default 3) and reports medians, ratios and peak RSS (Nebula / PyTorch
# as installed).
#
#   tools/peers/bench-model.sh gpt2 4 64 [THREADS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?model} batch=${2:?batch} seq=${3:?seq} threads=${4:-2} steps=${5:-5}
reps=${REPS:-3}
tps() { sed -n 's/.* \([0-9.]*\) \(tok\|seq\|img\)\/s.*/\1/p' | tail -1; }
rss() { sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' | tail -1; }
neb=() pt=() ptp=() nrss=() prss=()
for r in $(seq 1 "$reps"); do
    out=$(build/bin/nebula-bench model --model "$model" --batch "$batch" --seq "$seq" --threads "$threads" \
              --steps "$steps")
    neb+=("$(tps <<<"$out")") nrss+=("$(rss <<<"$out")")
    out=$(/usr/bin/python3 tools/peers/bench_model_torch.py --model "$model" --batch "$batch" --seq "$seq" \
              --threads "$threads" --steps "$steps")
    pt+=("$(tps <<<"$out")") prss+=("$(rss <<<"$out")")
    ptp+=("$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 tools/peers/bench_model_torch.py --model "$model" \
              --batch "$batch" --seq "$seq" --threads "$threads" --steps "$steps" | tps)")
done
/usr/bin/python3 - "$model" "$batch" "$seq" "$threads" "${neb[*]}" "${pt[*]}" "${ptp[*]}" "${nrss[*]}" "${prss[*]}" <<'PY'
import statistics, sys
model, b, t, th = sys.argv[1:5]
neb, pt, ptp, nr, pr = ([float(x) for x in s.split()] for s in sys.argv[5:10])
n, p, q = statistics.median(neb), statistics.median(pt), statistics.median(ptp)
print(f"# runs: nebula {neb} pytorch {pt} pytorch-passive {ptp}")
print(f"| {model} B={b} T={t}, {th} threads | {n:.2f} | {p:.2f} | {q:.2f} | {n/p:.2f}x | {n/q:.2f}x "
      f"| {statistics.median(nr):.0f} / {statistics.median(pr):.0f} MiB |")
PY
