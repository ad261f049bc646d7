#!/usr/bin/env bash
# test_model_faults — nebula-model under crashes and hostile repositories:
#   - SIGKILL at every stage of a commit (the CHAOS build's fault points, MODULE#N:KILL:
#     the Nth point reached, every 11th from the first and each of the last 14 before the
#     commit completes — chunk, skeleton, manifest and commit objects, the ref's lock,
#     write, fsync and rename, the reflog): every time, fsck passes,
#     the branch is at the old commit or the new one, and the next commit succeeds (a
#     dead process's lock is broken);
#   - SIGKILL in a checkout: no step directory appears, the next checkout succeeds;
#   - a flipped byte in a chunk: fsck names the object and exits 1, checkout refuses it
#     (exit 2) and leaves no checkpoint behind;
#   - a ref pointing at no object, a HEAD that holds garbage, a manifest whose hash is
#     right but whose sizes lie (an item's bytes against its shape, the file's size against
#     its skeleton and items), a truncated object: clear errors, exit 2 (fsck: 1), the
#     work tree untouched;
#   - gc removes what a crash left and nothing that a ref reaches.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
. validation/cli/model_lib.sh
C=build/chaos/bin/nebula-model
[ -x $C ] || { echo "FAIL - $C is missing (make chaos)"; exit 1; }
licenses_data
train $tmp/r1 1 --steps 6
S3=ckpt/step_00000003 S6=ckpt/step_00000006
base=$tmp/base
nm init $base >/dev/null
nm --repo $base commit -m three $tmp/r1/$S3 >/dev/null
old=$(rev $base main)

# crash N: a copy of base, the commit of step 6 killed at the Nth fault point; prints the
# exit code; fails the test when the copy is not consistent afterwards
crash_bad=0 crash_runs=0
crash() {
    local n=$1 w=$tmp/w rc now
    rm -rf $w && cp -a $base $w
    NEBULA_CHAOS_FAULT="model#$n:KILL" $C --repo $w commit -m six $tmp/r1/$S6 >$tmp/crash.log 2>&1
    rc=$?
    crash_runs=$((crash_runs + 1))
    grep -o 'SIGKILL at model[.a-z_]*' $tmp/crash.log >>$tmp/points
    now=$(rev $w main)
    if ! nm --repo $w fsck >$tmp/fsck.log 2>&1; then
        echo "    #$n ($(grep -o 'at model[.a-z_]*' $tmp/crash.log)): fsck fails"; tail -3 $tmp/fsck.log; crash_bad=$((crash_bad + 1))
    elif [ "$now" != "$old" ] && ! { [ $rc -eq 0 ] || nm --repo $w log | grep -q " six"; }; then
        echo "    #$n: main moved to an unknown commit"; crash_bad=$((crash_bad + 1))
    elif ! nm --repo $w commit -m six $tmp/r1/$S6 >$tmp/again.log 2>&1 || ! nm --repo $w fsck >/dev/null 2>&1 \
         || [ "$(nm --repo $w log | wc -l)" != 2 ]; then
        echo "    #$n ($(grep -o 'at model[.a-z_]*' $tmp/crash.log)): the next commit fails"; tail -3 $tmp/again.log
        crash_bad=$((crash_bad + 1))
    fi
    return $rc
}
n=1
while crash $n; [ $? -eq 137 ]; do n=$((n + 11)); done  # until the commit reaches its end unharmed
last=$n
for ((n = last - 13; n < last; n++)); do [ $n -ge 1 ] && crash $n; done
echo "    $crash_runs crashes, the commit has fewer than $last fault points"
check "every crash leaves a repository fsck passes, at the old or the new commit, and a next commit succeeds" \
    test $crash_bad -eq 0 -a $crash_runs -ge 20
check "the sweep killed the commit in each stage: objects (write, fsync, rename), the ref's lock, write, fsync and rename, the reflog" \
    bash -c "for p in object_write object_fsync object_rename lock ref_write ref_fsync ref_rename reflog; do
                 grep -q \"at model.\$p\$\" $tmp/points || { echo \"    never killed at model.\$p\"; exit 1; }; done"

# --- a crash in a checkout ----------------------------------------------------------------------
R=$tmp/repo
cp -a $base $R
nm --repo $R commit -m six $tmp/r1/$S6 >/dev/null
NEBULA_CHAOS_FAULT="model.checkout:KILL" $C --repo $R checkout main~1 >$tmp/co.log 2>&1
check "a checkout killed before its rename leaves no step directory" test ! -e $R/$S3
expect "the next checkout succeeds" 0 "checksums verified" -- $M --repo $R checkout main~1
expect "gc keeps what is younger than its grace (a commit may be running)" 0 "gc: removed 0 files" -- $M --repo $R gc
expect "gc --grace 0 removes the debris and keeps every reachable object" 0 "gc: removed" -- $M --repo $R gc --grace 0
expect "fsck after gc" 0 "0 unreachable" -- $M --repo $R fsck
nm --repo $R checkout main >/dev/null

# --- a flipped byte in a chunk --------------------------------------------------------------------
D=$tmp/damaged
cp -a $R $D
man3=$(nm --repo $D show main~1 --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["manifest"])')
chunk=$($PY - $D $man3 <<'PY'
import json, subprocess, sys
# the object of /params/wte.weight's first chunk in the first commit's manifest
objs = sys.argv[1] + "/.nebula-model/objects/"
raw = open(objs + sys.argv[2][:2] + "/" + sys.argv[2][2:], "rb").read()
m = json.loads(subprocess.run(["zstd", "-dqc"], input=raw[40:], capture_output=True, check=True).stdout)
cid = [i for i in m["items"] if i["path"] == "/params/wte.weight"][0]["chunks"][0]
print(objs + cid[:2] + "/" + cid[2:])
PY
)
$PY -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0x10; open(p,'wb').write(b)" $chunk
id=$(basename "$(dirname $chunk)")$(basename $chunk)
expect "fsck finds the flipped byte and names the object" 1 "${id}" -- $M --repo $D fsck
d6=$(xxh128sum <$D/$S6/state.h5)
expect "checkout refuses the commit that holds the damaged chunk" 2 "damaged" -- $M --repo $D checkout main~1 --force
check "... and leaves the work tree as it was (its step 6 in place)" test "$(xxh128sum <$D/$S6/state.h5)" = "$d6"
rm -rf $D/$S6
expect "... and checks out a commit that does not hold it" 0 "checksums verified" -- $M --repo $D checkout main --force
check "no checkpoint is left behind by the refused checkout" test ! -e $D/$S3

# --- hostile repositories -----------------------------------------------------------------------
H=$tmp/hostile
cp -a $R $H
h6=$(xxh128sum <$H/$S6/state.h5)
printf '0123456789abcdef0123456789abcdef\n' >$H/.nebula-model/refs/heads/nowhere
expect "a ref pointing at no object: checkout" 2 "is missing" -- $M --repo $H checkout nowhere
expect "... and no commit goes on top of it" 2 "the branch's tip is damaged" -- \
    $M --repo $H commit -m on-top --branch nowhere $tmp/r1/$S3
expect "... fsck names it" 1 "reached from refs/heads/nowhere" -- $M --repo $H fsck
rm $H/.nebula-model/refs/heads/nowhere
printf 'not a ref\n' >$H/.nebula-model/refs/heads/garbage
expect "a ref holding garbage: fsck" 1 "does not hold a commit id" -- $M --repo $H fsck
rm $H/.nebula-model/refs/heads/garbage
cp $H/.nebula-model/HEAD $tmp/HEAD.bak
printf 'ref: ../../etc\n' >$H/.nebula-model/HEAD
expect "a HEAD that is neither a branch nor an id" 2 "holds neither a branch nor a commit id" -- $M --repo $H log
cp $tmp/HEAD.bak $H/.nebula-model/HEAD

# objects built by hand: header (magic, kind, encoding, zeros, size, base) and a zstd frame
mkobj() {  # mkobj REPO KIND FILE -> prints the id
    $PY - "$@" <<'PY'
import os, struct, subprocess, sys
repo, kind, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = open(path, "rb").read()
oid = subprocess.run(["xxh128sum"], input=data, capture_output=True).stdout.split()[0].decode()
frame = subprocess.run(["zstd", "-q", "-c", path], capture_output=True).stdout  # a file: its size goes in the frame
d = os.path.join(repo, ".nebula-model/objects", oid[:2]); os.makedirs(d, exist_ok=True)
open(os.path.join(d, oid[2:]), "wb").write(b"NBMOBJ1\0" + bytes([kind, 0]) + bytes(6) + struct.pack("<Q", len(data)) + bytes(16) + frame)
print(oid)
PY
}
man=$(nm --repo $H show main --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["manifest"])')
f=$H/.nebula-model/objects/${man:0:2}/${man:2}
tail -c +41 $f | zstd -dqc >$tmp/manifest.json
lie() {  # lie NAME PYTHON-EXPR-ON-j: a commit of a manifest edited by the expression, as branch NAME
    $PY - $tmp/manifest.json $tmp/$1.json "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(j, sort_keys=True, separators=(",", ":")))
PY
    local mid cid
    mid=$(mkobj $H 3 $tmp/$1.json)
    printf '{"author":"t","format":"nebula-model-commit","lineage":null,"manifest":"%s","message":"lie","parents":[],"time":0,"version":1}' \
        "$mid" >$tmp/$1.commit
    cid=$(mkobj $H 4 $tmp/$1.commit)
    printf '%s\n' "$cid" >$H/.nebula-model/refs/heads/$1
}
lie shape 'it = [x for x in j["items"] if x["path"] == "/params/wte.weight"][0]; it["bytes"] = str(int(it["bytes"]) * 2)'
expect "a manifest whose item lies about its bytes: checkout" 2 "but its shape and float32 make" -- \
    $M --repo $H checkout shape --force
lie filesize 'j["file_bytes"] = str(int(j["file_bytes"]) + 4096)'
expect "a manifest that lies about the file's size: checkout" 2 "lies about sizes" -- $M --repo $H checkout filesize --force
expect "fsck names both lying manifests" 1 "make" -- $M --repo $H fsck
check "the work tree's checkpoint is untouched by every refusal" test "$(xxh128sum <$H/$S6/state.h5)" = "$h6"
rm $H/.nebula-model/refs/heads/shape $H/.nebula-model/refs/heads/filesize
# a link planted in the work tree: never vouched for, and --force removes the link, not its target
ln -s $tmp/r1/$S3 $H/ckpt/step_00000003
h3=$(xxh128sum <$tmp/r1/$S3/state.h5)
expect "a linked checkpoint in the work tree counts as uncommitted" 0 "uncommitted  ckpt/step_00000003" -- $M --repo $H status
expect "checkout --force goes through" 0 "switched to branch 'main'" -- $M --repo $H checkout main --force
check "... removing the link, not the checkpoint it points at" \
    test ! -L $H/ckpt/step_00000003 -a -f $tmp/r1/$S3/COMMITTED -a "$(xxh128sum <$tmp/r1/$S3/state.h5)" = "$h3"

# the reflog protects a rolled-back commit from gc, under a nested branch name too
nm --repo $H checkout main -b team/exp >/dev/null
nm --repo $H commit -m exp $tmp/r1/$S3 >/dev/null
gone=$(rev $H team/exp)
nm --repo $H rollback >/dev/null
nm --repo $H gc --grace 0 >/dev/null
expect "gc keeps a commit the reflog of team/exp still names" 0 "commit   $gone" -- $M --repo $H show $gone
nm --repo $H gc --grace 0 --prune-reflog >/dev/null
expect "gc --prune-reflog removes it" 2 "" -- $M --repo $H show $gone
truncate -s 30 $f
expect "a truncated manifest object: show" 2 "has no valid header" -- $M --repo $H show main
finish
