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

#include <stdbool.h>
#include <stdio.h>
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
    char what[160];            /* e.g. "SIGKILL ranks 1,3" */
    bool done;
} chaos_fault;

typedef struct chaos_ctx {
    const config *cfg;
    char name[128];
    char out[CHAOS_PATH_MAX];      /* report, logs and run directories */
    char run_dir[CHAOS_PATH_MAX];  /* the faulted run */
    char train_bin[CHAOS_PATH_MAX];
    double t0;
    chaos_launch launches[CHAOS_MAX_LAUNCHES];
    int nlaunches;
    chaos_fault faults[CHAOS_MAX_FAULTS];
    int nfaults;
    bool netns_up, tmpfs_mounted;
} chaos_ctx;

double chaos_now(void);

/* Launching and watching (launch.c). */
/* Starts nebula-train on `world` ranks for run_dir, output to log; extra environment
 * "K=V" entries (NULL-terminated) for this launch. */
int chaos_start(chaos_ctx *x, const char *run_dir, int world, const char *log, long steps, const char *const *env,
                chaos_launch *l);
/* Non-blocking: true once the launch ended (exit code filled in). */
bool chaos_poll(chaos_launch *l);
/* SIGTERM to the launch's session, SIGKILL after `grace` seconds; waits for it; then
 * SIGKILLs any nebula-train of run_dir still alive (ranks started by another daemon). */
void chaos_stop(chaos_launch *l, const char *run_dir, double grace);
/* True when a rank of the launch has been gone for 2 s while the launcher still runs
 * (checked every 0.2 s): a supervisor stops the launch then, as torchrun's agent does, instead of
 * waiting for the launcher (srun waits KillWait, 30 s by default, for the survivors). */
bool chaos_rank_died(chaos_launch *l, const char *run_dir);
/* The heartbeat's step (and its world), -1 when there is none yet. */
long chaos_heartbeat(const char *run_dir, int *world);
/* PIDs of run_dir's nebula-train ranks on this host, indexed by rank; returns how many
 * were found (up to max). */
int chaos_rank_pids(const char *run_dir, pid_t *pids, int max);
/* The step a launch's log says it resumed from: 0 fresh, -1 not yet known. */
long chaos_log_resumed(const char *log);
/* "eval step=N loss=X" last in the log: X, or NAN. */
double chaos_log_final_loss(const char *log, long *step);
/* Runs a command to completion (argv, NULL-terminated), output appended to log; exit code. */
int chaos_run_cmd(const char *const *argv, const char *log);

/* The scenario runner and the soak runner (scenario.c, soak.c); exit codes of main. */
int chaos_run_scenario(const config *cfg, const char *out);
int chaos_soak(const config *cfg, const char *out);

/* Shared by the runners: the fault-free reference run of the same training. */
int chaos_reference(chaos_ctx *x, const char *run_dir, int world, long steps, double *loss);

#endif
