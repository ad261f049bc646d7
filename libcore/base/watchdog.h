/* watchdog — a deadline for the calls that can block on a peer and have none of their
 * own: HDF5's collective I/O (MPI-IO opens, writes, the barrier in H5Fclose), MPI's
 * blocking communicator calls (splits, dups, frees) and MPI_Finalize, a wait for the
 * checkpoint writer's thread. comm/ctl.h and comm.h bound their own waits and return
 * STATUS_TIMEOUT; inside a library call the main thread cannot.
 *
 * The caller brackets such a call with watchdog_enter / watchdog_leave (a mutex and a
 * clock read: nothing is written). A background thread wakes every tick (1 s, less
 * for a deadline under 5 s); when the call it guards is past its deadline, it prints
 * one error naming the call, how long it waited and which ranks made no progress, then
 * ends the whole job with exit code 1 (the status timeout's) through MPI_Abort.
 *
 * Which ranks: every rank's thread rewrites its own line of a beacon file on each tick
 * (one pwrite of 128 bytes, no fsync; RUN_DIR/beacons, on the file system every rank
 * already shares for checkpoints):
 *   rank=1 pid=4242 time=1764612345.123 seq=17 state=in since=1764612340.101 op=...
 * A rank whose line is older than a few ticks is stopped, hung in the kernel, or dead
 * (its thread would have written); a fresh line "in" a guarded call waits like us; a
 * fresh line "out" of any is still computing or blocked in a call nobody guards; a line
 * "failed" is a rank that reported an error (watchdog_failed): the others are waiting
 * for a rank that failed, and a longer deadline would not help. All but the waiting are
 * named. A rank's own watchdog keeps its line fresh while it reads the others' before
 * ending the job, so its peers never take it for dead. Clocks of the nodes are assumed
 * within a second of each other (NTP); on a file system that caches other clients'
 * writes for longer than a few seconds (NFS without `noac`), a line may look older than
 * it is, so a rank can be named as stopped when it is only waiting.
 *
 * The one design decision: the thread ends the job with MPI_Abort although MPI runs
 * MPI_THREAD_FUNNELED. The main thread is inside MPI and will never return to make the
 * call; OpenMPI's abort asks the launcher (PMIx) to kill every rank without driving
 * communication, and it is the one route that ends the job under srun as well as
 * mpirun (an _exit of one rank ends an mpirun job, but srun by default, KillOnBadExit =
 * 0, leaves the other tasks waiting unless run with --kill-on-bad-exit). Measured with
 * OpenMPI 4.1 here: a rank blocked in MPI_Barrier against a SIGSTOPped peer, aborted
 * from a second thread, ends the mpirun job 0.4 s later, exit code 1, the stopped rank
 * killed; under srun --mpi=pmix (Slurm 22) a checkpoint save stuck in HDF5 that way
 * ends 6 s after the stop, srun exit code 1, the stopped task killed. In case the abort
 * itself blocks, an alarm of a few seconds set before it ends the process by SIGALRM,
 * which the launcher also turns into the end of the job. */
#ifndef NEBULA_WATCHDOG_H
#define NEBULA_WATCHDOG_H

#include <stddef.h>

#include "log.h"

typedef struct watchdog watchdog;

/* Bytes of one rank's line in the beacon file; rank r's line starts at r * this. */
#define WATCHDOG_BEACON_BYTES 128

/* After MPI_Init: starts the thread of this rank. timeout_s is the deadline the job
 * runs with (comm.timeout), which sets the tick; *out is NULL when timeout_s <= 0 (no
 * deadlines: every watchdog call below is then a no-op). */
status watchdog_start(watchdog **out, int rank, int size, double timeout_s);
/* Every rank: writes its beacon into `path` (created when missing; a file every rank
 * can read) from now on. STATUS_IO, logged, when it cannot be opened: the watchdog
 * then still ends a stuck job, naming no rank. */
status watchdog_beacons(watchdog *wd, const char *path);
/* Guards the blocking call(s) that follow: `what` says what this rank is doing, for
 * the message ("checkpoint save of step 20: HDF5 collective write"; copied). The job
 * ends when watchdog_leave has not come timeout_s seconds after (0: no deadline, the
 * beacon still shows the call). Nested guards keep the outer `what` and the later of
 * the two deadlines. Main thread only. */
void watchdog_enter(watchdog *wd, const char *what, double timeout_s);
void watchdog_leave(watchdog *wd);
/* This rank has failed in `what` (its error is logged; copied, shortened to fit the
 * line) and is about to tell the others: its line says "failed" with `what` until
 * watchdog_failed(wd, NULL), so that a rank still waiting for it — because the failed
 * rank then died or got stuck before it could tell — names it as "failed: what", a
 * rank that reported an error, not as stopped, hung or dead. Any thread. */
void watchdog_failed(watchdog *wd, const char *what);
/* What the beacons say about the ranks marked in `ranks` (world size entries; NULL:
 * all) other than this one, appended to out: "no progress from rank 1 (no sign of life
 * for 6.1 s: stopped, hung or dead; last inside ...); waiting in a guarded call: 0".
 * For a timeout found by the caller's own deadline (comm/ctl.h), so that its message
 * names ranks too. When no rank looks stuck yet (one stopped a moment ago still has a
 * fresh line), reads again each tick for up to a few ticks. "" without beacons. */
void watchdog_describe_ranks(watchdog *wd, const char *ranks, char *out, size_t len);
/* After MPI_Finalize returned: this rank's line says "done", and it waits until every
 * rank's does. Finalize's last synchronisation can let the other ranks leave while one
 * is stuck inside it; then no MPI rank is left to notice and the launcher waits for it
 * forever. So when a rank's line still lacks "done" after the deadline and shows no
 * sign of life, this rank logs it and exits with code 1, which makes mpirun kill the
 * rest (a clean end waits only until the last rank's line is written: milliseconds). */
void watchdog_finish(watchdog *wd);
/* Stops the thread and closes the beacon file (it stays: the last state of each rank). */
void watchdog_stop(watchdog *wd);

#endif
