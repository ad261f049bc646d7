#!/usr/bin/env bash
# test_model — nebula-model on checkpoints nebula-train writes (a one-layer GPT-2):
#   - commit -> checkout gives state.h5 back byte for byte (cmp, h5diff), verified, and
#     nebula-train resumes from the checkout bit-exactly (its step-6 parameters and
#     moments are the straight run's, every dataset `same` in nebula-ckpt diff);
#   - object ids are the standard XXH3-128 (xxh128sum of a chunk's content is its name);
#   - commit --delta stores chunks as deltas against the parent's, checked out byte for byte;
#   - diff of two commits agrees with nebula-ckpt diff of the two files (kinds, elements
#     that differ, max|a-b|, relative L2, cosine);
#   - branch, tag, checkout (-b, a branch, a detached commit), log with decorations and
#     --graph, rollback (and its reflog), status; a checkout over an uncommitted
#     checkpoint of the work tree is refused and leaves it as it was, --force discards it;
#   - a copy of a checkpoint rewritten for another grid (nebula-ckpt reshard --dp 2)
#     commits with no new tensor bytes;
#   - a fine-tune with a frozen backbone (optim.freeze): the frozen tensors and their
#     moments stay bit for bit, the rest trains, and its commit stores no more tensor
#     bytes than those that changed; a pattern that matches nothing is refused;
#   - lineage: run directory, step, config hash, the data file's XXH3-128, metrics;
#   - the specification's three commands, verbatim, through the `nebula` umbrella;
#   - bad usage exits 2.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
. validation/cli/model_lib.sh
licenses_data
S3=ckpt/step_00000003
S6=ckpt/step_00000006

train $tmp/r1 1 --steps 6
check "nebula-train wrote steps 3 and 6" test -f $tmp/r1/$S6/COMMITTED -a -f $tmp/r1/$S3/COMMITTED
R=$tmp/repo
expect "init" 0 "initialised an empty repository" -- $M init $R
expect "init refuses a directory that holds one" 2 "already holds a repository" -- $M init $R
expect "commit a checkpoint directory" 0 "[main " -- $M --repo $R commit -m "step 3" $tmp/r1/$S3
expect "commit a run directory: its newest checkpoint" 0 "52 datasets" -- $M --repo $R commit -m "step 6" $tmp/r1
expect "the same checkpoint again: nothing to commit" 0 "nothing to commit" -- $M --repo $R commit -m again $tmp/r1
C3=$(rev $R HEAD~1)
C6=$(rev $R HEAD)
check "two commits, HEAD~1 is the first" test -n "$C3" -a -n "$C6" -a "$C3" != "$C6"
expect "commit without -m" 2 "needs a message" -- $M --repo $R commit $tmp/r1

# --- object ids are XXH3-128 of the content (whole objects: 40-byte header, one zstd frame)
check "object names are xxh128sum of their content (whole objects; byte planes put back)" $PY - $R <<'PY'
import os, subprocess, sys
import numpy as np
n = 0
for d, _, fs in os.walk(sys.argv[1] + "/.nebula-model/objects"):
    for f in fs:
        raw = open(os.path.join(d, f), "rb").read()
        if raw[9]:  # a delta: its content needs its base
            continue
        data = subprocess.run(["zstd", "-dqc"], input=raw[40:], capture_output=True, check=True).stdout
        if raw[10]:  # byte planes of raw[10]-byte elements
            data = np.frombuffer(data, np.uint8).reshape(raw[10], -1).T.tobytes()
        h = subprocess.run(["xxh128sum"], input=data, capture_output=True).stdout.split()[0].decode()
        if h != os.path.basename(d) + f:
            print(f"    {d}/{f}: content hashes to {h}"); sys.exit(1)
        n += 1
print(f"    {n} objects rehashed")
sys.exit(0 if n > 40 else 1)
PY

# --- deltas (--delta): smaller where a chunk is close to its parent's, the same bytes back ---
RD=$tmp/delta
nm init $RD >/dev/null && nm --repo $RD commit -m three $tmp/r1/$S3 >/dev/null
out=$(nm --repo $RD commit -m six --delta $tmp/r1/$S6)
nd=$(sed -n 's/.*new (\([0-9]*\) as deltas).*/\1/p' <<<"$out")
echo "    $nd chunks stored as deltas"
check "commit --delta stores some chunks as deltas against the parent's" test "${nd:-0}" -gt 0
expect "their checkout is state.h5 byte for byte" 0 "checksums verified" -- nm --repo $RD checkout main
check "... cmp" cmp -s $RD/$S6/state.h5 $tmp/r1/$S6/state.h5
expect "fsck follows the delta bases" 0 "fsck: ok" -- nm --repo $RD fsck

# --- checkout: byte for byte, verified, resumable -------------------------------------------
expect "checkout the first commit (detached)" 0 "HEAD is now at ${C3:0:12}" -- $M --repo $R checkout ${C3:0:8}
check "the checkout is state.h5 byte for byte" cmp -s $R/$S3/state.h5 $tmp/r1/$S3/state.h5
check "h5diff finds no difference" h5diff -q $R/$S3/state.h5 $tmp/r1/$S3/state.h5
expect "nebula-ckpt verify passes on the checkout" 0 "every CRC-32 matches" -- $CK verify $R/$S3
expect "status: detached, the checkpoint committed" 0 "committed    ckpt/step_00000003" -- $M --repo $R status
# resume in the repository directory itself: the work tree is a run directory's ckpt/
train $R 1 --steps 6
grep "^step=[456] " $tmp/r1.log | awk '{print $1, $2}' >$tmp/straight.txt
grep "^step=[456] " $R.log | awk '{print $1, $2}' >$tmp/resumed.txt
check "the resumed run starts from the checkout" grep -q "resumed from $R/$S3 at step 3" $R.log
check "its losses of steps 4-6 are the straight run's" cmp -s $tmp/straight.txt $tmp/resumed.txt
$CK diff $R/$S6 $tmp/r1/$S6 --json >$tmp/resume-diff.json 2>&1
check "its step-6 tensors are the straight run's, bit for bit" $PY - $tmp/resume-diff.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["datasets"]
bad = [x["name"] for x in d if x["result"] != "same" and not x["name"].startswith("/rank/")]
print(f"    {len(d)} datasets, differing tensors: {bad[:3]}")
sys.exit(1 if bad or len(d) < 40 else 0)
PY
# the run left step 6 in the work tree, not committed: a checkout must not remove it
expect "status lists the new checkpoint as uncommitted" 0 "uncommitted  ckpt/step_00000006" -- $M --repo $R status
h6=$(xxh128sum <$R/$S6/state.h5)
expect "checkout over an uncommitted checkpoint is refused" 2 "uncommitted checkpoints (step_00000006)" -- \
    $M --repo $R checkout main
check "... and leaves it as it was" test "$(xxh128sum <$R/$S6/state.h5)" = "$h6" -a -f $R/$S6/COMMITTED
expect "a work-tree checkpoint commits (detached HEAD moves)" 0 "[detached HEAD " -- \
    $M --repo $R commit -m "resumed to 6" $R/$S6
RES=$(rev $R HEAD)
expect "then the checkout goes through" 0 "switched to branch 'main'" -- $M --repo $R checkout main
check "the work tree holds main's checkpoint only" test -f $R/$S6/COMMITTED -a ! -e $R/$S3
check "the resumed commit's tensors are main's: diff differs only in per-rank rows" \
    bash -c "! $M --repo $R diff $RES main | grep ' values \| shape \| only-' | grep -v '^/rank/'"

# --- diff agrees with nebula-ckpt diff --------------------------------------------------------
$M --repo $R diff $C3 $C6 --json >$tmp/mdiff.json 2>&1
$CK diff $tmp/r1/$S3 $tmp/r1/$S6 --json >$tmp/cdiff.json 2>&1
check "diff of two commits agrees with nebula-ckpt diff of their files" $PY - $tmp/mdiff.json $tmp/cdiff.json <<'PY'
import json, math, sys
m, c = (json.load(open(p)) for p in sys.argv[1:3])
cm = {d["name"]: d for d in c["datasets"]}
bad = []
for d in m["datasets"]:
    e = cm.get(d["name"])
    if e is None or d["result"] != e["result"] or d["differ"] != e["differ"]:
        bad.append((d["name"], d["result"], e and e["result"])); continue
    for k in ("max_abs", "rel_l2", "cosine"):
        a, b = d[k], e[k]
        if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-12 * max(1, abs(b))):
            bad.append((d["name"], k, a, b))
changed = sum(d["chunks_changed"] > 0 for d in m["datasets"])
print(f"    {len(m['datasets'])} datasets, {changed} with changed chunks; disagreements: {bad[:3]}")
sys.exit(1 if bad or len(m["datasets"]) != len(c["datasets"]) or m["identical"] else 0)
PY
expect "diff text: per-tensor rows and the metrics" 0 "metrics loss" -- bash -c "$M --repo $R diff $C3 $C6; true"

# --- lineage ------------------------------------------------------------------------------
$M --repo $R show $C6 --json >$tmp/show.json 2>&1
check "lineage: run dir, step, config hash, the data file's hash, metrics" $PY - $tmp/show.json $tmp/r1 "$data/train.bin" <<'PY'
import json, subprocess, sys
j, run, data = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
l = j["lineage"]
h = subprocess.run(["xxh128sum", data], capture_output=True, text=True).stdout.split()[0]
d = [x for x in l["data"] if x["key"] == "data.train"]
ok = (l["run_dir"] == run and l["step"] == 6 and len(l["config_hash"]) == 32 and d and d[0]["xxh3"] == h
      and abs(l["metrics"]["loss"] - 5.213921) < 1e-5 and l["code_version"] and j["checkpoint"]["step"] == 6)
print(f"    run_dir {l['run_dir']}, data {d[0]['xxh3'] if d else None} vs {h}, loss {l['metrics'].get('loss')}")
sys.exit(0 if ok else 1)
PY

# --- branches, tags, log, rollback -------------------------------------------------------------
expect "tag" 0 "tag 'v1' at ${C3:0:12}" -- $M --repo $R tag v1 $C3
expect "a tag never moves" 2 "tags never move" -- $M --repo $R tag v1 HEAD
expect "branch at a start" 0 "branch 'side' at ${C3:0:12}" -- $M --repo $R branch side v1
expect "branch list marks the current one" 0 "* main" -- $M --repo $R branch
expect "log decorates HEAD -> main" 0 "(HEAD -> main)" -- $M --repo $R log
expect "log of the tag" 0 "tag: v1" -- $M --repo $R log v1
expect "log --graph draws both lines" 0 "| * " -- bash -c "$M --repo $R commit -m side-6 --branch side $tmp/r1 >/dev/null && $M --repo $R log --graph"
expect "deleting the current branch is refused" 2 "is checked out" -- $M --repo $R branch main --delete
expect "an unknown name" 2 "is neither a branch" -- $M --repo $R checkout nope
expect "rollback moves main back one commit" 0 "rolled back to HEAD~1" -- $M --repo $R rollback
check "main is back at the first commit" test "$(rev $R main)" = "$C3"
check "the work tree follows (step 3 of the straight run)" bash -c "cmp -s $R/$S3/state.h5 $tmp/r1/$S3/state.h5 && test ! -e $R/$S6"
expect "checkout of the commit the rollback left restores it" 0 "switched to a new branch 'undo'" -- \
    $M --repo $R checkout ${C6:0:12} -b undo
check "the reflog records the rollback" grep -q "rollback: from" $R/.nebula-model/logs/refs/heads/main

# --- another grid: no new tensor bytes -----------------------------------------------------
$CK reshard $tmp/r1/$S6 --dp 2 --out $tmp/grid2 >$tmp/reshard.log 2>&1
expect "a copy rewritten for 2 ranks commits with no new tensor bytes" 0 "new tensor bytes 0," -- \
    $M --repo $R commit -m "dp 2 copy" --branch side $tmp/grid2/step_00000006
check "... and its diff against the 1-rank commit is only per-rank state (rows per rank)" \
    bash -c "$M --repo $R diff $C6 side >$tmp/grid.txt; grep -q '^/rank/loader  *shape' $tmp/grid.txt && \
             ! grep ' values \| shape \| only-' $tmp/grid.txt | grep -v '^/rank/'"

# --- a fine-tune with a frozen backbone (optim.freeze): only the rest is stored -------------------
mkdir -p $tmp/ft/ckpt && cp -r $tmp/r1/$S6 $tmp/ft/ckpt/
train $tmp/ft-bad 1 --steps 9 --set optim.freeze='wte.weight,h.9.*'
check "optim.freeze with a pattern that matches nothing is refused: exit 2 naming it" \
    test $? -eq 2 -a -n "$(grep "'h.9.\*' matches no tensor" $tmp/ft-bad.log)"
train $tmp/ft 1 --steps 9 --set optim.freeze='wte.weight,wpe.weight,h.0.attn.*'
check "the fine-tune froze 6 tensors" grep -q "optim.freeze: 6 of 16 tensors frozen" $tmp/ft.log
$CK diff $tmp/r1/$S6 $tmp/ft/ckpt/step_00000009 --json >$tmp/ft-diff.json 2>&1
check "frozen tensors and their moments are unchanged, the rest trained" $PY - $tmp/ft-diff.json <<'PY'
import json, sys
d = {x["name"]: x["result"] for x in json.load(open(sys.argv[1]))["datasets"]}
frozen = [n for n in d if n.split("/")[-1].startswith(("wte.", "wpe.", "h.0.attn."))]
trained = [n for n in d if n.startswith("/params/") and n not in frozen]
ok = len(frozen) == 18 and all(d[n] == "same" for n in frozen) and all(d[n] == "values" for n in trained)
print(f"    {len(frozen)} frozen datasets same: {all(d[n] == 'same' for n in frozen)}, {len(trained)} trained params changed")
sys.exit(0 if ok else 1)
PY
changed=$($PY - $tmp/r1/$S6/state.h5 $tmp/ft/ckpt/step_00000009/state.h5 <<'PY'
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
n = []
a.visititems(lambda k, o: n.append(k) if isinstance(o, h5py.Dataset) and not k.startswith("rank/") else None)
print(sum(b[k].nbytes for k in n if not np.array_equal(a[k][()], b[k][()])))
PY
)
nm --repo $R branch finetune $C6 >/dev/null
out=$(nm --repo $R commit -m finetune --branch finetune $tmp/ft/ckpt/step_00000009)
stored=$(sed -n 's/.*new tensor bytes \([0-9]*\),.*/\1/p' <<<"$out")
echo "    changed tensor bytes $changed, new tensor bytes stored $stored"
check "the fine-tune's commit stores at most the changed tensors' bytes" test -n "$stored" -a "${stored:-1}" -gt 0 -a "${stored:-1}" -le "$changed"

# --- the specification's commands, verbatim, through the umbrella --------------------------------
U=$tmp/spec
nm init $U >/dev/null && nm --repo $U commit -m base $tmp/r1 >/dev/null && nm --repo $U branch my_model >/dev/null
nm init --bare $tmp/origin >/dev/null
(cd $U && nm remote add origin $tmp/origin >/dev/null)
expect "nebula model checkout my_model -b experimental" 0 "switched to a new branch 'experimental'" -- \
    bash -c "cd $U && $ROOT/build/bin/nebula model checkout my_model -b experimental"
train $U 1 --steps 9   # three more steps in the repository directory: ckpt/step_00000009
expect "nebula model commit -m \"added attention layer\"" 0 "[experimental " -- \
    bash -c "cd $U && $ROOT/build/bin/nebula model commit -m \"added attention layer\""
expect "nebula model push origin experimental" 0 "push origin experimental" -- \
    bash -c "cd $U && $ROOT/build/bin/nebula model push origin experimental"
expect "the remote has the branch" 0 "experimental" -- nm --repo $tmp/origin branch

# --- usage -------------------------------------------------------------------------------------
expect "unknown subcommand" 2 "unknown subcommand 'frob'" -- $M frob
expect "an option the subcommand does not take" 2 "does not apply to 'log'" -- $M --repo $R log --force
expect "diff needs two names" 2 "diff takes 2 to 2" -- $M --repo $R diff main
expect "not a repository" 2 "is not a repository" -- $M --repo $tmp/r1 log
expect "--help lists the commands" 0 "nebula-model clone SRC DIR" -- $M --help
finish
