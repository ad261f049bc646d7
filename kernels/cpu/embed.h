/* embed — embedding lookup: out[n] = table[ids[n]] (token, position and
 * token-type embeddings), and its backward, a scatter-add into the table.
 *
 * The one design decision: the backward is parallel over the embedding dimension
 * C, never over the ids. Repeated ids (the same token twice in a batch) then never
 * race, need no atomics, and each table element receives its adds in the order of
 * n, so dtable is bit-identical for any OMP_NUM_THREADS.
 *
 * An id outside [0, V) is a bug upstream (tokenizer/model mismatch) and dies.
 * The kernels do not receive V, so they die on negative ids only; the upper
 * bound is checked by embedding_check_ids, which the caller runs once per batch
 * of token ids against the vocabulary size (positions and token types are in
 * range by construction). */
#ifndef NEBULA_KERNELS_EMBED_H
#define NEBULA_KERNELS_EMBED_H

#include <stdint.h>

/* Dies naming the first id outside [0, V). */
void embedding_check_ids(const int32_t *ids, /* (N) */
                         int N, int V);

/* out = table[ids] (accumulate = 0) or out += table[ids] (accumulate = 1, to sum
 * token + position + type embeddings into one buffer). */
void embedding_forward(float *out,         /* (N, C) */
                       const int32_t *ids, /* (N), each in [0, V) */
                       const float *table, /* (V, C) */
                       int N, int C, int accumulate);

/* dtable[ids[n]] += dout[n] for every n. */
void embedding_backward(float *dtable,      /* (V, C) */
                        const float *dout,  /* (N, C) */
                        const int32_t *ids, /* (N), each in [0, V) */
                        int N, int C);

/* Vocabulary-parallel (Megatron's VocabParallelEmbedding): this rank holds rows
 * [lo, lo + rows) of the table. out[n] = shard[ids[n] - lo] for the ids it holds,
 * 0 for the others (the tensor-parallel sum of the ranks' outs is the lookup); the
 * backward adds only into the rows it holds. */
void embedding_forward_rows(float *out,         /* (N, C) */
                            const int32_t *ids, /* (N), each >= 0 */
                            const float *shard, /* (rows, C): rows lo .. lo + rows - 1 */
                            int N, int C, int lo, int rows);
void embedding_backward_rows(float *dshard,      /* (rows, C) */
                             const float *dout,  /* (N, C) */
                             const int32_t *ids, /* (N) */
                             int N, int C, int lo, int rows);

/* The specification, in double (same contracts, same checks). */
void embedding_forward_ref(double *out,         /* (N, C) */
                           const int32_t *ids,  /* (N) */
                           const double *table, /* (V, C) */
                           int N, int C, int accumulate);
void embedding_backward_ref(double *dtable,     /* (V, C) */
                            const double *dout, /* (N, C) */
                            const int32_t *ids, /* (N) */
                            int N, int C);

#endif
