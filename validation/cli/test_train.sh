#!/usr/bin/env bash
# nebula-train end to end on the licence-text corpus with gpt2-tiny (constant learning
# rate, so train.steps only bounds the loop and runs of different lengths share their
# first steps exactly):
#   - data-parallel equivalence: 1 rank x 8, 1 rank x 4 x accumulation 2, 2 ranks x 4
#     and 4 ranks (2 virtual nodes x 2, hierarchical allreduce) x 2 give the same
#     20-step loss trajectory within 1e-5 relative;
#   - resume: stopping at step 20 and resuming to 30 ends with parameters and moments
#     bit-identical to a straight 30-step run; so do resuming after a SIGKILL and
#     resuming from an asynchronous checkpoint, and a DGC-Pro run (compression state
#     included);
#   - a corrupted newest checkpoint is reported and the previous one is used;
#   - a checkpoint of another architecture is refused;
#   - a checkpoint written at 4 ranks resumes at 2 with the same global batch
#     (accumulation 2) and continues the 4-rank trajectory within 1e-5;
#   - ranks sharing cores split them: 4 unbound ranks take nproc / 4 threads each;
#   - inconsistent batch sizes and bad data files exit 2 naming the problem.
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
licenses_data

# run RUN_DIR NP [ARG...]: licenses_run (lib.sh)
run() { licenses_run "$@"; }

# --- data-parallel equivalence -------------------------------------------------
run $tmp/dp1 1 --steps 20 --set train.global_batch=8 --set train.micro_batch=8
run $tmp/dp1a 1 --steps 20 --set train.global_batch=8 --set train.micro_batch=4
run $tmp/dp2 2 --steps 20 --set train.global_batch=8 --set train.micro_batch=4
run $tmp/dp4 4 --steps 20 --set train.global_batch=8 --set train.micro_batch=2 --ranks-per-node 2 \
    --set comm.algo=hier
check "1 rank x 8 = 1 rank x 4 x accum 2 (20 steps)" same_losses $tmp/dp1 $tmp/dp1a
check "1 rank x 8 = 2 ranks x 4 (20 steps)" same_losses $tmp/dp1 $tmp/dp2
check "1 rank x 8 = 4 ranks (2 nodes x 2, hier) x 2 (20 steps)" same_losses $tmp/dp1 $tmp/dp4
check "the loss falls (step 20 < step 1 - 0.5)" $PY -c "
import json,sys; l=[json.loads(x) for x in open('$tmp/dp1/metrics.jsonl')]; l=[j['loss'] for j in l if j['kind']=='train']
sys.exit(0 if l[-1] < l[0] - 0.5 else 1)"

# --- threads per rank: ranks whose CPU sets overlap split the cores (torchrun's rule),
# whether MPI sees them on one host or, as here, on virtual nodes of one rank each
MPIRUN="$MPIRUN --bind-to none" run $tmp/share 4 --steps 1 --set train.global_batch=8 --set train.micro_batch=2 \
    --set runtime.bind=none --ranks-per-node 1
want=$(($(nproc) / 4))
[ $want -ge 1 ] || want=1
threads="$want threads"; [ $want -eq 1 ] && threads="1 thread"
check "4 unbound ranks on $(nproc) cores take $threads each" grep -q "x 4 ranks; $threads per rank" $tmp/share.log

# --- resume bit-identical ----------------------------------------------------------
ck="--set ckpt.every_steps=10 --set train.global_batch=8"
run $tmp/straight 2 --steps 30 $ck
run $tmp/stopped 2 --steps 20 $ck
run $tmp/stopped 2 --steps 30 $ck
# identical FILE1 FILE2: every parameter and optimizer moment bit-identical (h5diff exact)
identical() {
    local g
    for g in /params /optim/m /optim/v; do h5diff -q "$1" "$2" $g $g || return 1; done
}
s30=ckpt/step_00000030/state.h5
check "resume at step 20 (clean stop) -> step 30 bit-identical to the straight run" \
    identical $tmp/straight/$s30 $tmp/stopped/$s30
check "the resumed run says where it resumed" grep -q "resumed from .*step_00000020 at step 20" $tmp/stopped.log
# The same with asynchronous checkpoints, resuming from step 10, whose background copy
# overlapped step 11 (ckpt_fence before its update)
run $tmp/async 2 --steps 20 $ck --set ckpt.async=true
run $tmp/async 2 --steps 30 $ck --set ckpt.async=true --resume $tmp/async/ckpt/step_00000010
check "async checkpoints: resume from step 10 -> step 30 bit-identical to the straight run" \
    identical $tmp/straight/$s30 $tmp/async/$s30

# DGC-Pro (2 virtual nodes, SGD with momentum correction): stop at 20, resume to 30;
# parameters, moments and the compression state (/rank/dgc: velocities, residuals)
# bit-identical to the straight run
dg="$ck --ranks-per-node 1 --set optim.name=sgd --set optim.lr=0.3 --set dgc.mode=on --set dgc.min_numel=1024 \
    --set dgc.warmup_steps=8 --set dgc.value_dtype=fp16"
run $tmp/dgc-straight 2 --steps 30 $dg
run $tmp/dgc-stopped 2 --steps 20 $dg
run $tmp/dgc-stopped 2 --steps 30 $dg
same_sgd_state() {
    local g
    for g in /params /optim/m /rank/dgc; do h5diff -q "$1" "$2" $g $g || return 1; done
}
check "DGC-Pro: resume at step 20 -> step 30 bit-identical, compression state included" \
    same_sgd_state $tmp/dgc-straight/$s30 $tmp/dgc-stopped/$s30
check "DGC-Pro: the run reports its traffic reduction" grep -q "gradient traffic between nodes .* less" $tmp/dgc-stopped.log
check "DGC-Pro: the compressed run differs from the dense one (compression took effect)" \
    eval '! h5diff -q $tmp/straight/$s30 $tmp/dgc-straight/$s30 /params /params'
# compression turned on for a run whose checkpoints have none, and a DGC-Pro checkpoint
# resumed with another number of ranks per node: both go on from a fresh compression state
cp -r $tmp/straight $tmp/dgc-late
run $tmp/dgc-late 2 --steps 33 $dg --set optim.name=adamw
check "DGC-Pro turned on over a dense checkpoint: resumes with a fresh compression state" \
    grep -q "holds no compression state" $tmp/dgc-late.log
cp -r $tmp/dgc-straight $tmp/dgc-2x2
run $tmp/dgc-2x2 4 --steps 33 $dg --ranks-per-node 2 --set train.micro_batch=2
check "a DGC-Pro checkpoint resumed at 2 nodes x 2 goes on with a fresh compression state" \
    grep -q "holds no compression state" $tmp/dgc-2x2.log

# SIGKILL after the step-10 commit, then resume explicitly from it
mkdir -p $tmp/killed
# (keep every checkpoint: on a loaded machine the run may be steps past 10 when the kill lands,
# and its own step-40 commit would retire step 10; what it committed after 10 is removed)
( run $tmp/killed 2 --steps 100000 $ck --set ckpt.keep_last=1000000 ) &
for i in $(seq 1 600); do [ -e $tmp/killed/ckpt/step_00000010/COMMITTED ] && break; sleep 0.1; done
pkill -KILL -f "run-dir $tmp/killed" ; wait 2>/dev/null
find $tmp/killed/ckpt -mindepth 1 -maxdepth 1 ! -name step_00000010 -exec rm -rf {} +
run $tmp/killed 2 --steps 30 $ck --resume $tmp/killed/ckpt/step_00000010
check "SIGKILL after a commit, resume from it -> step 30 bit-identical" \
    identical $tmp/straight/$s30 $tmp/killed/$s30
run $tmp/killed 2 --steps 31 $ck --resume auto
check "after SIGKILL, --resume auto finds the newest committed checkpoint" grep -q "resumed from" $tmp/killed.log

# --- corrupt newest checkpoint falls back --------------------------------------------
cp -r $tmp/stopped $tmp/corrupt
$PY - $tmp/corrupt/ckpt/step_00000030/state.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    off = f["params/h.0.attn.c_attn.weight"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 0x40]))
PY
run $tmp/corrupt 2 --steps 32 $ck
check "a corrupted newest checkpoint is reported (names the dataset)" grep -q "h.0.attn.c_attn.weight" $tmp/corrupt.log
check "... and the previous committed one is used" grep -q "resumed from .*step_00000020" $tmp/corrupt.log

# --- another architecture is refused ---------------------------------------------------
expect "a checkpoint of another architecture is refused, listing its tensors" 2 "does not match this run's parameter table" -- \
    $MPIRUN -np 1 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/stopped \
    --set data.train="$data/train.bin" --set data.val= --steps 40 --set model.n_layer=1 $ck

# --- 4 ranks -> 2 ranks, same global batch ------------------------------------------------
rs="--set ckpt.every_steps=10 --set train.global_batch=8 --set train.micro_batch=2"
run $tmp/four 4 --steps 20 $rs --ranks-per-node 2
run $tmp/reshard 4 --steps 10 $rs --ranks-per-node 2
run $tmp/reshard 2 --steps 20 $rs
check "a 4-rank checkpoint resumes at 2 ranks (accumulation 2)" grep -q "another world size" $tmp/reshard.log
check "... and continues the 4-rank trajectory within 1e-5" same_losses $tmp/four $tmp/reshard 11

# --- bad input ------------------------------------------------------------------------------
expect "inconsistent batch sizes name the keys" 2 "train.global_batch = 10" -- \
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/bad \
    --set data.train="$data/train.bin" --set train.global_batch=10 --set train.micro_batch=4
head -c 1000 /dev/urandom >$tmp/garbage.bin
expect "a file that is no token file is refused naming it" 2 "garbage.bin" -- \
    $MPIRUN -np 1 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/bad \
    --set data.train=$tmp/garbage.bin
finish
