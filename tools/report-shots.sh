#!/usr/bin/env bash
# report-shots.sh — the screenshots of docs/pictures.md: each figure of nebula-report alone
# (--only fig-NAME), rendered by headless Chromium 1000 px wide, cut below the figure and
# stored as a 256-colour PNG in docs/pictures/fig-NAME.png.
#
# Usage: tools/report-shots.sh [RUN_DIR ...]
#   With run directories: their figures (as `nebula-report RUN_DIR ...` draws them).
#   Without: the sample first, in a temporary directory: gpt2-tiny at 2 ranks (2 virtual
#   nodes, DGC-Pro, an alert rule) to step 60, its newest checkpoint removed and relaunched
#   to step 80; a second run of 40 steps beside a soak's samples.csv and report.json; bench
#   table outputs. The records are the trainer's own, with rank 1 slowed and layer 2's gradient
#   zeroed by its test hooks (runtime.slowdown, runtime.zero_grad_layer), grad_hist every 2
#   steps, attention every 10, steps 2-6 traced (DGC-Pro) and the soak's run traced (dense
#   buckets); the soak and bench files are fixtures of validation/cli/report_check.py.
# Needs chromium; python3-pil (Debian's) for the cut and the palette, else the PNGs are
# stored as Chromium writes them.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "report-shots: $*" >&2; exit 2; }
for exe in report train; do
    [ -x build/bin/nebula-$exe ] || die "build/bin/nebula-$exe is missing; run make first"
done
command -v chromium >/dev/null || die "chromium is missing (tools/deps.sh install)"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
PY=/usr/bin/python3

# train DIR NP [ARG...]: the test's gpt2-tiny run on the licence texts
train() {
    local dir=$1 np=$2
    shift 2
    mpirun --oversubscribe -np "$np" build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini \
        --run-dir "$dir" --set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin" \
        --set train.global_batch=8 --set optim.warmup_steps=5 --set train.log_interval=1 \
        --set train.eval_interval=5 --set train.eval_batches=1 "$@" >>"$dir.log" 2>&1 </dev/null ||
        { tail -5 "$dir.log" >&2; die "training into $dir failed"; }
}

sample() {
    build/bin/nebula-train prepare "$tmp/data" /usr/share/common-licenses/* >/dev/null
    local opts=(--ranks-per-node 1 --set dgc.mode=on --set dgc.min_numel=1024 --set dgc.warmup_steps=4
                --set monitor.explosion=0.05 --set ckpt.every_steps=20 --set runtime.slowdown=1:20
                --set runtime.zero_grad_layer=2 --set monitor.histogram_interval=2
                --set monitor.attention_interval=10)
    train "$tmp/run" 2 --steps 60 "${opts[@]}" --trace --set trace.steps=2-6
    rm -rf "$tmp/run/ckpt/step_00000060"
    train "$tmp/run" 2 --steps 80 "${opts[@]}"
    mkdir -p "$tmp/soak" "$tmp/bench"
    train "$tmp/soak/run" 2 --steps 40 --ranks-per-node 1 --trace
    $PY validation/cli/report_check.py soak "$tmp/soak"
    $PY validation/cli/report_check.py bench "$tmp/bench"
    echo "report-shots: sample runs in $tmp"
}

if [ $# -eq 0 ]; then
    sample
    set -- "$tmp/run" "$tmp/soak" "$tmp/bench"
fi
mkdir -p docs/pictures
for fig in curves resources gradients attention dgc timeline soak scaling; do
    html=$tmp/fig-$fig.html png=docs/pictures/fig-$fig.png
    build/bin/nebula-report "$@" --only "fig-$fig" --out "$html" >/dev/null
    rm -f "$tmp/shot.png"
    for opt in --headless=new --headless; do
        timeout 60 chromium "$opt" --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" --hide-scrollbars \
            --screenshot="$tmp/shot.png" --window-size=1000,4000 "file://$html" >"$tmp/chromium.log" 2>&1 || true
        [ -s "$tmp/shot.png" ] && break
    done
    [ -s "$tmp/shot.png" ] || { tail -3 "$tmp/chromium.log" >&2; die "chromium wrote no screenshot of fig-$fig"; }
    # cut the white below the figure (8 px kept) and store a palette of 256 colours: flat charts lose
    # nothing, and it is a quarter of the size
    $PY - "$tmp/shot.png" "$png" <<'PY' || cp "$tmp/shot.png" "$png"
import sys
from PIL import Image, ImageChops
im = Image.open(sys.argv[1]).convert("RGB")
box = ImageChops.difference(im, Image.new("RGB", im.size, (255, 255, 255))).getbbox()
if box:
    im = im.crop((0, 0, im.width, min(im.height, box[3] + 8)))
im.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(sys.argv[2], optimize=True)
PY
    echo "report-shots: $png ($(($(stat -c %s "$png") / 1024)) KiB)"
done
