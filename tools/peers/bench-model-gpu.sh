#!/usr/bin/env bash
# bench-model-gpu.sh OUT_DIR — the GPU throughput table: nebula-bench model --device cuda
# beside PyTorch eager (tools/peers/bench_model_torch.py --device cuda) on the same GPU,
# same model, batch, sequence and optimizer (AdamW), bf16 autocast both ways, for GPT-2
# 124M, BERT-base and ResNet-50; each run measures its own dense bf16 GEMM rate for the
# MFU column (ResNet FLOPs: Nebula's count, passed to the peer). REPS (default 3) runs
# each, medians.
# Writes OUT_DIR/gpu-bench.md (the table rows of docs/gpu.md; its first line the provenance,
# "<!-- provenance: {...} -->", docs/benchmarks.md#provenance) and the raw outputs beside it.
set -uo pipefail
cmdline=$(printf '%q ' "$0" "$@")
cd "$(dirname "$0")/../.." || exit 1
out=${1:?usage: bench-model-gpu.sh OUT_DIR}
reps=${REPS:-3}
py=${NEBULA_PYTHON:-python3}
mkdir -p "$out"
tps() { sed -n 's/.* \([0-9.]*\) \(tok\|seq\|img\)\/s.*/\1/p' | tail -1; }
flops_img() { sed -n 's/.*model FLOPs per step \([0-9.]*\) G.*/\1/p' | head -1; }
mfu() { sed -n 's/.*MFU \([0-9.]*\)%.*/\1/p' | tail -1; }
rc=0
{
    build/bin/nebula-bench provenance --format markdown --command "${cmdline% }" --param out="$out" \
        --param reps="$reps" --param gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" ||
        rc=1
    echo "GPU throughput, $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo
    echo "| model | shape | Nebula per s | PyTorch eager per s | ratio | Nebula MFU | PyTorch MFU |"
    echo "|---|---|---:|---:|---:|---:|---:|"
} >"$out/gpu-bench.md"
for spec in "gpt2 16 1024" "bert-base 32 128" "resnet50 64 64"; do
    read -r model batch seq <<<"$spec"
    extra=()
    neb=() pt=() nm=() pm=()
    for _ in $(seq 1 "$reps"); do
        o=$(build/bin/nebula-bench model --device cuda --precision bf16 --model "$model" --batch "$batch" \
                --seq "$seq" --steps 10 2>&1) || { echo "$o"; rc=1; continue; }
        echo "$o" >>"$out/nebula-$model-$batch-$seq.txt"
        neb+=("$(tps <<<"$o")") nm+=("$(mfu <<<"$o")")
        [[ $model == resnet* ]] && extra=(--flops-per-image "$(awk -v g="$(flops_img <<<"$o")" -v b="$batch" \
                                                              'BEGIN { print g * 1e9 / b }')")
        o=$($py tools/peers/bench_model_torch.py --device cuda --precision bf16 --model "$model" --batch "$batch" \
                --seq "$seq" --steps 10 "${extra[@]}" 2>&1) || { echo "$o"; rc=1; continue; }
        echo "$o" >>"$out/pytorch-$model-$batch-$seq.txt"
        pt+=("$(tps <<<"$o")") pm+=("$(mfu <<<"$o")")
    done
    if [ ${#neb[@]} -eq 0 ] || [ ${#pt[@]} -eq 0 ]; then continue; fi
    $py - "$model" "$batch" "$seq" "${neb[*]}" "${pt[*]}" "${nm[*]}" "${pm[*]}" >>"$out/gpu-bench.md" <<'PY'
import statistics, sys
model, b, t = sys.argv[1:4]
neb, pt, nm, pm = ([float(x) for x in s.split()] for s in sys.argv[4:8])
n, p = statistics.median(neb), statistics.median(pt)
shape = f"B={b} 224x224" if model.startswith("resnet") else f"B={b} T={t}"
print(f"| {model} bf16 | {shape} | {n:.0f} | {p:.0f} | {n / p:.2f}x | {statistics.median(nm):.1f}% "
      f"| {statistics.median(pm):.1f}% |")
PY
done
cat "$out/gpu-bench.md"
exit "$rc"
