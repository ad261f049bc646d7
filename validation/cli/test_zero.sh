#!/usr/bin/env bash
# nebula-train --zero 1 (ZeRO-1: optimizer state sharded by consistent hashing) on the
# licence-text corpus with gpt2-tiny, constant learning rate:
#   - 2 ranks and 4 ranks (2 virtual nodes x 2): 20 steps with --zero 1 end with
#     parameters and moments bit-identical to --zero 0 (nebula-ckpt diff exits 0);
#   - a ZeRO run stopped at 10 and resumed to 20 equals the straight ZeRO run, and a
#     non-ZeRO checkpoint resumed with ZeRO equals the non-ZeRO run;
#   - a 4-rank ZeRO checkpoint resumed at 2 ranks with and without ZeRO (same global
#     batch) continues the 4-rank trajectory within 1e-5, and the ZeRO resume reports
#     the fraction of shards that moved;
#   - the memory table shows the optimizer memory reduced;
#   - on a process grid (ZeRO over each replica's data-parallel group, shards of 48 floats so
#     that they cut the tensor-parallel pieces): tp2 x dp2 and pp2 x dp2 for gpt2-tiny and
#     pp2 x dp2 for bert-tiny (the tied embedding on both ends; shards of 1024: HDF5 selects
#     a rank's ranges in time quadratic in their number) end bit-identical to the same
#     grid without ZeRO; pp2 x dp2 stopped at 10 and resumed is bit-identical; tp2 x dp2's
#     ZeRO checkpoint resumed at dp4 and dp4's at pp2 x dp2 with ZeRO continue the
#     trajectory within 1e-5; a live dp4 -> tp2 x dp2 change under ZeRO continues too;
#   - ZeRO with asynchronous checkpoints or forced DGC-Pro exits 2 saying why.
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
CKPT=build/bin/nebula-ckpt
licenses_data

# run RUN_DIR NP [ARG...]: licenses_run (lib.sh) at global batch 8, 2 per rank, small shards,
# a checkpoint every 10 steps
run() {
    local dir=$1 np=$2
    shift 2
    licenses_run "$dir" "$np" --set ckpt.every_steps=10 --set train.global_batch=8 --set train.micro_batch=2 \
        --set zero.shard_numel=2048 "$@"
}

same() { $CKPT diff "$1" "$2" >"$tmp/diff.out" 2>&1 || { tail -5 "$tmp/diff.out" | sed 's/^/    /'; return 1; }; }

# optimizer MiB of a log's memory table
opt_mib() { awk '/^  optimizer/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' "$1"; }

s10=ckpt/step_00000010
s20=ckpt/step_00000020

# --- bit-identical to the unsharded optimizer ------------------------------------------
run $tmp/z0-2 2 --steps 20 --zero 0
run $tmp/z1-2 2 --steps 20 --zero 1
check "2 ranks: --zero 1 ends bit-identical to --zero 0 (params, m, v; 20 steps)" same $tmp/z0-2/$s20 $tmp/z1-2/$s20
run $tmp/z0-4 4 --steps 20 --zero 0 --ranks-per-node 2
run $tmp/z1-4 4 --steps 20 --zero 1 --ranks-per-node 2
check "4 ranks (2 x 2): --zero 1 ends bit-identical to --zero 0 (params, m, v; 20 steps)" \
    same $tmp/z0-4/$s20 $tmp/z1-4/$s20
check "the ZeRO run says what is sharded in its memory table" grep -q "ZeRO-1: .* shards" $tmp/z1-4.log
a=$(opt_mib $tmp/z0-4.log) b=$(opt_mib $tmp/z1-4.log)
echo "    optimizer memory per rank at 4 ranks: $a MiB unsharded, $b MiB with ZeRO-1"
check "the memory table shows the optimizer memory reduced (4 ranks: < 0.5 x)" \
    $PY -c "import sys; sys.exit(0 if float('$b') < 0.5 * float('$a') else 1)"

# --- resume -------------------------------------------------------------------------------
run $tmp/z1-stop 2 --steps 10 --zero 1
run $tmp/z1-stop 2 --steps 20 --zero 1
check "ZeRO: stop at 10, resume to 20 -> bit-identical to the straight ZeRO run" same $tmp/z1-2/$s20 $tmp/z1-stop/$s20
check "... it resumed from step 10" grep -q "resumed from .*step_00000010 at step 10" $tmp/z1-stop.log
run $tmp/z0-to-z1 2 --steps 20 --zero 1 --resume $tmp/z0-2/$s10
check "a non-ZeRO checkpoint resumed with ZeRO -> bit-identical to the non-ZeRO run" \
    same $tmp/z0-2/$s20 $tmp/z0-to-z1/$s20

# --- 4 ranks -> 2 ranks, same global batch ---------------------------------------------------
run $tmp/r2z 2 --steps 20 --zero 1 --resume $tmp/z1-4/$s10
run $tmp/r2n 2 --steps 20 --zero 0 --resume $tmp/z1-4/$s10
check "a 4-rank ZeRO checkpoint resumes at 2 ranks with ZeRO" grep -q "another world size" $tmp/r2z.log
check "... within 1e-5 of the 4-rank trajectory" same_losses $tmp/z1-4 $tmp/r2z 11
check "... and reports the moved fraction" grep -q "zero: resharded from 4 to 2 ranks: .* change owner" $tmp/r2z.log
grep "zero: resharded" $tmp/r2z.log | sed 's/^/    /'
check "a 4-rank ZeRO checkpoint resumes at 2 ranks without ZeRO" grep -q "another world size" $tmp/r2n.log
check "... within 1e-5 of the 4-rank trajectory" same_losses $tmp/z1-4 $tmp/r2n 11

# --- on a process grid ---------------------------------------------------------------------------
g=(--ranks-per-node 2 --set zero.shard_numel=48)
for l in "tp2dp2 --set parallel.tp=2" "pp2dp2 --set parallel.pp=2" \
    "bpp2dp2 --set parallel.pp=2 --set model.name=bert-tiny --set zero.shard_numel=1024"; do
    set -- $l
    name=$1
    shift
    run $tmp/$name-z0 4 --steps 20 --zero 0 "${g[@]}" "$@"
    run $tmp/$name-z1 4 --steps 20 --zero 1 "${g[@]}" "$@"
    check "$name: --zero 1 ends bit-identical to --zero 0 (params, m, v; 20 steps)" \
        same $tmp/$name-z0/$s20 $tmp/$name-z1/$s20
done
check "the grid's ZeRO shards its replica's data-parallel group (2 ranks)" \
    grep -q "ZeRO-1: .* shards of <= 48 floats over 2 ranks" $tmp/tp2dp2-z1.log
run $tmp/pp2dp2-stop 4 --steps 10 --zero 1 "${g[@]}" --set parallel.pp=2
run $tmp/pp2dp2-stop 4 --steps 20 --zero 1 "${g[@]}" --set parallel.pp=2
check "pp2 x dp2 with ZeRO: stop at 10, resume to 20 -> bit-identical" same $tmp/pp2dp2-z1/$s20 $tmp/pp2dp2-stop/$s20
run $tmp/tz-to-dp4 4 --steps 20 --zero 1 "${g[@]}" --resume $tmp/tp2dp2-z1/$s10
check "tp2 x dp2's ZeRO checkpoint resumed at dp4 with ZeRO continues its trajectory within 1e-5" \
    same_losses $tmp/tp2dp2-z1 $tmp/tz-to-dp4 11
run $tmp/dp4-to-pz 4 --steps 20 --zero 1 "${g[@]}" --set parallel.pp=2 --resume $tmp/z0-4/$s10
check "dp4's checkpoint resumed at pp2 x dp2 with ZeRO continues the dp4 trajectory within 1e-5" \
    same_losses $tmp/z0-4 $tmp/dp4-to-pz 11
mkdir -p $tmp/live && printf 'tp=2\n' >$tmp/live/control
run $tmp/live 4 --steps 20 --zero 1 "${g[@]}" --resume $tmp/z0-4/$s10
check "a live dp4 -> tp2 x dp2 change under ZeRO re-forms the grid" grep -q "the groups re-formed in place" $tmp/live.log
check "... and continues the dp4 trajectory within 1e-5" same_losses $tmp/z0-4 $tmp/live 11

# --- refused combinations ----------------------------------------------------------------------
expect "ZeRO with asynchronous checkpoints exits 2 saying why" 2 "ckpt.async = true and zero.stage = 1" -- \
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/bad \
    --set data.train="$data/train.bin" --set data.val= --steps 2 --set optim.warmup_steps=0 --zero 1 --async-ckpt
expect "ZeRO with forced DGC-Pro exits 2 saying why" 2 "not supported together" -- \
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/bad \
    --set data.train="$data/train.bin" --set data.val= --steps 2 --set optim.warmup_steps=0 --zero 1 --set dgc.mode=on
finish
