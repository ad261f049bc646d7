/* layernorm — see layernorm.h. Backward, with n = (x - mean) * rstd and
 * dn = weight * dout (llm.c's derivation):
 *   dinp    += rstd * (dn - mean_c(dn) - n * mean_c(dn * n))
 *   dweight += sum_rows(n * dout),   dbias += sum_rows(dout).
 * Both passes are built per vector level (isa_variant.h). */
#include "layernorm.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/log.h"
#include "isa_variant.h"

/* Below this many elements a call runs on one thread (a parallel region costs a
 * few microseconds; a 32 x 768 layernorm is about that). */
#define LAYERNORM_PAR_MIN (1 << 15)
/* Columns per task in the final reduction over chunks (a 256-byte row slice). */
#define LAYERNORM_COL_BLOCK 64

void ISA_FN(layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int BT, int C, float eps)
{
    if (BT <= 0 || C <= 0) return;
    #pragma omp parallel for schedule(static) if ((size_t)BT * (size_t)C >= LAYERNORM_PAR_MIN)
    for (int i = 0; i < BT; i++) {
        const float *x = inp + (size_t)i * C;
        float *o = out + (size_t)i * C;
        float m = 0.0f;
        #pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f; /* two passes: no cancellation for rows with a large mean */
        #pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

void ISA_FN(layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int BT, int C)
{
    if (BT <= 0 || C <= 0) return;
    int nchunk = (BT + LAYERNORM_CHUNK_ROWS - 1) / LAYERNORM_CHUNK_ROWS;
    size_t stride = 2 * (size_t)C; /* chunk k: dweight partial, then dbias partial */
    float *part = malloc((size_t)nchunk * stride * sizeof(float));
    CHECK(part != NULL, "out of memory for the layernorm backward scratch (2 * C floats per 32 rows)");
    int par = (size_t)BT * (size_t)C >= LAYERNORM_PAR_MIN;

    #pragma omp parallel for schedule(static) if (par)
    for (int k = 0; k < nchunk; k++) {
        float *pw = part + (size_t)k * stride, *pb = pw + C;
        #pragma omp simd
        for (int c = 0; c < C; c++) pw[c] = pb[c] = 0.0f;
        int end = (k + 1) * LAYERNORM_CHUNK_ROWS < BT ? (k + 1) * LAYERNORM_CHUNK_ROWS : BT;
        for (int i = k * LAYERNORM_CHUNK_ROWS; i < end; i++) {
            const float *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
            float *dx = dinp + (size_t)i * C;
            float m = mean[i], s = rstd[i], dn_mean = 0.0f, dnn_mean = 0.0f;
            #pragma omp simd reduction(+ : dn_mean, dnn_mean)
            for (int c = 0; c < C; c++) {
                float n = (x[c] - m) * s, dn = weight[c] * g[c];
                dn_mean += dn;
                dnn_mean += dn * n;
                pw[c] += n * g[c];
                pb[c] += g[c];
            }
            dn_mean /= (float)C;
            dnn_mean /= (float)C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float n = (x[c] - m) * s, dn = weight[c] * g[c];
                dx[c] += (dn - dn_mean - n * dnn_mean) * s;
            }
        }
    }

    /* Chunks in chunk order, per block of columns: independent of the thread count. */
    int nblock = (C + LAYERNORM_COL_BLOCK - 1) / LAYERNORM_COL_BLOCK;
    #pragma omp parallel for schedule(static) if (par)
    for (int blk = 0; blk < nblock; blk++) {
        int c0 = blk * LAYERNORM_COL_BLOCK;
        int w = C - c0 < LAYERNORM_COL_BLOCK ? C - c0 : LAYERNORM_COL_BLOCK;
        float sw[LAYERNORM_COL_BLOCK] = { 0 }, sb[LAYERNORM_COL_BLOCK] = { 0 };
        for (int k = 0; k < nchunk; k++) {
            const float *pw = part + (size_t)k * stride + c0, *pb = pw + C;
            #pragma omp simd
            for (int j = 0; j < w; j++) {
                sw[j] += pw[j];
                sb[j] += pb[j];
            }
        }
        #pragma omp simd
        for (int j = 0; j < w; j++) {
            dweight[c0 + j] += sw[j];
            dbias[c0 + j] += sb[j];
        }
    }
    free(part);
}

#if ISA_ONCE
ISA_VARIANTS(void, layernorm_forward, (float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                        const float *bias, int BT, int C, float eps));
ISA_VARIANTS(void, layernorm_backward, (float *dinp, float *dweight, float *dbias, const float *dout,
                                         const float *inp, const float *weight, const float *mean, const float *rstd,
                                         int BT, int C));

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int BT, int C, float eps)
{
    ISA_DISPATCH(layernorm_forward, (out, mean, rstd, inp, weight, bias, BT, C, eps));
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int BT, int C)
{
    ISA_DISPATCH(layernorm_backward, (dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C));
}

void layernorm_forward_ref(double *out, double *mean, double *rstd, const double *inp, const double *weight,
                           const double *bias, int BT, int C, double eps)
{
    for (int i = 0; i < BT; i++) {
        const double *x = inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + eps);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (x[c] - m) * s * weight[c] + bias[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

void layernorm_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                            const double *weight, const double *mean, const double *rstd, int BT, int C)
{
    for (int i = 0; i < BT; i++) {
        const double *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
        double dn_mean = 0, dnn_mean = 0;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - mean[i]) * rstd[i];
            dn_mean += weight[c] * g[c];
            dnn_mean += weight[c] * g[c] * n;
        }
        dn_mean /= C;
        dnn_mean /= C;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - mean[i]) * rstd[i];
            dinp[(size_t)i * C + c] += (weight[c] * g[c] - dn_mean - n * dnn_mean) * rstd[i];
            dweight[c] += n * g[c];
            dbias[c] += g[c];
        }
    }
}
#endif
