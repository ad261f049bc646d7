#!/usr/bin/env bash
# test_tensorboard — monitor.tensorboard and monitor.histogram_interval (docs/metrics.md,
# "TensorBoard event files"), read back with TensorBoard's own reader (build/venv).
# GPT-2 tiny on 2 ranks as 2 nodes, a scalar line every 2 steps, an evaluation every 3,
# histograms every 2 steps; 6 steps with dense gradients, then a second launch that resumes
# from the step-6 checkpoint and runs to step 10 with DGC-Pro on (its dgc_* keys in the
# train records). validation/cli/tensorboard_check.py then checks, against metrics.jsonl and
# the checkpoint (h5py): a second event file for the second launch, every scalar equal to
# its record's value in float32, every histogram summing to its layer's element count, the
# weights of step 10 bucket for bucket, and the grad_hist records' sum rule. A run without
# the keys writes no RUN_DIR/tb but still its grad_hist records (the default interval).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
VPY=build/venv/bin/python
if ! $VPY -c "import tensorboard, h5py" >/dev/null 2>&1; then
    echo "FAIL - $VPY with the tensorboard package is missing: run make deps (tools/deps.sh creates build/venv)"
    exit 1
fi
licenses_data
d=$tmp/run
# tb_run STEPS [ARG...]: one launch of the run in $d (output appended to $d.log)
tb_run() {
    local steps=$1
    shift
    $MPIRUN -np 2 build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir $d \
        --set data.train=$data/train.bin --set data.val=$data/val.bin --set optim.schedule=constant \
        --set optim.warmup_steps=0 --set train.global_batch=8 --set train.log_interval=2 \
        --set train.eval_interval=3 --set train.eval_batches=1 --set ckpt.every_steps=5 --ranks-per-node 1 \
        --set monitor.tensorboard=true --set monitor.histogram_interval=2 --steps "$steps" "$@" >>$d.log 2>&1 </dev/null
}
check "launch 1: 6 dense steps with monitor.tensorboard = true" tb_run 6
check "launch 1 says where its event file is" grep -q "^tensorboard: writing $d/tb/events.out.tfevents\." $d.log
check "launch 2: resumed from step 6 to step 10 with DGC-Pro on" tb_run 10 --set dgc.mode=on
check "launch 2 resumed and compressed" bash -c "grep -q '\"kind\":\"resume\",\"step\":6' $d/metrics.jsonl && \
    grep -q '\"dgc_density\"' $d/metrics.jsonl"
check "TensorBoard's reader against metrics.jsonl and the checkpoint" $VPY validation/cli/tensorboard_check.py $d 2

# without the keys: no event file, the grad_hist record at the default interval (100)
expect "defaults: a 100-step run" 0 "summary:" -- $MPIRUN -np 2 build/bin/nebula-train --model gpt2-tiny \
    --micro-batch 2 --seq-len 16 --steps 100 --run-dir $tmp/plain --set train.log_interval=100
check "defaults: no RUN_DIR/tb, one grad_hist record at step 100" bash -c "[ ! -e $tmp/plain/tb ] && \
    [ \"\$(grep -c '\"kind\":\"grad_hist\"' $tmp/plain/metrics.jsonl)\" = 1 ] && \
    grep -q '\"kind\":\"grad_hist\",\"step\":100,' $tmp/plain/metrics.jsonl"
expect "monitor.histogram_interval = 0: no grad_hist record" 0 "summary:" -- $MPIRUN -np 2 build/bin/nebula-train \
    --model gpt2-tiny --micro-batch 2 --seq-len 16 --steps 4 --run-dir $tmp/off --set monitor.histogram_interval=0
check "monitor.histogram_interval = 0: none written" bash -c "! grep -q grad_hist $tmp/off/metrics.jsonl"
expect "a negative monitor.histogram_interval is refused, naming the key" 2 "monitor.histogram_interval" -- \
    build/bin/nebula-train --model gpt2-tiny --steps 1 --run-dir $tmp/bad --set monitor.histogram_interval=-1
finish
