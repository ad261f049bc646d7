# lib.sh — what every Nebula job script does the same way; sourced, not submitted.
#
# sbatch copies a job script into Slurm's spool directory before running it, so a script
# cannot find this file next to itself: it finds it through NEBULA_JOBSCRIPTS (set by the
# modulefile of an installation: PREFIX/share/nebula/jobscripts), else NEBULA_HOME/jobscripts
# (default: the directory sbatch was called from, SLURM_SUBMIT_DIR).
#
# Variables every job script reads (set them in the environment before sbatch, which
# exports the submitting environment by default):
#   NEBULA_HOME        where the job runs: relative configs and run directories are under it
#                      (default: SLURM_SUBMIT_DIR)
#   NEBULA_BIN         the directory of the executables (default: NEBULA_HOME/build/bin in a
#                      build tree, else the one of nebula-train on PATH, as after module load)
#   NEBULA_LAUNCHER    srun (default: direct launch, srun --mpi=pmix) or mpirun (OpenMPI's
#                      launcher, which takes the allocation from Slurm)
#   NEBULA_SRUN_ARGS   extra srun options (word-split), e.g. "--cpu-bind=cores"
#   NEBULA_MPIRUN_ARGS extra mpirun options (word-split), e.g. "--bind-to core --map-by socket"
#   NEBULA_MAX_RESTARTS  requeues a job may ask for before it gives up (default 20)
#   NEBULA_PML         OpenMPI's point-to-point layer for the ranks: unset keeps the site's
#                      choice (Debian: ob1, its openmpi-mca-params.conf says `pml = ^ucx`);
#                      "ucx" selects UCX (exported as OMPI_MCA_pml, see below), "ob1" forces ob1
# shellcheck shell=bash

NEBULA_HOME=${NEBULA_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
NEBULA_LAUNCHER=${NEBULA_LAUNCHER:-srun}
NEBULA_MAX_RESTARTS=${NEBULA_MAX_RESTARTS:-20}
if [ -z "${NEBULA_BIN:-}" ]; then
    if [ -x "$NEBULA_HOME/build/bin/nebula-train" ]; then
        NEBULA_BIN=$NEBULA_HOME/build/bin
    elif command -v nebula-train >/dev/null; then
        NEBULA_BIN=$(dirname "$(command -v nebula-train)")
    else
        NEBULA_BIN=$NEBULA_HOME/build/bin
    fi
fi
export NEBULA_BIN

# UCX only on request. An OMPI_MCA_* variable overrides openmpi-mca-params.conf, and srun
# and mpirun both hand the environment to every rank. OpenMPI 4.1's pml ucx also declines
# itself unless it finds a Mellanox device (pml_ucx_devices defaults to mlx*): "any" lets
# it run over shared memory and TCP as well. Values the user exported win.
if [ -n "${NEBULA_PML:-}" ]; then
    export OMPI_MCA_pml=$NEBULA_PML
    if [ "$NEBULA_PML" = ucx ]; then
        export OMPI_MCA_pml_ucx_tls=${OMPI_MCA_pml_ucx_tls:-any}
        export OMPI_MCA_pml_ucx_devices=${OMPI_MCA_pml_ucx_devices:-any}
    fi
fi

nebula_die() {  # usage and input errors: exit 2, as the executables do
    echo "$(basename "${0}"): error: $*" >&2
    exit 2
}

# One line that says what runs where; with --open-mode=append, each requeued run of the
# job starts with its own header line in the same output file.
nebula_header() {
    echo "=== ${SLURM_JOB_NAME:-job} ${SLURM_JOB_ID:-?}${SLURM_ARRAY_TASK_ID:+ array task $SLURM_ARRAY_TASK_ID}" \
        "SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} nodes=${SLURM_JOB_NODELIST:-?}" \
        "(${SLURM_JOB_NUM_NODES:-?} nodes, ${SLURM_NTASKS:-?} tasks, ${SLURM_CPUS_PER_TASK:-1} cpus/task)" \
        "launcher=$NEBULA_LAUNCHER date=$(date -Is)"
}

# nebula_need NAME...: every executable exists. Job scripts never build: a job that builds
# races the other jobs of the same tree and hides a broken build inside a queue wait.
nebula_need() {
    [ -n "${SLURM_JOB_ID:-}" ] || nebula_die "not inside a Slurm job: submit with sbatch"
    [ -d "$NEBULA_HOME" ] || nebula_die "NEBULA_HOME=$NEBULA_HOME is not a directory"
    local b
    for b in "$@"; do
        [ -x "$NEBULA_BIN/$b" ] || nebula_die "$NEBULA_BIN/$b is missing; build it first (make, on a login node), or set NEBULA_BIN / module load nebula: job scripts never build"
    done
    case "$NEBULA_LAUNCHER" in srun|mpirun) ;;
        *) nebula_die "NEBULA_LAUNCHER=$NEBULA_LAUNCHER: valid values are srun and mpirun" ;;
    esac
    case "$NEBULA_MAX_RESTARTS" in ''|*[!0-9]*) nebula_die "NEBULA_MAX_RESTARTS=$NEBULA_MAX_RESTARTS is not a count" ;; esac
}

# nebula_launch [-N NODES -n TASKS --] PROGRAM ARGS...: the launcher command line, in the
# array NEBULA_CMD (not run). Without -N/-n the program runs on the whole allocation; with
# them, on the first NODES nodes with TASKS ranks (a node-count sweep).
# shellcheck disable=SC2034  # NEBULA_CMD is the result, used by the job scripts
nebula_launch() {
    local nodes='' tasks='' extra
    while [ $# -gt 0 ]; do
        case "$1" in
            -N) nodes=$2; shift 2 ;;
            -n) tasks=$2; shift 2 ;;
            --) shift; break ;;
            *) break ;;
        esac
    done
    if [ "$NEBULA_LAUNCHER" = srun ]; then
        read -ra extra <<<"${NEBULA_SRUN_ARGS:-}"
        # --kill-on-bad-exit: one dead rank ends the step instead of leaving the others in MPI
        NEBULA_CMD=(srun --mpi=pmix --kill-on-bad-exit=1 ${nodes:+-N "$nodes"} ${tasks:+-n "$tasks"} "${extra[@]}" "$@")
    else
        read -ra extra <<<"${NEBULA_MPIRUN_ARGS:-}"
        local map=()
        # TASKS ranks over NODES nodes: mpirun fills each node with TASKS/NODES ranks in turn
        [ -n "$nodes" ] && [ -n "$tasks" ] && map=(--map-by "ppr:$(((tasks + nodes - 1) / nodes)):node")
        NEBULA_CMD=(mpirun ${tasks:+-np "$tasks"} "${map[@]}" "${extra[@]}" "$@")
    fi
}

# nebula_ranks_outcome RC LOG: the exit status the ranks meant, printed. A launcher's own
# code can hide it: mpirun that gets SIGTERM (scancel, a time limit, a node's shutdown)
# returns 1 even when every rank checkpointed and exited 3. Code 3 is read from the run's
# log instead: rank 0's last line "stopping at step N of M on request ...; exit code 3"
# (written after the collective step end, so it speaks for every rank), in one of two
# forms, each with the durable proof, the COMMITTED marker of a checkpoint:
#   "... checkpoint committed, a relaunch resumes from it; exit code 3": step N's, found
#     through the "checkpoint committed: DIR" line;
#   "... no checkpoint written (...); the last committed checkpoint is step K at DIR, a
#     relaunch resumes from it; exit code 3" (a stop while non-finite steps are being
#     skipped: nothing is committed then): DIR's, of step K.
# A withheld stop with nothing committed yet, and any other code, keep the launcher's:
# 5 (a monitor rule's stop action: a person decides, never requeued), 1 (a failure, a
# diverged run).
nebula_ranks_outcome() {
    local rc=$1 log=$2 line stop step dir rest n
    case "$rc" in 0|2|3|4|5) echo "$rc"; return ;; esac
    line=$(grep -a '^stopping at step [0-9]* of [0-9]* on request .*; exit code 3$' "$log" 2>/dev/null | tail -1)
    stop=$(awk '{ print $4 }' <<<"$line")
    case "$line" in
        *"; the last committed checkpoint is step "*" at "*", a relaunch resumes from it; exit code 3")
            rest=${line#*; the last committed checkpoint is step }
            step=${rest%% at *}
            dir=${rest#* at }
            dir=${dir%, a relaunch resumes from it; exit code 3}
            # the step named and the directory's agree, or nothing is proven
            case "$step" in ''|*[!0-9]*) step=none ;; esac
            n=${dir##*/step_}
            case "$dir" in */step_*) ;; *) n= ;; esac
            case "$n" in ''|*[!0-9]*) dir= ;; *) [ "$((10#$n))" = "$step" ] || dir= ;; esac ;;
        *"checkpoint committed"*)
            step=$stop
            dir=$(grep -a -o "checkpoint committed: .*/step_0*$step\$" "$log" | tail -1 | sed 's/^checkpoint committed: //') ;;
    esac
    if [ -n "$dir" ] && [ -f "$dir/COMMITTED" ]; then
        if [ "$step" = "$stop" ]; then
            echo "$(date -Is) the launcher exited $rc, but the ranks stopped at step $step with the checkpoint" \
                "committed ($dir): outcome 3" >&2
        else
            echo "$(date -Is) the launcher exited $rc, but the ranks stopped at step $stop, where no checkpoint was" \
                "written (non-finite steps skipped), the last committed one being step $step ($dir): outcome 3" >&2
        fi
        echo 3
        return
    fi
    echo "$rc"
}

# nebula_run_requeueable ARGS...: run the launcher command ARGS; the job asks to be
# requeued when it is told to stop and the program saved its state.
#
#   Slurm signals this batch shell (--signal=B:USR1@SECONDS) before the time limit. The
#   trap forwards SIGUSR2 to the launcher; srun and mpirun both pass SIGUSR2 to every rank
#   (both turn a SIGTERM they receive into killing the ranks). nebula-train stops at the
#   next step boundary, commits a checkpoint and exits 3. The job then requeues itself
#   (`scontrol requeue`), keeps its id and output file, and the next run resumes from
#   the newest committed checkpoint of the same run directory. The status is the ranks'
#   outcome (nebula_ranks_outcome), not only the launcher's code: the launcher's output
#   is also kept in NEBULA_LAUNCH_LOG (default: a file in TMPDIR, removed at the end).
#
# Only exit 3 requeues: 5 (an alert rule's `stop`, docs/monitor.md) and 1 (diverged, failed)
# end the job with that code for a person to look at.
# Returns the program's exit status; does not return after a requeue.
nebula_run_requeueable() {
    local pid rc own_log=0
    NEBULA_STOP_ASKED=0
    if [ -z "${NEBULA_LAUNCH_LOG:-}" ]; then
        NEBULA_LAUNCH_LOG=$(mktemp "${TMPDIR:-/tmp}/nebula-launch.XXXXXX") || nebula_die "cannot create a file in TMPDIR"
        own_log=1
    fi
    # the launcher's output goes to the job's output as before and to the log the outcome
    # is read from; $! is the launcher, not tee
    "$@" > >(tee -a "$NEBULA_LAUNCH_LOG") 2>&1 &
    pid=$!
    # Bash runs a trap only between commands: `wait` is one that a signal interrupts.
    # shellcheck disable=SC2064  # the pid is fixed now, on purpose
    trap "NEBULA_STOP_ASKED=1; echo \"\$(date -Is) USR1: asking the ranks to checkpoint and stop\"; kill -USR2 $pid 2>/dev/null" USR1
    while :; do
        wait "$pid"
        rc=$?
        # above 128 while the launcher still runs: the trap cut the wait short; wait again
        [ $rc -gt 128 ] && kill -0 "$pid" 2>/dev/null && continue
        break
    done
    # the launcher ended just after the trap cut the wait short: its status is still there
    if [ $rc -gt 128 ] && [ "$NEBULA_STOP_ASKED" = 1 ]; then
        wait "$pid" 2>/dev/null
        local again=$?
        [ $again -ne 127 ] && rc=$again
    fi
    trap - USR1
    sleep 0.2  # tee writes the launcher's last lines
    rc=$(nebula_ranks_outcome "$rc" "$NEBULA_LAUNCH_LOG")
    [ $own_log = 1 ] && rm -f "$NEBULA_LAUNCH_LOG"
    if [ "$rc" -eq 3 ]; then
        local n=${SLURM_RESTART_COUNT:-0}
        if [ "$n" -ge "$NEBULA_MAX_RESTARTS" ]; then
            echo "$(date -Is) stopped with the state saved, but this job was requeued $n times" \
                "(NEBULA_MAX_RESTARTS=$NEBULA_MAX_RESTARTS): not requeued again; resubmit to continue" >&2
            exit 3
        fi
        echo "$(date -Is) stopped with the state saved: requeueing job $SLURM_JOB_ID (restart $((n + 1)))"
        scontrol requeue "$SLURM_JOB_ID" || { echo "scontrol requeue failed; resubmit to continue" >&2; exit 3; }
        # Slurm now ends this run (its batch step) and queues the job again
        exit 0
    fi
    return "$rc"
}
