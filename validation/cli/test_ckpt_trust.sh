#!/usr/bin/env bash
# test_ckpt_trust — what a resume trusts (docs/checkpoints.md#loading), on one gpt2-tiny run
# at 2 ranks with committed checkpoints at steps 10, 20, 30, copied per case:
#   - `--resume auto` falls back to the newest checkpoint that opens, verifies and passes
#     the value checks, naming each one skipped with its reason on one line: state.h5
#     removed, made a directory, replaced by garbage; 8 bytes flipped in the HDF5 metadata
#     of /optim/v and of /params (damaged metadata, never "does not match this run's
#     parameter table");
#   - files of the run's own checkpoint directory are never read through a link: a step
#     directory that is a link, a state.h5 and a COMMITTED marker that are links (to intact
#     copies) are each skipped by name, while ckpt/ itself may be a link (to scratch);
#   - blobs and tensors forged with valid checksums are refused by name and skipped: the
#     monitor blob's lr_scale NaN (in rank 1's row only: the ranks agree), -1 and 1e300,
#     the elastic blob's global batch 2^62, /optim/v holding -1, Inf or NaN, a reload
#     history setting optim.lr = -1, a NaN residual in DGC-Pro's state; when no
#     checkpoint qualifies the run exits 2 listing each with its reason; an explicit path to
#     a forged one exits 2 naming the field; `nebula-ckpt verify` fails on each, naming it;
#   - no checkpoint is committed while the divergence guard skips non-finite steps (SGD at
#     lr 1000): every checkpoint record is of a step whose loss was finite, and the rollback
#     and the final HINT point at such a step;
#   - checked at start, exit 2: sched.costs = abc, -1, nan with sched.mode = balanced;
#     an unknown chaos fault point (nebula-chaos, naming the valid ones, before any run);
#     trace.steps past the run's end: a warning at start, the run goes on, no trace.json.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
BIN=${NEBULA_BIN:-build/bin}
TRAIN=$BIN/nebula-train
CK=$BIN/nebula-ckpt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# train NP DIR [ARG...]: gpt2-tiny, checkpoints every 10 steps, output in DIR.log
train() {
    local np=$1 dir=$2
    shift 2
    timeout 120 $MPIRUN -np "$np" $TRAIN --model gpt2-tiny --set train.micro_batch=2 --set train.threads=1 \
        --set runtime.bind=none --set ckpt.every_steps=10 --run-dir "$dir" "$@" >"$dir.log" 2>&1 </dev/null
}
S=step_000000
train 2 "$tmp/R" --steps 30 --set dgc.mode=on  # DGC-Pro: its state is one of the blobs forged below
check "a 2-rank run with checkpoints at steps 10, 20, 30" \
    test -f "$tmp/R/ckpt/${S}10/COMMITTED" -a -f "$tmp/R/ckpt/${S}20/COMMITTED" -a -f "$tmp/R/ckpt/${S}30/COMMITTED"

# damage NAME STEP:HOW...: a copy of the run with each STEP's state.h5 damaged; HOW is
# removed, dir, garbage, meta:OBJECT (8 bytes flipped in its object header), or
# DATASET=VALUE (a tensor's element 3, or a blob's first field in row ROW with
# /rank/NAME[ROW]; VALUE text:T makes the row the text T, and /rank/dgc's VALUE goes into
# the first residual v[0]; the checksums recomputed, as a forger would)
damage() {
    local name=$1
    shift
    cp -r "$tmp/R" "$tmp/$name"
    for spec in "$@"; do
        local h5=$tmp/$name/ckpt/$S${spec%%:*}/state.h5 how=${spec#*:}
        case $how in
            removed) rm "$h5" ;;
            dir) rm "$h5" && mkdir "$h5" ;;
            garbage) head -c 65536 /dev/urandom >"$h5" ;;
            *) $PY - "$h5" "$how" <<'PY' ;;
import struct, sys, zlib
import h5py, numpy as np
path, how = sys.argv[1], sys.argv[2]
crc = lambda b: np.uint32(zlib.crc32(bytes(b)) & 0xFFFFFFFF)
if how.startswith("meta:"):
    with h5py.File(path, "r") as f:
        at = h5py.h5o.get_info(f[how[5:]].id).addr + 16
    with open(path, "r+b") as f:
        f.seek(at); b = f.read(8); f.seek(at); f.write(bytes(x ^ 0xA5 for x in b))
    sys.exit(0)
name, value = how.split("=", 1)
with h5py.File(path, "r+") as f:
    if name.startswith("/rank/"):
        blob, row = (name.split("[") + ["-1]"])[:2]
        row = int(row.rstrip("]"))
        d = f[blob]
        rows = d[()]
        at = 0
        if value.startswith("text:"):
            field = value[5:].encode().ljust(rows.shape[1], b"\0")
        elif blob.endswith("dgc"):  # header (48 bytes), 16 per table entry, u (with momentum), v
            has_u = struct.unpack("<i", rows[0, 40:44].tobytes())[0]
            nent = len(f["params"])
            smax = (rows.shape[1] - 48 - 16 * nent) // (4 * (2 if has_u else 1))
            at, field = 48 + 16 * nent + (4 * smax if has_u else 0), struct.pack("<f", float(value))
        else:
            field = struct.pack("<q", int(value)) if blob.endswith("elastic") else struct.pack("<d", float(value))
        for r in range(rows.shape[0]):
            if row < 0 or r == row: rows[r, at:at + len(field)] = np.frombuffer(field, np.uint8)
        d[...] = rows
        d.attrs["row_checksums"] = np.array([crc(rows[r].tobytes()) for r in range(rows.shape[0])], np.uint32)
        d.attrs["checksum"] = crc(rows.tobytes())
    else:
        d = f[name]
        a = d[()]
        a.flat[3] = float(value)
        d[...] = a
        d.attrs["checksum"] = crc(a.tobytes())
PY
        esac
    done
}

# resumed NAME: the step `auto` took (from its line), or "none"
resumed() { grep -o "resuming from .*step_[0-9]*" "$tmp/$1.log" | grep -o "[0-9]*$" | sed 's/^0*//' | head -1; }
# skipped NAME STEP TEXT: one line names that checkpoint as skipped, with TEXT as its reason
skipped() { grep "skipping .*/$S$2: " "$tmp/$1.log" | grep -qF -- "$3"; }

# --- a damaged newest checkpoint falls back (--steps 10: nothing to train after the load) ---
damage files 30:removed 20:dir
train 2 "$tmp/files" --steps 10
check "state.h5 removed (30) and made a directory (20): auto resumes step 10 (took $(resumed files))" \
    test "$(resumed files)" = 10
files_named() { skipped files 30 "state.h5 cannot be opened: No such file" && skipped files 20 "state.h5 is a directory"; }
check "... each skipped one named with its reason" files_named
damage garbage 30:garbage
train 1 "$tmp/garbage" --steps 10
check "state.h5 replaced by garbage: skipped as truncated or damaged, auto resumes step 20" \
    bash -c "[ '$(resumed garbage)' = 20 ] && grep -q 'skipping .*${S}30: cannot open .*not an HDF5 file' '$tmp/garbage.log'"
damage meta 30:meta:optim/v 20:meta:params
train 2 "$tmp/meta" --steps 10
check "8 bytes flipped in the metadata of /optim/v (30) and /params (20): auto resumes step 10 (took $(resumed meta))" \
    test "$(resumed meta)" = 10
check "... named as damaged HDF5 metadata, not as another parameter table" \
    bash -c "grep -q 'skipping .*${S}30: damaged HDF5 metadata.*optim/v' '$tmp/meta.log' &&
             grep -q 'skipping .*${S}20: damaged HDF5 metadata.*params' '$tmp/meta.log' &&
             ! grep -q 'does not match this run' '$tmp/meta.log'"

# --- forged values with valid checksums ----------------------------------------------------
damage blobs "30:/rank/monitor[1]=nan" 20:/rank/elastic=4611686018427387904
train 2 "$tmp/blobs" --steps 10
check "a NaN rate scale in rank 1's monitor row (30), a global batch of 2^62 (20): auto resumes step 10 (took $(resumed blobs))" \
    test "$(resumed blobs)" = 10
blobs_named() {
    skipped blobs 30 "/rank/monitor: lr_scale = nan, outside [0, 1]" &&
        skipped blobs 20 "/rank/elastic: global_batch = 4.6116860184273879e+18, outside [1, 1073741824]"
}
check "... each named by blob and field (rank 1's refusal reaches rank 0)" blobs_named

# --- never through a link in the run's own checkpoint directory; ckpt/ itself may be one ---
damage links
mkdir "$tmp/links-keep" && mv "$tmp/links/ckpt" "$tmp/links-scratch" && ln -s "$tmp/links-scratch" "$tmp/links/ckpt"
ln -s "$tmp/R/ckpt/${S}30" "$tmp/links/ckpt/${S}40"  # a whole checkpoint, intact, behind a link
for f in ${S}30/state.h5 ${S}20/COMMITTED; do         # intact copies, behind links
    mv "$tmp/links/ckpt/$f" "$tmp/links-keep/${f%%/*}" && ln -s "$tmp/links-keep/${f%%/*}" "$tmp/links/ckpt/$f"
done
train 2 "$tmp/links" --steps 10
check "ckpt/ a link; step 40 a link, step 30's state.h5 and step 20's COMMITTED links: auto resumes step 10 (took $(resumed links))" \
    test "$(resumed links)" = 10
links_named() {
    skipped links 40 "is a symbolic link" && skipped links 30 "state.h5 is a symbolic link" &&
        skipped links 20 "COMMITTED marker is a symbolic link"
}
check "... each skipped one named as a symbolic link" links_named

# --- the reload history and DGC-Pro's state are value-checked too ---
damage forged '30:/rank/reload=text:{"seen":1,"base":{},"entries":[{"version":1,"step":5,"undo_of":0,"undone":false,"changes":[{"key":"optim.lr","old":"0.0003","new":"-1"}]}]}' \
    '20:/rank/dgc[1]=nan'
train 2 "$tmp/forged" --steps 10 --set dgc.mode=on
check "a reload history setting optim.lr = -1 (30), a NaN residual in rank 1's DGC-Pro state (20): auto resumes step 10 (took $(resumed forged))" \
    test "$(resumed forged)" = 10
forged_named() {
    skipped forged 30 "/rank/reload: the reload history holds an assignment the config schema refuses, optim.lr = -1" &&
        skipped forged 20 "/rank/dgc holds 1 NaN or Inf value(s) among DGC-Pro's residuals"
}
check "... each named by blob (rank 1's refusal reaches rank 0)" forged_named
expect "an explicit path to the forged reload history: exit 2 naming it" 2 "/rank/reload: the reload history holds" -- \
    timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 40 --set train.threads=1 \
    --set runtime.bind=none --run-dir "$tmp/explicit-reload" --resume "$tmp/forged/ckpt/${S}30"
damage moments 30:/optim/v/wte.weight=-1 20:/optim/v/wte.weight=inf 10:/rank/monitor=1e300
train 2 "$tmp/moments" --steps 10
rc=$?
check "no checkpoint qualifies (v = -1, v = Inf, lr_scale = 1e300): exit 2 (got $rc), listing each with its reason" \
    bash -c "[ $rc -eq 2 ] && grep -q 'no checkpoint under .* can be resumed' '$tmp/moments.log' &&
             grep -q '${S}30: /optim/v/wte.weight holds 1 negative value' '$tmp/moments.log' &&
             grep -q '${S}20: /optim/v/wte.weight holds 1 NaN or Inf' '$tmp/moments.log' &&
             grep -q '${S}10: /rank/monitor: lr_scale = 1.0000000000000001e+300' '$tmp/moments.log'"
expect "an explicit path to a forged checkpoint: exit 2 naming the field" 2 "/optim/v/wte.weight holds 1 negative value" -- \
    timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 40 --set train.threads=1 \
    --set runtime.bind=none --run-dir "$tmp/explicit" --resume "$tmp/moments/ckpt/${S}30"
damage more "30:/rank/monitor=-1" 20:/optim/v/wte.weight=nan
for c in "blobs 30 lr_scale = nan" "blobs 20 global_batch = 4.6116860184273879e+18" "more 30 lr_scale = -1" \
         "moments 30 holds 1 negative value" "more 20 holds 1 NaN or Inf" "moments 10 lr_scale = 1.0000000000000001e+300" \
         "forged 30 /rank/reload: the reload history holds an assignment" "forged 20 /rank/dgc: holds 1 NaN or Inf"; do
    set -- $c
    d=$1 step=$2
    shift 2
    expect "nebula-ckpt verify $d/step $step: exit 1 naming '$*'" 1 "$*" -- $CK verify "$tmp/$d/ckpt/$S$step"
done

# --- no commit during a NaN-skip streak (the guard rolls back once, then the run diverges) ---
timeout 120 $TRAIN --model gpt2-tiny --set optim.name=sgd --set train.micro_batch=2 --steps 40 --lr 1000 \
    --set optim.schedule=constant --set optim.warmup_steps=0 --set train.threads=1 --set runtime.bind=none \
    --set train.log_interval=1 --set ckpt.every_steps=2 --run-dir "$tmp/nan" >"$tmp/nan.log" 2>&1 </dev/null
rc=$?
hint=$(grep -o "the last committed checkpoint is step [0-9]*" "$tmp/nan.log" | grep -o "[0-9]*$")
check "SGD at lr 1000: skips, a rollback, then diverged (exit $rc); no checkpoint written inside a skip streak" \
    $PY - "$tmp/nan/metrics.jsonl" "$rc" "$hint" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
loss, bad = {}, []  # the loss of each step as last run (a rollback redoes steps)
for r in recs:
    if r["kind"] == "train": loss[r["step"]] = r["loss"]
    if r["kind"] == "checkpoint" and loss.get(r["step"]) is None: bad.append(f"checkpoint of step {r['step']}")
    if r["kind"] == "rollback" and r["to_step"] and loss.get(r["to_step"]) is None: bad.append(f"rollback to {r['to_step']}")
skips = [r["step"] for r in recs if r["kind"] == "skipped"]
hint = int(sys.argv[3]) if sys.argv[3] else -1
if hint >= 0 and loss.get(hint) is None: bad.append(f"the HINT's step {hint}")
print(f"    skipped {len(skips)} steps, checkpoints {[r['step'] for r in recs if r['kind'] == 'checkpoint']}, "
      f"the HINT names step {hint}; at a non-finite step: {bad or 'none'}")
sys.exit(0 if sys.argv[2] == "1" and skips and hint > 0 and not bad and any(r["kind"] == "rollback" for r in recs) else 1)
PY

# --- checked at start ----------------------------------------------------------------------
licenses_data
for costs in abc -1 nan; do
    expect "sched.mode = balanced with sched.costs = $costs: exit 2 naming the key" 2 "sched.costs = '$costs'" -- \
        timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 2 --set train.threads=1 \
        --set runtime.bind=none --set data.train="$data/train.bin" --set sched.mode=balanced \
        --set sched.costs="$costs" --run-dir "$tmp/sched"
done
expect "an unknown chaos fault point: exit 2 at once, naming the valid ones" 2 "POINT one of ckpt.write, ckpt.fsync" -- \
    timeout 60 $BIN/nebula-chaos run io-error --out "$tmp/chaos" --set fault.io=ckpt.nosuch:EIO
check "... before the reference run (nothing under its --out)" test ! -e "$tmp/chaos/report.json"
expect "trace.steps past the run's end: a warning at start, the run goes on" 0 \
    "trace.steps = 50-60 (--set): step 50 onwards lies past the end of this run (train.steps = 4)" -- \
    timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 4 --set train.threads=1 \
    --set runtime.bind=none --set trace.enable=true --set trace.steps=50-60 --run-dir "$tmp/trace"
check "... and no trace.json" test ! -e "$tmp/trace/trace.json"
finish
