#!/usr/bin/env bash
# Bounded time (docs/training.md, "Running: placement, errors, logs"): a rank stopped
# with SIGSTOP — it holds its connections open and answers nothing, the hardest peer
# to give up on — must not hold the job past comm.timeout. gpt2-tiny on 2 ranks with
# comm.timeout = 5 s; rank 1 is stopped
#   ckpt  during a synchronous checkpoint save, as soon as .step_*.tmp/state.h5 exists
#         (rank 0 then waits in the checkpoint writer's agreement, under the deadline);
#   eval  during an evaluation (held-out batches every step);
#   ctl   at a step boundary (the per-step agreement on checkpoints, signals and the
#         control file);
#   dgc   during a DGC-Pro exchange (dgc.mode = on, 2 virtual nodes);
#   end   once the summary is printed: in the frees or MPI_Finalize.
# Each case: mpirun and every rank, the stopped one included, are gone within
# comm.timeout + 10 s (the outer `timeout` of 15 s would exit 124 otherwise), exit code
# 1, and the message names the operation and rank 1.
# Usage: test_bounded.sh [ckpt|eval|ctl|dgc|end]... (all without arguments).
. "$(dirname "$0")/lib.sh"
licenses_data
TIMEOUT=5
# also when this script is killed from outside: nothing of its jobs may be left
trap 'pkill -KILL -f -- "--run-dir $tmp/"; rm -rf "$tmp"' EXIT

# rank_pid DIR RANK: the pid of RANK of the job running in DIR (empty while it starts)
rank_pid() {
    local p
    for p in $(pgrep -f -- "--run-dir $1( |$)"); do
        tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}

# bounded NAME REGEX STOP_WHEN -- ARGS...: runs the job in $tmp/NAME, stops rank 1 once
# the shell condition STOP_WHEN holds (with $dir set), then checks exit code, time
# bound, message and that nothing of the job is left.
bounded() {
    local name=$1 text=$2 when=$3
    shift 4
    local dir=$tmp/$name
    mkdir -p "$dir"
    ( licenses_run "$dir" 2 --set comm.timeout=$TIMEOUT --set train.steps=400 "$@" ) &
    local job=$! pid="" stopped=0 t0=$SECONDS
    # licenses_run has no `timeout` of its own: the deadline is enforced below
    while kill -0 $job 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do
        [ -z "$pid" ] && pid=$(rank_pid "$dir" 1)
        if [ -n "$pid" ] && eval "$when"; then kill -STOP "$pid" && stopped=1 && break; fi
        sleep 0.002
    done
    local t_stop=$SECONDS rc=0
    if [ $stopped = 1 ]; then
        # wait for the job at most comm.timeout + 10 s after the stop
        while kill -0 $job 2>/dev/null && [ $((SECONDS - t_stop)) -le $((TIMEOUT + 10)) ]; do sleep 0.2; done
    fi
    if [ $stopped = 0 ]; then
        echo "FAIL - $name: rank 1 was never stopped (pid '${pid}'); the job ran $((SECONDS - t0)) s"
        tail -3 "$dir.log" | sed 's/^/    /'
        fails=$((fails + 1))
        pkill -KILL -f -- "--run-dir $dir( |$)"
        wait $job 2>/dev/null
        return
    fi
    local alive=0
    pgrep -f -- "--run-dir $dir( |$)" >/dev/null && alive=1
    if kill -0 $job 2>/dev/null || [ $alive = 1 ]; then
        echo "FAIL - $name: the job still runs $((SECONDS - t_stop)) s after rank 1 was stopped (comm.timeout = $TIMEOUT s)"
        pgrep -af -- "--run-dir $dir( |$)" | sed 's/^/    /' | cut -c1-160
        tail -3 "$dir.log" | sed 's/^/    /'
        fails=$((fails + 1))
        pkill -KILL -f -- "--run-dir $dir( |$)"
        wait $job 2>/dev/null
        return
    fi
    wait $job
    rc=$?
    if [ $rc -ne 1 ]; then
        echo "FAIL - $name: exit $rc, expected 1"; tail -5 "$dir.log" | sed 's/^/    /'; fails=$((fails + 1))
    elif ! grep -qE -- "$text" "$dir.log" || ! grep -qE "rank 1([^0-9]|$)" "$dir.log"; then
        echo "FAIL - $name: the message lacks '$text' or rank 1"; grep -i error "$dir.log" | head -5 | sed 's/^/    /'
        fails=$((fails + 1))
    else
        echo "ok - $name: job gone $((SECONDS - t_stop)) s after rank 1 stopped, exit 1, names the operation and rank 1"
        grep -m1 -iE "watchdog|timed out|did not" "$dir.log" | cut -c1-600 | sed 's/^/    /'
    fi
}

# steps DIR: training records in DIR's metrics.jsonl so far (rank 0 writes one per step)
steps() {
    local n
    n=$(grep -c '"kind":"train"' "$1/metrics.jsonl" 2>/dev/null)
    echo "${n:-0}"
}

cases=${*:-ckpt eval ctl dgc end}
for c in $cases; do
    case $c in
    # the save of step 1 creates the file with every rank in HDF5's collective calls
    ckpt) bounded ckpt "checkpoint save of step|on checkpoint" 'compgen -G "$dir/ckpt/.step_*.tmp/state.h5" >/dev/null' -- \
        --set ckpt.every_steps=1 ;;
    # rank 0 writes step 2's record, then every rank evaluates 64 batches: rank 1 stops in
    # their forward passes, rank 0 waits in the evaluation's allreduce
    eval) bounded eval "allreduce on world \(evaluation\)" '[ "$(steps $dir)" -ge 2 ]' -- \
        --set data.val="$data/val.bin" --set train.eval_interval=1 --set train.eval_batches=64 ;;
    # rank 0 writes step 2's record and joins the step-end agreement, where rank 1 already
    # waits (it has nothing to log)
    ctl) bounded ctl "allreduce" '[ "$(steps $dir)" -ge 2 ]' -- ;;
    # 10 ms into step 3 (of about 40): rank 1 stops in its forward or backward pass, rank 0
    # waits in DGC-Pro's exchange, or in the step's verdict allreduce just before it (the
    # non-finite counts are agreed before the exchange), whichever it reaches first
    dgc) bounded dgc "dgc peers|allreduce on world" '[ "$(steps $dir)" -ge 2 ] && sleep 0.01' -- --set dgc.mode=on --ranks-per-node 1 ;;
    # the last step's summary is out: rank 1 stops in the frees or MPI_Finalize (OpenMPI's
    # ends in a barrier), which only the watchdog bounds
    end) bounded end "shutdown|MPI_Finalize|world" 'grep -q "^summary:" "$dir.log"' -- --set train.steps=20 ;;
    *) echo "unknown case $c"; exit 2 ;;
    esac
done
finish
