/* dtype — the element types and reduction operators that comm (collectives) and
 * kernels (reduce loops) share, with the size of each type and a typed element read
 * and written as a double.
 *
 * The one design decision: this table sits below both comm and kernels, header only
 * (static inline, no library of its own), so comm.h needs no kernels header for its
 * types and kernels/cpu needs nothing of libcore beyond this file. The names keep
 * their reduce_ prefix: they are what every collective and reduce loop already spells. */
#ifndef NEBULA_BASE_DTYPE_H
#define NEBULA_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

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
static inline size_t reduce_dtype_size(reduce_dtype dt)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: return sizeof(float);
    case REDUCE_DTYPE_F64: return sizeof(double);
    case REDUCE_DTYPE_I32: return sizeof(int32_t);
    case REDUCE_DTYPE_I64: return sizeof(int64_t);
    }
    return 0;
}

/* Element i of a typed buffer as a double, and back (exact for the small integers
 * tests and benchmarks use to check reductions bit for bit). */
static inline double reduce_get(const void *buf, size_t i, reduce_dtype dt)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: return ((const float *)buf)[i];
    case REDUCE_DTYPE_F64: return ((const double *)buf)[i];
    case REDUCE_DTYPE_I32: return ((const int32_t *)buf)[i];
    case REDUCE_DTYPE_I64: return (double)((const int64_t *)buf)[i];
    }
    return 0;
}

static inline void reduce_set(void *buf, size_t i, reduce_dtype dt, double v)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case REDUCE_DTYPE_F64: ((double *)buf)[i] = v; break;
    case REDUCE_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case REDUCE_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

#endif
