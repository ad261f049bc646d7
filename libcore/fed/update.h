/* fed/update — the arithmetic of federated updates: checks of what a client sends,
 * clipping and Gaussian noise (DP-FedAvg: McMahan, Ramage, Talwar, Zhang, "Learning
 * Differentially Private Recurrent Language Models", ICLR 2018), adaptive clipping
 * (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive
 * Clipping", NeurIPS 2021), aggregation rules (FedAvg's weighted mean, coordinate-wise
 * trimmed mean and median) and server optimizers (Reddi et al., "Adaptive Federated
 * Optimization", ICLR 2021). fed_update.c holds the checks, clipping, noise and server
 * steps; fed_agg.c the aggregation rules.
 *
 * The one design decision: everything here is a pure function of its arguments and of
 * counter-based random streams (base/rng.h, RNG_PURPOSE_FED), and every reduction runs
 * in double in a fixed order (clients i = 0..k-1, elements in index order). A resumed
 * run, a rerun, or a run with another number of threads produces the same bits; nothing
 * allocates (callers pass scratch and the optimizer's moments).
 *
 * An update u or delta is (n) floats: a client's local model minus the global model it
 * started the round from (so the server adds it).
 *
 * Differential privacy, as the engine uses these pieces (DP-FedAvg with a noise
 * multiplier sigma and clip norm C): every client clips its update to norm C
 * (fed_clip), the server sums (fed_agg_sum) and the sum carries Gaussian noise of
 * standard deviation sigma * C before dividing by the expected number of clients m.
 *
 * Distributed noise: with secure aggregation the server never sees one update, so the
 * noise is added by the clients. Each client adds N(0, sigma^2 C^2 / t) per element,
 * where t is the secure-aggregation threshold (the least number of survivors for which
 * the sum is revealed at all). s >= t survivors then carry variance s sigma^2 C^2 / t
 * >= sigma^2 C^2: at least the full noise; the privacy accountant assumes exactly sigma
 * (conservative: more survivors only add noise). Each client draws its share from its
 * own stream (stream = the client's id, index = the round), so the shares are
 * independent and a resumed round redraws the same ones.
 *
 * Floating-point caveats for the accountant: the normals come from Box-Muller in double
 * on 53-bit uniforms, so |z| <= sqrt(2 * 53 ln 2) ~ 8.57 (the tail beyond is cut, mass
 * about 1e-17), and noise added in floating point is not exactly the Gaussian
 * mechanism (Mironov, "On Significance of the Least Significant Bits for Differential
 * Privacy", CCS 2012); both effects are far below the delta a run targets. */
#ifndef NEBULA_FED_UPDATE_H
#define NEBULA_FED_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/rng.h"

/* ---- checks of a client's update -------------------------------------------------- */

/* Why an update was refused. fed_update_check tests in this order and reports the first
 * that holds. */
typedef enum fed_reject {
    FED_REJECT_NONE = 0,    /* accepted */
    FED_REJECT_SIZE,        /* not the model's number of elements */
    FED_REJECT_NONFINITE,   /* a NaN or an infinity */
    FED_REJECT_STALE,       /* computed for another round (older, or a round not yet opened) */
    FED_REJECT_NORM,        /* L2 norm above the limit */
} fed_reject;

/* "none", "size", "nonfinite", "stale", "norm" (a fixed string; "unknown" otherwise). */
const char *fed_reject_name(fed_reject r);

/* Checks an update u (n floats) that a client says it computed in `round` against the
 * model's expect_n elements and the round the server runs, expect_round. norm_limit > 0
 * refuses a norm above it (the caller passes e.g. a factor times the clip norm: with
 * clipping, a norm far above C means the client did not clip); 0 sets no limit. *norm
 * (may be NULL) gets the L2 norm when it was computed (size right, values finite),
 * NaN otherwise. One pass over u. */
fed_reject fed_update_check(const float *u, size_t n, size_t expect_n, int64_t round, int64_t expect_round,
                            double norm_limit, double *norm);

/* ---- norms, clipping, noise ------------------------------------------------------- */

/* ||x||_2: the squares summed in double in index order. No float vector overflows the
 * sum (|x_i|^2 < 2^256), so the norm is non-finite iff some x[i] is. */
double fed_l2norm(const float *x, size_t n);

/* Scales x (n) to norm <= C (C > 0): x * min(1, C / ||x||), and returns ||x|| before.
 * An x with ||x|| <= C is left unchanged bit for bit. Otherwise each element is scaled
 * in double and rounded toward zero, and the result is verified: fed_l2norm(x) <= C
 * holds afterwards (the sensitivity the accountant assumes). A non-finite norm leaves x
 * unchanged and is returned: check updates with fed_update_check first. */
double fed_clip(float *x, size_t n, double C);

/* Standard normals by Box-Muller in double: u1 = (1 + top 53 bits of rng_u64) 2^-53 in
 * (0, 1], theta = 2 pi (top 53 bits of the next rng_u64) 2^-53; z0 = r cos theta,
 * z1 = r sin theta with r = sqrt(-2 ln u1). Takes 4 outputs of r; z1 may be NULL. */
void fed_normal2(rng *r, double *z0, double *z1);
/* z0 of fed_normal2 (4 outputs). */
double fed_normal(rng *r);

/* x[i] += std * z_i (rounded once to float) for the normals z_i of the stream
 * (seed, stream, RNG_PURPOSE_FED, index): element i takes branch i % 2 of the pair
 * i / 2 (fed_normal2, outputs 4 (i/2) .. 4 (i/2) + 3). So the noise of an element
 * depends only on (seed, stream, index, i): a resumed run draws the same, and a slice
 * gets what the whole vector would (fed_noise_add_at). std >= 0; 0 leaves x as is.
 * index < 2^48 (RNG_STEP_LIMIT). */
void fed_noise_add(float *x, size_t n, double std, uint64_t seed, uint32_t stream, uint64_t index);
/* The same for elements first .. first + n - 1 of a longer vector; x points at element
 * `first`. Threads that noise disjoint slices produce the bits of one fed_noise_add. */
void fed_noise_add_at(float *x, size_t first, size_t n, double std, uint64_t seed, uint32_t stream,
                      uint64_t index);

/* ---- adaptive clipping (Andrew et al., NeurIPS 2021) ------------------------------ */

/* The clip norm learned toward a quantile of the update norms. Fixed layout (4 doubles,
 * no padding), written into checkpoints as-is. */
typedef struct fed_clip_state {
    double C;         /* current clip norm, > 0 */
    double quantile;  /* target fraction gamma of updates with norm <= C, in (0, 1) */
    double lr;        /* eta_C of the geometric update, >= 0 (e.g. 0.2) */
    double sigma_b;   /* std of the noise on the sum of the clients' bits, >= 0 */
} fed_clip_state;

/* A client's bit b_i = 1[||Delta_i|| <= C], with the norm before clipping. */
int fed_clip_bit(double norm, double C);

/* The noisy fraction b = (bits + N(0, sigma_b^2)) / m of updates under the clip norm:
 * bits = the sum of the clients' bits, m > 0 the expected number of clients (not the
 * number that reported: the paper's estimator). The normal is fed_normal of the stream
 * (seed, stream, RNG_PURPOSE_FED, index); the caller gives it a stream of its own (not
 * one of the update noise). */
double fed_clip_fraction(const fed_clip_state *s, int64_t bits, double m, uint64_t seed, uint32_t stream,
                         uint64_t index);

/* The geometric update C <- C exp(-lr (b - quantile)) for a fraction b from
 * fed_clip_fraction: too many updates under C (b > gamma) shrinks C. */
void fed_clip_adapt(fed_clip_state *s, double b);

/* The noise multiplier left for the updates when the bits take their share of a total
 * sigma_total (Theorem 1 of Andrew et al.: the two Gaussian queries compose to one of
 * multiplier sigma_total when sigma_update = (sigma_total^-2 - (2 sigma_b)^-2)^-1/2;
 * the 2 is the bits' sensitivity 1/2 once centred). NaN when none exists:
 * 2 sigma_b <= sigma_total, or an argument not > 0. sigma_b = +inf (no bit noise is
 * accounted) gives sigma_total. */
double fed_clip_sigma_update(double sigma_total, double sigma_b);

/* ---- aggregation over k clients (fed_agg.c) --------------------------------------- */

/* out = sum_i w_i u_i / sum_i w_i, element-wise, i in order, in double; rounded once to
 * float. u: k pointers to (n) floats; w: (k) weights >= 0 with a positive sum (FedAvg:
 * the clients' sample counts), or NULL for equal weights. out (n) may be one of the
 * u_i. k >= 1. */
void fed_agg_mean(float *out, const float *const *u, const double *w, int k, size_t n);

/* out = sum_i w_i u_i (w NULL: all ones), as fed_agg_mean without the division: the
 * sum DP-FedAvg noises, or a sum of masked updates. */
void fed_agg_sum(float *out, const float *const *u, const double *w, int k, size_t n);

/* Coordinate-wise trimmed mean (Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust
 * Distributed Learning: Towards Optimal Statistical Rates", ICML 2018): per element, the
 * trim largest and trim smallest of the k values are dropped and the remaining k - 2 trim
 * averaged. 0 <= 2 trim < k; scratch (k) floats; out (n) may be one of the u_i (each
 * element is written after its k values are read). With at most trim attackers, every
 * output element lies between the smallest and the largest honest value.
 *
 * Values are ordered by their IEEE bits as a total order (-0 < +0, NaNs beyond the
 * infinities), so hostile NaNs are trimmed like large values. Per element the two cut
 * values are found by selection (expected O(k), heapsort past a depth limit, so no input
 * makes it quadratic); the kept values are then summed in double in client order (ties
 * at a cut counted as copies of the cut value): the result does not depend on how the
 * selection moved values around. */
void fed_agg_trimmed_mean(float *out, const float *const *u, int k, size_t n, int trim, float *scratch);

/* Coordinate-wise median: the middle value for odd k, the mean (in double) of the two
 * middle values for even k; the trimmed mean with trim = (k - 1) / 2. scratch (k). */
void fed_agg_median(float *out, const float *const *u, int k, size_t n, float *scratch);

/* ---- server optimizers (Reddi et al., ICLR 2021, Algorithm 2) --------------------- */

typedef enum fed_server_kind {
    FED_SERVER_AVG = 0,  /* global += lr * delta (lr = 1: FedAvg) */
    FED_SERVER_ADAM,     /* FedAdam */
    FED_SERVER_YOGI,     /* FedYogi */
} fed_server_kind;

/* The server's optimizer. m and v are caller-owned (n) floats, checkpointed with the
 * model; NULL for FED_SERVER_AVG. */
typedef struct fed_server_opt {
    fed_server_kind kind;  /* the rule */
    double lr;             /* server learning rate eta */
    double beta1;          /* first-moment decay, [0, 1) */
    double beta2;          /* second-moment decay, [0, 1) */
    double tau;            /* adaptivity: added to sqrt(v); v starts at tau^2 */
    int64_t t;             /* steps taken (fed_server_step counts) */
    float *m;              /* (n) first moment; starts at 0 */
    float *v;              /* (n) second moment; starts at tau^2 */
} fed_server_opt;

/* Sets the fields, t = 0, m = 0 and v = tau^2 (the paper's v_{-1} >= tau^2, its
 * smallest choice) when kind is ADAM or YOGI. */
void fed_server_init(fed_server_opt *o, fed_server_kind kind, double lr, double beta1, double beta2, double tau,
                     float *m, float *v, size_t n);

/* One server step with the aggregated update delta (n) (sum w_i (local_i - global) /
 * sum w_i), per element in double from the stored floats:
 *   AVG:  global += lr delta
 *   ADAM: m = b1 m + (1 - b1) d;  v = b2 v + (1 - b2) d^2
 *   YOGI: m as ADAM;              v = v - (1 - b2) d^2 sign(v - d^2)
 *   then  global += lr m / (sqrt(v) + tau)
 * with m, v, global each rounded once to float, and the global step taken from the
 * double m and v before rounding. No bias correction (Algorithm 2 has none: v starting
 * at tau^2 and the tau in the denominator keep the first steps small). t += 1. */
void fed_server_step(fed_server_opt *o, float *global, const float *delta, size_t n);

#endif
