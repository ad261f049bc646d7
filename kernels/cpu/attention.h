/* attention — multi-head scaled dot-product attention, fused and memory-efficient
 * (FlashAttention: Dao et al., NeurIPS 2022; backward as in FlashAttention-2, Dao 2023).
 *
 *   S = Q K^T / sqrt(HS) (+ masks),  P = softmax_rows(S),  out = P V,  per (b, h).
 *
 * The one design decision: the fast path never holds more than one (64 x 64) tile of
 * scores per thread. The forward walks key tiles with an online softmax (running
 * max m and sum l per query row) and saves only lse = m + log(l) per row; the
 * backward recomputes P = exp(S - lse) tile by tile (FlashAttention-2 order: key
 * tiles outer). Scratch is O(T * HS) per thread instead of O(NH * T^2), and each
 * (b, h) pair is one OpenMP task that owns disjoint columns of every output, so
 * results are bit-identical for any thread count.
 *
 * Layout. q, k, v are (B, T, *) rows of `ld` floats; head h reads columns
 * [h*HS, (h+1)*HS) with HS = C / NH. GPT-2 passes q = qkv, k = qkv + C, v = qkv + 2C,
 * ld = 3C; BERT passes three (B, T, C) buffers with ld = C. out is (B, T, C), heads
 * concatenated. lse is (B, NH, T).
 *
 * Masks. causal = 1: key j > query i is masked (GPT-2). key_mask (B, T) or NULL:
 * 1.0 keeps key j of sequence b, 0.0 masks it (BERT attention_mask). A masked key
 * gets score -inf, i.e. weight exactly 0 (HF adds a large negative number; the
 * result is the same up to exp underflow). A query row whose keys are ALL masked
 * (every key of a padded sequence, or causal row i whose keys 0..i are padding) is
 * defined as: out = 0, lse = -inf, and it contributes no gradient (dq of that row
 * is 0 and it adds nothing to dk, dv). No NaN is ever produced.
 *
 * The _ref functions are the specification: double precision, plain loops, the full
 * (T, T) softmax materialised per (b, h); key_mask is double there too. */
#ifndef NEBULA_KERNELS_ATTENTION_H
#define NEBULA_KERNELS_ATTENTION_H

void attention_forward(float *out,            /* (B, T, C) */
                       float *lse,            /* (B, NH, T) saved for backward */
                       const float *q,        /* (B, T, ld), head h at columns h*HS.. */
                       const float *k,        /* (B, T, ld) */
                       const float *v,        /* (B, T, ld) */
                       int ld,                /* row stride of q, k, v (and dq, dk, dv), >= C */
                       const float *key_mask, /* (B, T) 1 keep / 0 masked, or NULL */
                       int B, int T, int C, int NH, int causal);

/* ADDS the gradients into dq, dk, dv (row stride ld, like q, k, v). */
void attention_backward(float *dq,             /* (B, T, ld) */
                        float *dk,             /* (B, T, ld) */
                        float *dv,             /* (B, T, ld) */
                        const float *dout,     /* (B, T, C) */
                        const float *q,        /* (B, T, ld) */
                        const float *k,        /* (B, T, ld) */
                        const float *v,        /* (B, T, ld) */
                        int ld,
                        const float *out,      /* (B, T, C) from attention_forward */
                        const float *lse,      /* (B, NH, T) from attention_forward */
                        const float *key_mask, /* (B, T) or NULL, as in forward */
                        int B, int T, int C, int NH, int causal);

/* The specification in double. The backward recomputes the softmax from q and k
 * (softmax Jacobian dS = P o (dP - rowsum(P o dP))) and does not read out or lse;
 * they are in the signature so both paths are called alike. It ADDS as well. */
void attention_forward_ref(double *out,            /* (B, T, C) */
                           double *lse,            /* (B, NH, T) */
                           const double *q,        /* (B, T, ld) */
                           const double *k,        /* (B, T, ld) */
                           const double *v,        /* (B, T, ld) */
                           int ld,
                           const double *key_mask, /* (B, T) or NULL */
                           int B, int T, int C, int NH, int causal);

void attention_backward_ref(double *dq,             /* (B, T, ld) */
                            double *dk,             /* (B, T, ld) */
                            double *dv,             /* (B, T, ld) */
                            const double *dout,     /* (B, T, C) */
                            const double *q,        /* (B, T, ld) */
                            const double *k,        /* (B, T, ld) */
                            const double *v,        /* (B, T, ld) */
                            int ld,
                            const double *out,      /* (B, T, C), not read */
                            const double *lse,      /* (B, NH, T), not read */
                            const double *key_mask, /* (B, T) or NULL */
                            int B, int T, int C, int NH, int causal);

#endif
