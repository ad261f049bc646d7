/* gemm_tune — the per-shape GEMM table as a file: `nebula-bench model --save-tune FILE`
 * times every fp32 GEMM shape a model's step runs on both paths (gemm_probe) and writes
 * the faster of each; `device.gemm_tune = FILE` makes a run take those paths (gemm.h).
 *
 * The one design decision: the table is made once, by a benchmark, and then read, never
 * re-timed at start-up: a choice made by timing can differ between two runs and change
 * their rounding, and a resumed run must compute what a straight one does (the same
 * reason comm.tune_file exists; the two files are kept side by side, a cluster's
 * tuning). A table belongs to one CPU model, ISA level and BLAS kernel set: loaded
 * anywhere else it is refused, naming what differs. */
#ifndef NEBULA_NN_GEMM_TUNE_H
#define NEBULA_NN_GEMM_TUNE_H

#include <jansson.h>

#include "base/log.h"
#include "cpu/gemm.h"

/* Writes n choices with their measured rates (gflops: 2 per shape, blas then onednn)
 * atomically (path_write_atomic); the provenance object is copied in when given. */
status gemm_tune_save(const char *path, const gemm_choice *c, const double *gflops, int n, const json_t *provenance);

/* Reads a table and installs it (gemm_set_table). STATUS_INPUT, with the file and what is
 * wrong named, for a file that is not a regular readable file, not such a table, or made
 * on another CPU model, ISA level or BLAS kernel set. */
status gemm_tune_load(const char *path);

#endif
