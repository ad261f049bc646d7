/* reduce — elementwise reductions used by the collectives (dst op= src).
 *
 * Plain loops that the compiler vectorises (`omp simd`); the reduction order is
 * fixed by the caller, so results are deterministic for a given schedule. */
#ifndef NEBULA_KERNELS_REDUCE_H
#define NEBULA_KERNELS_REDUCE_H

#include <stddef.h>

typedef enum reduce_dtype {
    REDUCE_DTYPE_F32 = 0,
    REDUCE_DTYPE_F64,
    REDUCE_DTYPE_I32,
    REDUCE_DTYPE_I64,
} reduce_dtype;

typedef enum reduce_op {
    REDUCE_OP_SUM = 0,
    REDUCE_OP_MAX,
    REDUCE_OP_MIN,
} reduce_op;

/* Bytes of one element. */
size_t reduce_dtype_size(reduce_dtype dt);

/* dst[i] = dst[i] op src[i] for i < n; dst and src must not overlap. */
void reduce_apply(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

/* dst[i] = src[i] op dst[i]: the same combination with the operands swapped, so two
 * ranks that exchange their data and each keep the result compute bit-identical
 * values even for NaN payloads, NaN in max/min and signed zeros. */
void reduce_apply_rev(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

/* Element i of a typed buffer as a double, and back (exact for the small integers
 * tests and benchmarks use to check reductions bit for bit). */
double reduce_get(const void *buf, size_t i, reduce_dtype dt);
void reduce_set(void *buf, size_t i, reduce_dtype dt, double v);

/* The specification: a scalar loop with no vectorisation hints, used by the tests. */
void reduce_apply_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);
void reduce_apply_rev_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

#endif
