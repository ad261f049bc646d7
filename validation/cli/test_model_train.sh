#!/usr/bin/env bash
# nebula-train with a nebula-model repository (docs/training.md "Model repository"), on
# gpt2-tiny and the licence-text corpus, 2 ranks, 16 steps, a checkpoint every 4:
#   - ckpt.commit_to = R: one commit per checkpoint (4), newest first in `nebula-model log`,
#     each with the message "step N loss L" (the step's loss as the run printed it), a
#     `commit` record per commit in metrics.jsonl (the same ids), and nebula-report's loss
#     curve marks each with its short id;
#   - ckpt.commit_every = 2 with asynchronous checkpoints and keep_last 1 (the commit reads
#     a checkpoint the next one prunes) on a named branch of a repository made on another:
#     half the checkpoints (steps 8 and 16), on that branch;
#   - ckpt.commit_when = improved: only checkpoints after a better evaluation (the last one on
#     the final evaluation), each declined one with its line;
#   - --resume model:R@HEAD~1 in a new run directory: the commit of step 12 checked out under
#     RUN_DIR/model-checkout/<id> byte for byte the original state.h5, the run's first step
#     13, and its losses from there bit for bit the original run's; a second launch reuses
#     the checkout;
#   - a commit that fails (the CHAOS build, ENOSPC at every object write) is a warning: the
#     run trains on, its checkpoints committed, no commit record;
#   - refused with exit 2: commit_to naming no repository (the HINT, no run directory left),
#     an unknown ref, commit_when = improved without data.val.
. "$(dirname "$0")/lib.sh"
MODEL=$PWD/build/bin/nebula-model
[ -x "$MODEL" ] || { echo "FAIL - $MODEL is missing (make)"; exit 1; }
licenses_data

# run RUN_DIR [ARG...]: 2 ranks, 16 steps, a checkpoint every 4 (licenses_run, lib.sh)
run() {
    local dir=$1
    shift
    licenses_run "$dir" 2 --steps 16 --set train.global_batch=8 --set ckpt.every_steps=4 "$@"
}
# losses RUN.log: "step loss" of every step line the run printed
losses() { sed -n 's/^step=\([0-9]*\) loss=\([^ ]*\) .*/\1 \2/p' "$1"; }

# --- a commit per checkpoint ------------------------------------------------------------
R=$tmp/R
$MODEL init $R >/dev/null
check "nebula-model init makes the repository" test -d $R/.nebula-model
run $tmp/a --set ckpt.commit_to=$R
check "a 16-step run committing into R" grep -q "^summary: steps=16" $tmp/a.log
$MODEL log --repo $R >$tmp/log.txt 2>&1
check "4 checkpoints, 4 commits (nebula-model log --repo)" [ "$(wc -l <$tmp/log.txt)" -eq 4 ]
check "nebula-model log inside the repository lists the same" eval "[ \"\$(cd $R && $MODEL log)\" = \"\$(cat $tmp/log.txt)\" ]"
check "the run printed one 'committed step N to R (main) as ID: X new chunks, Y MB stored' line per checkpoint" \
    [ "$(grep -cE "^committed step (4|8|12|16) to $R \(main\) as [0-9a-f]{12}: [0-9]+ new chunks, [0-9.]+ MB stored$" \
        $tmp/a.log)" -eq 4 ]
$PY - $tmp/a/metrics.jsonl $tmp/log.txt "$(cd $R && pwd -P)" <<'PY'
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
log = [l.split()[0] for l in open(sys.argv[2])]             # newest first, 12-hex ids
commits = [r for r in recs if r["kind"] == "commit"]
checkpoints = [r["step"] for r in recs if r["kind"] == "checkpoint"]
bad = []
if [c["step"] for c in commits] != checkpoints or checkpoints != [4, 8, 12, 16]:
    bad.append(f"commit records at {[c['step'] for c in commits]}, checkpoints at {checkpoints}")
for c in commits:
    if not re.fullmatch(r"[0-9a-f]{32}", c.get("commit", "")) or c.get("repo") != sys.argv[3] or c.get("branch") != "main":
        bad.append(f"record {c}")
if [c["commit"][:12] for c in reversed(commits)] != log:
    bad.append(f"ids {[c['commit'][:12] for c in commits]} against the log {log}")
print("    " + "; ".join(bad) if bad else f"    {len(commits)} commit records")
sys.exit(1 if bad else 0)
PY
check "metrics.jsonl: a commit record per checkpoint (step, 32-hex id, repo, branch), the ids the log's" [ $? -eq 0 ]
show=$($MODEL --repo $R show HEAD~1 2>&1)
want=$(losses $tmp/a.log | awk '$1 == 12 { print "step 12 loss " $2 }')
check "nebula-model show HEAD~1: the message 'step 12 loss L', L the step's printed loss" \
    eval '[ -n "$want" ] && grep -qF -- "$want" <<<"$show"'
build/bin/nebula-report $tmp/a --out $tmp/a.html --only fig-curves >/dev/null 2>&1
# marked ID...: each id is a mark's tag in the report
marked() {
    local id
    for id in "$@"; do grep -q ">$id</text></g>" $tmp/a.html || return 1; done
}
check "nebula-report: the loss curve marks the 4 commits, each labelled with its id" eval \
    "[ \$(grep -o 'data-marker=\"commit\"' $tmp/a.html | wc -l) -eq 4 ] && marked $(cut -c1-12 $tmp/log.txt | tr '\n' ' ')"

# --- every other checkpoint, async, on a branch ---------------------------------------------
R2=$tmp/R2
$MODEL init $R2 --branch dev >/dev/null
run $tmp/b --set ckpt.commit_to=$R2:exp --set ckpt.commit_every=2 --set ckpt.async=true --set ckpt.keep_last=1
check "commit_every = 2, async, keep_last 1: steps 8 and 16 committed, on branch exp" eval \
    "[ \"\$($MODEL log --repo $R2 exp --json | $PY -c 'import json,sys; print([c[\"lineage\"][\"step\"] for c in json.load(sys.stdin)])')\" = '[16, 8]' ] &&
     [ \$(grep -c '\"kind\":\"commit\".*\"branch\":\"exp\"' $tmp/b/metrics.jsonl) -eq 2 ] &&
     [ \$(grep -c '\"kind\":\"checkpoint\"' $tmp/b/metrics.jsonl) -eq 4 ]"
check "the repository's HEAD branch (dev) has no commit" eval "! $MODEL log --repo $R2 2>/dev/null | grep -q ."

# --- only improvements: a checkpoint every 2 steps, an evaluation every 4 ----------------------
$MODEL init $tmp/Ri >/dev/null
licenses_run $tmp/i 2 --steps 12 --set train.global_batch=8 --set ckpt.every_steps=2 --set data.val=$data/val.bin \
    --set train.eval_interval=4 --set train.eval_batches=1 --set ckpt.commit_to=$tmp/Ri --set ckpt.commit_when=improved
steps_i=$($PY -c 'import json,sys; print([json.loads(l)["step"] for l in open(sys.argv[1]) if "\"commit\"" in l])' \
    $tmp/i/metrics.jsonl)
check "commit_when = improved: checkpoints 4 and 8 committed (each after a better evaluation), 2, 6 and 10 not ($steps_i)" \
    eval "[ '$steps_i' = '[4, 8]' ] || [ '$steps_i' = '[4, 8, 12]' ]"
check "... each declined checkpoint says why" eval \
    "grep -q '^checkpoint step 2 not committed to .*: no held-out loss yet' $tmp/i.log &&
     grep -q '^checkpoint step 6 not committed to .*: held-out loss .* (step 4) is not below the last commit' $tmp/i.log"
check "... the last checkpoint decided on the final evaluation (step 12)" eval \
    "[ \$(grep -c '^committed step 12 \|^checkpoint step 12 not committed to .* (step 12) is not below' $tmp/i.log) -eq 1 ]"

# --- resume from a commit -----------------------------------------------------------------
id=$(sed -n 2p $tmp/log.txt | cut -c1-12)
run $tmp/c --set ckpt.resume=model:$R@HEAD~1
check "--resume model:R@HEAD~1: resumed from the checkout of commit $id at step 12" \
    grep -q "^resumed from $tmp/c/model-checkout/$id/step_00000012 at step 12" $tmp/c.log
check "the checkout is the original state.h5 byte for byte" \
    cmp -s $tmp/a/ckpt/step_00000012/state.h5 $tmp/c/model-checkout/$id/step_00000012/state.h5
check "the resumed run's first step is 13" [ "$(losses $tmp/c.log | head -1 | cut -d' ' -f1)" = 13 ]
check "its printed losses of steps 13-16 are the original run's, bit for bit" \
    eval "[ \"\$(losses $tmp/c.log)\" = \"\$(losses $tmp/a.log | awk '\$1 >= 13')\" ] && [ \$(losses $tmp/c.log | wc -l) -eq 4 ]"
check "and so are its metrics.jsonl losses" same_losses $tmp/a $tmp/c 13 exact
licenses_run $tmp/c 2 --steps 14 --set train.global_batch=8 --set ckpt.resume=model:$R@$id
check "a second launch naming the commit by its id reuses the checkout" eval \
    "grep -q 'is checked out at .*model-checkout/$id/step_00000012 already' $tmp/c.log &&
     grep -q '^resumed from .*model-checkout/$id/step_00000012 at step 12' $tmp/c.log"

# --- a commit that fails is a warning ------------------------------------------------------
# (the CHAOS build: every object write of the repository fails with ENOSPC)
CHAOS=build/chaos/bin/nebula-train
[ -x $CHAOS ] || { echo "FAIL - $CHAOS is missing (make chaos)"; exit 1; }
$MODEL init $tmp/R3 >/dev/null
NEBULA_CHAOS_FAULT=model.object_write:ENOSPC $MPIRUN -np 1 -x NEBULA_CHAOS_FAULT $CHAOS \
    --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/full --set data.train=$data/train.bin --set data.val= \
    --set optim.warmup_steps=0 --set train.log_interval=1 --steps 8 --set train.global_batch=8 --set ckpt.every_steps=4 \
    --set ckpt.commit_to=$tmp/R3 >$tmp/full.log 2>&1 </dev/null
rc=$?
check "every object write failing (ENOSPC): the run trains on to step 8, exit 0 (got $rc)" eval \
    "[ $rc -eq 0 ] && grep -q '^summary: steps=8' $tmp/full.log"
check "... a warning per checkpoint, no commit record, both checkpoints committed" eval \
    "[ \$(grep -c 'warning: step [48] was not committed to $tmp/R3 (main): I/O error' $tmp/full.log) -eq 2 ] &&
     ! grep -q '\"kind\":\"commit\"' $tmp/full/metrics.jsonl && [ -e $tmp/full/ckpt/step_00000008/COMMITTED ] &&
     [ -e $tmp/full/ckpt/step_00000004/COMMITTED ]"
check "... and the repository has no commit, and nothing fsck reports" eval \
    "! $MODEL log --repo $tmp/R3 2>/dev/null | grep -q . && $MODEL fsck --repo $tmp/R3 >/dev/null"

# --- refusals -------------------------------------------------------------------------------
# refused NAME TEXT RUN_DIR [ARG...]: a 1-rank run exits 2 and its log holds TEXT
refused() {
    local name=$1 text=$2 dir=$3 rc
    shift 3
    licenses_run "$dir" 1 --steps 2 --set ckpt.every_steps=1 "$@"
    rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$text" "$dir.log"; then echo "ok - $name"; else
        echo "FAIL - $name: exit $rc, expected 2 and '$text'"; tail -5 "$dir.log" | sed 's/^/    /'; fails=$((fails + 1)); fi
}
refused "commit_to naming no repository: exit 2 naming the key, with the HINT" \
    "HINT: nebula-model init $tmp/none" $tmp/bad --set ckpt.commit_to=$tmp/none
check "... before the run directory is made" [ ! -e $tmp/bad ]
check "... the message names the key" grep -q "ckpt.commit_to = $tmp/none (--set)" $tmp/bad.log
refused "--resume model:R@nosuch: exit 2 naming the ref" "'nosuch' names no commit of $R" $tmp/bad2 \
    --set ckpt.resume=model:$R@nosuch
refused "--resume model:DIR@HEAD of a directory that is no repository: exit 2" \
    "$tmp/none is not a nebula-model repository" $tmp/bad3 --set ckpt.resume=model:$tmp/none@HEAD
refused "commit_when = improved without data.val: exit 2" "ckpt.commit_when = improved" $tmp/bad4 \
    --set ckpt.commit_to=$R --set ckpt.commit_when=improved
finish
