/* dgc — DGC-Pro's selection kernels on the CPU: the twin of kernels/cuda/dgc.h (the
 * same functions without the cuda_ prefix; counts are returned instead of written to
 * device memory). libcore/dgc decides which tensor, at which density, from which
 * sample fraction and seed; these loops only compute.
 *
 * The one design decision: the threshold comes from a sample, as in DGC. The k-th
 * largest |x| of a tensor is estimated by the same quantile of a sample of 0.1-1% of
 * its entries, so the cost is one quickselect over the sample plus one streaming pass
 * that compares every entry with the threshold. The sample is stratified (a window of
 * 16 consecutive entries drawn uniformly in each of m/16 equal strata) so that it
 * covers every row of a weight matrix at one cache line per window, and its positions
 * come from a counter-based hash of (seed, stratum): reproducible without a generator
 * state to checkpoint, and drawn identically by cuda_dgc_sample_abs. */
#ifndef NEBULA_KERNELS_CPU_DGC_H
#define NEBULA_KERNELS_CPU_DGC_H

#include <stddef.h>
#include <stdint.h>

/* The k-th largest (1 <= k <= n) of a[0, n), reordering a (Wirth's selection). */
float dgc_kth_largest(float *a, size_t n, size_t k);

/* The threshold: the k-th largest |x| of n values, exactly (scratch: n floats);
 * INFINITY when n or k is 0, k clamped to n. The host half of both devices' threshold. */
float dgc_kth_abs(const float *x, size_t n, size_t k, float *scratch);

/* cuda_dgc_sample_abs on the CPU: writes the m |x| values of the stratified sample for
 * (n, fraction, seed) to sample (capacity m) and returns m = ceil(fraction * n) clamped
 * to [1, n], rounded down to whole windows of 16 when m >= 64 (0 when n == 0). */
size_t dgc_sample_abs(const float *x, size_t n, double fraction, uint64_t seed, float *sample);

/* cuda_dgc_select on the CPU: writes the indices of the entries with |x| >= thr
 * (thr > 0; NaN never selected) to idx (capacity cap) in ascending order and returns
 * how many there are (those beyond cap are counted, not written). Vectorised;
 * ~1 G entries/s per core. x (n), idx (cap). */
size_t dgc_select(const float *x, size_t n, float thr, uint32_t *idx, size_t cap);

/* dgc_select's plain loop, the specification its AVX2 and NEON builds equal index for
 * index (for tests). */
size_t dgc_select_portable(const float *x, size_t n, float thr, uint32_t *idx, size_t cap);

/* cuda_dgc_count_above on the CPU: the number of i < n with |x[i]| >= thr. */
size_t dgc_count_above(const float *x, size_t n, float thr);

#endif
