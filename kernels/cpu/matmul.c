/* matmul — see matmul.h. The products go through gemm_f32 (gemm.h: the BLAS, or oneDNN
 * where the BLAS runs kernels below this CPU's width). In math form out = inp · Wm with Wm (C, OC): Wm = W^T for
 * MATMUL_LAYOUT_OUT_IN and Wm = W for MATMUL_LAYOUT_IN_OUT. Every GEMM below is
 * row-major and follows from that identity:
 *   forward   out  (BT, OC) = inp  (BT, C)  · Wm
 *   backward  dinp (BT, C) += dout (BT, OC) · Wm^T
 *             dW          += inp^T · dout   (IN_OUT, (C, OC))  or  dout^T · inp  (OUT_IN, (OC, C))
 * The bias is written into out first and sgemm adds onto it (beta = 1), so there is
 * no second pass over out. The dbias reduction is the one loop built per vector level
 * (isa_variant.h); the rest is built once. */
#include "matmul.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "blas.h"
#include "gemm.h"
#include "isa_variant.h"

/* Below this many elements of out (or dout) the bias fill and the dbias reduction
 * run on one thread: a parallel region costs a few microseconds. */
#define MATMUL_PAR_MIN (1 << 16)
/* Columns of dbias one task owns: a 256-byte row slice, so the adds vectorise. */
#define MATMUL_DBIAS_BLOCK 64

/* dbias[o] += sum over rows of dout[:, o]: each block of columns is summed in row
 * order into a local accumulator and added once, so the result does not depend on
 * the thread count. */
void ISA_FN(matmul_dbias)(float *dbias, const float *dout, int BT, int OC)
{
    int nblock = (OC + MATMUL_DBIAS_BLOCK - 1) / MATMUL_DBIAS_BLOCK;
    #pragma omp parallel for schedule(static) if ((size_t)BT * (size_t)OC >= MATMUL_PAR_MIN)
    for (int b = 0; b < nblock; b++) {
        int o0 = b * MATMUL_DBIAS_BLOCK;
        int w = OC - o0 < MATMUL_DBIAS_BLOCK ? OC - o0 : MATMUL_DBIAS_BLOCK;
        float acc[MATMUL_DBIAS_BLOCK] = { 0 };
        for (int i = 0; i < BT; i++) {
            const float *row = dout + (size_t)i * OC + o0;
            #pragma omp simd
            for (int j = 0; j < w; j++) acc[j] += row[j];
        }
        #pragma omp simd
        for (int j = 0; j < w; j++) dbias[o0 + j] += acc[j];
    }
}

#if ISA_ONCE
ISA_VARIANTS(void, matmul_dbias, (float *dbias, const float *dout, int BT, int OC));

static void matmul_dbias(float *dbias, const float *dout, int BT, int OC)
{
    ISA_DISPATCH(matmul_dbias, (dbias, dout, BT, OC));
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                    int BT, int C, int OC, matmul_layout layout)
{
    if (BT <= 0 || OC <= 0) return;
    size_t n = (size_t)BT * (size_t)OC;
    if (bias) {
        #pragma omp parallel for schedule(static) if (n >= MATMUL_PAR_MIN)
        for (int i = 0; i < BT; i++)
            memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
    } else {
        memset(out, 0, n * sizeof(float));
    }
    if (C <= 0) return;
    if (BT == 1) {  /* one row (generation with a KV cache): a matrix-vector product, bound by reading W */
        if (layout == MATMUL_LAYOUT_OUT_IN)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, 1.0f, out, 1);
        else
            cblas_sgemv(CblasRowMajor, CblasTrans, C, OC, 1.0f, weight, OC, inp, 1, 1.0f, out, 1);
        return;
    }
    if (layout == MATMUL_LAYOUT_OUT_IN)
        gemm_f32(false, true, BT, OC, C, inp, C, weight, C, true, out, OC);
    else
        gemm_f32(false, false, BT, OC, C, inp, C, weight, OC, true, out, OC);
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int BT, int C, int OC, matmul_layout layout)
{
    if (BT <= 0 || C <= 0 || OC <= 0) return;
    int out_in = layout == MATMUL_LAYOUT_OUT_IN;
    if (dinp) {
        if (out_in) /* W (OC, C) is already Wm^T */
            gemm_f32(false, false, BT, C, OC, dout, OC, weight, C, true, dinp, C);
        else
            gemm_f32(false, true, BT, C, OC, dout, OC, weight, OC, true, dinp, C);
    }
    if (dweight) {
        if (out_in)
            gemm_f32(true, false, OC, C, BT, dout, OC, inp, C, true, dweight, C);
        else
            gemm_f32(true, false, C, OC, BT, inp, C, dout, OC, true, dweight, OC);
    }
    if (dbias) matmul_dbias(dbias, dout, BT, OC);
}

/* Element (c, o) of Wm (C, OC) whatever the storage. */
static double matmul_wm_ref(const double *weight, int c, int o, int C, int OC, matmul_layout layout)
{
    return layout == MATMUL_LAYOUT_OUT_IN ? weight[(size_t)o * C + c] : weight[(size_t)c * OC + o];
}

void matmul_forward_ref(double *out, const double *inp, const double *weight, const double *bias,
                        int BT, int C, int OC, matmul_layout layout)
{
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)i * C + c] * matmul_wm_ref(weight, c, o, C, OC, layout);
            out[(size_t)i * OC + o] = s;
        }
}

void matmul_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                         const double *weight, int BT, int C, int OC, matmul_layout layout)
{
    if (dinp)
        for (int i = 0; i < BT; i++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int o = 0; o < OC; o++)
                    s += dout[(size_t)i * OC + o] * matmul_wm_ref(weight, c, o, C, OC, layout);
                dinp[(size_t)i * C + c] += s;
            }
    if (dweight)
        for (int c = 0; c < C; c++)
            for (int o = 0; o < OC; o++) {
                double s = 0;
                for (int i = 0; i < BT; i++) s += inp[(size_t)i * C + c] * dout[(size_t)i * OC + o];
                size_t at = layout == MATMUL_LAYOUT_OUT_IN ? (size_t)o * C + c : (size_t)c * OC + o;
                dweight[at] += s;
            }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < BT; i++) s += dout[(size_t)i * OC + o];
            dbias[o] += s;
        }
}
#endif
