/* dgc_select — the thresholds of DGC-Pro (dgc.h): which densities are read off one
 * sample of a tensor. The element loops (the stratified sample, the exact k-th
 * largest, the compare-and-compact selection) are kernels: kernels/cpu/dgc.c, with
 * kernels/cuda/dgc.cu their device twin. */
#include "dgc.h"

#include <math.h>
#include <stddef.h>

#include "cpu/dgc.h"

void dgc_sampled_thresholds(const float *x, size_t n, const double *density, float *thr, int count, double fraction,
                            uint64_t seed, float *scratch)
{
    if (n == 0) {
        for (int q = 0; q < count; q++) thr[q] = INFINITY;
        return;
    }
    size_t m = dgc_sample_abs(x, n, fraction, seed, scratch);
    for (int q = 0; q < count; q++) {  /* the selection only permutes the sample: one sample serves all */
        size_t k = (size_t)ceil(density[q] * (double)m);
        if (k < 1) k = 1;
        if (k > m) k = m;
        thr[q] = dgc_kth_largest(scratch, m, k);
    }
}

float dgc_sampled_threshold(const float *x, size_t n, double density, double fraction, uint64_t seed,
                            float *scratch)
{
    float thr;
    dgc_sampled_thresholds(x, n, &density, &thr, 1, fraction, seed, scratch);
    return thr;
}
