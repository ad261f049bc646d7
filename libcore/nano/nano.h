/* nano — libnebula-nano, the edge runtime: load a .neb file, run it, read its outputs.
 *
 * Depends on libc and libm only (OpenMP when built with it): no MPI, no HDF5, so it
 * cross-builds for arm64 and links into an application on its own (pkg-config
 * nebula-nano). A model is loaded once — the file mapped, every section checked, the
 * weights packed for the kernels of this CPU — and then runs with no allocation: its
 * inputs, outputs and activations live in one arena laid out by the memory plan.
 *
 *   nano_model *m; char err[256];
 *   if (nano_model_load(&m, "model.neb", err, sizeof err) != NANO_OK) { puts(err); ... }
 *   nano_io in = nano_model_input(m, 0);   // fill in.data (in.bytes)
 *   nano_model_run(m);
 *   nano_io out = nano_model_output(m, 0); // read out.data
 *   nano_model_free(m);
 */
#ifndef NEBULA_NANO_H
#define NEBULA_NANO_H

#include <stddef.h>
#include <stdint.h>

#include "nano_graph.h"

typedef struct nano_model nano_model;

/* A view of one input or output: its buffer lives in the model's arena. */
typedef struct nano_io {
    const char *name;
    int dtype;             /* nano_dtype */
    int ndim;
    const int64_t *shape;  /* [ndim] */
    void *data;            /* the buffer: fill an input before nano_model_run */
    size_t bytes;
} nano_io;

/* Loads and checks a .neb file (header, section checksums, graph, shapes, plan) and
 * prepares the kernels. Hostile or damaged files give NANO_E_FORMAT with the reason. */
nano_status nano_model_load(nano_model **m, const char *path, char *err, size_t errlen);
/* The same from a graph in memory (the deploy tool's calibration and accuracy runs);
 * the graph must outlive the model and is not changed. */
nano_status nano_model_from_graph(nano_model **m, const nano_graph *g, char *err, size_t errlen);
void nano_model_free(nano_model *m);

int nano_model_ninputs(const nano_model *m);
int nano_model_noutputs(const nano_model *m);
nano_io nano_model_input(const nano_model *m, int i);
nano_io nano_model_output(const nano_model *m, int i);
/* The graph as loaded (names, shapes, meta). */
const nano_graph *nano_model_graph(const nano_model *m);

/* Threads for the next runs (1 .. the OpenMP maximum; 1 without OpenMP). */
void nano_model_set_threads(nano_model *m, int n);
/* Runs every node in order; on failure nano_model_error says which node and why. */
nano_status nano_model_run(nano_model *m);
const char *nano_model_error(const nano_model *m);

/* Calls fn after each node with its output tensors (calibration: activation ranges). */
typedef void (*nano_observer)(void *ctx, const nano_graph *g, int node, const float *const *outs);
void nano_model_set_observer(nano_model *m, nano_observer fn, void *ctx);

/* The bytes the model holds: arena, packed weights, scratch. */
size_t nano_model_memory(const nano_model *m);
/* The instruction set the kernels run ("avx512", "avx2", "neon", "portable"). */
const char *nano_isa_name(void);

/* .neb files (neb_format.c) */
#define NEB_VERSION 1
/* Writes g (planned) to path: temporary name, fsync, rename. */
nano_status neb_write(const nano_graph *g, const char *path, char *err, size_t errlen);
/* Reads and checks path into g; constants point into the mapping held by *map
 * (released by neb_unmap after g is freed). */
nano_status neb_read(nano_graph *g, const char *path, void **map, size_t *map_len, char *err, size_t errlen);
void neb_unmap(void *map, size_t len);
/* The same checks on a file image in memory (a model in flash, the fuzzer): constants
 * point into buf, which must outlive g; name is used in messages. */
nano_status neb_parse(nano_graph *g, const void *buf, size_t len, const char *name, char *err, size_t errlen);

/* .npy arrays (nano_npy.c): nebula-infer's inputs and outputs, nebula-deploy's data. */
typedef struct nano_npy {
    int dtype;                     /* NANO_DT_F32 (f8 is narrowed), I64, I32 or U8 */
    int ndim;
    int64_t shape[NANO_MAX_DIMS];
    int64_t count;                 /* elements */
    void *data;                    /* malloc'd; free() it */
} nano_npy;
nano_status nano_npy_read(const char *path, nano_npy *out, char *err, size_t errlen);
nano_status nano_npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data, char *err,
                           size_t errlen);

#endif
