/* gemm — the fp32 GEMMs of the fully connected layers, on the path that runs this CPU
 * at its own vector width: the BLAS the build links, or oneDNN's matmul.
 *
 * Why two paths: a BLAS picks its kernels from its own table of CPUs. Debian 12's
 * OpenBLAS 0.3.21 does not know CPUs newer than it (Sapphire Rapids, Zen 4 in some
 * builds) and falls back to its Prescott (SSE3) kernels: a quarter of the machine, said
 * nowhere but in the core name. oneDNN dispatches on the CPU's feature flags instead
 * (AVX2, AVX-512, AMX), so it cannot fall behind that way.
 *
 * The one design decision: the path is chosen per process from facts, not timings,
 * so that two runs of one config on one machine compute the same bits (a resumed run
 * must match a straight one): gemm_blas_level() reads the level the BLAS's kernels
 * run at (OpenBLAS: its core name; BLIS: its architecture; MKL and FlexiBLAS are
 * trusted), and when that is below the CPU's vector level (isa_active(): AVX-512
 * kernels where the CPU has AVX-512, AVX2 where AVX2) every call goes to oneDNN.
 * NEBULA_GEMM=blas|onednn forces a path (the tests force both; a user compares). A
 * per-shape choice from timings is a table the caller loads (gemm_set_table), made
 * by `nebula-bench model --save-tune FILE` and fixed for the run, as comm.tune_file
 * fixes the allreduce's algorithm. */
#ifndef NEBULA_KERNELS_GEMM_H
#define NEBULA_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>

#include "isa.h"

typedef enum gemm_path {
    GEMM_PATH_BLAS = 0, /* cblas_sgemm of the linked library */
    GEMM_PATH_ONEDNN,   /* dnnl_matmul, f32, oneDNN's kernels for isa_active() */
    GEMM_PATHS
} gemm_path;

/* C (M, N) = [C +] op(A) (M, K) · op(B) (K, N), row-major with leading dimensions;
 * ta / tb: the operand is stored transposed ((K, M) / (N, K)); accumulate: C += (sgemm's
 * beta = 1), else C =. Results agree with sgemm's within fp32 summation-order rounding. */
void gemm_f32(bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
              bool accumulate, float *C, int ldc);
/* The same on a given path (the probe and the tests). */
void gemm_f32_on(gemm_path path, bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, bool accumulate, float *C, int ldc);

/* The level of the BLAS's own kernels: OpenBLAS's core name mapped to the ISA it uses
 * (Prescott ... Nehalem: base; Sandybridge: base (AVX without FMA counts as below
 * avx2); Haswell, Zen: avx2; SkylakeX, Cooperlake, SapphireRapids: avx512 or above);
 * BLIS's architecture likewise; MKL and FlexiBLAS: the machine's (they dispatch on
 * flags). */
isa_level gemm_blas_level(void);
/* The path gemm_f32 takes for shapes without a table entry: NEBULA_GEMM's, else oneDNN
 * when gemm_blas_level() is below the vector width of isa_active() (base < avx2 <
 * avx512; bf16 and AMX do not widen fp32 vectors), else the BLAS. Set once per process.
 * An invalid NEBULA_GEMM ends the process with exit code 2 (gemm_env_check first). */
gemm_path gemm_default(void);
/* Checks NEBULA_GEMM: unset, auto, blas or onednn; false with `why` otherwise. */
bool gemm_env_check(char *why, size_t len);
const char *gemm_path_name(gemm_path p);  /* "blas", "onednn" */

/* One line for the start-up and benchmark headers: the path and why, e.g.
 * "oneDNN matmul (the BLAS runs core Prescott = base kernels below this CPU's avx512)"
 * or "BLAS (core Cooperlake = avx512 kernels, this CPU's width)". */
void gemm_describe(char *buf, size_t len);

/* Per-shape choices (from a measured table): a shape listed here takes its path;
 * others take gemm_default(). Copies the entries; n = 0 clears the table. */
typedef struct gemm_shape {
    int M, N, K;
    bool ta, tb;
} gemm_shape;
typedef struct gemm_choice {
    gemm_shape shape;
    gemm_path path;
} gemm_choice;
void gemm_set_table(const gemm_choice *c, int n);
/* The distinct shapes gemm_f32 has been called with since the process started (at most
 * cap; returns how many were recorded), so a probe times exactly what a model runs. */
int gemm_seen_shapes(gemm_shape *out, int cap);

/* Times each shape on both paths (buffers of the shape, one warm-up call each, then 3
 * interleaved rounds, each path's fastest) and fills out[i] with the faster path;
 * oneDNN must be 3% faster to replace the BLAS, so a near-tie keeps the library the user
 * linked. gflops (2 per shape: blas, onednn) may be NULL. About 4 calls of each shape. */
void gemm_probe(const gemm_shape *shapes, int n, gemm_choice *out, double *gflops);

/* Releases oneDNN's primitives (device_close). */
void gemm_release(void);

#endif
