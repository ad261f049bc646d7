#!/usr/bin/env bash
# test_ckpt_v2 — checkpoint format version 2 against the committed fixtures (the gpt2-tiny
# of validation/fixtures/ckpt/README.md, 2 ranks, step 3):
#   - nebula-train reads the version 1 fixture directly, saying so in its log;
#   - nebula-ckpt upgrade turns a copy into version 2 (the process grid and a dtype on every
#     dataset, checksums valid), which verifies, shows the grid and reads with h5py;
#   - resuming the upgraded copy and resuming the version 1 file give the same losses bit
#     for bit and the same checkpoint at step 5 (diff: identical; that a resume equals the
#     uninterrupted run is test_ckpt_tool's and test_ckpt's: the fixtures were written by
#     older builds, whose float rounding may differ from this one's);
#   - saves record their grid (tensor parallel, ZeRO-1);
#   - the version 2 fixture resumes; a file claiming version 3 is refused (exit 2) naming
#     both versions, as a version 1 build refuses a version 2 file;
#   - convert --dtype bf16 / fp16 writes an export copy stored in 16 bits that verifies,
#     reads in h5py with the values rounded to nearest, and resumes with a warning that
#     the run continues from rounded values (a ZeRO run refuses it); --dtype fp32 widens it
#     back exactly.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
CK=build/bin/nebula-ckpt
TRAIN=build/bin/nebula-train
licenses_data
FX=validation/fixtures/ckpt
S3=step_00000003
S5=step_00000005

# the fixtures' run (README.md), continued to step 5, a loss every step; output in RUN.log
run() {
    local dir=$1
    shift
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set train.global_batch=4 --set train.seq_len=16 \
        --set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set model.max_seq_len=16 \
        --set optim.schedule=constant --set optim.warmup_steps=0 --set train.threads=1 --set train.log_interval=1 \
        --ckpt-every 5 --steps 5 "$@" >"$dir.log" 2>&1 </dev/null
}
# place FIXTURE RUN: a copy of a committed checkpoint as RUN/ckpt/step_N
place() { mkdir -p "$2/ckpt" && cp -r "$1" "$2/ckpt/"; }

# --- version 1, read directly -----------------------------------------------------------------
place $FX/v1/$S3 $tmp/direct
run $tmp/direct
check "nebula-train resumes the v1 fixture directly" grep -q "resumed from $tmp/direct/ckpt/$S3 at step 3" \
    $tmp/direct.log
check "... and its log says the file is format version 1" grep -q "is format version 1 (this build writes 2)" \
    $tmp/direct.log

# --- upgrade ----------------------------------------------------------------------------------
expect "upgrade of the v1 fixture (--out) says what changed" 0 "format version 1 -> 2" -- \
    $CK upgrade $FX/v1/$S3 --out $tmp/upgraded/ckpt
expect "... recording the grid from the stored config" 0 "parallel    dp 2 x tp 1 x pp 1, ZeRO stage 0" -- \
    $CK info $tmp/upgraded/ckpt/$S3
expect "... which verifies (every checksum unchanged), showing the new fields" 0 \
    "format     version 2, grid dp 2 x tp 1 x pp 1, ZeRO stage 0, tensors float32" -- $CK verify $tmp/upgraded/ckpt/$S3
check "... the fixture itself is untouched (still version 1)" \
    $PY -c "import h5py,sys; sys.exit(int(h5py.File('$FX/v1/$S3/state.h5','r').attrs['format_version']) != 1)"
check "h5py reads the upgraded file: version 2, the grid, a dtype on every dataset, data as in v1" \
    $PY - $tmp/upgraded/ckpt/$S3/state.h5 $FX/v1/$S3/state.h5 <<'PY'
import sys, zlib, h5py, numpy as np
new, old = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
a = new.attrs
assert int(a["format_version"]) == 2 and int(a["parallel_dp"]) == 2 and int(a["parallel_tp"]) == 1
assert int(a["parallel_pp"]) == 1 and int(a["zero_stage"]) == 0
names = []
new.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in names:
    d = new[n]
    assert d.attrs["dtype"] == ("uint8" if n.startswith("rank/") else "float32"), n
    assert np.array_equal(d[()], old[n][()]) and zlib.crc32(d[()].tobytes()) == int(d.attrs["checksum"]), n
PY
run $tmp/upgraded
check "nebula-train resumes the upgraded copy without the v1 note" \
    bash -c "grep -q 'resumed from .*$S3 at step 3' $tmp/upgraded.log && ! grep -q 'format version 1' $tmp/upgraded.log"
check "upgraded and direct resumes: the same losses bit for bit (steps 4-5)" \
    same_losses $tmp/direct $tmp/upgraded 4 exact
expect "... and the same checkpoint at step 5" 0 "identical" -- \
    $CK diff $tmp/direct/ckpt/$S5 $tmp/upgraded/ckpt/$S5

# --- version 2 fixture; a newer version --------------------------------------------------------
place $FX/v2/$S3 $tmp/v2
run $tmp/v2
check "nebula-train resumes the v2 fixture" grep -q "resumed from $tmp/v2/ckpt/$S3 at step 3" $tmp/v2.log
place $FX/v2/$S3 $tmp/v3
$PY -c "import h5py, numpy as np; h5py.File('$tmp/v3/ckpt/$S3/state.h5', 'r+').attrs['format_version'] = np.int32(3)"
run $tmp/v3 --resume $tmp/v3/ckpt/$S3
rc=$?
check "a file of format version 3 is refused (exit 2) naming both versions" \
    bash -c "[ $rc -eq 2 ] && grep -q 'format v3 > supported v2' $tmp/v3.log && ! grep -q resumed $tmp/v3.log"
expect "... and nebula-ckpt refuses it the same way (exit 2)" 2 "format v3 > supported v2" -- \
    $CK info $tmp/v3/ckpt/$S3

# --- the grid a save records --------------------------------------------------------------------
run $tmp/tp2 --set parallel.tp=2
expect "a tensor-parallel save records dp 1 x tp 2" 0 "parallel    dp 1 x tp 2 x pp 1, ZeRO stage 0" -- \
    $CK info $tmp/tp2/ckpt/$S5
run $tmp/zero --set train.zero=1
expect "a ZeRO-1 save records stage 1" 0 "parallel    dp 2 x tp 1 x pp 1, ZeRO stage 1" -- $CK info $tmp/zero/ckpt/$S5

# --- reduced-precision export copies -----------------------------------------------------------
run $tmp/straight
for dt in bf16 fp16; do
    expect "convert --dtype $dt writes an export copy" 0 "committed" -- \
        $CK convert $tmp/straight/ckpt/$S5 --dtype $dt --out $tmp/$dt/ckpt
    expect "... which verifies, naming the stored type" 0 "tensors $([ $dt = bf16 ] && echo bfloat16 || echo float16)" \
        -- $CK verify $tmp/$dt/ckpt/$S5
    check "... h5py: every tensor 16-bit, its dtype attribute, values rounded to nearest, crc32 as stored" \
        $PY - $tmp/$dt/ckpt/$S5/state.h5 $tmp/straight/ckpt/$S5/state.h5 $dt <<'PY'
import sys, zlib, h5py, numpy as np
new, old, dt = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), sys.argv[3]
names = []
new.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and not n.startswith("rank/") else None)
assert names
for n in names:
    d, src = new[n], old[n][()].astype(np.float32)
    assert d.attrs["dtype"] == {"bf16": "bfloat16", "fp16": "float16"}[dt], n
    assert d.id.get_type().get_size() == 2, n  # h5py shows bfloat16 as float32 (exactly widened)
    bits = src.view(np.uint32).astype(np.uint64)
    if dt == "bf16":  # round to nearest even, the upper 16 bits
        want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    else:
        want = src.astype(np.float16).view(np.uint16)
    got = np.empty(d.shape, np.uint16)
    d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, got, mtype=d.id.get_type())  # the bits as stored
    assert np.array_equal(got.ravel(), want.ravel()), n
    assert np.array_equal(d[()].astype(np.float32), (want.astype(np.uint32) << 16).view(np.float32) if dt == "bf16"
                          else want.view(np.float16).astype(np.float32)), n
    assert zlib.crc32(got.tobytes()) == int(d.attrs["checksum"]), n
PY
done
expect "info names the stored type" 0 "bfloat16" -- $CK info $tmp/bf16/ckpt/$S5
run $tmp/bf16 --steps 6 --resume $tmp/bf16/ckpt/$S5
check "nebula-train resumes the bf16 copy, warning that it continues from rounded values" \
    bash -c "grep -q 'resumed from .*$S5 at step 5' $tmp/bf16.log && grep -q 'stores its tensors as bfloat16' $tmp/bf16.log"
run $tmp/bf16-zero --steps 6 --resume $tmp/bf16/ckpt/$S5 --set train.zero=1
rc=$?
check "... and refuses it into ZeRO shards (exit 2), naming the tensor, its type and the fix" \
    bash -c "[ $rc -eq 2 ] && grep -q 'is stored as bfloat16, and this run holds that group in ZeRO shards.*--dtype fp32' \
             $tmp/bf16-zero.log"
expect "convert --dtype fp32 widens the fp16 copy back" 0 "committed" -- \
    $CK convert $tmp/fp16/ckpt/$S5 --dtype fp32 --out $tmp/wide/ckpt
check "... exactly: its tensors equal the fp16 values" $PY - $tmp/wide/ckpt/$S5/state.h5 $tmp/fp16/ckpt/$S5/state.h5 <<'PY'
import sys, h5py, numpy as np
w, h = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
w.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and not n.startswith("rank/") else None)
sys.exit(0 if names and all(w[n].dtype == np.float32 and w[n].attrs["dtype"] == "float32"
                            and np.array_equal(w[n][()], h[n][()].astype(np.float32)) for n in names) else 1)
PY
expect "convert --dtype with another value exits 2 naming the choices" 2 "bf16|fp16|fp32" -- \
    $CK convert $tmp/straight/ckpt/$S5 --dtype int8 --out $tmp/bad/ckpt
finish
