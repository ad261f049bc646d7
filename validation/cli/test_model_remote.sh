#!/usr/bin/env bash
# test_model_remote — nebula-model push, pull and clone between repositories in
# directories (a shared file system):
#   - a push sends every object once: a second push sends none, a push of one more
#     commit sends exactly that commit's new objects (its new chunks, skeleton, manifest
#     and commit), counted by the push and by the files that appear in the remote;
#   - clone and pull receive only what is missing; pull fast-forwards and checks out,
#     refuses diverged lines; a push to a branch checked out in a remote's work tree is
#     refused;
#   - two pushes of diverged commits to one branch at once: one wins, the other is
#     rejected (non-fast-forward or moved meanwhile), the remote's branch is the winner's
#     commit and fsck passes; push --force replaces it;
#   - a remote that is a FIFO, a symbolic-link loop or a plain file: exit 2, nothing
#     written.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
. validation/cli/model_lib.sh
licenses_data
train $tmp/r1 1 --steps 9 --set ckpt.keep_last=5
A=$tmp/a B=$tmp/b
nobj() { find "$1/.nebula-model/objects" -type f | wc -l; }
nm init $A >/dev/null
nm --repo $A commit -m three $tmp/r1/ckpt/step_00000003 >/dev/null
nm --repo $A commit -m six $tmp/r1/ckpt/step_00000006 >/dev/null
nm init --bare $B >/dev/null
nm --repo $A remote add origin $B >/dev/null
expect "remote lists origin" 0 "origin" -- $M --repo $A remote
have=$(nobj $A)
expect "the first push sends every object" 0 "push origin main: $have objects sent" -- $M --repo $A push origin main
check "the remote holds exactly the local objects" test "$(nobj $B)" = "$have"
expect "a second push sends nothing" 0 "0 objects sent" -- $M --repo $A push
out=$(nm --repo $A commit -m nine $tmp/r1 2>&1)
new=$(sed -n 's/.*chunks: \([0-9]*\) new.*/\1/p' <<<"$out")
want=$((new + 3))  # the new chunks, the skeleton, the manifest, the commit
expect "a push of one more commit sends its $want new objects only" 0 "$want objects sent" -- $M --repo $A push
check "the remote grew by exactly those" test "$(nobj $B)" = "$((have + want))"
expect "fsck of the remote" 0 "fsck: ok" -- $M --repo $B fsck

# --- clone, pull -------------------------------------------------------------------------
expect "clone" 0 "cloned $B into $tmp/c" -- $M clone $B $tmp/c
check "the clone's work tree holds main's checkpoint, byte for byte" cmp -s $tmp/c/ckpt/step_00000009/state.h5 \
    $tmp/r1/ckpt/step_00000009/state.h5
check "the clone has main and origin/main at the same commit" test "$(rev $tmp/c main)" = "$(rev $A main)" \
    -a "$(rev $tmp/c origin/main)" = "$(rev $A main)"
train $tmp/r2 1 --steps 12 --set train.seed=5
nm --repo $A commit -m twelve $tmp/r2 >/dev/null
nm --repo $A push >/dev/null
expect "pull receives the missing objects and fast-forwards" 0 "pull origin main: " -- $M --repo $tmp/c pull
check "... and checks the new commit out" cmp -s $tmp/c/ckpt/step_00000012/state.h5 $tmp/r2/ckpt/step_00000012/state.h5
expect "a second pull receives nothing" 0 "0 objects received" -- $M --repo $tmp/c pull
check "pull moved main to the remote's" test "$(rev $tmp/c main)" = "$(rev $A main)"
expect "a push to the branch a non-bare remote has checked out is refused" 2 "checked out in its work tree" -- \
    $M --repo $A push $tmp/c main

# --- two pushers at once ---------------------------------------------------------------------
nm clone $B $tmp/p1 >/dev/null
nm clone $B $tmp/p2 >/dev/null
nm --repo $tmp/p1 commit -m "from p1" $tmp/r1/ckpt/step_00000003 >/dev/null
nm --repo $tmp/p2 commit -m "from p2" $tmp/r1/ckpt/step_00000006 >/dev/null
nm --repo $tmp/p1 push >$tmp/push1.log 2>&1 &
p1=$!
nm --repo $tmp/p2 push >$tmp/push2.log 2>&1 &
p2=$!
wait $p1; rc1=$?
wait $p2; rc2=$?
echo "    push exit codes: $rc1 $rc2"
check "one of two concurrent pushes wins, the other is rejected" test $((rc1 + rc2)) -eq 1 -a $((rc1 * rc2)) -eq 0
check "the loser is told why" grep -qh "push rejected" $tmp/push1.log $tmp/push2.log
winner=$tmp/p1; [ $rc1 -eq 0 ] || winner=$tmp/p2
check "the remote's main is the winner's commit" test "$(rev $B main)" = "$(rev $winner main)"
expect "fsck of the remote after the race" 0 "fsck: ok" -- $M --repo $B fsck
check "no lock is left behind" test -z "$(find $B/.nebula-model -name '*.lock')"
loser=$tmp/p2; [ $winner = $tmp/p1 ] || loser=$tmp/p1
expect "the loser's pull refuses the diverged lines" 1 "have diverged" -- $M --repo $loser pull
expect "push --force replaces the remote branch" 0 "objects sent" -- $M --repo $loser push --force
check "the remote's main is now the loser's" test "$(rev $B main)" = "$(rev $loser main)"

# --- hostile remotes ---------------------------------------------------------------------------
mkfifo $tmp/fifo
ln -s $tmp/loop1 $tmp/loop2
ln -s $tmp/loop2 $tmp/loop1
echo text >$tmp/plain
for bad in fifo loop1 plain; do
    nm --repo $A remote add "r$bad" $tmp/$bad >/dev/null 2>&1
    expect "a remote that is $bad: exit 2" 2 "remote " -- timeout 20 $M --repo $A push "r$bad" main
done
check "nothing was written through them" test -p $tmp/fifo -a "$(cat $tmp/plain)" = text
expect "an unknown remote" 2 "no remote named 'nowhere'" -- $M --repo $A push nowhere main
expect "a branch name that climbs out of refs/heads (../tags/v1) is refused" 2 "is not a valid branch name" -- \
    $M --repo $A push origin ../tags/v1
finish
