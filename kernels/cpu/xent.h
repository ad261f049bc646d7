/* xent — fused softmax + cross-entropy over a vocabulary padded for speed.
 *
 *   lse_i = log sum_{j<V} exp(logits_ij),  loss_i = lse_i - logits_i,target_i
 *
 * The one design decision: the logits are (BT, Vp) with only the first V columns
 * real (Vp rounds V up so the LM-head matmul runs on aligned tiles, as in llm.c).
 * Columns [V, Vp) are never read and never written: whatever the padded weights
 * produced there (zeros, garbage, even NaN) cannot reach the loss, and their
 * gradient stays exactly what the caller had. The forward saves lse so the
 * backward is one pass, softmax = exp(logit - lse), with no second reduction.
 *
 * Targets: target -1 means "ignore this row" (MLM positions that are not masked,
 * padding): its loss is 0 and it gets no gradient whatever dlosses says; its lse is
 * still computed (a pure function of the logits). Any other target outside [0, V)
 * (a padded column included) is a bug and dies. Rows are independent and each is
 * handled by one thread in a fixed order: results are bit-identical for any
 * OpenMP thread count. lse is max + log(sum exp(x - max)) with the sum in double,
 * so logits of any magnitude are safe. */
#ifndef NEBULA_KERNELS_XENT_H
#define NEBULA_KERNELS_XENT_H

#include <stdint.h>

#define XENT_IGNORE (-1) /* target value of a row without a loss */

void xent_forward(float *losses,           /* (BT) lse - logit[target]; 0 for ignored rows */
                  float *lse,              /* (BT) saved for backward */
                  const float *logits,     /* (BT, Vp), columns [0, V) real */
                  const int32_t *targets,  /* (BT) in [0, V) or XENT_IGNORE */
                  int BT, int V, int Vp);

/* ADDS dlosses[i] * (softmax_i - onehot(target_i)) into columns [0, V) of dlogits;
 * ignored rows and padded columns are left untouched. For a mean loss the model
 * passes dlosses = 1 / (number of rows that are not ignored). */
void xent_backward(float *dlogits,          /* (BT, Vp) */
                   const float *logits,     /* (BT, Vp) */
                   const float *lse,        /* (BT) from xent_forward */
                   const int32_t *targets,  /* (BT) */
                   const float *dlosses,    /* (BT) */
                   int BT, int V, int Vp);

/* Vocabulary-parallel cross-entropy (Megatron's vocab_parallel_cross_entropy): this
 * rank holds columns [lo, lo + Vl) of the logits, of which the first Vr (<= Vl) are
 * real (the rest: padding past V, never read). No rank holds a full row; the model
 * reduces the pieces over the tensor-parallel group between the calls:
 *   1. xent_vp_max:  mx_i  = max over the rank's real columns (-inf without any);
 *                    the group's MAX gives the row's max M_i
 *   2. xent_vp_sums: part_i = (sum_j exp(x_ij - M_i) in double, x_i,target when the
 *                    rank holds the target else 0); the group's SUM gives the row's
 *                    sum S_i and target logit, so lse_i = M_i + log S_i
 *   3. xent_vp_backward: the xent_backward of the rank's columns with the global lse
 *                    (softmax = exp(x - lse); the one-hot only where the rank holds
 *                    the target). Ignored rows (XENT_IGNORE) get no gradient. */
void xent_vp_max(float *mx,             /* (BT) */
                 const float *logits,   /* (BT, Vl) */
                 int BT, int Vr, int Vl);
void xent_vp_sums(double *part,          /* (BT, 2): sum of exp, target logit */
                  const float *logits,   /* (BT, Vl) */
                  const float *mx,       /* (BT) the group's max */
                  const int32_t *targets,/* (BT) global ids in [0, V) or XENT_IGNORE */
                  int BT, int lo, int Vr, int Vl);
void xent_vp_backward(float *dlogits,         /* (BT, Vl), ADDED into */
                      const float *logits,    /* (BT, Vl) */
                      const float *lse,       /* (BT) the row's global lse */
                      const int32_t *targets, /* (BT) */
                      const float *dlosses,   /* (BT) */
                      int BT, int lo, int Vr, int Vl);

/* The specification in double: plain loops, the softmax materialised per row. The
 * backward recomputes lse from the logits and does not read `lse`. */
void xent_forward_ref(double *losses,          /* (BT) */
                      double *lse,             /* (BT) */
                      const double *logits,    /* (BT, Vp) */
                      const int32_t *targets,  /* (BT) */
                      int BT, int V, int Vp);

void xent_backward_ref(double *dlogits,         /* (BT, Vp) */
                       const double *logits,    /* (BT, Vp) */
                       const double *lse,       /* (BT), not read */
                       const int32_t *targets,  /* (BT) */
                       const double *dlosses,   /* (BT) */
                       int BT, int V, int Vp);

#endif
