/* transformer — the CUDA variants of the transformer layer kernels: layernorm, GELU,
 * residual, embedding, cross-entropy and fused attention.
 *
 * The one design decision: every function here is the CPU kernel of the same name
 * without the cuda_ prefix (kernels/cpu/<layer>.h), with the same parameter list
 * character for character and the same semantics, on device pointers; the model
 * swaps the two through a table of function pointers. Kernels run on
 * cuda_stream_current(), never synchronise, take scratch from cuda_workspace(), and
 * report launch failures through cuda_error_take() (device.h). Backward functions
 * ADD into their gradients. Every reduction has a fixed order (no float atomics),
 * so a rerun on the same GPU gives the same bits.
 *
 * Checks the CPU kernels do by dying cannot be done on the device without a
 * synchronisation: an embedding id < 0 writes a NaN row (forward) and adds nothing
 * (backward); a cross-entropy target outside [0, V) that is not XENT_IGNORE gives a
 * NaN loss and no gradient. Ids >= V are not detectable (V is not passed): run
 * embedding_check_ids on the host ids before uploading them. Bad shapes (C not a
 * multiple of NH, HS = C / NH > 128, ld < C) record cudaErrorInvalidValue and launch
 * nothing. */
#ifndef NEBULA_KERNELS_CUDA_TRANSFORMER_H
#define NEBULA_KERNELS_CUDA_TRANSFORMER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layernorm (kernels/cpu/layernorm.h) ---- */
void cuda_layernorm_forward(float *out,          /* (BT, C) */
                            float *mean,         /* (BT) or NULL */
                            float *rstd,         /* (BT) or NULL */
                            const float *inp,    /* (BT, C) */
                            const float *weight, /* (C) */
                            const float *bias,   /* (C) */
                            int BT, int C, float eps);
void cuda_layernorm_backward(float *dinp,         /* (BT, C) */
                             float *dweight,      /* (C) */
                             float *dbias,        /* (C) */
                             const float *dout,   /* (BT, C) */
                             const float *inp,    /* (BT, C) */
                             const float *weight, /* (C) */
                             const float *mean,   /* (BT) */
                             const float *rstd,   /* (BT) */
                             int BT, int C);

/* ---- gelu (kernels/cpu/gelu.h) ---- */
void cuda_gelu_tanh_forward(float *out,       /* (N) */
                            const float *inp, /* (N) */
                            size_t N);
void cuda_gelu_tanh_backward(float *dinp,       /* (N) */
                             const float *inp,  /* (N) */
                             const float *dout, /* (N) */
                             size_t N);
void cuda_gelu_erf_forward(float *out,       /* (N) */
                           const float *inp, /* (N) */
                           size_t N);
void cuda_gelu_erf_backward(float *dinp,       /* (N) */
                            const float *inp,  /* (N) */
                            const float *dout, /* (N) */
                            size_t N);

/* ---- residual (kernels/cpu/residual.h) ---- */
void cuda_residual_forward(float *out,     /* (N) */
                           const float *a, /* (N) */
                           const float *b, /* (N) */
                           size_t N);
/* da += dout, db += dout; da or db may be NULL. */
void cuda_residual_backward(float *da,         /* (N) or NULL */
                            float *db,         /* (N) or NULL */
                            const float *dout, /* (N) */
                            size_t N);

/* ---- embedding (kernels/cpu/embed.h) ---- */
/* out = table[ids] (accumulate = 0) or out += table[ids] (accumulate = 1). */
void cuda_embedding_forward(float *out,         /* (N, C) */
                            const int32_t *ids, /* (N), each in [0, V) */
                            const float *table, /* (V, C) */
                            int N, int C, int accumulate);
/* dtable[ids[n]] += dout[n] for every n, in the order of n. */
void cuda_embedding_backward(float *dtable,      /* (V, C) */
                             const float *dout,  /* (N, C) */
                             const int32_t *ids, /* (N), each in [0, V) */
                             int N, int C);

/* ---- cross-entropy (kernels/cpu/xent.h) ---- */
void cuda_xent_forward(float *losses,          /* (BT) lse - logit[target]; 0 for ignored rows */
                       float *lse,             /* (BT) saved for backward */
                       const float *logits,    /* (BT, Vp), columns [0, V) real */
                       const int32_t *targets, /* (BT) in [0, V) or XENT_IGNORE */
                       int BT, int V, int Vp);
/* ADDS dlosses[i] * (softmax_i - onehot(target_i)) into columns [0, V) of dlogits. */
void cuda_xent_backward(float *dlogits,         /* (BT, Vp) */
                        const float *logits,    /* (BT, Vp) */
                        const float *lse,       /* (BT) from cuda_xent_forward */
                        const int32_t *targets, /* (BT) */
                        const float *dlosses,   /* (BT) */
                        int BT, int V, int Vp);

/* ---- attention (kernels/cpu/attention.h; HS = C / NH <= 128) ---- */
void cuda_attention_forward(float *out,            /* (B, T, C) */
                            float *lse,            /* (B, NH, T) saved for backward */
                            const float *q,        /* (B, T, ld), head h at columns h*HS.. */
                            const float *k,        /* (B, T, ld) */
                            const float *v,        /* (B, T, ld) */
                            int ld,                /* row stride of q, k, v (and dq, dk, dv), >= C */
                            const float *key_mask, /* (B, T) 1 keep / 0 masked, or NULL */
                            int B, int T, int C, int NH, int causal);
/* ADDS the gradients into dq, dk, dv (row stride ld, like q, k, v). */
void cuda_attention_backward(float *dq,             /* (B, T, ld) */
                             float *dk,             /* (B, T, ld) */
                             float *dv,             /* (B, T, ld) */
                             const float *dout,     /* (B, T, C) */
                             const float *q,        /* (B, T, ld) */
                             const float *k,        /* (B, T, ld) */
                             const float *v,        /* (B, T, ld) */
                             int ld,
                             const float *out,      /* (B, T, C) from cuda_attention_forward */
                             const float *lse,      /* (B, NH, T) from cuda_attention_forward */
                             const float *key_mask, /* (B, T) or NULL, as in forward */
                             int B, int T, int C, int NH, int causal);

#ifdef __cplusplus
}
#endif

#endif
