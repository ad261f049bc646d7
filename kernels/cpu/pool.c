/* pool — see pool.h. The fast max pooling keeps PyTorch's per-output scan order
 * (window rows, then columns) but runs it for a whole output row at once: for
 * each in-image window row ih and column offset kw, every output of the row
 * compares one input, so the inner loop over ow is a vectorised compare-and-blend
 * into the output row itself (out and argmax double as the running best). */
#include "pool.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

/* Below this many input elements a call runs on one thread. */
#define POOL_OMP_MIN (1 << 15)

/* Outputs o in [*o0, *o1) whose input column o*stride - pad + k lies in [0, len). */
static void pool_valid(int k, int pad, int stride, int len, int olen, int *o0, int *o1)
{
    int lo = pad - k, hi = len - 1 + pad - k;
    int a = lo > 0 ? (lo + stride - 1) / stride : 0;
    int b = hi < 0 ? 0 : hi / stride + 1;
    if (b > olen) b = olen;
    if (a > b) a = b;
    *o0 = a;
    *o1 = b;
}

void maxpool2d_forward(float *out, int32_t *argmax, const float *inp, int N, int C, int H, int W, int K,
                       int stride, int pad, int OH, int OW)
{
    assert(K >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= K);
    assert(OH == (H + 2 * pad - K) / stride + 1 && OW == (W + 2 * pad - K) / stride + 1);
    const long planes = (long)N * C;
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW >= POOL_OMP_MIN)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * HW;
        for (int oh = 0; oh < OH; oh++) {
            float *restrict o = out + p * OHW + (size_t)oh * OW;
            int32_t *restrict a = argmax + p * OHW + (size_t)oh * OW;
            int ih0 = oh * stride - pad, ih1 = ih0 + K;
            if (ih0 < 0) ih0 = 0;
            if (ih1 > H) ih1 = H;
            for (int ow = 0; ow < OW; ow++) {
                int iw0 = ow * stride - pad;
                o[ow] = -INFINITY;
                a[ow] = ih0 * W + (iw0 < 0 ? 0 : iw0);
            }
            for (int ih = ih0; ih < ih1; ih++) {
                const float *row = x + (size_t)ih * W;
                for (int kw = 0; kw < K; kw++) {
                    int ow0, ow1;
                    pool_valid(kw, pad, stride, W, OW, &ow0, &ow1);
#pragma omp simd
                    for (int ow = ow0; ow < ow1; ow++) {
                        int iw = ow * stride - pad + kw;
                        float v = row[iw];
                        if (v > o[ow] || v != v) {
                            o[ow] = v;
                            a[ow] = ih * W + iw;
                        }
                    }
                }
            }
        }
    }
}

void maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax, int N, int C, int H, int W, int K,
                        int stride, int pad, int OH, int OW)
{
    (void)K, (void)stride, (void)pad;
    const long planes = (long)N * C;
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW >= POOL_OMP_MIN)
    for (long p = 0; p < planes; p++) {
        float *dx = dinp + p * HW;
        const float *g = dout + p * OHW;
        const int32_t *a = argmax + p * OHW;
        for (size_t j = 0; j < OHW; j++) dx[a[j]] += g[j];
    }
}

void avgpool_global_forward(float *out, const float *inp, int N, int C, int HW)
{
    const long planes = (long)N * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW >= POOL_OMP_MIN)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * HW;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < HW; i++) s += x[i];
        out[p] = s / (float)HW;
    }
}

void avgpool_global_backward(float *dinp, const float *dout, int N, int C, int HW)
{
    const long planes = (long)N * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * HW >= POOL_OMP_MIN)
    for (long p = 0; p < planes; p++) {
        float *dx = dinp + p * HW;
        const float g = dout[p] / (float)HW;
#pragma omp simd
        for (int i = 0; i < HW; i++) dx[i] += g;
    }
}

/* ---- the specification ------------------------------------------------------ */

void maxpool2d_forward_ref(double *out, int32_t *argmax, const double *inp, int N, int C, int H, int W, int K,
                           int stride, int pad, int OH, int OW)
{
    for (int p = 0; p < N * C; p++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int ih0 = oh * stride - pad, iw0 = ow * stride - pad;
                int ih1 = ih0 + K < H ? ih0 + K : H, iw1 = iw0 + K < W ? iw0 + K : W;
                if (ih0 < 0) ih0 = 0;
                if (iw0 < 0) iw0 = 0;
                double best = -INFINITY;
                int32_t at = ih0 * W + iw0;
                for (int ih = ih0; ih < ih1; ih++)
                    for (int iw = iw0; iw < iw1; iw++) {
                        double v = inp[(size_t)p * H * W + ih * W + iw];
                        if (v > best || isnan(v)) {
                            best = v;
                            at = ih * W + iw;
                        }
                    }
                out[((size_t)p * OH + oh) * OW + ow] = best;
                argmax[((size_t)p * OH + oh) * OW + ow] = at;
            }
}

void maxpool2d_backward_ref(double *dinp, const double *dout, const int32_t *argmax, int N, int C, int H, int W,
                            int K, int stride, int pad, int OH, int OW)
{
    (void)K, (void)stride, (void)pad;
    for (int p = 0; p < N * C; p++)
        for (int j = 0; j < OH * OW; j++)
            dinp[(size_t)p * H * W + argmax[(size_t)p * OH * OW + j]] += dout[(size_t)p * OH * OW + j];
}

void avgpool_global_forward_ref(double *out, const double *inp, int N, int C, int HW)
{
    for (int p = 0; p < N * C; p++) {
        double s = 0.0;
        for (int i = 0; i < HW; i++) s += inp[(size_t)p * HW + i];
        out[p] = s / HW;
    }
}

void avgpool_global_backward_ref(double *dinp, const double *dout, int N, int C, int HW)
{
    for (int p = 0; p < N * C; p++)
        for (int i = 0; i < HW; i++) dinp[(size_t)p * HW + i] += dout[p] / HW;
}
