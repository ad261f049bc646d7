/* nebula-chaos — launch nebula-train, watch it, break it on purpose, relaunch it, and
 * check afterwards that nothing was lost. Internal interface of apps/chaos.
 *
 * The one decision to know: the supervisor watches two things only, the launcher's exit
 * status and the heartbeat line rank 0 rewrites after every step (RUN_DIR/heartbeat). A
 * frozen rank or a partitioned network never makes OpenMPI exit; a heartbeat that stops
 * moving for `scenario.heartbeat_timeout` seconds does, and the supervisor then kills
 * the whole launch (its session) and relaunches from the last committed checkpoint. */
#ifndef NEBULA_CHAOS_H
#define NEBULA_CHAOS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <sys/types.h>

#include "base/config.h"

#define CHAOS_MAX_FAULTS   16
#define CHAOS_MAX_LAUNCHES 64
#define CHAOS_PATH_MAX     4096

/* One launch of nebula-train (mpirun, srun or mpirun inside the namespace cluster). */
typedef struct chaos_launch {
    pid_t pid;                 /* the launcher; leader of its own session */
    int world;                 /* ranks */
    double t_start, t_end;     /* supervisor clock, seconds */
    int exit_code;             /* 0..255, or 128 + signal */
    bool hung;                 /* killed by the supervisor: the heartbeat stopped */
    long resumed_step;         /* -1 before the log says; 0 for a fresh start */
    long last_step;            /* the heartbeat's last step */
    double t_first_progress;   /* first heartbeat past resumed_step; 0 before */
    bool all_seen;             /* every rank was seen alive at least once */
    bool rank_lost;            /* then one was gone: stopped by the supervisor */
    double t_ranks;            /* last check of the ranks */
    double t_short;            /* since when fewer ranks than the world are alive; 0 if all are */
    char log[CHAOS_PATH_MAX];  /* its stdout and stderr */
} chaos_launch;

/* One injected fault and what followed it. */
typedef struct chaos_fault {
    long at_step;              /* planned: inject when the heartbeat reaches it */
    long step;                 /* the heartbeat's step when injected */
    double t_inject;
    double t_detect;           /* the launch it hit ended or was declared hung; 0 before */
    double t_recover;          /* the next launch made progress past its resumed step */
    int launch;                /* the launch it hit */
    int ranks_hit;             /* kill: ranks killed */
    long lost;                 /* steps redone: last step reached - step resumed from */
    char what[160];            /* what was done, e.g. "SIGKILL ranks 1,3": never the plan */
    bool done;                 /* its step came: the supervisor acted */
    bool injected;             /* evidence that it struck: kill(2) succeeded on every rank
                                * hit, the rank logged "chaos: injected", the disk filled */
} chaos_fault;

typedef struct chaos_ctx {
    const config *cfg;
    char name[128];
    char out[CHAOS_PATH_MAX];      /* report, logs and run directories */
    char run_dir[CHAOS_PATH_MAX];  /* the faulted run */
    char train_bin[CHAOS_PATH_MAX];  /* the nebula-train a launch starts (chaos_bin_path, or CHAOS_TRAIN_BIN) */
    char ckpt_bin[CHAOS_PATH_MAX];   /* nebula-ckpt, for verify and diff */
    double t0;
    chaos_launch launches[CHAOS_MAX_LAUNCHES];
    int nlaunches;
    chaos_fault faults[CHAOS_MAX_FAULTS];
    int nfaults;
    bool netns_up, tmpfs_mounted;
} chaos_ctx;

double chaos_now(void);

/* SIGTERM, SIGINT or SIGHUP received by the supervisor (0 before): the runners stop the
 * launch in flight (the signal forwarded to its session, SIGKILL after
 * CHAOS_STOP_GRACE seconds), write an "interrupted" report and exit 128 + the signal.
 * Set only by the handler main() installs. */
extern volatile sig_atomic_t chaos_interrupted;
#define CHAOS_STOP_GRACE 10.0
/* "SIGTERM" for SIGTERM, ...; "signal N" for others. */
const char *chaos_signame(int sig);

/* Up-front checks (check.c), exit code 2 on failure with FILE:LINE, key and valid values. */
/* The file is a regular text file (no NUL byte, no other control character than tab,
 * CR and LF): binary garbage is refused instead of being read as an empty file. */
status chaos_check_text(const char *path);
/* Every value of the scenario (and soak) keys that the schema cannot check by itself. */
status chaos_check_values(const config *cfg, bool soak);
/* "72h", "90m", "45s", "2d" or plain seconds; -1 when malformed. */
double chaos_duration(const char *s);
/* The signal a preemption sends for a fault.signals word (USR1, USR2, TERM), 0 if none. */
int chaos_preempt_signal(const char *word);
/* The build with compiled-in fault points: refused with a HINT when it is missing. */
#define CHAOS_TRAIN_BIN "build/chaos/bin/nebula-train"
status chaos_need_chaos_build(void);

/* Launching and watching (launch.c). */
/* Starts nebula-train on `world` ranks for run_dir, output to log; extra environment
 * "K=V" entries (NULL-terminated) for this launch. */
int chaos_start(chaos_ctx *x, const char *run_dir, int world, const char *log, long steps, const char *const *env,
                chaos_launch *l);
/* Non-blocking: true once the launch ended (exit code filled in). */
bool chaos_poll(chaos_launch *l);
/* `sig` to the launch's session, SIGKILL after `grace` seconds; waits for it; then
 * SIGKILLs any nebula-train of run_dir still alive (ranks started by another daemon). */
void chaos_stop(chaos_launch *l, const char *run_dir, int sig, double grace);
/* True when a rank of the launch has been gone for 2 s while the launcher still runs
 * (checked every 0.2 s): a supervisor stops the launch then, as torchrun's agent does, instead of
 * waiting for the launcher (srun waits KillWait, 30 s by default, for the survivors). */
bool chaos_rank_died(chaos_launch *l, const char *run_dir);
/* The heartbeat's step (and its world), -1 when there is none yet. */
long chaos_heartbeat(const char *run_dir, int *world);
/* The start of each turn of a watch loop over launch l (scenario and soak): *now; time
 * the supervisor spent elsewhere since *t_prev (over 1 s: a remote kill step, a verify)
 * is added to *t_hb, as it is not time the ranks failed to progress; the resumed step
 * from the log; the heartbeat's step into *step, and on progress l->last_step = *step
 * and *t_hb = *now. False after an interrupt: l is stopped then. */
bool chaos_watch_tick(chaos_launch *l, const char *run_dir, double *t_prev, double *t_hb, double *now, long *step);
/* Finding, signalling and sampling ranks on every node (ranks.c). */
typedef struct chaos_rank {
    int rank;
    pid_t pid;                 /* 0: not found (not registered, or a local one that is gone) */
    char host[64];             /* the rank's host name */
    char node[64];             /* its Slurm node name (SLURMD_NODENAME), else the host name */
    bool local;                /* on the supervisor's node: kill(2) and /proc reach it */
} chaos_rank;
/* The registry of run_dir's launch: RUN_DIR.ranks/rank.N. */
void chaos_registry_dir(const char *run_dir, char *out, size_t cap);
/* run_dir's ranks on every node, indexed by rank (max entries); how many were found. */
int chaos_ranks(const char *run_dir, chaos_rank *ranks, int max);
/* PIDs of run_dir's ranks on this node, indexed by rank; how many. */
int chaos_rank_pids(const char *run_dir, pid_t *pids, int max);
/* Delivers sig to the rank on its node; true when it was delivered. */
bool chaos_signal_rank(const chaos_rank *r, int sig, const char *log);
/* SIGKILL to every rank found, on every node: a launch that lost a rank or hangs is torn
 * down at once (survivors asked to stop gracefully would wait on the dead rank until the
 * launcher's own kill timeout, srun's KillWait); how many were reached. */
int chaos_kill_ranks(const char *run_dir, const char *log);
/* Sums resident memory (MB) and open descriptors over the ranks; how many were sampled. */
int chaos_usage(const chaos_rank *ranks, int max, double *rss_mb, int *fds, const char *log);
/* `nebula-chaos rank DIR -- PROGRAM ...` and `nebula-chaos probe PID...` (internal). */
int chaos_rank_main(int argc, char **argv);
int chaos_probe_main(int argc, char **argv);
/* The number after `before` on the first line of the log holding `marker` (0 on a line
 * holding `fresh`, when not NULL); -1 when there is none. */
long chaos_log_step(const char *log, const char *marker, const char *before, const char *fresh);
/* The step a launch's log says it resumed from: 0 fresh, -1 not yet known. */
long chaos_log_resumed(const char *log);
/* "eval step=N loss=X" last in the log: X, or NAN. */
double chaos_log_final_loss(const char *log, long *step);
/* This executable's path, for the shim and the probe on every node. */
/* nebula-train, nebula-ckpt: in $NEBULA_BIN, else beside nebula-chaos (an install's bin/,
 * the tree's build/bin), else build/bin/NAME under the working directory, else on PATH. */
void chaos_bin_path(const char *name, char *out, size_t cap);
void chaos_self_path(char *out, size_t cap);
/* splitmix64: every random choice of a scenario or soak, from fault.seed (reproducible). */
uint64_t chaos_mix(uint64_t *state);
/* The newest committed step of run_dir, -1 if none. */
long chaos_newest_commit(const char *run_dir);
/* Flips `bytes` bytes in the middle of the newest committed checkpoint's state.h5 and
 * syncs it; its step, or -1 when nothing was damaged. */
long chaos_corrupt_newest(const char *run_dir, long bytes);
/* Runs a command to completion (argv, NULL-terminated), output appended to log; exit code. */
int chaos_run_cmd(const char *const *argv, const char *log);
/* Writes a report file in OUT (report.md, report.json) by path_write_atomic: whole or not
 * at all, and a symbolic link planted under its name is replaced, never written through.
 * text NULL (out of memory) or a failed write: an error line; the exit code is unchanged. */
void chaos_write_report(const char *path, const char *text);

/* The scenario runner and the soak runner (scenario.c, soak.c); exit codes of main. */
int chaos_run_scenario(const config *cfg, const char *out);
/* prov: the soak's provenance (comm/comm_provenance.h), whose hosts the soak fills in from its
 * ranks' registry before samples.csv and report.json carry it. */
int chaos_soak(const config *cfg, const char *out, json_t *prov);

/* Shared by the runners: the fault-free reference run of the same training. */
int chaos_reference(chaos_ctx *x, const char *run_dir, int world, long steps, double *loss);

#endif
