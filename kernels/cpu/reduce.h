/* reduce — elementwise reductions used by the collectives (dst op= src).
 *
 * Plain loops that the compiler vectorises (`omp simd`); the reduction order is
 * fixed by the caller, so results are deterministic for a given schedule. */
#ifndef NEBULA_KERNELS_REDUCE_H
#define NEBULA_KERNELS_REDUCE_H

#include <stddef.h>

#include "base/dtype.h"  /* reduce_dtype, reduce_op, reduce_dtype_size, reduce_get/set */

/* dst[i] = dst[i] op src[i] for i < n; dst and src must not overlap. */
void reduce_apply(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

/* dst[i] = src[i] op dst[i]: the same combination with the operands swapped, so two
 * ranks that exchange their data and each keep the result compute bit-identical
 * values even for NaN payloads, NaN in max/min and signed zeros. */
void reduce_apply_rev(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

/* The specification: a scalar loop with no vectorisation hints, used by the tests. */
void reduce_apply_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);
void reduce_apply_rev_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op);

#endif
