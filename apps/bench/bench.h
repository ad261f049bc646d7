/* bench — nebula-bench subcommands. */
#ifndef NEBULA_APPS_BENCH_H
#define NEBULA_APPS_BENCH_H

#include "comm/comm.h"
#include "base/config.h"
#include "base/runtime.h"

/* The allreduce sweep in the style of nccl-tests; returns STATUS_CORRUPT on any wrong element. */
status bench_comm_run(const config *cfg, runtime *rt, comm *c);

/* The median of v[0, n) (the mean of the middle two for even n); sorts v. */
double bench_median(double *v, int n);

/* Training-step throughput of a model (single process): on the CPU the trainer's
 * train_step at world size 1 (rt, c: this process's runtime and comm). */
status bench_model_run(const config *cfg, const runtime *rt, comm *c);

/* DGC-Pro's threshold selection on one core against a streaming read (single process). */
status bench_dgc_run(const config *cfg);

#endif
