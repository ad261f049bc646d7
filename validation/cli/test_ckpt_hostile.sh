#!/usr/bin/env bash
# test_ckpt_hostile — nebula-ckpt's outputs never touch a committed checkpoint, and
# non-finite weights are never converted:
#   - convert --to --out naming a committed checkpoint's state.h5, its COMMITTED marker,
#     a new file inside its directory, or the directory itself exits 2 naming the
#     checkpoint, which still verifies afterwards;
#   - convert --from --out DIR exits 2 when DIR/step_00000000 already exists, and when DIR
#     is inside a committed checkpoint; reshard --out DIR exits 2 when DIR holds another
#     committed checkpoint of the same step;
#   - a checkpoint with a NaN weight (its checksum made to match) is not converted to
#     safetensors (exit 2, naming the tensor), nor is a safetensors file with an Inf one;
#   - safetensors metadata, or an llm.c header, claiming a model its file cannot hold
#     (211 TB) is refused before anything is allocated (exit 2);
#   - damaged HDF5 metadata is a damaged checkpoint (exit 1, no HDF5 error stack), not
#     "not a Nebula checkpoint"; a newer format version says to upgrade Nebula;
#   - a FIFO where a file is read (a safetensors or llm.c input, a checkpoint's state.h5
#     or COMMITTED marker on resume and in nebula-ckpt) is refused at once, never opened
#     (open(2) of a FIFO without a writer blocks forever).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
CK=${CK:-build/bin/nebula-ckpt}
TRAIN=build/bin/nebula-train

timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 2 --set train.threads=1 --set runtime.bind=none \
    --set ckpt.every_steps=2 --run-dir "$tmp/run" >"$tmp/run.log" 2>&1 </dev/null
S=$tmp/run/ckpt/step_00000002
check "a committed checkpoint to work on" test -f "$S/COMMITTED"
sum_before=$(md5sum "$S/state.h5" "$S/COMMITTED")

for out in "$S/state.h5" "$S/COMMITTED" "$S/new.safetensors"; do
    expect "convert --to --out ${out#$tmp/} is refused" 2 "committed checkpoint" -- \
        $CK convert "$S" --to safetensors --out "$out"
done
expect "convert --to --out the checkpoint's directory is refused" 2 "is a directory" -- \
    $CK convert "$S" --to safetensors --out "$S"
check "the checkpoint is untouched and verifies" bash -c "[ \"\$(md5sum '$S/state.h5' '$S/COMMITTED')\" = '$sum_before' ] && $CK verify '$S' >/dev/null"

expect "convert --to a new file works" 0 "converted" -- $CK convert "$S" --to safetensors --out "$tmp/m.safetensors"
expect "convert --from into a fresh directory works" 0 "converted" -- \
    $CK convert "$tmp/m.safetensors" --from safetensors --out "$tmp/conv"
expect "convert --from again is refused: step_00000000 exists" 2 "step_00000000 already exists and is committed" -- \
    $CK convert "$tmp/m.safetensors" --from safetensors --out "$tmp/conv"
expect "convert --from into a committed checkpoint is refused" 2 "committed checkpoint" -- \
    $CK convert "$tmp/m.safetensors" --from safetensors --out "$S/sub"
mkdir -p "$tmp/other/ckpt" && cp -r "$S" "$tmp/other/ckpt/"
expect "reshard --out over another committed step is refused" 2 "already exists and is committed" -- \
    $CK reshard "$S" --dp 2 --out "$tmp/other/ckpt"

# NaN and Inf weights
nan=$tmp/nan/step_00000002
mkdir -p "$tmp/nan" && cp -r "$S" "$nan"
$PY - "$nan/state.h5" "$tmp/m.safetensors" "$tmp/inf.safetensors" <<'PY'
import json, struct, sys, zlib
import h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/params/h.1.mlp.c_fc.weight"]
    a = d[()]
    a.flat[3] = np.nan
    d[...] = a
    d.attrs["checksum"] = np.uint32(zlib.crc32(a.tobytes()) & 0xFFFFFFFF)
raw = bytearray(open(sys.argv[2], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
start = 8 + n + h["ln_f.weight"]["data_offsets"][0]
raw[start:start + 4] = struct.pack("<f", float("inf"))
open(sys.argv[3], "wb").write(raw)
PY
expect "a checkpoint with a NaN weight is not converted" 2 "h.1.mlp.c_fc.weight holds 1 NaN or Inf value(s)" -- \
    $CK convert "$nan" --to safetensors --out "$tmp/nan.safetensors"
check "nothing was written" test ! -e "$tmp/nan.safetensors"
expect "a safetensors file with an Inf weight is not converted" 2 "ln_f.weight holds 1 NaN or Inf value(s)" -- \
    $CK convert "$tmp/inf.safetensors" --from safetensors --out "$tmp/inf"

# Metadata that claims a model its file cannot hold (n_layer 1024 x n_embd 65536: 211 TB)
$PY - "$tmp/m.safetensors" "$tmp/huge.safetensors" <<'PY'
import json, re, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
ini = h["__metadata__"]["nebula_config"]
for key, v in (("n_layer", 1024), ("n_embd", 65536)):
    ini, k = re.subn(r"(?m)^%s\s*=.*$" % key, "%s = %d" % (key, v), ini)
    if not k: ini = ini.replace("[model]\n", "[model]\n%s = %d\n" % (key, v), 1)
h["__metadata__"]["nebula_config"] = ini
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
expect "metadata claiming a model its file cannot hold is refused before allocating" 2 \
    "more than the file's" -- timeout 30 $CK convert "$tmp/huge.safetensors" --from safetensors --out "$tmp/huge"
$PY -c "
import struct
h = [20240326, 3, 1024, 50257, 1024, 16, 65536, 50304] + [0] * 248
open('$tmp/huge.bin', 'wb').write(struct.pack('<256i', *h) + bytes(4096))"
expect "an llm.c header claiming more than its file holds is refused before allocating" 2 "bytes are missing" -- \
    timeout 30 $CK convert "$tmp/huge.bin" --from llmc --out "$tmp/huge-llmc"

# Damaged metadata is damage (exit 1), not "not a Nebula checkpoint"; a newer format says so
dmg=$tmp/dmg/step_00000002
mkdir -p "$tmp/dmg" && cp -r "$S" "$dmg"
$PY -c "f = open('$dmg/state.h5', 'r+b'); f.seek(400); f.write(b'\xa5' * 64)"
for cmd in info verify; do
    expect "$cmd: damaged HDF5 metadata is a damaged checkpoint (exit 1)" 1 \
        "a damaged or unreadable checkpoint: HDF5 could not read its metadata" -- $CK $cmd "$dmg"
done
check "no HDF5 error stack on the way" bash -c "! $CK info '$dmg' 2>&1 | grep -q HDF5-DIAG"
new=$tmp/new/step_00000002
mkdir -p "$tmp/new" && cp -r "$S" "$new"
$PY -c "import h5py, numpy as np; f = h5py.File('$new/state.h5', 'r+'); f.attrs['format_version'] = np.int32(99)"
expect "a newer format version names it and says to upgrade Nebula" 2 \
    "written by a newer Nebula (format v99 > supported v" -- $CK info "$new"
expect "nebula-train says the same" 2 "written by a newer Nebula (format v99" -- \
    timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 3 --set train.threads=1 \
    --set runtime.bind=none --run-dir "$tmp/new-run" --resume "$new"
# FIFOs where files are read: refused at once (a timeout would mean open(2) blocked)
mkfifo "$tmp/fifo.safetensors" "$tmp/fifo.bin"
expect "a FIFO as the safetensors input: exit 2, not a hang" 2 "is a FIFO" -- \
    timeout -k 5 20 $CK convert "$tmp/fifo.safetensors" --from safetensors --out "$tmp/conv-fifo"
expect "a FIFO as the llm.c input: exit 2, not a hang" 2 "is a FIFO" -- \
    timeout -k 5 20 $CK convert "$tmp/fifo.bin" --from llmc --out "$tmp/conv-fifo2"
F=$tmp/fifo-run/ckpt/step_00000002
mkdir -p "$F" && cp "$S/COMMITTED" "$F/" && mkfifo "$F/state.h5"
expect "a FIFO as a checkpoint's state.h5 in nebula-ckpt verify: refused, not a hang" 2 "is not a regular file" -- \
    timeout -k 5 20 $CK verify "$F"
expect "a FIFO as a checkpoint's state.h5 on resume: exit 2, not a hang" 2 "is a FIFO" -- \
    timeout -k 5 30 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 4 --set train.threads=1 \
    --set runtime.bind=none --set ckpt.every_steps=2 --run-dir "$tmp/fifo-run" --resume auto
rm -f "$F/COMMITTED" && mkfifo "$F/COMMITTED" && cp "$S/state.h5" "$F/state.h5.x" && rm -f "$F/state.h5" && mv "$F/state.h5.x" "$F/state.h5"
expect "a FIFO as a COMMITTED marker in nebula-ckpt verify: not committed, not a hang" 1 "NOT committed" -- \
    timeout -k 5 20 $CK verify "$F"
finish
