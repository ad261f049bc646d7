#!/usr/bin/env bash
# bench-models.sh — Nebula's training throughput beside PyTorch's (`nebula-bench table
# models` runs this): per model, shape and precision, tools/peers/bench-model.sh runs
# nebula-bench model and bench_model_torch.py on the same cores, interleaved --reps
# times, PyTorch 1.13 (Debian's) and with --torch2 PyTorch 2.x (PyPI, installed on
# demand into its own environment), each as installed and with OMP_WAIT_POLICY=PASSIVE;
# a cell is the median, a ratio is Nebula over the peer's better setting. bf16 rows run
# --precision bf16 against PyTorch's CPU autocast bf16; they are left out where the CPU
# has no bf16 kernels (Nebula refuses bf16 there). --paths runs every row once per
# condition, Nebula and the peers alike: auto (as the machine is), prescott
# (OPENBLAS_CORETYPE=Prescott: the BLAS on SSE3 kernels, as Debian's OpenBLAS runs on
# CPUs newer than it), or an ISA level (NEBULA_CPU_ISA=avx2, ...; Nebula's kernels only).
# The header names the CPU, its ISA level, the fp32 GEMM path, the measured peaks and the
# GEMM rates of a Nebula process; each row names its ISA level, BLAS core and GEMM path;
# the first line is the table's provenance, "<!-- provenance: {...} -->"
# (docs/benchmarks.md#provenance).
#
# Usage: tools/bench-models.sh [--models gpt2:4:64,resnet50:16:1,...] [--precisions fp32,bf16]
#                              [--paths auto,prescott,avx2] [--reps R] [--steps N] [--threads N] [--torch2]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table models: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
models=gpt2:4:64,gpt2:8:128,bert-base:8:128,resnet50:16:1,resnet18-cifar:64:1
precisions=fp32,bf16 paths=auto reps=3 steps=5 threads=2 torch2=0
while [ $# -gt 0 ]; do
    case $1 in
    --models) [ $# -ge 2 ] || die "--models needs a value"; models=$2; shift 2 ;;
    --precisions) [ $# -ge 2 ] || die "--precisions needs a value"; precisions=$2; shift 2 ;;
    --paths) [ $# -ge 2 ] || die "--paths needs a value"; paths=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads=$2; shift 2 ;;
    --torch2) torch2=1; shift ;;
    -h | --help) sed -n '2,21s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --models, --precisions, --paths, --reps, --steps, --threads or --torch2" ;;
    esac
done
for v in reps steps threads; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -ge 1 ]] || die "--$v must be a positive integer, not '${!v}'"
done
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a prec_list <<<"$precisions"
for m in "${model_list[@]}"; do
    IFS=: read -r name batch seq <<<"$m"
    [[ -n $name && $batch =~ ^[0-9]+$ && $seq =~ ^[0-9]+$ ]] || die "bad model '$m'; expected NAME:BATCH:SEQ (SEQ 1 for images), e.g. gpt2:4:64"
    [ -f "configs/models/$name.ini" ] || die "unknown model '$name'; expected one of: $(cd configs/models && ls -- *.ini | sed 's/\.ini$//' | tr '\n' ' ')"
done
for p in "${prec_list[@]}"; do
    [[ $p == fp32 || $p == bf16 ]] || die "unknown precision '$p'; expected fp32 or bf16"
done
IFS=, read -r -a path_list <<<"$paths"
path_env() {  # PATH: the environment of that condition
    case $1 in
    auto) echo "NEBULA_CPU_ISA=auto" ;;
    prescott) echo "OPENBLAS_CORETYPE=Prescott" ;;
    *) echo "NEBULA_CPU_ISA=$1" ;;
    esac
}
for c in "${path_list[@]}"; do
    case $c in
    auto | prescott | base | avx2 | avx512 | avx512_bf16 | amx) ;;
    *) die "unknown path '$c'; expected auto, prescott or an ISA level (base, avx2, avx512, avx512_bf16, amx)" ;;
    esac
done
bench=build/bin/nebula-bench
[ -x $bench ] || die "$bench is missing; run make first"

$bench provenance --format markdown --command "${cmdline% }" --param models="$models" --param precisions="$precisions" \
    --param paths="$paths" --param reps="$reps" --param steps="$steps" --param threads="$threads" --param torch2="$torch2" ||
    { echo "nebula-bench table models: nebula-bench provenance failed" >&2; exit 1; }
# The header: one small Nebula run prints the CPU, the ISA level and the GEMM rates.
if $bench model --model gpt2-tiny --batch 1 --seq 8 --steps 1 --threads "$threads" --precision bf16 \
    >/tmp/nebula-models-probe.$$ 2>&1; then
    bf16_ok=1
else
    bf16_ok=0
    $bench model --model gpt2-tiny --batch 1 --seq 8 --steps 1 --threads "$threads" >/tmp/nebula-models-probe.$$ 2>&1 ||
        { cat /tmp/nebula-models-probe.$$ >&2; rm -f /tmp/nebula-models-probe.$$; die "nebula-bench model failed"; }
fi
grep -E '^# (cpu|fp32 GEMMs|peak|GEMM)' /tmp/nebula-models-probe.$$ | sed 's/; model FLOPs per step.*//'
rm -f /tmp/nebula-models-probe.$$
echo "# $reps interleaved runs per cell, medians; $steps timed steps per run; threads $threads"
hdr="| model | ISA, BLAS core, GEMM path, precision | Nebula | PyTorch 1.13 | 1.13 PASSIVE | ratio "
sep="|---|---|---|---|---|---"
if [ "$torch2" = 1 ]; then hdr+="| PyTorch 2.x | 2.x PASSIVE | ratio "; sep+="|---|---|---"; fi
echo "$hdr| peak RSS Nebula / PyTorch 1.13 |"
echo "$sep|---|"
for p in "${prec_list[@]}"; do
    if [ "$p" = bf16 ] && [ "$bf16_ok" = 0 ]; then
        echo "# bf16 rows left out: this CPU has no bf16 kernels (nebula-bench model --precision bf16 says why)"
        continue
    fi
    for c in "${path_list[@]}"; do
        for m in "${model_list[@]}"; do
            IFS=: read -r name batch seq <<<"$m"
            env $(path_env "$c") TORCH2=$torch2 REPS=$reps PRECISION=$p \
                tools/peers/bench-model.sh "$name" "$batch" "$seq" "$threads" "$steps" | grep '^|'
        done
    done
done
