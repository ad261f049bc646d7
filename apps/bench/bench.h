/* bench — nebula-bench subcommands. */
#ifndef NEBULA_APPS_BENCH_H
#define NEBULA_APPS_BENCH_H

#include "comm/comm.h"
#include "comm/comm_provenance.h"
#include "base/config.h"
#include "base/runtime.h"

/* Every subcommand's machine-readable output carries `prov` (comm_provenance.h): a JSON
 * document as its "provenance" key, JSON lines as a first line {KIND: "provenance",
 * "provenance": {...}} (KIND: the key that names a row), CSV as a first line
 * "# provenance: {...}". */

/* The allreduce sweep in the style of nccl-tests; returns STATUS_CORRUPT on any wrong element. */
status bench_comm_run(const config *cfg, runtime *rt, comm *c, const json_t *prov);

/* The median of v[0, n) (the mean of the middle two for even n); sorts v. */
double bench_median(double *v, int n);

/* Training-step throughput of a model (single process): on the CPU the trainer's
 * train_step at world size 1 (rt, c: this process's runtime and comm). */
status bench_model_run(const config *cfg, const runtime *rt, comm *c, const json_t *prov);

/* DGC-Pro's threshold selection on one core against a streaming read (single process). */
status bench_dgc_run(const config *cfg, const json_t *prov);

/* The provenance line on stdout of a JSON-lines output: {kind: "provenance", "provenance": prov}. */
void bench_provenance_row(const char *kind, const json_t *prov);

/* `nebula-bench provenance [--command TEXT] [--param KEY=VALUE]... [--format json|csv|markdown]`:
 * the provenance of a script's run (every rank's host when launched on its ranks), one
 * line on stdout; argc, argv: main's (argv[1] is "provenance"). Exit code. */
int bench_provenance_main(int argc, char **argv);

#endif
