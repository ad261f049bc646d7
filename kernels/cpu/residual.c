/* residual — see residual.h. Memory-bound: one rounding per element, so the fast
 * path equals the reference rounded to float. */
#include "residual.h"

/* Below this many elements a call runs on one thread. */
#define RESIDUAL_PAR_MIN (1 << 16)

void residual_forward(float *out, const float *a, const float *b, size_t N)
{
    #pragma omp parallel for simd schedule(static) if (parallel : N >= RESIDUAL_PAR_MIN)
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void residual_backward(float *da, float *db, const float *dout, size_t N)
{
    if (da && db) { /* one pass over dout */
        #pragma omp parallel for simd schedule(static) if (parallel : N >= RESIDUAL_PAR_MIN)
        for (size_t i = 0; i < N; i++) {
            da[i] += dout[i];
            db[i] += dout[i];
        }
        return;
    }
    float *d = da ? da : db;
    if (!d) return;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= RESIDUAL_PAR_MIN)
    for (size_t i = 0; i < N; i++) d[i] += dout[i];
}

void residual_forward_ref(double *out, const double *a, const double *b, size_t N)
{
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void residual_backward_ref(double *da, double *db, const double *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        if (da) da[i] += dout[i];
        if (db) db[i] += dout[i];
    }
}
