/* attention_kv — causal attention of a few new queries over a key/value cache, the
 * decoding step of an autoregressive transformer (GPT-2's generation with a KV cache).
 *
 *   out_i = softmax_j( q_i . k_j / sqrt(HS) ) v_j,  j = 0 .. P + i,  per head,
 *
 * where P = Tk - Tq is the number of cached positions before the first new query:
 * query i sits at position P + i and sees every key up to and including its own, the
 * causal rule of attention.h's kernel with the query and key ranges told apart.
 *
 * The one design decision: one pass of online softmax per (query, head) (Milakov and
 * Gimelshein 2018: a running max and sum, the accumulator rescaled when the max grows),
 * so no (Tq, Tk) score matrix and no scratch exist: a step allocates nothing and reads
 * each cached key and value once, which is what a memory-bound decoding step costs.
 * Each (query, head) pair is one OpenMP iteration writing its own columns of out, so
 * results do not depend on the thread count. The specification is attention.h's
 * attention_forward_ref over the whole sequence (validation/unit/test_gpt2_generate.c
 * compares the two). */
#ifndef NEBULA_KERNELS_ATTENTION_KV_H
#define NEBULA_KERNELS_ATTENTION_KV_H

void attention_kv_forward(float *out,     /* (Tq, C) heads concatenated */
                          const float *q, /* (Tq, ldq), head h at columns h*HS.. */
                          int ldq,        /* row stride of q, >= C */
                          const float *k, /* (Tk, C) cached keys, the Tq new ones last */
                          const float *v, /* (Tk, C) cached values, likewise */
                          int Tq, int Tk, int C, int NH);

#endif
