#!/usr/bin/env bash
# The run directory and the metrics writer (docs/training.md, "Run directory" and
# "Output and metrics"), gpt2-tiny on the licence texts:
#   - lock: a second run on a directory in use exits 2 naming the holder (host, pid,
#     since) and a HINT, before touching anything; the first goes on untouched (its
#     config.ini, no duplicated step in metrics.jsonl, its checkpoint verifies);
#     a lock left by a kill -9'd run is stale (the kernel dropped its flock): taken over
#     with a line naming the dead holder; where flock fails (CHAOS build, rundir.lock),
#     a live holder on this host is still found from the holder line;
#   - links and special files planted under the names the trainer writes (metrics.jsonl,
#     heartbeat, lock; a FIFO) exit 2 naming the file, the link's target untouched;
#   - metrics: every line of metrics.jsonl is JSON, non-finite numbers are null with the
#     key kept (a diverging GPT-2's loss and gnorm); a failed write (CHAOS build, metrics.write)
#     loses that record only, the run goes on to exit 0 and reports the count; a failed
#     open of metrics.jsonl or of the lock exits 1 before training; a real full disk (a
#     tmpfs, root only) leaves whole lines only and the run goes on;
#   - resume: another seed or seq_len than the checkpoint's warns; a checkpoint that
#     already reaches train.steps says "nothing to do" and exits 0 without invented
#     numbers; config.ini is the resolved config and runs again as --config;
#   - exposed_comm is a share of step time (0-100%);
#   - launches: every record carries time, elapsed_s, launch and job, and strict JSON
#     parsers read every line; a resumed launch is launch 2 and marks the steps it redoes;
#     progress lines show done=i/N (p%), elapsed and the ETA as h:mm:ss.
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
CHAOS=build/chaos/bin/nebula-train
CKPT=build/bin/nebula-ckpt
licenses_data

# go NP RUN_DIR LOG [ARG...]: gpt2-tiny under a 120 s deadline, output in LOG; $BIN: the binary
go() {
    local np=$1 dir=$2 log=$3
    shift 3
    timeout 120 $MPIRUN -np "$np" ${BIN:-$TRAIN} --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set optim.schedule=constant \
        --set optim.warmup_steps=0 --set train.log_interval=1 --set train.eval_interval=0 \
        --set train.global_batch=8 "$@" >"$log" 2>&1 </dev/null
}
has() { grep -qE -- "$2" "$1"; }  # has FILE REGEX
# wait_step RUN_DIR N: until the heartbeat reports step >= N (60 s at most)
wait_step() {
    for _ in $(seq 600); do
        local s
        s=$(sed -n 's/^step=\([0-9]*\).*/\1/p' "$1/heartbeat" 2>/dev/null)
        [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
# json_ok FILE: every line is a JSON object and no train step repeats
# json_ok FILE: every line one JSON object under a strict parser (NaN/Infinity refused), with
# the header every record carries (docs/metrics.md), "nonfinite" naming exactly its null
# keys, and no train step twice unless the later one is marked redone
json_ok() {
    $PY - "$1" <<'PY'
import datetime, json, sys
def refuse(c): raise ValueError(f"non-JSON constant {c}")
steps = []
for n, line in enumerate(open(sys.argv[1]), 1):
    j = json.loads(line, parse_constant=refuse)  # raises on a blank or torn line
    assert isinstance(j, dict), f"line {n} is not an object"
    for k in ("kind", "step", "time", "elapsed_s", "launch", "job"): assert k in j, f"line {n} lacks {k}"
    assert datetime.datetime.strptime(j["time"], "%Y-%m-%dT%H:%M:%S.%fZ"), j["time"]
    assert j["launch"] >= 1 and j["elapsed_s"] >= 0, f"line {n}: launch {j['launch']}, elapsed {j['elapsed_s']}"
    def null_paths(v, path=""):  # as metrics.c names them: a.b, layers.3.density
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        return [p for k, x in items for p in null_paths(x, f"{path}.{k}" if path else str(k))] if items else \
               ([path] if v is None else [])
    nulls = sorted(null_paths(j))
    assert nulls == sorted(j.get("nonfinite", [])), f"line {n}: null keys {nulls}, nonfinite {j.get('nonfinite')}"
    if j["kind"] == "train" and not j.get("redone"): steps.append(j["step"])
assert len(steps) == len(set(steps)), f"duplicated steps {sorted(steps)}"
PY
}

# --- two runs on one directory ------------------------------------------------------------
A=$tmp/a
go 2 $A $tmp/a.log --steps 1000 --ckpt-every 2 --seed 11 &
pid_a=$!
wait_step $A 2 || echo "    (the first run did not reach step 2 in 60 s)"
holder=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' $A/lock)
go 1 $A $tmp/b.log --steps 1000 --ckpt-every 2 --seed 7; rc=$?
check "a second run on a directory in use exits 2 (got $rc)" test "$rc" -eq 2
check "... naming the holder (host, pid $holder, since when) and a HINT" eval \
    "has $tmp/b.log 'is in use by another run: host $(hostname) pid $holder since 20[0-9-]+T' && has $tmp/b.log '^HINT: '"
check "... while the first is still running" kill -0 $pid_a
if [ -x $CHAOS ]; then  # flock failing (CHAOS build): the holder line is the fallback
    NEBULA_CHAOS_FAULT=rundir.lock:EIO BIN=$CHAOS go 1 $A $tmp/b2.log --steps 1000; rc=$?
    check "where flock fails, a live holder on this host still refuses the run (exit $rc)" eval \
        "[ $rc -eq 2 ] && has $tmp/b2.log 'pid $holder since .*its process is alive'"
fi
kill -USR2 $holder  # rank 0 asks; every rank agrees at the step end: checkpoint and stop
wait $pid_a; rc=$?
check "the first run stops on request as usual (exit 3, got $rc)" test "$rc" -eq 3
check "... untouched: its config.ini (seed 11), no duplicated step in metrics.jsonl" eval \
    "grep -qx 'seed = 11' $A/config.ini && json_ok $A/metrics.jsonl"
last=$(ls $A/ckpt | grep '^step_' | tail -1)
check "... its last checkpoint ($last) verifies" eval "$CKPT verify $A/ckpt/$last >/dev/null 2>&1"
check "... and it released the lock (empty holder line)" test ! -s $A/lock

# --- a stale lock: the holder was killed with SIGKILL ---------------------------------------
K=$tmp/k
go 1 $K $tmp/k.log --steps 1000 &
pid_k=$!
wait_step $K 1 || echo "    (the run did not reach step 1 in 60 s)"
holder=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' $K/lock)
[ -n "$holder" ] && kill -9 "$holder"
wait $pid_k
check "a kill -9'd run leaves its holder line (pid $holder)" has $K/lock "pid=$holder "
go 1 $K $tmp/k2.log --steps 2; rc=$?
check "the next run takes the stale lock over (exit $rc) and says whose it was" eval \
    "[ $rc -eq 0 ] && has $tmp/k2.log 'taking over a stale lock of host $(hostname) pid $holder since'"

# --- links and special files where the trainer writes -----------------------------------------
for name in metrics.jsonl heartbeat lock; do
    L=$tmp/link-${name%%.*}
    mkdir -p $L
    echo precious >$tmp/target-$name
    ln -s $tmp/target-$name $L/$name
    go 1 $L $L.log --steps 2; rc=$?
    check "a symbolic link as RUN_DIR/$name exits 2 (got $rc) naming it; the target is untouched" eval \
        "[ $rc -eq 2 ] && has $L.log '$L/$name is .*symbolic link' && [ \"\$(cat $tmp/target-$name)\" = precious ]"
done
F=$tmp/fifo
mkdir -p $F && mkfifo $F/metrics.jsonl
go 1 $F $F.log --steps 2; rc=$?
check "a FIFO as RUN_DIR/metrics.jsonl exits 2 (got $rc), not a hang" eval "[ $rc -eq 2 ] && has $F.log 'metrics.jsonl is a FIFO'"

# --- metrics: valid JSON always, write faults ----------------------------------------------
R=$tmp/rn
timeout 120 $MPIRUN -np 1 $TRAIN --model gpt2-tiny --run-dir $R --set train.micro_batch=2 --set optim.name=sgd \
    --set optim.warmup_steps=0 --set optim.lr=1000 --set optim.schedule=constant --set train.max_grad_norm=0 \
    --set train.log_interval=1 --steps 8 >$R.log 2>&1 </dev/null
check "a diverging GPT-2 (SGD): every metrics line is JSON, a non-finite loss and gnorm are null with their keys kept" eval \
    "json_ok $R/metrics.jsonl && grep -q '\"loss\":null' $R/metrics.jsonl && grep -q '\"gnorm\":null' $R/metrics.jsonl"
if [ -x $CHAOS ]; then
    M=$tmp/mw
    NEBULA_CHAOS_FAULT=metrics.write:EIO@3 BIN=$CHAOS go 1 $M $M.log --steps 5; rc=$?
    check "metrics.write fails at step 3 (CHAOS build): exit 0 (got $rc), the error logged with path and errno" eval \
        "[ $rc -eq 0 ] && has $M.log 'cannot write a record to $M/metrics.jsonl at step 3: Input/output error'"
    # step 3 writes two records (train and ranks); both are lost, nothing else
    check "... the records of step 3 only are lost, the rest is valid JSON, and the count is reported" eval \
        "json_ok $M/metrics.jsonl && [ \$(grep -c '\"kind\":\"train\"' $M/metrics.jsonl) -eq 4 ] && \
         [ \$(grep -c '\"kind\":\"ranks\"' $M/metrics.jsonl) -eq 4 ] && ! has $M/metrics.jsonl '\"step\":3,' && \
         has $M.log '^metrics: 2 of 14 records could not be written' && has $M/metrics.jsonl '\"metrics_lost\":2'"
    for point in metrics.open rundir.open; do
        NEBULA_CHAOS_FAULT=$point:EIO BIN=$CHAOS go 1 $tmp/$point $tmp/$point.log --steps 2; rc=$?
        check "$point fails (CHAOS build): exit 1 before training (got $rc)" eval \
            "[ $rc -eq 1 ] && ! has $tmp/$point.log '^step='"
    done
    # (a test of its own fails every point of the module in turn; these two keep the lock's
    # holder line and config.ini honest about being optional)
    for point in rundir.write rundir.config; do
        NEBULA_CHAOS_FAULT=$point:EIO BIN=$CHAOS go 1 $tmp/$point $tmp/$point.log --steps 2; rc=$?
        check "$point fails (CHAOS build): a warning, the run goes on (exit $rc)" eval \
            "[ $rc -eq 0 ] && has $tmp/$point.log 'injected EIO at $point' && has $tmp/$point.log '^summary: steps=2'"
    done
else
    echo "    (no CHAOS build: the fault-point checks are left out; make chaos builds it)"
fi

# A real full disk (root only): a 16 KiB tmpfs as the run directory holds the lock, config.ini,
# the heartbeat and one page of metrics.jsonl (about 20 records); the record that does not fit is
# written in part by the kernel, and cut back off. No checkpoints (they would fail the run).
FD=$tmp/full
mkdir -p $FD
if mount -t tmpfs -o size=16k tmpfs $FD 2>/dev/null; then
    go 1 $FD $tmp/full.log --steps 30 --set ckpt.every_steps=0 --set ckpt.every_minutes=0; rc=$?
    check "a full disk under metrics.jsonl: exit 0 (got $rc), ENOSPC logged, the losses counted" eval \
        "[ $rc -eq 0 ] && has $tmp/full.log 'metrics.jsonl at step [0-9]+: No space left on device' && \
         has $tmp/full.log '^metrics: [0-9]+ of [0-9]+ records could not be written'"
    check "... and every line it holds is whole JSON (the torn record was cut off)" json_ok $FD/metrics.jsonl
    umount $FD
else
    echo "    (not root: the full-disk check is left out)"
fi

# --- resume: warnings, nothing to do, config.ini ---------------------------------------------
S=$tmp/s
go 2 $S $tmp/s1.log --steps 3 --ckpt-every 3 >/dev/null
check "exposed_comm is a share of step time (0-100%), on the summary line and in the summary record" eval \
    "sed -n 's/.*exposed_comm=\([0-9]*\)%.*/\1/p' $tmp/s1.log | awk '{exit !(\$1 >= 0 && \$1 <= 100)}' && \
     $PY -c 'import json,sys; s=[j for j in map(json.loads, open(sys.argv[1])) if j[\"kind\"]==\"summary\"][-1]; \
sys.exit(not 0 <= s[\"exposed_comm_pct\"] <= 100)' $S/metrics.jsonl"
go 2 $S $tmp/s2.log --steps 4 --ckpt-every 4 --seed 7 --seq-len 32; rc=$?
check "resuming with another seed and seq_len warns about both (exit $rc)" eval \
    "[ $rc -eq 0 ] && has $tmp/s2.log 'resuming with train.seed = 7, but the checkpoint.s run used 1337' && \
     has $tmp/s2.log 'resuming with train.seq_len = 32, but the checkpoint.s run used 64'"
check "... and metrics.jsonl marks where the resumed launch starts" \
    grep -q '"kind":"resume","step":3,"checkpoint":"'"$S"'/ckpt/step_00000003"' $S/metrics.jsonl
cp $S/config.ini $tmp/config.ini
timeout 120 $MPIRUN -np 1 $TRAIN --config $tmp/config.ini >$tmp/s3.log 2>&1 </dev/null; rc=$?
check "config.ini is the resolved config: as --config it resumes the run, which has nothing to do (exit $rc)" eval \
    "[ $rc -eq 0 ] && has $tmp/s3.log '^nothing to do: the checkpoint resumed is at step 4 and train.steps = 4' && \
     ! has $tmp/s3.log '=inf|final_loss='"
check "... and metrics.jsonl says so without invented numbers" eval \
    "json_ok $S/metrics.jsonl && tail -1 $S/metrics.jsonl | grep -q '\"steps_run\":0' && ! tail -1 $S/metrics.jsonl | grep -q final_loss"

# --- launches: counted, and steps an earlier launch wrote are marked when redone --------------
L=$tmp/l
go 1 $L $tmp/l1.log --steps 6 --ckpt-every 4 >/dev/null
rm -rf $L/ckpt/step_00000006  # as if the launch died after logging step 6, before committing it
go 1 $L $tmp/l2.log --steps 8 --ckpt-every 4; rc=$?
check "a resumed launch (exit $rc): launch 2 in every record it writes, steps 5-6 redone, 7-8 not; every line strict JSON" eval \
    "[ $rc -eq 0 ] && json_ok $L/metrics.jsonl && $PY -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
launches = [r[\"launch\"] for r in recs]
assert launches == sorted(launches) and set(launches) == {1, 2}, launches
two = [r for r in recs if r[\"launch\"] == 2]
assert two[0][\"kind\"] == \"launch\" and two[0][\"previous_step\"] == 6, two[0]
assert [r[\"step\"] for r in two if r[\"kind\"] == \"resume\"] == [4], two
redone = {r[\"step\"]: r.get(\"redone\", False) for r in two if r[\"kind\"] == \"train\"}
assert redone == {5: True, 6: True, 7: False, 8: False}, redone
assert [r[\"step\"] for r in recs if r[\"kind\"] == \"checkpoint\"] == [4, 6, 8], recs
' $L/metrics.jsonl"
N=$tmp/n
go 1 $N $tmp/n1.log --steps 3 --set ckpt.every_steps=0 >/dev/null
printf '{"kind":"train","st' >>$N/metrics.jsonl  # a record torn by a crash inside its write
go 1 $N $tmp/n2.log --steps 3 --set ckpt.every_steps=0; rc=$?
check "without checkpoints a second launch (exit $rc) starts at step 0 and marks steps 1-3 redone; a torn last line is cut off" eval \
    "[ $rc -eq 0 ] && has $tmp/n2.log 'metrics: cut a torn last record \\(19 bytes\\)' && json_ok $N/metrics.jsonl && $PY -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
two = [r for r in recs if r[\"launch\"] == 2]
assert two[0][\"kind\"] == \"launch\" and two[0][\"previous_step\"] == 3, two[0]
assert [(r[\"step\"], r.get(\"redone\")) for r in two if r[\"kind\"] == \"train\"] == [(1, True), (2, True), (3, True)], two
' $N/metrics.jsonl"
check "... progress lines: done=i/N (p%), elapsed and eta as h:mm:ss" \
    has $tmp/l2.log '^step=8 .* done=8/8 \(100\.0%\) elapsed=[0-9]+:[0-5][0-9]:[0-5][0-9] eta=0:00:00$'
finish
