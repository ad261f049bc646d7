/* batchnorm — see batchnorm.h. The fast path folds the normalisation into one
 * multiply-add per element, out = x*scale + shift with scale = weight*rstd and
 * shift = bias - mean*scale, and runs one channel per thread. */
#include "batchnorm.h"

#include <math.h>
#include <stddef.h>

/* Below this many elements the whole call runs on one thread. */
#define BATCHNORM_OMP_MIN (1 << 15)

/* Unbiased from biased variance: var * M/(M-1); M = 1 (undefined) keeps var. */
static double batchnorm_unbias(double var, size_t M)
{
    return M > 1 ? var * (double)M / (double)(M - 1) : var;
}

void batchnorm_forward(float *out, float *mean, float *rstd, float *running_mean, float *running_var,
                       const float *inp, const float *weight, const float *bias, int N, int C, int HW, float eps,
                       float momentum, int training)
{
    const size_t M = (size_t)N * HW, CHW = (size_t)C * HW;
#pragma omp parallel for schedule(static) if (M * C >= BATCHNORM_OMP_MIN)
    for (int c = 0; c < C; c++) {
        double mu, rs;
        if (training) {
            double s = 0.0, q = 0.0;
            for (int n = 0; n < N; n++) {
                const float *x = inp + n * CHW + (size_t)c * HW;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < HW; i++) s += x[i];
            }
            mu = s / (double)M;
            for (int n = 0; n < N; n++) {
                const float *x = inp + n * CHW + (size_t)c * HW;
#pragma omp simd reduction(+ : q)
                for (int i = 0; i < HW; i++) q += ((double)x[i] - mu) * ((double)x[i] - mu);
            }
            double var = q / (double)M;
            rs = 1.0 / sqrt(var + (double)eps);
            if (running_mean) running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + (double)momentum * mu);
            if (running_var)
                running_var[c] =
                    (float)((1.0 - momentum) * running_var[c] + (double)momentum * batchnorm_unbias(var, M));
        } else {
            mu = running_mean[c];
            rs = 1.0 / sqrt((double)running_var[c] + (double)eps);
        }
        if (mean) mean[c] = (float)mu;
        if (rstd) rstd[c] = (float)rs;
        const float scale = (float)((weight ? weight[c] : 1.0) * rs);
        const float shift = (float)((bias ? bias[c] : 0.0) - mu * (double)scale);
        for (int n = 0; n < N; n++) {
            const float *x = inp + n * CHW + (size_t)c * HW;
            float *y = out + n * CHW + (size_t)c * HW;
#pragma omp simd
            for (int i = 0; i < HW; i++) y[i] = x[i] * scale + shift;
        }
    }
}

void batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C, int HW)
{
    const size_t M = (size_t)N * HW, CHW = (size_t)C * HW;
#pragma omp parallel for schedule(static) if (M * C >= BATCHNORM_OMP_MIN)
    for (int c = 0; c < C; c++) {
        const float mu = mean[c], rs = rstd[c];
        double sg = 0.0, sgx = 0.0; /* sum dy, sum dy*xhat */
        for (int n = 0; n < N; n++) {
            const float *x = inp + n * CHW + (size_t)c * HW, *g = dout + n * CHW + (size_t)c * HW;
#pragma omp simd reduction(+ : sg, sgx)
            for (int i = 0; i < HW; i++) {
                sg += g[i];
                sgx += (double)g[i] * ((double)(x[i] - mu) * rs);
            }
        }
        if (dbias) dbias[c] += (float)sg;
        if (dweight) dweight[c] += (float)sgx;
        if (!dinp) continue;
        const float k = (float)((weight ? weight[c] : 1.0) * rs);
        const float mg = (float)(sg / (double)M), mgx = (float)(sgx / (double)M);
        for (int n = 0; n < N; n++) {
            const float *x = inp + n * CHW + (size_t)c * HW, *g = dout + n * CHW + (size_t)c * HW;
            float *dx = dinp + n * CHW + (size_t)c * HW;
#pragma omp simd
            for (int i = 0; i < HW; i++) dx[i] += k * (g[i] - mg - (x[i] - mu) * rs * mgx);
        }
    }
}

/* ---- the specification ------------------------------------------------------ */

void batchnorm_forward_ref(double *out, double *mean, double *rstd, double *running_mean, double *running_var,
                           const double *inp, const double *weight, const double *bias, int N, int C, int HW,
                           double eps, double momentum, int training)
{
    const size_t M = (size_t)N * HW;
    for (int c = 0; c < C; c++) {
        double mu, var;
        if (training) {
            double s = 0.0, q = 0.0;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < HW; i++) s += inp[((size_t)n * C + c) * HW + i];
            mu = s / (double)M;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < HW; i++) {
                    double d = inp[((size_t)n * C + c) * HW + i] - mu;
                    q += d * d;
                }
            var = q / (double)M;
            if (running_mean) running_mean[c] = (1.0 - momentum) * running_mean[c] + momentum * mu;
            if (running_var) running_var[c] = (1.0 - momentum) * running_var[c] + momentum * batchnorm_unbias(var, M);
        } else {
            mu = running_mean[c];
            var = running_var[c];
        }
        double rs = 1.0 / sqrt(var + eps);
        if (mean) mean[c] = mu;
        if (rstd) rstd[c] = rs;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                out[j] = (inp[j] - mu) * rs * (weight ? weight[c] : 1.0) + (bias ? bias[c] : 0.0);
            }
    }
}

void batchnorm_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                            const double *weight, const double *mean, const double *rstd, int N, int C, int HW)
{
    const size_t M = (size_t)N * HW;
    for (int c = 0; c < C; c++) {
        double sg = 0.0, sgx = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                sg += dout[j];
                sgx += dout[j] * (inp[j] - mean[c]) * rstd[c];
            }
        if (dbias) dbias[c] += sg;
        if (dweight) dweight[c] += sgx;
        if (!dinp) continue;
        double w = weight ? weight[c] : 1.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                double xhat = (inp[j] - mean[c]) * rstd[c];
                dinp[j] += w * rstd[c] * (dout[j] - sg / (double)M - xhat * sgx / (double)M);
            }
    }
}
