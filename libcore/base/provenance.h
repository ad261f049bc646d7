/* provenance — where a benchmark's figures came from, as one JSON object that every JSON
 * and CSV output of nebula-bench and nebula-chaos soak carries (docs/benchmarks.md#provenance):
 *
 *   nebula_version  "0.1.0 (git-1a2b3c4-dirty)", as --version prints it
 *   git_revision    the commit the build was made from (40 hex digits), or "unknown"
 *   date            when the run started, UTC, ISO 8601: "2025-06-01T12:34:56Z"
 *   hosts           [{"host": NAME, "ranks": N}, ...]: every rank's host, once, in rank order
 *   ranks           the number of ranks (the sum of hosts[].ranks)
 *   mpi_library     MPI_Get_library_version's text, on one line
 *   blas            OpenBLAS's configuration and the core kernel it chose
 *   onednn          oneDNN's version and commit
 *   cpu_model       the CPU's model name
 *   cpu_isa         the ISA level the kernels run at (isa.h: NEBULA_CPU_ISA may lower it)
 *   cpu_isa_detail  how the level was chosen, the machine's features
 *   command         the command line, shell-quoted
 *   config          the resolved config: {"section.key": "value", ...}, every key
 *
 * The one design decision: base builds the object and knows only what this process
 * knows (its version, clock, MPI library, command line and config); the kernels' fields
 * and the other ranks' hosts come from the layers that own them, through the setters
 * here (comm/comm_provenance.h puts them together). Values are strings except hosts and
 * ranks; a field nobody could tell is "unknown", never empty. */
#ifndef NEBULA_PROVENANCE_H
#define NEBULA_PROVENANCE_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* A new object with the fields this process knows alone: nebula_version, git_revision,
 * date (now), mpi_library (callable before MPI_Init), command (argv[0, argc) quoted),
 * config (cfg's resolved values; NULL: {}) and hosts = this host with `ranks` ranks;
 * the kernels' fields are "unknown" until set. Dies when out of memory. */
json_t *provenance_new(const config *cfg, int argc, char *const *argv, int ranks);

/* Sets a string field; NULL or "" sets "unknown". */
void provenance_set(json_t *p, const char *key, const char *value);

/* hosts and ranks from n ranks' host names, rank r's at `first + r * stride` (an array
 * of structs holding a name, or of char[stride]): each name once, in the order of its
 * first rank, with its count; an empty name counts as "unknown". */
void provenance_set_hosts(json_t *p, const char *first, int n, size_t stride);

/* The first line of a CSV: "# provenance: {compact JSON}\n" (a comment line: pandas'
 * comment='#', and the repository's readers skip lines that start with '#'). */
status provenance_write_csv_line(FILE *f, const json_t *p);

/* The same object as one line of a Markdown file: "<!-- provenance: {JSON} -->\n"
 * (invisible when rendered; "-->" inside a string is written "--\u003e"). */
status provenance_write_md_line(FILE *f, const json_t *p);

#endif
