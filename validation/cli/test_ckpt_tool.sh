#!/usr/bin/env bash
# test_ckpt_tool — nebula-ckpt on checkpoints nebula-train writes (gpt2-tiny shrunk to one
# layer of width 16, AdamW, a constant rate, the licence-text corpus, global batch 4):
#   - info, as text and as JSON parsed against h5py's view of the same file (shapes,
#     dtypes, checksums = zlib.crc32, the loader position);
#   - verify: a good checkpoint exits 0, also under mpirun; a byte flipped inside a tensor
#     (its offset from h5py), a byte flipped in rank 1's blob row, a truncated file, a
#     wrong magic attribute, a missing dataset, a missing commit marker and a file that
#     is no HDF5 each exit non-zero (never a crash) naming the tensor and file offset,
#     the row, or the problem;
#   - diff: identical copies exit 0; two steps of a run exit 1 with max|a-b|, relative L2
#     and cosine equal to numpy's within 1e-9 (and the same under mpirun -np 3);
#   - upgrade: every fixture under validation/fixtures/ckpt/vN/ reaches the current format
#     version (nebula-train reading it directly first, saying so, when it is older),
#     verifies, and nebula-train resumes from it;
#   - reshard 2 -> 4 ranks, then 4 -> 2 under mpirun: nebula-train resumes each at the new
#     size; at 4 ranks the losses follow a straight 2-rank run within 1e-5, and back at 2
#     ranks the run ends bit-identical to the straight one; a DGC-Pro checkpoint resharded
#     offline resumes exactly as the original resharded on load (residuals from zero,
#     bit-identical two steps later); in place (no --out) the checkpoint is replaced
#     through the commit protocol;
#   - convert: to safetensors (every parameter under its name, the model in the metadata)
#     and back, bit for bit, to a checkpoint nebula-train resumes from; to llm.c's file and
#     back under mpirun, bit for bit; a file without metadata needs --model (and --set for
#     its sizes); GPT-2's unpadded vocabulary is padded on the way in and dropped on the
#     way out; a missing or reshaped tensor is named;
#   - bad usage exits 2.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
CK=build/bin/nebula-ckpt
TRAIN=build/bin/nebula-train
licenses_data
S3=ckpt/step_00000003
S6=ckpt/step_00000006

# run RUN_DIR NP [--set ...]: one training run of the tiny model, output in RUN_DIR.log
run() {
    local dir=$1 np=$2
    shift 2
    $MPIRUN -np "$np" $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set train.global_batch=4 --set train.seq_len=16 \
        --set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set model.max_seq_len=16 \
        --set optim.schedule=constant --set optim.warmup_steps=0 --set train.threads=1 --set train.log_interval=1 \
        --ckpt-every 3 "$@" >"$dir.log" 2>&1 </dev/null
}

run $tmp/straight 2 --steps 6
check "nebula-train wrote steps 3 and 6" test -f $tmp/straight/$S6/COMMITTED -a -f $tmp/straight/$S3/COMMITTED
A=$tmp/straight/$S3

# --- info -------------------------------------------------------------------------------
for text in "format      NEBULA-CKPT version" "step        3" "model       gpt2-tiny" "world       2 ranks" \
            "AdamW moments (optim/m, optim/v)" "loader      epoch 0, next global sample 12" "commit      committed" \
            "/params/h.0.attn.c_attn.weight" "name = gpt2-tiny"; do
    expect "info shows '$text'" 0 "$text" -- $CK info $A
done
$CK info $A --json >$tmp/info.json 2>&1
check "info --json agrees with h5py: header, every dataset's shape, dtype, offset and crc32, the loader" \
    $PY - $tmp/info.json $A/state.h5 <<'PY'
import h5py, json, sys, zlib
import numpy as np
j, f = json.load(open(sys.argv[1])), h5py.File(sys.argv[2], "r")
names = []
f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
listed = {d["name"]: d for d in j["tensors"] + j["blobs"]}
bad = [n for n in names if n not in listed or listed[n]["shape"] != list(f[n].shape)
       or listed[n]["dtype"] != str(f[n].dtype) or listed[n]["offset"] != f[n].id.get_offset()
       or int(listed[n]["checksum"], 16) != zlib.crc32(f[n][()].tobytes()) & 0xFFFFFFFF]
epoch, cursor = np.frombuffer(f["rank/loader"][0].tobytes(), "<u8")
ok = (not bad and len(listed) == len(names) and j["step"] == 3 and j["world_size"] == 2
      and j["format_version"] == int(f.attrs["format_version"]) and j["commit"] == "committed"
      and j["model"] == "gpt2-tiny" and j["state"]["optimizer"] == "adamw" and j["state"]["dgc"] is None
      and j["state"]["loader"] == {"epoch": int(epoch), "cursor": int(cursor)} and "[model]" in j["config"])
print(f"    {len(names)} datasets, mismatches {bad[:3]}")
sys.exit(0 if ok else 1)
PY

# --- verify -------------------------------------------------------------------------------
expect "verify: a good checkpoint" 0 "every CRC-32 matches" -- $CK verify $A
expect "verify: ... and its tables match the stored config's model" 0 "groups match the tables of gpt2-tiny" -- \
    $CK verify $A
expect "verify under mpirun -np 2 (parallel HDF5 reads)" 0 "every CRC-32 matches" -- $MPIRUN -np 2 $CK verify $A
for k in flip row trunc magic missing uncommitted; do cp -r $A $tmp/$k; done
off=$($PY - $tmp/flip/state.h5 $tmp/row/state.h5 $tmp/magic/state.h5 $tmp/missing/state.h5 <<'PY'
import h5py, sys
def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x40]))
with h5py.File(sys.argv[1], "r") as f: off = f["params/wte.weight"].id.get_offset()
flip(sys.argv[1], off + 100)
with h5py.File(sys.argv[2], "r") as f: row = f["rank/loader"].id.get_offset() + f["rank/loader"].shape[1]
flip(sys.argv[2], row + 3)
with h5py.File(sys.argv[3], "r+") as f: f.attrs["magic"] = "NOT-NEBULA"
with h5py.File(sys.argv[4], "r+") as f: del f["params/h.0.ln_1.weight"]
print(off)
PY
)
truncate -s 60000 $tmp/trunc/state.h5
rm $tmp/uncommitted/COMMITTED
head -c 5000 /dev/urandom >$tmp/garbage.h5
expect "verify: a flipped byte in a tensor names it and its file offset" 1 "/params/wte.weight at file offset $off" -- \
    $CK verify $tmp/flip
expect "verify under mpirun -np 3: the same tensor and offset" 1 "/params/wte.weight at file offset $off" -- \
    $MPIRUN -np 3 $CK verify $tmp/flip
expect "verify: a flipped byte in rank 1's loader row names the row" 1 "/rank/loader row 1 (rank 1's bytes)" -- \
    $CK verify $tmp/row
expect "verify: a truncated file says so, with both sizes" 1 "truncated: it has 60000 bytes" -- $CK verify $tmp/trunc
expect "verify: a wrong magic is not a checkpoint (exit 2)" 2 "not a Nebula checkpoint" -- $CK verify $tmp/magic
expect "verify: a missing dataset is named" 1 "missing: params/h.0.ln_1.weight" -- $CK verify $tmp/missing
expect "verify: no commit marker fails" 1 "not committed" -- $CK verify $tmp/uncommitted
expect "verify: random bytes are no HDF5 file (exit 2)" 2 "is not an HDF5 file" -- $CK verify $tmp/garbage.h5
expect "info: a truncated file exits 1" 1 "truncated" -- $CK info $tmp/trunc
expect "diff: a missing dataset shows as only in A" 1 "/params/h.0.ln_1.weight" -- $CK diff $A $tmp/missing

# --- diff ---------------------------------------------------------------------------------
cp -r $A $tmp/copy
expect "diff: a copy is identical (exit 0)" 0 "identical: 52 of 52 datasets identical" -- $CK diff $A $tmp/copy
expect "diff: steps 3 and 6 differ (exit 1)" 1 "different" -- $CK diff $A $tmp/straight/$S6
for np in 1 3; do
    $MPIRUN -np $np $CK diff $A $tmp/straight/$S6 --json >$tmp/diff$np.json 2>$tmp/diff$np.err </dev/null
    check "diff --json at $np rank(s): max|a-b|, relative L2 and cosine equal numpy's (1e-9)" \
        $PY - $tmp/diff$np.json $A/state.h5 $tmp/straight/$S6/state.h5 <<'PY'
import h5py, json, sys
import numpy as np
j, a, b = json.load(open(sys.argv[1])), h5py.File(sys.argv[2], "r"), h5py.File(sys.argv[3], "r")
worst, n = 0.0, 0
for d in j["datasets"]:
    if d["name"].startswith("/rank/"): continue
    x, y = a[d["name"]][()].astype(np.float64).ravel(), b[d["name"]][()].astype(np.float64).ravel()
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    want = (np.abs(x - y).max(), np.linalg.norm(x - y) / nx, x @ y / nx / ny)
    if d["result"] != ("same" if (x == y).all() else "values"): sys.exit(1)
    if d["result"] == "values":
        n += 1
        worst = max([worst] + [abs(g - w) / abs(w) for g, w in zip((d["max_abs"], d["rel_l2"], d["cosine"]), want)])
print(f"    {n} tensors differ; worst relative error against numpy {worst:.1e}")
sys.exit(0 if n > 0 and worst <= 1e-9 and not j["identical"] and j["header"]["step"] == [3, 6] else 1)
PY
done

# --- upgrade: every fixture of every released format version --------------------------------
current=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['current_format_version'])" $tmp/info.json)
for fixture in validation/fixtures/ckpt/v*/step_*; do
    v=$(basename "$(dirname "$fixture")")
    run_fx=$tmp/fixture-$v
    mkdir -p $run_fx/ckpt
    cp -r "$fixture" $run_fx/ckpt/
    fx=$run_fx/ckpt/$(basename "$fixture")
    # the run's [model] section, batch shape and optimizer from the config stored in the
    # fixture (only keys that outlive versions: the rest of that config may name keys
    # this build no longer has)
    $CK info $fx --json | $PY -c "
import configparser, json, sys
c = configparser.ConfigParser(interpolation=None)
c.read_string(json.load(sys.stdin)['config'])
print('[model]'); [print(k, '=', v) for k, v in c['model'].items()]
print('[train]\nseq_len =', c['train']['seq_len'], '\nglobal_batch =', c['train']['global_batch'])
print('[optim]\nname =', c['optim']['name'])" >$tmp/fixture-$v.ini
    step=$($CK info $fx --json | $PY -c "import json,sys; print(json.load(sys.stdin)['step'])")
    resume=(--config configs/train/gpt2-tiny-licenses.ini --config $tmp/fixture-$v.ini --run-dir $run_fx
            --set data.train="$data/train.bin" --set data.val= --set train.threads=1 --set optim.warmup_steps=0
            --ckpt-every 1 --steps $((step + 1)))
    if [ "${v#v}" -lt "$current" ]; then
        expect "fixture $v: nebula-train reads format version ${v#v} directly, saying so" 0 \
            "is format version ${v#v} (this build writes $current)" -- \
            $MPIRUN -np 2 $TRAIN "${resume[@]}" --run-dir $tmp/direct-$v --resume $fx
        expect "fixture $v: upgrade to version $current says what changed" 0 \
            "from format version ${v#v} to $current" -- $CK upgrade $fx
    else
        expect "fixture $v: upgrade of the current version changes nothing" 0 "is current: nothing to change" -- \
            $CK upgrade $fx
    fi
    expect "fixture $v: verifies after the upgrade" 0 "ok" -- $CK verify $fx
    expect "fixture $v: info reports version $current" 0 "NEBULA-CKPT version $current" -- $CK info $fx
    expect "fixture $v: nebula-train resumes from it" 0 "resumed from $fx at step $step" -- \
        $MPIRUN -np 2 $TRAIN "${resume[@]}"
done

# --- reshard --------------------------------------------------------------------------------
$CK reshard $A --dp 4 --out $tmp/four/ckpt >$tmp/reshard4.log 2>&1
check "reshard 2 -> 4 ranks (--out) commits the result" \
    grep -q "resharded $A from 2 to 4 ranks, committed as $tmp/four/$S3" $tmp/reshard4.log
check "... and states each blob's rule: the loader position is global" grep -q "the loader position is global" \
    $tmp/reshard4.log
check "... no RNG state: every stream is counter-based" grep -q "rng .*counter-based" $tmp/reshard4.log
expect "... info records where its rows come from" 0 \
    "(resharded offline from 2 ranks: every blob row is rank 0's)" -- $CK info $tmp/four/$S3
expect "... and verifies" 0 "every CRC-32 matches" -- $CK verify $tmp/four/$S3
expect "... its tensors equal the original's (diff: only the blobs and header differ)" 1 \
    "48 of 52 datasets identical" -- \
    $CK diff $A $tmp/four/$S3
run $tmp/four 4 --steps 6
check "nebula-train resumes the 4-rank reshard at 4 ranks" \
    grep -q "resumed from .*step_00000003 at step 3" $tmp/four.log
check "... and follows the straight 2-rank run within 1e-5 (steps 4-6)" same_losses $tmp/straight $tmp/four 4
expect "reshard 4 -> 2 ranks under mpirun -np 2 (parallel HDF5)" 0 "from 4 to 2 ranks" -- \
    $MPIRUN -np 2 $CK reshard $tmp/four/$S3 --dp 2 --out $tmp/two/ckpt
run $tmp/two 2 --steps 6
check "nebula-train resumes the 2-rank reshard at 2 ranks" grep -q "resumed from .*step_00000003 at step 3" $tmp/two.log
expect "... and ends bit-identical to the straight run at step 6" 0 "identical: 52 of 52" -- \
    $CK diff $tmp/straight/$S6 $tmp/two/$S6
# DGC-Pro (2 virtual nodes x 1, SGD with momentum correction): its residuals belong to the
# 2-rank layout. Resuming the offline reshard at 4 ranks and resuming the original at 4
# ranks (resharded on load) must be the same thing: the same warning, the same state.
dg=(--ranks-per-node 1 --set optim.name=sgd --set optim.lr=0.3 --set dgc.mode=on --set dgc.min_numel=1024)
run $tmp/dgc 2 --steps 3 "${dg[@]}"
expect "reshard of a DGC-Pro checkpoint states the rule for its residuals" 0 \
    "DGC-Pro's residuals and velocities belong to the 2-rank layout" -- \
    $CK reshard $tmp/dgc/$S3 --dp 4 --out $tmp/dgc-offline/ckpt
run $tmp/dgc-offline 4 --steps 5 "${dg[@]}"
run $tmp/dgc-onload 4 --steps 5 "${dg[@]}" --resume $tmp/dgc/$S3
check "DGC-Pro, offline reshard: nebula-train starts the residuals from zero" \
    grep -q "dgc: the checkpoint's compression state belongs to another layout" $tmp/dgc-offline.log
check "DGC-Pro, resharded on load: the same warning" \
    grep -q "dgc: the checkpoint's compression state belongs to another layout" $tmp/dgc-onload.log
expect "DGC-Pro: both runs end bit-identical at step 5, compression state included" 0 "identical: " -- \
    $CK diff $tmp/dgc-offline/ckpt/step_00000005 $tmp/dgc-onload/ckpt/step_00000005

mkdir -p $tmp/inplace/ckpt && cp -r $A $tmp/inplace/ckpt/
expect "reshard in place (no --out) replaces the checkpoint" 0 "committed as itself" -- \
    $CK reshard $tmp/inplace/$S3 --dp 3
expect "... which now holds 3 ranks' rows" 0 "world       3 ranks" -- $CK info $tmp/inplace/$S3
check "... committed, and nothing left of the replaced one" \
    test -f $tmp/inplace/$S3/COMMITTED -a "$(ls -A $tmp/inplace/ckpt)" = step_00000003

# --- bad usage ------------------------------------------------------------------------------
expect "no subcommand exits 2" 2 "missing subcommand" -- $CK
expect "an unknown subcommand exits 2" 2 "unknown subcommand 'inspect'" -- $CK inspect $A
expect "a missing path exits 2" 2 "verify needs a PATH" -- $CK verify
expect "a path that does not exist exits 2" 2 "No such file or directory" -- $CK info $tmp/nowhere
expect "a run directory gets a hint naming a checkpoint" 2 "HINT: name one checkpoint" -- $CK info $tmp/straight
expect "an option of another subcommand exits 2" 2 "--dp does not apply to 'info'" -- $CK info $A --dp 4
expect "an unknown option exits 2 with a suggestion" 2 "did you mean '--json'" -- $CK info $A --jsn
expect "reshard without --dp exits 2" 2 "reshard needs --dp N" -- $CK reshard $A
expect "reshard to the size it has exits 2" 2 "already holds the state of 2 ranks" -- $CK reshard $A --dp 2
expect "reshard of an uncommitted checkpoint exits 2" 2 "not a committed checkpoint" -- \
    $CK reshard $tmp/uncommitted --dp 4 --out $tmp/never
expect "in place, a directory not named step_N exits 2 asking for --out" 2 "give --out DIR" -- \
    $CK reshard $tmp/copy --dp 4
expect "convert without --to or --from exits 2" 2 "convert needs one of --to FORMAT" -- $CK convert $A --out $tmp/x
expect "convert --to without --out exits 2" 2 "convert needs --out FILE" -- $CK convert $A --to llmc
expect "--model applies to convert only" 2 "--model does not apply to 'info'" -- $CK info $A --model gpt2
expect "--set model.* applies to convert only" 2 "--set model.n_layer does not apply to 'verify'" -- \
    $CK verify $A --set model.n_layer=2

# --- convert ----------------------------------------------------------------------------------
# st.py: safetensors read and written with numpy alone (8-byte header length, JSON, raw data)
cat >$tmp/st.py <<'PY'
import json, struct, sys
import numpy as np
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in h.items()}, meta
def write(path, tensors):
    h, data = {}, b""
    for k, a in tensors.items():
        raw = np.ascontiguousarray(a, "<f4").tobytes()
        h[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    head = json.dumps(h).encode()
    head += b" " * (-len(head) % 8)
    open(path, "wb").write(struct.pack("<Q", len(head)) + head + data)
PY
expect "convert --to safetensors" 0 "to $tmp/a.safetensors (safetensors" -- \
    $CK convert $A --to safetensors --out $tmp/a.safetensors
check "... holds every parameter under its name, as the checkpoint holds it, and the model in its metadata" \
    $PY - $tmp/a.safetensors $A/state.h5 <<PY
import sys; sys.path.insert(0, "$tmp")
import h5py, st
import numpy as np
t, meta = st.read(sys.argv[1])
p = h5py.File(sys.argv[2], "r")["params"]
ok = sorted(t) == sorted(p) and all(np.array_equal(t[k], p[k][()]) for k in p)
sys.exit(0 if ok and meta["nebula_model"] == "gpt2-tiny" and "n_embd = 16" in meta["nebula_config"] else 1)
PY
expect "convert --from safetensors (architecture from the metadata)" 0 \
    "to $tmp/from-st/ckpt/step_00000000: gpt2-tiny" -- \
    $CK convert $tmp/a.safetensors --from safetensors --out $tmp/from-st/ckpt
expect "... verifies" 0 "every CRC-32 matches" -- $CK verify $tmp/from-st/ckpt/step_00000000
$CK diff $A $tmp/from-st/ckpt/step_00000000 --json >$tmp/from-st.json 2>&1
check "... its parameters are the checkpoint's bit for bit, its moments zero" $PY - $tmp/from-st.json \
    $tmp/from-st/ckpt/step_00000000/state.h5 <<'PY'
import h5py, json, sys
j, f = json.load(open(sys.argv[1])), h5py.File(sys.argv[2], "r")
params = [d for d in j["datasets"] if d["name"].startswith("/params/")]
zero = all(not f[g][k][()].any() for g in ("optim/m", "optim/v") for k in f[g])
sys.exit(0 if params and all(d["result"] == "same" for d in params) and zero else 1)
PY
run $tmp/from-st 1 --steps 2 --set train.micro_batch=4
check "nebula-train resumes from the converted checkpoint" \
    grep -q "resumed from .*step_00000000 at step 0" $tmp/from-st.log
expect "convert --to llmc" 0 "(llm.c GPT-2 model file, fp32)" -- $CK convert $A --to llmc --out $tmp/a.bin
check "... 1024 header bytes and every parameter as fp32" \
    $PY -c "import os,sys; sys.exit(0 if os.path.getsize('$tmp/a.bin') == 1024 + 4 * $(
        $PY -c "import h5py; f=h5py.File('$A/state.h5'); print(sum(f['params'][k].size for k in f['params']))") else 1)"
expect "convert --from llmc under mpirun -np 2" 0 "to $tmp/from-llmc/ckpt/step_00000000: gpt2-tiny, 2 ranks" -- \
    $MPIRUN -np 2 $CK convert $tmp/a.bin --from llmc --model gpt2-tiny --out $tmp/from-llmc/ckpt
check "... its parameters are the checkpoint's bit for bit (llm.c's transposes undone)" $PY -c "
import h5py, sys
a, b = h5py.File('$A/state.h5', 'r')['params'], h5py.File('$tmp/from-llmc/ckpt/step_00000000/state.h5', 'r')['params']
sys.exit(0 if sorted(a) == sorted(b) and all((a[k][()] == b[k][()]).all() for k in a) else 1)"
# A file without Nebula's metadata, GPT-2's vocabulary unpadded (200 real rows of 256):
# --model and --set describe it; writing it back drops the padding rows again.
$PY - $tmp/a.safetensors $tmp/v200.safetensors $tmp/missing.safetensors <<PY
import sys; sys.path.insert(0, "$tmp")
import st
t, _ = st.read(sys.argv[1])
t = dict(t, **{"wte.weight": t["wte.weight"][:200]})
st.write(sys.argv[2], t)
st.write(sys.argv[3], {k: v for k, v in t.items() if k != "ln_f.bias"})
PY
small="--set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set model.max_seq_len=16
       --set model.vocab_size=200"
expect "convert --from safetensors without metadata or --model exits 2" 2 "give --model NAME" -- \
    $CK convert $tmp/v200.safetensors --from safetensors --out $tmp/never
expect "... a tensor of another shape is named with both shapes" 2 \
    "tensor 'wte.weight' is (200, 16) in the file; gpt2-tiny's is (256, 64)" -- \
    $CK convert $tmp/v200.safetensors --from safetensors --model gpt2-tiny --out $tmp/never
expect "... a missing tensor is named" 2 "holds no tensor 'ln_f.bias'" -- \
    $CK convert $tmp/missing.safetensors --from safetensors --model gpt2-tiny $small --out $tmp/never
expect "... and with --model and --set model.*: 200 vocabulary rows, padded to 256" 0 "gpt2-tiny, 1 rank" -- \
    $CK convert $tmp/v200.safetensors --from safetensors --model gpt2-tiny $small --out $tmp/v200/ckpt
expect "... back to safetensors: wte.weight without its padding rows" 0 "without its padding rows" -- \
    $CK convert $tmp/v200/ckpt/step_00000000 --to safetensors --out $tmp/v200-back.safetensors
check "... every tensor as it came in, the padding rows zero in the checkpoint" \
    $PY - $tmp/v200.safetensors $tmp/v200-back.safetensors $tmp/v200/ckpt/step_00000000/state.h5 <<PY
import sys; sys.path.insert(0, "$tmp")
import h5py, st
import numpy as np
a, _ = st.read(sys.argv[1]); b, _ = st.read(sys.argv[2])
wte = h5py.File(sys.argv[3], "r")["params/wte.weight"][()]
ok = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
sys.exit(0 if ok and wte.shape == (256, 16) and not wte[200:].any() else 1)
PY
expect "convert --from safetensors of a file that is none exits 2" 2 "garbage.h5" -- \
    $CK convert $tmp/garbage.h5 --from safetensors --model gpt2-tiny --out $tmp/never
check "... and writes nothing" test ! -e $tmp/never
finish
