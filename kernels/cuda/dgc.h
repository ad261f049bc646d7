/* dgc — CUDA variants of DGC-Pro's threshold sample and selection (libcore/dgc.h,
 * dgc_select.c, dgc_codec.c's dgc_round_value).
 *
 * The one design decision: every result equals the CPU's exactly and is
 * deterministic. Selection is a comparison (|x[i]| >= thr, NaN never selected, as
 * the CPU's ordered compare) and the compaction is a two-pass count-then-write over
 * fixed tiles of 2048 entries: pass 1 counts each tile's hits, an exclusive scan of
 * the tile counts (integers: exact) gives each tile its first output slot, pass 2
 * recounts and writes each hit at its rank — indices come out in ascending order,
 * with no atomics, identical to dgc_select's. The threshold stays on the host: the
 * device gathers dgc_sampled_threshold's sample (the same windows, from the same
 * counter-based hash of (seed, stratum), in the same order) and the host takes its
 * k-th largest with dgc_kth_abs, so the threshold is the CPU's bit for bit.
 *
 * Device pointers; launched on cuda_stream_current(); no synchronisation; scratch
 * (12 bytes per tile) from cuda_workspace. Counts are written to the device, so a
 * select can be followed by a gather without the host waiting. */
#ifndef NEBULA_KERNELS_CUDA_DGC_H
#define NEBULA_KERNELS_CUDA_DGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *count_dev = the number of i < n with |x[i]| >= thr. x (n), n <= 2^32 (indices are
 * uint32, as dgc_select's); count_dev: one uint64 on the device. */
void cuda_dgc_count_above(const float *x, size_t n, float thr, uint64_t *count_dev);

/* dgc_select on the device: the indices i < n with |x[i]| >= thr, ascending, into
 * idx[0, min(count, cap)); *count_dev = count (hits beyond cap are counted, not
 * written, as dgc_select returns them). idx (cap). */
void cuda_dgc_select(const float *x, size_t n, float thr, uint32_t *idx, size_t cap, uint64_t *count_dev);

/* dgc_sampled_threshold's sample: writes the m |x| values it would draw for (n,
 * fraction, seed), in its order, to sample (device, capacity m) and returns m (known
 * on the host without waiting: m = ceil(fraction * n) clamped to [1, n], rounded
 * down to whole windows of 16 when m >= 64; 0 when n == 0). The threshold for a
 * density d is then, on the host after copying the sample down:
 *   k = clamp(ceil(d * m), 1, m);  thr = dgc_kth_abs(sample, m, k, scratch);
 * which equals dgc_sampled_threshold(x, n, d, fraction, seed, ..) exactly. */
size_t cuda_dgc_sample_abs(const float *x, size_t n, double fraction, uint64_t seed, float *sample);

/* val[j] = x[idx[j]] for j < min(*count_dev, cap), rounded through fp16 when fp16 is
 * set (dgc_round_value with DGC_VALUES_FP16: nearest even, subnormals kept, NaN
 * bits as gcc's _Float16). x: the tensor; idx, val (cap); count_dev as the select
 * wrote it. */
void cuda_dgc_gather_values(const float *x, const uint32_t *idx, const uint64_t *count_dev, size_t cap, float *val,
                            bool fp16);

#ifdef __cplusplus
}
#endif

#endif
