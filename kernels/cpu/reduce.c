/* reduce — see reduce.h. One macro expands the (dtype, op) matrix so the fast
 * and reference paths cannot drift apart in which combinations they support. */
#include "reduce.h"

#include <stdint.h>

/* a op b with a the left operand: sum a + b; max keeps a unless b > a; min keeps a
 * unless b < a (so NaN and signed zeros resolve by operand position). */
#define REDUCE_LOOPS(T, d, s, n, rev)                                                    \
    do {                                                                                 \
        T *restrict d_ = (T *)(d);                                                       \
        const T *restrict s_ = (const T *)(s);                                           \
        switch (op) {                                                                    \
        case REDUCE_OP_SUM:                                                              \
            if (rev) { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = s_[i] + d_[i]; } \
            else { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = d_[i] + s_[i]; }     \
            break;                                                                       \
        case REDUCE_OP_MAX:                                                              \
            if (rev) { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = d_[i] > s_[i] ? d_[i] : s_[i]; } \
            else { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = s_[i] > d_[i] ? s_[i] : d_[i]; }     \
            break;                                                                       \
        case REDUCE_OP_MIN:                                                              \
            if (rev) { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = d_[i] < s_[i] ? d_[i] : s_[i]; } \
            else { _Pragma("omp simd") for (size_t i = 0; i < (n); i++) d_[i] = s_[i] < d_[i] ? s_[i] : d_[i]; }     \
            break;                                                                       \
        }                                                                                \
    } while (0)

static void reduce_fast(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op, int rev)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: REDUCE_LOOPS(float, dst, src, n, rev); break;
    case REDUCE_DTYPE_F64: REDUCE_LOOPS(double, dst, src, n, rev); break;
    case REDUCE_DTYPE_I32: REDUCE_LOOPS(int32_t, dst, src, n, rev); break;
    case REDUCE_DTYPE_I64: REDUCE_LOOPS(int64_t, dst, src, n, rev); break;
    }
}

void reduce_apply(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op)
{
    reduce_fast(dst, src, n, dt, op, 0);
}

void reduce_apply_rev(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op)
{
    reduce_fast(dst, src, n, dt, op, 1);
}

/* The specification: result = a op b, a the left operand, one element at a time. */
#define REDUCE_REF(T)                                                           \
    do {                                                                        \
        T *d_ = (T *)dst;                                                       \
        const T *s_ = (const T *)src;                                           \
        for (size_t i = 0; i < n; i++) {                                        \
            T a = rev ? s_[i] : d_[i], b = rev ? d_[i] : s_[i];                 \
            if (op == REDUCE_OP_SUM) d_[i] = a + b;                             \
            else if (op == REDUCE_OP_MAX) d_[i] = b > a ? b : a;                \
            else d_[i] = b < a ? b : a;                                         \
        }                                                                       \
    } while (0)

static void reduce_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op, int rev)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: REDUCE_REF(float); break;
    case REDUCE_DTYPE_F64: REDUCE_REF(double); break;
    case REDUCE_DTYPE_I32: REDUCE_REF(int32_t); break;
    case REDUCE_DTYPE_I64: REDUCE_REF(int64_t); break;
    }
}

void reduce_apply_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op)
{
    reduce_ref(dst, src, n, dt, op, 0);
}

void reduce_apply_rev_ref(void *dst, const void *src, size_t n, reduce_dtype dt, reduce_op op)
{
    reduce_ref(dst, src, n, dt, op, 1);
}
