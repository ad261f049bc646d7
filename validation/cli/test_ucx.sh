#!/usr/bin/env bash
# UCX, the inter-node transport of the design: OpenMPI's UCX PML selected for a 2-rank
# nebula-train run on 2 virtual nodes (so the gradient allreduce crosses the leaders'
# communicator), checked to be the PML OpenMPI chose, and the loss and gradient-norm
# trajectory bit for bit the one of the same run over ob1: the reduction order is
# Nebula's, the transport only moves the bytes. Where UCX cannot open (no UCX PML in
# this OpenMPI, no usable transport) the test says why and is skipped.
cd "$(dirname "$0")/../.." || exit 1
. validation/cli/lib.sh

run() {  # run PML RUNDIR: 6 steps of GPT-2 tiny on synthetic data, one line per step
    $MPIRUN --bind-to none -np 2 --mca pml "$1" --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca pml_base_verbose 10 build/bin/nebula-train --model gpt2-tiny --set train.micro_batch=2 \
        --seq-len 32 --steps 6 --seed 7 --data synthetic-fixed --set train.threads=1 --set runtime.bind=none \
        --set train.log_interval=1 --set runtime.ranks_per_node=1 --set ckpt.every_steps=6 --run-dir "$2" 2>&1
}
out=$(run ucx "$tmp/ucx")
if ! grep -q 'select: component ucx selected' <<<"$out"; then
    why=$(grep -m1 -iE 'no components|not available|unable|error' <<<"$out" | cut -c1-160)
    echo "SKIP: OpenMPI's UCX PML cannot open here (${why:-no UCX PML selected})"
    exit 77
fi
echo "ok - OpenMPI selected the UCX PML on both ranks ($(grep -c 'select: component ucx selected' <<<"$out") of 2)"
traj() { sed -n 's/^step=\([0-9]*\) loss=\([^ ]*\) lr=[^ ]* gnorm=\([^ ]*\).*/\1 \2 \3/p'; }
ucx=$(traj <<<"$out")
ob1=$(run ob1 "$tmp/ob1" | traj)
check "6 steps over UCX" test "$(wc -l <<<"$ucx")" -eq 6
check "loss and gradient norm over UCX equal ob1's bit for bit" test "$ucx" = "$ob1"
check "the final parameters are the same: nebula-ckpt diff of the two runs" \
    build/bin/nebula-ckpt diff "$tmp/ucx/ckpt/step_00000006" "$tmp/ob1/ckpt/step_00000006"
finish
