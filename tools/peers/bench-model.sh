#!/usr/bin/env bash
# bench-model.sh — nebula-bench model beside PyTorch, same model, shape and threads,
# in one run on the same cores: PyTorch 1.13 (Debian's) and, with TORCH2=1, PyTorch 2.x
# (PyPI, installed on demand by torch2-venv.sh), each as installed and with
# OMP_WAIT_POLICY=PASSIVE (tuned). Repeats REPS times (default 3), interleaved, and
# reports medians, Nebula's ratio to each peer's better setting, peak RSS (Nebula /
# PyTorch 1.13 as installed), the ISA level Nebula's kernels ran at (NEBULA_CPU_ISA
# caps it), the BLAS's core and the fp32 GEMM path (kernels/cpu/gemm.h). PRECISION=bf16
# runs Nebula's --precision bf16 against PyTorch's CPU autocast bf16; NEBULA_ARGS adds
# options to Nebula's command (e.g. "--set device.gemm_tune=FILE"). The first line is the provenance (docs/benchmarks.md#provenance) as a
# Markdown comment, "<!-- provenance: {...} -->".
#
#   tools/peers/bench-model.sh gpt2 4 64 [THREADS] [STEPS]
#   TORCH2=1 REPS=3 tools/peers/bench-model.sh resnet50 16 1 2 3      # T is ignored for images
set -euo pipefail
cmdline=$(printf '%q ' "$0" "$@")
cd "$(dirname "$0")/../.."
model=${1:?model} batch=${2:?batch} seq=${3:?seq} threads=${4:-2} steps=${5:-5}
reps=${REPS:-3} prec=${PRECISION:-fp32}
build/bin/nebula-bench provenance --format markdown --command "${cmdline% }" --param model="$model" \
    --param batch="$batch" --param seq="$seq" --param threads="$threads" --param steps="$steps" \
    --param reps="$reps" --param precision="$prec" --param torch2="${TORCH2:-0}"
pys=(/usr/bin/python3)
[ "${TORCH2:-0}" = 1 ] && pys+=("$(tools/peers/torch2-venv.sh)")
tps() { sed -n 's/.* \([0-9.]*\) \(tok\|seq\|img\)\/s.*/\1/p' | tail -1; }
rss() { sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' | tail -1; }
isa() {  # "avx512_bf16, core Cooperlake" (OpenBLAS), "..., arch zen3" (BLIS), the level alone otherwise
    sed -n -e 's/^# cpu: ISA level \([a-z0-9_]*\).*(\(core\|arch\) \([^)]*\)).*/\1, \2 \3/p' \
        -e 't' -e 's/^# cpu: ISA level \([a-z0-9_]*\).*/\1/p' | tail -1
}
gemm_path() { sed -n 's/^# fp32 GEMMs: \(oneDNN matmul\|BLAS\).*/\1/p' | tail -1; }
torch() {  # PYTHON [ENV...]: one PyTorch run's output
    local py=$1; shift
    env "$@" "$py" tools/peers/bench_model_torch.py --model "$model" --batch "$batch" --seq "$seq" \
        --threads "$threads" --steps "$steps" --precision "$prec"
}
neb=() nrss=() prss=() peers=("" "" "" "")  # peers: 1.13, 1.13 tuned, 2.x, 2.x tuned (space-separated runs)
level=
for r in $(seq 1 "$reps"); do
    out=$(build/bin/nebula-bench model --model "$model" --batch "$batch" --seq "$seq" --threads "$threads" \
              --steps "$steps" --precision "$prec" ${NEBULA_ARGS:-})
    neb+=("$(tps <<<"$out")") nrss+=("$(rss <<<"$out")") level="$(isa <<<"$out"), $(gemm_path <<<"$out")"
    for i in "${!pys[@]}"; do
        out=$(torch "${pys[$i]}")
        peers[$((2 * i))]+=" $(tps <<<"$out")"
        [ "$i" = 0 ] && prss+=("$(rss <<<"$out")")
        peers[$((2 * i + 1))]+=" $(torch "${pys[$i]}" OMP_WAIT_POLICY=PASSIVE | tps)"
    done
done
/usr/bin/python3 - "$model" "$batch" "$seq" "$threads" "$level, $prec" "${neb[*]}" "${nrss[*]}" "${prss[*]}" \
    "${peers[@]}" <<'PY'
import statistics, sys
model, b, t, th, level = sys.argv[1:6]
neb, nr, pr = ([float(x) for x in s.split()] for s in sys.argv[6:9])
peers = [[float(x) for x in s.split()] for s in sys.argv[9:13]]
med = lambda v: statistics.median(v) if v else float("nan")
n = med(neb)
p = [med(v) for v in peers]
print(f"# runs: nebula {neb} pytorch-1.13 {peers[0]} passive {peers[1]} pytorch-2.x {peers[2]} passive {peers[3]}")
cols = f"| {p[0]:.2f} | {p[1]:.2f} | {n / max(p[0], p[1]):.2f}x "
if peers[2]:
    cols += f"| {p[2]:.2f} | {p[3]:.2f} | {n / max(p[2], p[3]):.2f}x "
print(f"| {model} B={b} T={t}, {th} threads | {level} | {n:.2f} {cols}"
      f"| {med(nr):.0f} / {med(pr):.0f} MiB |")
PY
