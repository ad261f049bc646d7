#!/usr/bin/env bash
# The fault-injection pass (SQLite's I/O-error tests: fail each I/O call in turn):
#
#   test_fault_pass.sh [--full] [MODULE...]     (modules: ckpt metrics rundir out)
#
# With ckpt, one named case first: one rank's collective write (ckpt.write:EIO/1, rank 1
# alone fails its slices of state.h5; see below). The module out (every atomic write of a
# file: base/path.c path_write_atomic) has its own pass at the end: a run's config.ini,
# reload answer, profile.json and profile shapes, nebula-report --out and nebula-ckpt
# convert --out (see there).
#
# For each MODULE, N = 1, 2, ...: the CHAOS build (build/chaos/bin/nebula-train) runs
# gpt2-tiny on 2 ranks with NEBULA_CHAOS_FAULT=MODULE#N:ERRNO, which fails the Nth fault
# point of the module that the process reaches, until a run reaches no point N (all
# points passed). The run resumes from step 3 of a copy of a committed 6-step run and
# trains to step 6 with ckpt.keep_last=1, so its one save reaches every call of the
# checkpoint writer: the directory, a step replaced (6: moved aside, put back when its
# save fails), the commit and pruning (3). Invariants for each N:
#   - the run exits 0 (the failure was survivable) or 1 (a failed save, its documented
#     code) within 120 s, with no rank left running; exit 1 comes with an error line
#     naming the errno's text;
#   - after exit 1 nothing of the failed save is left (no .tmp/.old, no uncommitted step);
#     nothing is lost: step 6 is committed (the new one, or the old one put back);
#   - the newest committed checkpoint resumes bit-exact: the normal build relaunched with
#     `--resume auto` starts at step 6 (a damaged step 6 would be skipped: caught) and
#     trains to a step 9 identical to that of an uninterrupted run (nebula-ckpt diff).
# A module whose points this build does not have (the CHAOS build refuses MODULE#N with
# exit 2, "cannot use") is skipped with a line saying so, not failed.
# Default (make check): every N of the synchronous writer, EIO at odd N and ENOSPC at
# even N, and for ckpt EIO at every other N of the asynchronous one (the first and the
# last point of each sweep always; metrics' and rundir's points do not depend on it);
# --full (or NEBULA_FAULT_PASS=full in the environment, for a whole test list): every N,
# both writers, EIO and ENOSPC (about 80 cases).
. "$(dirname "$0")/lib.sh" || exit 1
[ -d "$tmp" ] || { echo "FAIL - no temporary directory"; exit 1; }
full=0
[ "${NEBULA_FAULT_PASS:-}" = full ] && full=1  # the long pass from a test list (validate.sbatch)
if [ "${1:-}" = --full ]; then full=1; shift; fi
modules=${*:-ckpt metrics rundir out}
chaos_build_data

# run BIN RUN_DIR STEPS [ARG...]: returns the exit code (124: past the bound, BOUND or 120 s)
run() {
    local bin=$1 dir=$2 steps=$3
    shift 3
    timeout ${BOUND:-120} $MPIRUN -np 2 $bin --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set optim.schedule=constant \
        --set optim.warmup_steps=0 --set train.log_interval=3 --set train.eval_interval=0 \
        --set ckpt.every_steps=3 --set ckpt.keep_last=2 --set train.global_batch=8 --steps "$steps" "$@" \
        >>"$dir.log" 2>&1 </dev/null
}
step() { printf '%s/ckpt/step_%08d' "$1" "$2"; }
# no_rank_left RUN_DIR: no process of the run is left 10 s after mpirun returned
no_rank_left() {
    local i
    for ((i = 0; i < 20; i++)); do
        pgrep -f -- "--run-dir $1( |$)" >/dev/null || return 0
        sleep 0.5
    done
    return 1
}
newest_committed() {  # the newest committed step under RUN_DIR/ckpt, or -1
    local s best=-1
    for s in "$1"/ckpt/step_*; do
        [ -e "$s/COMMITTED" ] || continue
        s=$((10#${s##*step_}))
        [ $s -gt $best ] && best=$s
    done
    echo $best
}
no_debris() {  # nothing but committed steps: no .step_N.tmp or .step_N.old, no step_N without its marker
    local s
    for s in "$1"/ckpt/.step_* "$1"/ckpt/step_*; do
        [ -e "$s" ] || continue
        case ${s##*/} in
            .*) echo "    debris left: $s"; return 1 ;;
            *) [ -e "$s/COMMITTED" ] || { echo "    debris left: $s"; return 1; } ;;
        esac
    done
}
same_as_straight() {  # same_as_straight RUN_DIR STEP: bit-identical to the uninterrupted run's
    $CKPT diff "$(step $tmp/straight $2)" "$(step "$1" $2)" >>"$1.diff" 2>&1 ||
        { echo "    step $2 differs from the uninterrupted run's"; return 1; }
}

run $TRAIN $tmp/straight 9 &
run $TRAIN $tmp/seed 6
wait
check "uninterrupted 9-step run" test -e "$(step $tmp/straight 9)/COMMITTED"
check "the seed: a committed 6-step run" test -e "$(step $tmp/seed 6)/COMMITTED"

# one MODULE MODE ERR N: runs case N; its verdict goes to $tmp/MODULE-MODE-ERR-N.out:
# "ok - ..." or "FAIL - ..." and the reasons, "past" when the run reached fewer than N
# points (the pass is over), "none" when this build has no fault points for MODULE.
# RULE (instead of MODULE#N:ERR), BOUND (the runs' bound, s), EXPECT (a regex the log's
# error line matches after exit 1), SET (one more --set) and LABEL make the named cases.
one() {
    local module=$1 mode=$2 err=$3 n=$4 d=$tmp/$1-$2-$3-$4 rc text name point newest why= rule
    rule=${RULE:-$module#$n:$err}
    name="${LABEL:+$LABEL: }$rule ($mode)"
    text=$([ $err = ENOSPC ] && echo "No space left on device" || echo "Input/output error")
    cp -a $tmp/seed "$d"
    : >"$d.log"
    NEBULA_CHAOS_FAULT=$rule run $CHAOS "$d" 6 --resume "$(step "$d" 3)" --set ckpt.keep_last=1 \
        --set ckpt.async=$([ $mode = async ] && echo true || echo false) ${SET:+--set "$SET"}
    rc=$?
    if [ $rc -eq 2 ] && grep -q "NEBULA_CHAOS_FAULT: cannot use '$module#" "$d.log"; then
        echo none >"$d.out"
        return
    fi
    point=$(grep -o "chaos: injected $err at [a-z_.]*" "$d.log" | head -1 | sed 's/.* at //')
    if [ -z "$point" ] && [ $rc -eq 0 ]; then
        echo past >"$d.out"
        return
    fi
    {
        name="$name at ${point:-(no injection)}"
        [ -n "$point" ] || echo "    exit $rc without an injection"
        [ $rc -eq 0 ] || [ $rc -eq 1 ] ||
            echo "    exit $rc (expected 0, or 1 for a failed save; 124: a hang past ${BOUND:-120} s)"
        no_rank_left "$d" || echo "    a rank is still running 10 s after the launcher returned"
        if [ $rc -eq 1 ]; then
            grep -qE "error: .*$text" "$d.log" || echo "    no error line naming '$text'"
            [ -z "${EXPECT:-}" ] || grep -qE "error: .*$EXPECT" "$d.log" || echo "    no error line matching '$EXPECT'"
            no_debris "$d"
        fi
        [ -z "${EXPECT:-}" ] || [ $rc -eq 1 ] || echo "    exit $rc: this case's save must fail (exit 1)"
        newest=$(newest_committed "$d")
        [ "$newest" -eq 6 ] || echo "    step 6 is lost: the newest committed step is $newest"
        echo "--- relaunch" >>"$d.log"
        run $TRAIN "$d" 9 --resume auto
        rc=$?
        [ $rc -eq 0 ] && grep -qE "resumed from .*step_0*$newest at step $newest( |$)" "$d.log" ||
            echo "    the relaunch (exit $rc) did not resume at step $newest, the newest committed"
        same_as_straight "$d" 9
    } >"$d.why" 2>&1
    if [ -s "$d.why" ]; then
        { echo "FAIL - $name"; cat "$d.why"; grep -E "chaos:|error|warning|resumed" "$d.log" | head -8 | sed 's/^/    /'; } >"$d.out"
    else
        echo "ok - $name" >"$d.out"
        rm -rf "$d" "$d.log" "$d.diff"  # keeps the temporary directory small
    fi
}

# report MODULE MODE ERR N: prints case N's verdict; returns 0 (ok or failed), 2 (past
# the last point) or 3 (no points in this build)
cases=0
report() {
    local out=$tmp/$1-$2-$3-$4.out
    case $(head -1 "$out") in
        past) return 2 ;;
        none) return 3 ;;
        FAIL*) fails=$((fails + 1)) ;;
    esac
    cases=$((cases + 1))
    cat "$out"
}

# sweep MODULE MODE ERR START STRIDE: N = START, START+STRIDE, ... until a run reaches fewer points,
# JOBS cases at a time (a case mostly waits: on MPI start-up and on the abort of a failed
# run); with STRIDE > 1 the last point is found and tried too, so the pass sees its end.
JOBS=${NEBULA_FAULT_PASS_JOBS:-4}
sweep() {
    local module=$1 mode=$2 err=$3 n=$4 stride=$5 k m r past=0 c=$tmp/$1-$2-$3
    while [ $past -eq 0 ] && [ $n -le 500 ]; do
        for ((k = 0; k < JOBS; k++)); do one $module $mode $err $((n + k * stride)) & done
        wait
        for ((k = 0; k < JOBS; k++)); do
            m=$((n + k * stride))
            if [ $past -gt 0 ]; then  # beyond the end too: not reported
                rm -rf "$c-$m" "$c-$m.log" "$c-$m.out" "$c-$m.why" "$c-$m.diff"
                continue
            fi
            report $module $mode $err $m
            r=$?
            if [ $r -eq 3 ]; then
                echo "SKIP - $module: this build has no $module fault points (NEBULA_CHAOS_FAULT refuses $module#N)"
                return 3
            fi
            [ $r -eq 2 ] && past=$m
        done
        n=$((n + JOBS * stride))
    done
    [ $past -gt 0 ] || { echo "FAIL - $module ($mode, $err): still injecting at N=$n"; fails=$((fails + 1)); return 1; }
    # the last point lies between the last N injected and the first past it
    for ((m = past - 1; m > 0; m--)); do
        [ -e "$c-$m.out" ] || [ -e "$tmp/$module-$mode-$([ $err = EIO ] && echo ENOSPC || echo EIO)-$m.out" ] &&
            break  # tried already, with this errno or the other
        one $module $mode $err $m
        report $module $mode $err $m
        [ $? -eq 2 ] || break
    done
    echo "ok - $module ($mode, $err): the pass is complete (no point reached past the last one tried)"
}

# One rank's collective write: rank 1 alone fails its write of state.h5 (a synchronous
# save: every rank writes its own slices). The ranks agree on the outcome after the write,
# so the save ends on both at once, well inside 30 s although comm.timeout is 300 s (a
# rank left waiting for the failed one would be ended only by the watchdog, after it);
# exit 1, the error names rank 1, the file and the errno; then every case's invariants.
if [[ " $modules " == *" ckpt "* ]]; then
    LABEL="one rank's collective write" RULE=ckpt.write:EIO/1 BOUND=30 SET=comm.timeout=300 \
        EXPECT="checkpoint of step 6 not saved: rank 1: cannot write dataset /[^ ]+ of [^ ]*state\.h5: Input/output error" \
        one ckpt sync EIO rank1
    case $(head -1 "$tmp/ckpt-sync-EIO-rank1.out") in
        past | none) echo "FAIL - one rank's collective write: ckpt.write:EIO/1 injected nothing"; fails=$((fails + 1)) ;;
        *) report ckpt sync EIO rank1 ;;
    esac
fi

for module in $modules; do
    [ $module = out ] && continue  # its own pass, below
    if [ $full -eq 1 ]; then
        for mode in sync async; do
            for err in EIO ENOSPC; do
                sweep $module $mode $err 1 1
                [ $? -eq 3 ] && break 2
            done
        done
    else
        sweep $module sync EIO 1 2
        [ $? -eq 3 ] && continue
        sweep $module sync ENOSPC 2 2
        # the asynchronous writer changes only the checkpoint's calls: the metrics file's and
        # the run directory's points are the same calls in the same order under either
        [ $module = ckpt ] && sweep $module async EIO 1 2
    fi
done
# The atomic writes (module out). A trainer's writes of its own files are survivable: each
# N of a 1-rank run that answers a reload request at step 2 and records its shape in
# profile.shapes (config.ini at the start and again after the reload, the reload answer,
# profile.json, the shapes record) fails in turn, EIO at odd N and ENOSPC at even N. Each
# must exit 0 with its step-4 checkpoint, an error line naming the file and the errno's
# text, and leave no temporary; every file is the old one or the whole new one (the shapes
# record keeps its earlier line, config.ini ends its last line, a reload answer present
# names its step) and a missing answer is said. nebula-report --out and nebula-ckpt convert
# --out (the CHAOS builds of both) fail at each of the five points: exit 1 naming the
# errno, the existing output untouched, no temporary.
out_case() {  # out_case N: its verdict in $tmp/out-N.out ("past": no point N reached)
    local n=$1 d=$tmp/out-$1 err=EIO text="Input/output error" rc point
    [ $((n % 2)) -eq 0 ] && err=ENOSPC text="No space left on device"
    mkdir -p "$d/run" && : >"$d/run/lock"  # a run directory, so that control takes a request for it
    $TRAIN control "$d/run" --at-step 2 --set optim.lr=0.001 >/dev/null
    printf 'OLD shape line\n' >"$d/shapes"
    NEBULA_CHAOS_FAULT=out#$n:$err timeout 60 $CHAOS --config configs/train/gpt2-tiny-licenses.ini \
        --run-dir "$d/run" --set data.train="$data/train.bin" --set data.val= --steps 4 --set optim.warmup_steps=0 \
        --set ckpt.every_steps=2 --set runtime.bind=none --set train.threads=1 --set profile.shapes="$d/shapes" \
        >"$d.log" 2>&1 </dev/null
    rc=$?
    point=$(grep -o "chaos: injected $err at [a-z_.]*" "$d.log" | head -1 | sed 's/.* at //')
    if [ -z "$point" ] && [ $rc -eq 0 ]; then echo past >"$d.out"; return; fi
    {
        [ -n "$point" ] || echo "    exit $rc without an injection"
        [ $rc -eq 0 ] || echo "    exit $rc: a failed write of a run's own file is survivable (expected 0)"
        [ -e "$d/run/ckpt/step_00000004/COMMITTED" ] || echo "    no committed step-4 checkpoint"
        grep -qE "error: cannot (create|write) [a-z ]+ $d/[^ ]+: $text" "$d.log" ||
            echo "    no error line naming the file and '$text'"
        find "$d" -name '*.tmp.*' | sed 's/^/    temporary left: /'
        [ "$(head -1 "$d/shapes")" = "OLD shape line" ] && [ -z "$(tail -c1 "$d/shapes")" ] ||
            echo "    the shapes record lost its earlier line or ends in a partial one"
        [ ! -e "$d/run/config.ini" ] || { grep -q '^\[nebula\]' "$d/run/config.ini" && [ -z "$(tail -c1 "$d/run/config.ini")" ]; } ||
            echo "    config.ini is not a whole file"
        if [ -e "$d/run/reload/v000001.applied" ]; then
            grep -q '^applied_step = 2$' "$d/run/reload/v000001.applied" || echo "    the reload answer is not whole"
        else
            grep -q "warning: the answer to reload v1 was not written" "$d.log" || echo "    the reload answer is missing, unsaid"
        fi
    } >"$d.why" 2>&1
    if [ -s "$d.why" ]; then
        { echo "FAIL - out#$n:$err at ${point:-(no injection)} (a 1-rank run)"; cat "$d.why";
          grep -E "chaos:|error|warning" "$d.log" | head -6 | sed 's/^/    /'; } >"$d.out"
    else
        echo "ok - out#$n:$err at $point (a 1-rank run)" >"$d.out"
    fi
}
# tool_case BIN ERR POINT OUT ARG...: BIN (a CHAOS build) with OUT holding "OLD" fails at POINT
tool_case() {
    local bin=$1 err=$2 point=$3 out=$4 text="Input/output error" rc why= what
    shift 4
    what="${bin##*/} $([ "$1" = convert ] && echo convert --out || echo --out)"
    [ $err = ENOSPC ] && text="No space left on device"
    echo OLD >"$out"
    NEBULA_CHAOS_FAULT=out.$point:$err timeout 60 "$bin" "$@" >"$out.log" 2>&1 </dev/null
    rc=$?
    grep -q "chaos: injected $err at out.$point" "$out.log" || why+="; nothing injected"
    [ $rc -eq 1 ] || why+="; exit $rc (expected 1)"
    grep -qE "error: cannot (create|write) [a-z.]+( file)? $out[^ ]*: $text" "$out.log" || why+="; no error line naming $out and '$text'"
    [ "$(cat "$out")" = OLD ] || why+="; the existing output was replaced"
    [ -z "$(ls "$out".tmp.* 2>/dev/null)" ] || why+="; a temporary was left"
    if [ -z "$why" ]; then echo "ok - $what fails at out.$point ($err): exit 1 naming it, the old output kept"
    else echo "FAIL - $what at out.$point ($err)${why}"; sed 's/^/    /' "$out.log" | head -5; fails=$((fails + 1)); fi
    cases=$((cases + 1))
}
if [[ " $modules " == *" out "* ]]; then
    past=0
    for ((n = 1; past == 0 && n <= 200; n += JOBS)); do
        for ((k = 0; k < JOBS; k++)); do out_case $((n + k)) & done
        wait
        for ((k = 0; k < JOBS; k++)); do
            m=$((n + k))
            if [ $past -gt 0 ]; then continue; fi
            case $(head -1 "$tmp/out-$m.out") in
                past) past=$m ;;
                FAIL*) fails=$((fails + 1)); cases=$((cases + 1)); cat "$tmp/out-$m.out" ;;
                *) cases=$((cases + 1)); cat "$tmp/out-$m.out"; rm -rf "$tmp/out-$m" ;;
            esac
        done
    done
    check "out: a 1-rank run's atomic writes, each failed in turn: the pass reached its end (no point N=$past)" \
        test $past -gt 20  # config.ini twice, the answer, profile.json, the shapes: 5 points each
    for point in create write fsync close rename; do
        tool_case build/chaos/bin/nebula-report EIO $point "$tmp/report.html" "$tmp/seed" --out "$tmp/report.html"
        tool_case build/chaos/bin/nebula-ckpt ENOSPC $point "$tmp/model.safetensors" convert "$(step $tmp/seed 6)" \
            --to safetensors --out "$tmp/model.safetensors"
    done
fi
echo "$cases faults injected"
check "at least one fault injected" [ $cases -gt 0 ]
finish
