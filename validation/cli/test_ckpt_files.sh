#!/usr/bin/env bash
# test_ckpt_files — checkpoints seen from outside one run: a 4-rank checkpoint (two
# virtual nodes) resumed at 4, 2 and 1 ranks (resharded: tensors bit-identical, per-rank
# state is rank 0's), `h5dump -H` listing its layout, and h5py reading every tensor with
# torch's shape, its values and crc32 checksum; the asynchronous writer's file equals the
# synchronous one object by object.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
T=build/test/mpi/test_ckpt
H5=step_00000100/state.h5

expect "write at 4 ranks, sync (MPI-IO)" 0 "ok - write (sync)" -- $MPIRUN -np 4 $T write "$tmp/sync" --ranks-per-node 2
expect "write at 4 ranks, async" 0 "ok - write (async)" -- $MPIRUN -np 4 $T write "$tmp/async" --async --ranks-per-node 2
expect "resume at 4 ranks: not resharded" 0 "ok - tensors bit-identical, own blob row" -- \
    $MPIRUN -np 4 $T read "$tmp/sync" 4
expect "resume at 2 ranks: resharded, rank 0's blobs" 0 "ok - resharded: tensors bit-identical, blobs are rank 0's" -- \
    $MPIRUN -np 2 $T read "$tmp/sync" 4
expect "resume at 1 rank: resharded, rank 0's blobs" 0 "ok - resharded: tensors bit-identical, blobs are rank 0's" -- \
    $MPIRUN -np 1 $T read "$tmp/async" 4
for text in 'GROUP "optim"' 'DATASET "h.0.attn.c_attn.weight"' 'DATASPACE  SIMPLE { ( 8, 3, 3, 3 ) / ( 8, 3, 3, 3 ) }' \
            'DATASET "logit_scale"' 'DATASPACE  SIMPLE { ( 4, 40 ) / ( 4, 40 ) }' 'ATTRIBUTE "checksum"' \
            'ATTRIBUTE "row_checksums"' 'ATTRIBUTE "table_hash"' 'ATTRIBUTE "magic"'; do
    expect "h5dump -H shows $text" 0 "$text" -- h5dump -H "$tmp/sync/$H5"
done
expect "h5dump -a /magic" 0 '(0): "NEBULA-CKPT"' -- h5dump -a /magic "$tmp/sync/$H5"
# Every rank killed (SIGKILL) while the background thread of step 200 has not written yet:
# its .tmp holds metadata and no data; resuming skips it and takes step 100.
$MPIRUN -np 2 $T write "$tmp/killed" --kill >"$tmp/killed.log" 2>&1
expect "killed during an async save: the file's metadata exists" 0 "" -- test -f "$tmp/killed/.step_00000200.tmp/state.h5"
expect "killed during an async save: resume skips it, takes step 100" 0 ".step_00000200.tmp: an unfinished save" -- \
    $MPIRUN -np 2 $T read "$tmp/killed" 2
expect "h5py: shapes, values, checksums, rows; async equals sync" 0 "ok - async file equals the sync file" -- \
    /usr/bin/python3 validation/cli/ckpt_h5py.py "$tmp/sync/$H5" "$tmp/async/$H5"
finish
