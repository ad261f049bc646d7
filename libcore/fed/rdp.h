/* rdp — the privacy accountant of federated training: Rényi differential privacy (RDP)
 * of the sampled Gaussian mechanism (Mironov, Talwar, Zhang, "Rényi Differential Privacy
 * of the Sampled Gaussian Mechanism", arXiv:1908.10530, 2019), composed over rounds and
 * converted to (epsilon, delta)-DP.
 *
 * One round samples each client (or example) with probability q and adds Gaussian noise
 * of standard deviation sigma x the clipping norm (sigma: the noise multiplier). Its RDP
 * at order alpha is log(A_alpha) / (alpha - 1), A_alpha from section 3.3 of the paper;
 * RDP composes by addition, order by order, so the ledger is one sum per order.
 *
 * The one design decision: the numbers are exactly those of Opacus 1.5.2's RDP accountant
 * (opacus/accountants/analysis/rdp.py, the orders DEFAULT_ALPHAS of
 * opacus/accountants/rdp.py), so a budget planned with Opacus means the same here; the
 * comparison is validation/reference/fed_rdp_ref.py (agreement ~1e-12 relative). Where
 * Opacus raises or returns NaN, this accountant returns the safe answer instead (+inf:
 * no privacy claimed); fed_rdp_gaussian says where.
 *
 * Ranges: q in [0, 1], sigma >= 0 (+inf allowed), delta in (0, 1). Out-of-range values are
 * bugs for fed_rdp_gaussian, fed_rdp_compose and fed_rdp_epsilon (die) but expected input
 * for the planners fed_rdp_sigma_for and fed_rdp_steps_for (logged, refused). */
#ifndef NEBULA_FED_RDP_H
#define NEBULA_FED_RDP_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

/* Opacus's DEFAULT_ALPHAS: 1.1, 1.2, ..., 10.9 (99 orders, each computed as 1 + x / 10.0
 * in double) then the integers 12..63 (52 orders). */
#define FED_RDP_NORDERS 151
/* The largest noise multiplier fed_rdp_sigma_for tries. */
#define FED_RDP_SIGMA_MAX 1e4
/* fed_rdp_sigma_for's bisection stops when its bracket is this narrow, relative. */
#define FED_RDP_SIGMA_RTOL 1e-9

/* The ledger: written as-is into a checkpoint (8 * FED_RDP_NORDERS + 16 bytes, no padding,
 * the host's byte order). A zeroed ledger is an empty one. */
typedef struct fed_rdp {
    double rdp[FED_RDP_NORDERS];  /* RDP spent so far at order fed_rdp_orders()[k], nats; >= 0 or +inf */
    int64_t steps;                /* rounds composed so far (>= 0); 0: nothing spent, epsilon 0 */
    double reserved;              /* 0 when written; readers ignore it (room for a later field) */
} fed_rdp;
_Static_assert(sizeof(fed_rdp) == 8 * FED_RDP_NORDERS + 16, "fed_rdp is written as-is: no padding");

/* The orders of the ledger, ascending; *n (may be NULL) receives FED_RDP_NORDERS. */
const double *fed_rdp_orders(int *n);

/* An empty ledger. */
void fed_rdp_init(fed_rdp *a);

/* RDP of one round at order alpha (> 1), nats: 0 for q = 0, +inf for sigma = 0,
 * alpha / (2 sigma^2) for q = 1, otherwise log(A_alpha) / (alpha - 1). */
double fed_rdp_gaussian(double q, double sigma, double alpha);

/* Adds `steps` (>= 0) rounds of (q, sigma) to the ledger; rounds with other q and sigma
 * may follow (RDP adds). */
void fed_rdp_compose(fed_rdp *a, double q, double sigma, int64_t steps);

/* Epsilon of the ledger at delta (Balle et al., "Hypothesis testing interpretations and
 * Renyi differential privacy", AISTATS 2020, theorem 21), minimised over the orders:
 *   eps = rdp - (log(delta) + log(alpha)) / (alpha - 1) + log((alpha - 1) / alpha).
 * *best_order (may be NULL) receives the order of the minimum. An empty ledger gives
 * 0 (order 0), as Opacus's accountant without history; +inf when no order gives a
 * guarantee. */
double fed_rdp_epsilon(const fed_rdp *a, double delta, double *best_order);

/* The smallest noise multiplier whose epsilon after `steps` (>= 1) rounds at rate q is
 * <= eps, to FED_RDP_SIGMA_RTOL: 0 when no noise is needed (q = 0). STATUS_INPUT, logged
 * with the values, when an input is out of range or no sigma up to FED_RDP_SIGMA_MAX
 * reaches eps. */
status fed_rdp_sigma_for(double q, int64_t steps, double delta, double eps, double *sigma);

/* The largest number of rounds of (q, sigma) whose epsilon is <= eps: 0 when one round
 * already exceeds it, INT64_MAX when no number does (q = 0). -1, logged, when an input is
 * out of range (the caller's STATUS_INPUT). */
int64_t fed_rdp_steps_for(double q, double sigma, double delta, double eps);

/* A loaded ledger is sane: every rdp[k] >= 0 (+inf allowed, NaN not), steps >= 0, and an
 * empty ledger (steps 0) holds only zeros. STATUS_CORRUPT with why naming the field and
 * its value otherwise. */
status fed_rdp_check(const fed_rdp *a, char *why, size_t len);

#endif
