#!/usr/bin/env bash
# DGC-Pro on the data-parallel dimension of a process grid: gpt2-tiny on the licence texts,
# 4 ranks as 2 virtual nodes x 2 with the tensor- or pipeline-parallel pairs inside the
# nodes, so each replica's data-parallel group has one rank per node and every gradient it
# exchanges crosses the compressed link (99% sparsity, every tensor compressed, clip 0.1 so
# that the local clipping acts):
#   - tp2 x dp2 and pp2 x dp2 compress over their groups (2 nodes x 1 rank each), send
#     >= 5x less than dense ring allreduces would (pp2: ~55x, as dp2; tp2: ~10x, the tensors
#     whole on every shard -- wpe, the norms, the row-parallel biases -- going dense, since
#     the shards' selections of them would differ and their copies drift apart), and end
#     within 5% of the loss of the data-parallel run with the same compression (dp2, one
#     rank per node: the same exchange over whole tensors; DGC-Pro's thresholds are per
#     tensor and its budget per slice, so a shard's selection is not the whole tensor's
#     and no tighter bound follows);
#   - a run stopped at 10 and resumed to 20 is bit-identical at both grids (the compression
#     state is per rank, padded to one row size across the stages; a tp shard's copies of
#     the whole tensors stay equal, which the checkpoint, holding tp rank 0's, relies on);
#   - resumed at another grid the state starts from zero with a warning.
. "$(dirname "$0")/lib.sh"
CKPT=build/bin/nebula-ckpt
licenses_data
DGC=(--set dgc.mode=on --set dgc.sparsity=0.99 --set dgc.min_numel=1 --set train.max_grad_norm=0.1)
run() {
    local dir=$1 np=$2
    shift 2
    licenses_run "$dir" "$np" --set ckpt.every_steps=10 --set train.global_batch=8 --set train.micro_batch=2 \
        "${DGC[@]}" "$@"
}
loss_at() { sed -n "s/^step=$2 loss=\([0-9.]*\) .*/\1/p" "$1.log"; }
reduction() { sed -n 's/^dgc: gradient traffic .*: \([0-9.]*\)x less/\1/p' "$1.log"; }
within() { $PY -c "import sys; a, b = float('$1'), float('$2'); sys.exit(0 if abs(a - b) <= $3 * abs(a) else 1)"; }
s10=ckpt/step_00000010
s20=ckpt/step_00000020

run $tmp/dp2 2 --steps 20 --ranks-per-node 1
for l in "tp2dp2 --set parallel.tp=2" "pp2dp2 --set parallel.pp=2"; do
    set -- $l
    name=$1
    shift
    run $tmp/$name 4 --steps 20 --ranks-per-node 2 "$@"
    check "$name: DGC-Pro on over the data-parallel group (2 nodes x 1 rank)" \
        grep -q "^dgc: on: sparsity 0.99 .* 2 nodes x 1 ranks" $tmp/$name.log
    x=$(reduction $tmp/$name)
    echo "    $name: ${x}x less gradient traffic between nodes; loss at step 20 $(loss_at $tmp/$name 20) (dp2: $(loss_at $tmp/dp2 20))"
    check "$name: >= 5x less gradient traffic than dense" $PY -c "import sys; sys.exit(0 if float('${x:-0}') >= 5 else 1)"
    check "$name: the loss at step 20 is dp2's with DGC-Pro within 5%" within "$(loss_at $tmp/dp2 20)" "$(loss_at $tmp/$name 20)" 0.05
    run $tmp/$name-stop 4 --steps 10 --ranks-per-node 2 "$@"
    run $tmp/$name-stop 4 --steps 20 --ranks-per-node 2 "$@"
    check "$name with DGC-Pro: stop at 10, resume to 20 -> bit-identical" $CKPT diff $tmp/$name/$s20 $tmp/$name-stop/$s20
done
run $tmp/to-pp 4 --steps 12 --ranks-per-node 2 --set parallel.pp=2 --resume $tmp/tp2dp2/$s10
check "tp2 x dp2's checkpoint resumed at pp2 x dp2: the compression state starts from zero, said" \
    grep -q "dgc: the checkpoint holds no compression state for this layout" $tmp/to-pp.log
finish
