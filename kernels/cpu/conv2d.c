/* conv2d — see conv2d.h. Column matrix layout: row r = (c*KH + kh)*KW + kw, column
 * oh*OW + ow, so weight (OC, C, KH, KW) read row-major is already the GEMM's
 * (OC, C*KH*KW) left operand and no weight transposition is ever made. */
#include "conv2d.h"

#include <assert.h>
#include <cblas.h>
#include <string.h>

/* Below this many elements moved, im2col/col2im/bias loops stay on one thread
 * (thread start-up costs microseconds; a 64K-float copy takes about as long). */
#define CONV2D_OMP_MIN (1 << 16)

size_t conv2d_workspace_floats(int C, int KH, int KW, int OH, int OW)
{
    return (size_t)C * (size_t)KH * (size_t)KW * (size_t)OH * (size_t)OW;
}

/* Output positions o in [*o0, *o1) whose input index o*stride - pad + k lies in
 * [0, len): everything outside reads padding. */
static void conv2d_valid(int k, int pad, int stride, int len, int olen, int *o0, int *o1)
{
    int lo = pad - k;            /* need o*stride >= lo */
    int hi = len - 1 + pad - k;  /* need o*stride <= hi */
    int a = lo > 0 ? (lo + stride - 1) / stride : 0;
    int b = hi < 0 ? 0 : hi / stride + 1;
    if (b > olen) b = olen;
    if (a > b) a = b;
    *o0 = a;
    *o1 = b;
}

static void conv2d_check_shape(int H, int W, int KH, int KW, int stride, int pad, int OH, int OW)
{
    (void)H, (void)W, (void)KH, (void)KW, (void)stride, (void)pad, (void)OH, (void)OW;
    assert(stride >= 1 && pad >= 0 && KH >= 1 && KW >= 1);
    assert(OH == (H + 2 * pad - KH) / stride + 1 && OW == (W + 2 * pad - KW) / stride + 1);
}

/* col (C*KH*KW, OH*OW) <- img (C, H, W); padding becomes 0. One thread per row. */
static void im2col(float *col, const float *img, int C, int H, int W, int KH, int KW, int stride, int pad,
                   int OH, int OW)
{
    const int rows = C * KH * KW;
    const size_t OHW = (size_t)OH * OW;
#pragma omp parallel for schedule(static) if ((size_t)rows * OHW >= CONV2D_OMP_MIN)
    for (int r = 0; r < rows; r++) {
        const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
        const float *plane = img + (size_t)c * H * W;
        float *dst = col + (size_t)r * OHW;
        int oh0, oh1, ow0, ow1;
        conv2d_valid(kh, pad, stride, H, OH, &oh0, &oh1);
        conv2d_valid(kw, pad, stride, W, OW, &ow0, &ow1);
        memset(dst, 0, (size_t)oh0 * OW * sizeof(float));
        for (int oh = oh0; oh < oh1; oh++) {
            float *d = dst + (size_t)oh * OW;
            const float *src = plane + (size_t)(oh * stride - pad + kh) * W;
            memset(d, 0, (size_t)ow0 * sizeof(float));
            if (stride == 1 && ow1 > ow0) {
                memcpy(d + ow0, src + (ow0 - pad + kw), (size_t)(ow1 - ow0) * sizeof(float));
            } else {
                for (int ow = ow0; ow < ow1; ow++) d[ow] = src[ow * stride - pad + kw];
            }
            memset(d + ow1, 0, (size_t)(OW - ow1) * sizeof(float));
        }
        memset(dst + (size_t)oh1 * OW, 0, (size_t)(OH - oh1) * OW * sizeof(float));
    }
}

/* img (C, H, W) += col2im(col): the adjoint of im2col. One thread per channel, which
 * owns its plane and adds its KH*KW rows in a fixed order: deterministic. */
static void col2im_add(float *img, const float *col, int C, int H, int W, int KH, int KW, int stride, int pad,
                       int OH, int OW)
{
    const size_t OHW = (size_t)OH * OW;
#pragma omp parallel for schedule(static) if ((size_t)C * KH * KW * OHW >= CONV2D_OMP_MIN)
    for (int c = 0; c < C; c++) {
        float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const float *src = col + ((size_t)(c * KH + kh) * KW + kw) * OHW;
                int oh0, oh1, ow0, ow1;
                conv2d_valid(kh, pad, stride, H, OH, &oh0, &oh1);
                conv2d_valid(kw, pad, stride, W, OW, &ow0, &ow1);
                for (int oh = oh0; oh < oh1; oh++) {
                    float *d = plane + (size_t)(oh * stride - pad + kh) * W;
                    const float *s = src + (size_t)oh * OW;
                    if (stride == 1 && ow1 > ow0) {
                        float *restrict dd = d + (ow0 - pad + kw);
                        const float *restrict ss = s + ow0;
#pragma omp simd
                        for (int j = 0; j < ow1 - ow0; j++) dd[j] += ss[j];
                    } else {
                        for (int ow = ow0; ow < ow1; ow++) d[ow * stride - pad + kw] += s[ow];
                    }
                }
            }
    }
}

void conv2d_forward(float *out, const float *inp, const float *weight, const float *bias, float *work, int N,
                    int C, int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW)
{
    conv2d_check_shape(H, W, KH, KW, stride, pad, OH, OW);
    const int K = C * KH * KW, OHW = OH * OW;
    const int pointwise = KH == 1 && KW == 1 && stride == 1 && pad == 0;
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC * OHW;          /* (OC, OH*OW) */
        const float *x = inp + (size_t)n * C * H * W;   /* (C, H, W) */
        const float *cols = x;                          /* (K, OH*OW) */
        if (!pointwise) {
            im2col(work, x, C, H, W, KH, KW, stride, pad, OH, OW);
            cols = work;
        }
        float beta = 0.0f;
        if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)OC * OHW >= CONV2D_OMP_MIN)
            for (int oc = 0; oc < OC; oc++) {
                float *row = o + (size_t)oc * OHW;
                const float b = bias[oc];
#pragma omp simd
                for (int j = 0; j < OHW; j++) row[j] = b;
            }
            beta = 1.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, OHW, K, 1.0f, weight, K, cols, OHW, beta, o,
                    OHW);
    }
}

/* dbias[oc] += sum over n, oh, ow of dout: one thread per output channel, double
 * accumulator, images in order. */
static void conv2d_bias_grad(float *dbias, const float *dout, int N, int OC, int OHW)
{
#pragma omp parallel for schedule(static) if ((size_t)N * OC * OHW >= CONV2D_OMP_MIN)
    for (int oc = 0; oc < OC; oc++) {
        double acc = 0.0;
        for (int n = 0; n < N; n++) {
            const float *g = dout + ((size_t)n * OC + oc) * OHW;
            double s = 0.0;
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < OHW; j++) s += g[j];
            acc += s;
        }
        dbias[oc] += (float)acc;
    }
}

void conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, float *work, int N, int C, int H, int W, int OC, int KH, int KW,
                     int stride, int pad, int OH, int OW)
{
    conv2d_check_shape(H, W, KH, KW, stride, pad, OH, OW);
    const int K = C * KH * KW, OHW = OH * OW;
    const int pointwise = KH == 1 && KW == 1 && stride == 1 && pad == 0;
    if (dbias) conv2d_bias_grad(dbias, dout, N, OC, OHW);
    for (int n = 0; n < N; n++) {
        const float *g = dout + (size_t)n * OC * OHW;   /* (OC, OH*OW) */
        const float *x = inp + (size_t)n * C * H * W;   /* (C, H, W) */
        if (dweight) {
            /* dweight (OC, K) += g (OC, OHW) . cols^T (OHW, K) */
            const float *cols = x;
            if (!pointwise) {
                im2col(work, x, C, H, W, KH, KW, stride, pad, OH, OW);
                cols = work;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, K, OHW, 1.0f, g, OHW, cols, OHW, 1.0f,
                        dweight, K);
        }
        if (dinp) {
            /* dcols (K, OHW) = weight^T (K, OC) . g (OC, OHW); dinp += col2im(dcols) */
            float *dx = dinp + (size_t)n * C * H * W;
            if (pointwise) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, OHW, OC, 1.0f, weight, K, g, OHW, 1.0f,
                            dx, OHW);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, OHW, OC, 1.0f, weight, K, g, OHW, 0.0f,
                            work, OHW);
                col2im_add(dx, work, C, H, W, KH, KW, stride, pad, OH, OW);
            }
        }
    }
}

/* ---- the specification ------------------------------------------------------ */

void conv2d_forward_ref(double *out, const double *inp, const double *weight, const double *bias, int N, int C,
                        int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW)
{
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = bias ? bias[oc] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += weight[((oc * C + c) * KH + kh) * KW + kw] * inp[((n * C + c) * H + ih) * W + iw];
                            }
                    out[((n * OC + oc) * OH + oh) * OW + ow] = s;
                }
}

void conv2d_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                         const double *weight, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                         int pad, int OH, int OW)
{
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double g = dout[((n * OC + oc) * OH + oh) * OW + ow];
                    if (dbias) dbias[oc] += g;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int wi = ((oc * C + c) * KH + kh) * KW + kw, xi = ((n * C + c) * H + ih) * W + iw;
                                if (dweight) dweight[wi] += g * inp[xi];
                                if (dinp) dinp[xi] += g * weight[wi];
                            }
                }
}
