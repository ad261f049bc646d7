#!/usr/bin/env bash
# bench-model-gpu.sh OUT_DIR — the GPU throughput table: nebula-bench model --device cuda
# beside PyTorch eager (tools/peers/bench_model_torch.py --device cuda) on the same GPU,
# same model, batch, sequence and optimizer, bf16 autocast both ways; each run measures
# its own dense bf16 GEMM rate for the MFU column. REPS (default 3) runs each, medians.
# Writes OUT_DIR/gpu-bench.md (the README table rows) and the raw outputs beside it.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bench-model-gpu.sh OUT_DIR}
reps=${REPS:-3}
py=${NEBULA_PYTHON:-python3}
mkdir -p "$out"
tps() { sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p' | tail -1; }
mfu() { sed -n 's/.*MFU \([0-9.]*\)%.*/\1/p' | tail -1; }
rc=0
{
    echo "GPU throughput, $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo
    echo "| model | shape | Nebula tok/s | PyTorch eager tok/s | ratio | Nebula MFU | PyTorch MFU |"
    echo "|---|---|---:|---:|---:|---:|---:|"
} >"$out/gpu-bench.md"
for spec in "gpt2 16 1024" "gpt2 8 1024"; do
    read -r model batch seq <<<"$spec"
    neb=() pt=() nm=() pm=()
    for r in $(seq 1 "$reps"); do
        o=$(build/bin/nebula-bench model --device cuda --precision bf16 --model "$model" --batch "$batch" \
                --seq "$seq" --steps 10 2>&1) || { echo "$o"; rc=1; continue; }
        echo "$o" >>"$out/nebula-$model-$batch-$seq.txt"
        neb+=("$(tps <<<"$o")") nm+=("$(mfu <<<"$o")")
        o=$($py tools/peers/bench_model_torch.py --device cuda --precision bf16 --model "$model" --batch "$batch" \
                --seq "$seq" --steps 10 2>&1) || { echo "$o"; rc=1; continue; }
        echo "$o" >>"$out/pytorch-$model-$batch-$seq.txt"
        pt+=("$(tps <<<"$o")") pm+=("$(mfu <<<"$o")")
    done
    [ ${#neb[@]} -gt 0 ] && [ ${#pt[@]} -gt 0 ] || continue
    $py - "$model" "$batch" "$seq" "${neb[*]}" "${pt[*]}" "${nm[*]}" "${pm[*]}" >>"$out/gpu-bench.md" <<'PY'
import statistics, sys
model, b, t = sys.argv[1:4]
neb, pt, nm, pm = ([float(x) for x in s.split()] for s in sys.argv[4:8])
n, p = statistics.median(neb), statistics.median(pt)
print(f"| {model} bf16 | B={b} T={t} | {n:.0f} | {p:.0f} | {n / p:.2f}x | {statistics.median(nm):.1f}% "
      f"| {statistics.median(pm):.1f}% |")
PY
done
cat "$out/gpu-bench.md"
exit "$rc"
