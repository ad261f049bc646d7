#!/usr/bin/env bash
# make demo: the suite's main job in a couple of minutes on 2 cores. A byte-level GPT
# trains data-parallel on 2 ranks on the licence texts under /usr/share/common-licenses,
# the loss falls, checkpoints are committed, and a second run resumes from the last
# one for a few more steps (configs/train/gpt2-tiny-licenses.ini). Steps 2-6 are traced
# (runs/demo/trace.json), TensorBoard event files go to runs/demo/tb/, and nebula-report
# draws the run into runs/demo/report.html (docs/pictures.md). Last, the trained model
# continues a sentence of the licences (nebula-train sample, docs/training.md#sampling).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-2}
STEPS=${STEPS:-600}
RUN=${RUN:-runs/demo}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rm -rf "$RUN"
build/bin/nebula-train prepare build/data/licenses /usr/share/common-licenses/*
train() {
    mpirun --oversubscribe -np "$NP" build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini \
        --run-dir "$RUN" "$@" </dev/null
}
echo "== training $STEPS steps on $NP ranks"
train --steps "$STEPS" --trace --set monitor.tensorboard=true | grep -E '^(step=|eval|checkpoint|summary|batch:|gpt2)'
echo "== resuming from the last checkpoint for 100 more steps"
train --steps "$((STEPS + 100))" --set monitor.tensorboard=true | grep -E '^(resumed|step=|eval|checkpoint|summary)'
echo "== the run's figures"
build/bin/nebula-report "$RUN"
echo "== where everything went"
ls -1 "$RUN" "$RUN/ckpt"
echo "metrics: $RUN/metrics.jsonl ($(wc -l <"$RUN/metrics.jsonl") lines); inspect a checkpoint with:"
echo "  h5dump -H $(ls -d "$RUN"/ckpt/step_* | tail -1)/state.h5"
echo "figures: open $RUN/report.html in a browser (one file, no network needed);"
echo "  tensorboard --logdir $RUN/tb (build/venv/bin/tensorboard); $RUN/trace.json in https://ui.perfetto.dev"
echo "== a sample from the trained model (nebula-train sample, its newest checkpoint)"
build/bin/nebula-train sample "$RUN" --prompt "Permission is" --tokens 48 --seed 1
