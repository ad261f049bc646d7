/* Fault points of the CHAOS build: a system call fails with an errno on purpose, and the
 * real error path runs. Compiled in only with -DCHAOS (`make chaos`); without it
 * FAULT_ERRNO is the constant 0 and the binary carries no fault code.
 *
 * NEBULA_CHAOS_FAULT is a comma-separated list of rules, each one of
 *   POINT:ERRNO[@STEP][/RANK]   the point fails (at the save/record of STEP only, with @STEP)
 *   MODULE#N:ERRNO[/RANK]       the Nth point of MODULE reached by this process fails (N >= 1),
 *                               whichever it is: failing each call in turn, as SQLite's I/O tests do
 * ERRNO is EIO or ENOSPC, or KILL: the process SIGKILLs itself at the point (a crash there,
 * for the crash-consistency tests of nebula-model's repository). POINT is a name of fault_points[] (fault.c), "module.call";
 * MODULE is the part before the dot (ckpt, metrics, rundir, out, model). A rule fires on rank RANK
 * of the plan's user (rank 0 without /RANK): "ckpt.write:EIO/1" fails rank 1's write of
 * state.h5 alone. A user (one writer, one file) parses the rules of its own module into
 * its own plan; a rule naming an unknown point or module is an input error. Faults fire
 * only where the caller asks: most points are rank 0's calls (the checkpoint writer's
 * directories and commit, the metrics file, the run directory), ckpt.write every rank's. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#define FAULT_RULES_MAX 16
#define FAULT_KILL (-9)  /* a rule's err: SIGKILL at the point instead of an errno */

typedef struct fault_plan {
    char module[16];          /* "ckpt", ...: the rules kept are this module's */
    struct {
        char point[32];       /* point name; "" for an #N rule */
        int err;              /* EIO, ENOSPC or FAULT_KILL */
        int64_t step;         /* POINT rules: this step only; -1: always */
        int64_t nth;          /* #N rules: the Nth point reached; 0 for POINT rules */
        int rank;             /* the rank it fires on (0 unless the rule names one) */
    } rule[FAULT_RULES_MAX];
    int n;                    /* rules kept; 0: no faults (always without -DCHAOS) */
    int rank;                 /* the user's rank (0 from fault_plan_init; a user whose points
                                 run on every rank sets it) */
    atomic_llong reached;     /* points of this module reached so far (the #N count) */
} fault_plan;

/* Parses NEBULA_CHAOS_FAULT (CHAOS builds; the normal build keeps no rule and reads
 * nothing) and keeps the rules of `module` (n = 0 when unset or when
 * none is the module's); STATUS_INPUT, logged with the valid points, when any rule is
 * malformed or names an unknown point. */
status fault_plan_init(fault_plan *f, const char *module);
/* The errno the call at `point` (a name of fault_points[] in f's module) fails with, after
 * the line "chaos: injected ENOSPC at ckpt.fsync (step 20, point #3)"; 0 when none or f is
 * NULL. Counts the point for #N rules. Thread-safe. */
int fault_errno(fault_plan *f, const char *point, int64_t step);

/* Whether `name` is a fault point ("ckpt.fsync"), in every build: a supervisor checks a
 * rule before it starts anything. */
bool fault_point_known(const char *name);
/* The point names of `module` ("ckpt"; NULL: every module), comma-separated, into out. */
void fault_point_names(const char *module, char *out, size_t len);

/* The step switches of the CHAOS build (docs/chaos.md), for the trainer's step: whether
 * the environment variable var lists tick, the tick-th step this process runs (counted
 * across rollbacks, so a redone step is clean; the same on every rank), after the line
 * "chaos: VAR at step STEP (the TICK-th step run)" when say. The switches:
 *   NEBULA_CHAOS_NAN    the step's loss is NaN        NEBULA_CHAOS_SPIKE  the loss reported x 10
 *   NEBULA_CHAOS_SLOW   the step 0.5 s longer         NEBULA_CHAOS_LEAK   64 MiB touched, never freed
 * Always false in the normal build, which reads no environment. */
bool fault_step_at(const char *var, long tick, long step, bool say);

#ifdef CHAOS
#define FAULT_ERRNO(f, point, step) fault_errno((f), (point), (step))
#else
#define FAULT_ERRNO(f, point, step) ((void)(f), (void)(step), 0)
#endif
