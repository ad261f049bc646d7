/* attn_stats — how the attention heads of a transformer spend their weight, from the
 * activations a forward left behind (docs/pictures.md, the attention-head matrix).
 *
 * Per head, over the queries of the batch: the entropy of the attention distribution
 * (nats; 0 = one key takes all, log(keys) = uniform) and its largest weight. The
 * forward saved q, k and each query row's lse = log sum_j exp(s_j) (kernels/cpu/
 * attention.h), so with s_j = q.k_j / sqrt(HS) and p_j = exp(s_j - lse):
 *   H = -sum_j p_j log p_j = lse - sum_j p_j s_j,   max_j p_j = exp(max_j s_j - lse).
 * One pass over the keys per query, the scores recomputed in double: a diagnostic run
 * every monitor.attention_interval steps on a probe batch, not a training kernel. */
#include <math.h>

#include "model_impl.h"

void attn_head_stats(double *entropy,       /* (NH) ADDS the sum over valid queries */
                     double *maxw,          /* (NH) ADDS */
                     double *nq,            /* (NH) ADDS the number of valid queries */
                     const float *q,        /* (B, T, ld) head h at columns h*HS */
                     const float *k,        /* (B, T, ld) */
                     int ld,
                     const float *lse,      /* (B, NH, T) */
                     const int32_t *key_mask, /* (B, T) 1 keep / 0 masked, or NULL */
                     int B, int T, int C, int NH, int causal)
{
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double l = lse[((size_t)b * NH + h) * T + i];
                if (!isfinite(l)) continue;  /* every key masked: no distribution */
                const float *qi = q + ((size_t)b * T + i) * ld + (size_t)h * HS;
                double ps = 0, smax = -INFINITY;
                int last = causal ? i : T - 1;
                for (int j = 0; j <= last; j++) {
                    if (key_mask && !key_mask[(size_t)b * T + j]) continue;
                    const float *kj = k + ((size_t)b * T + j) * ld + (size_t)h * HS;
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += (double)qi[d] * kj[d];
                    s *= scale;
                    ps += exp(s - l) * s;
                    if (s > smax) smax = s;
                }
                entropy[h] += l - ps;
                maxw[h] += exp(smax - l);
                nq[h] += 1;
            }
}
