/* fed_rdp — the RDP accountant of the sampled Gaussian mechanism (rdp.h).
 *
 * A_alpha (Mironov, Talwar, Zhang 2019, arXiv:1908.10530, section 3.3) is
 * E_{z ~ mu0}[(mu(z) / mu0(z))^alpha] with mu0 = N(0, sigma^2), mu = (1-q) mu0 + q N(1, sigma^2).
 * For an integer alpha it is a finite binomial sum (their eq. for integer orders):
 *   A_alpha = sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2));
 * for a fractional alpha the integral splits at z0 = sigma^2 log(1/q - 1) + 1/2, where
 * q N(1, sigma^2) = (1-q) N(0, sigma^2), and each half is a binomial series in C(alpha, i),
 * alternating from i > alpha on, whose terms carry Gaussian tails (erfc) that keep it
 * convergent.
 *
 * The one design decision: every sum runs in log space (log-add, log-sub, log erfc), in
 * double, term for term as Opacus 1.5.2 does (opacus/accountants/analysis/rdp.py), so the
 * numbers match it to rounding (~1e-12) and nothing overflows for small sigma or large
 * orders, where exp((i^2 - i) / (2 sigma^2)) alone would. */
#include "rdp.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Opacus's DEFAULT_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)),
 * evaluated with the same double operations, so the integer test below picks the same
 * formula (1 + 10 / 10.0 is exactly 2.0). */
#define FRAC(x) (1 + (x) / 10.0)
#define FRAC10(d) FRAC(d##0), FRAC(d##1), FRAC(d##2), FRAC(d##3), FRAC(d##4), \
                  FRAC(d##5), FRAC(d##6), FRAC(d##7), FRAC(d##8), FRAC(d##9)
#define INT10(d) d##0, d##1, d##2, d##3, d##4, d##5, d##6, d##7, d##8, d##9
static const double fed_rdp_order_table[] = {
    FRAC(1), FRAC(2), FRAC(3), FRAC(4), FRAC(5), FRAC(6), FRAC(7), FRAC(8), FRAC(9),
    FRAC10(1), FRAC10(2), FRAC10(3), FRAC10(4), FRAC10(5), FRAC10(6), FRAC10(7), FRAC10(8), FRAC10(9),
    12, 13, 14, 15, 16, 17, 18, 19, INT10(2), INT10(3), INT10(4), INT10(5), 60, 61, 62, 63,
};
_Static_assert(sizeof fed_rdp_order_table / sizeof fed_rdp_order_table[0] == FED_RDP_NORDERS,
               "the order table holds Opacus's 151 default orders");

/* A fractional order's series stops when both halves' terms fall below e^-30 (Opacus's
 * rule: A_alpha >= 1, so a term of 1e-13 is near rounding). For large i the Gaussian
 * growth exp(i^2 / (2 sigma^2)) and the erfc tail cancel, leaving about i^-(alpha + 2)
 * from C(alpha, i) and the tail's 1/x, so the loop ends; the cap only guards against a
 * pathological input (it then counts as a failed series: +inf). */
#define FRAC_TERM_STOP -30.0
#define FRAC_MAX_TERMS 100000000

const double *fed_rdp_orders(int *n)
{
    if (n) *n = FED_RDP_NORDERS;
    return fed_rdp_order_table;
}

void fed_rdp_init(fed_rdp *a)
{
    memset(a, 0, sizeof *a);
}

/* ---- log-space arithmetic -------------------------------------------------------- */

/* log(e^x + e^y); -inf stands for 0. NaN propagates (fmin and fmax would drop it). */
static double log_add(double x, double y)
{
    if (isnan(x) || isnan(y)) return NAN;
    double a = fmin(x, y), b = fmax(x, y);
    if (a == -INFINITY || b == INFINITY) return b;
    return log1p(exp(a - b)) + b;
}

/* log(e^x - e^y) for x >= y; false when x < y (a partial sum would turn negative: Opacus
 * raises ValueError there). */
static bool log_sub(double x, double y, double *out)
{
    if (x < y) return false;
    if (y == -INFINITY) { *out = x; return true; }
    if (x == y) { *out = -INFINITY; return true; }
    double e = expm1(x - y);
    *out = isinf(e) ? x : log(e) + y;  /* e^(x-y) overflows: e^y is below x's last bit */
    return true;
}

/* log(erfc(x)), accurate where erfc underflows (x > 26.5). Below 10, libm's erfc keeps
 * full relative accuracy (erfc(10) = 2.1e-45); above, the asymptotic series of
 * Abramowitz & Stegun 7.1.23,
 *   erfc(x) = e^(-x^2) / (x sqrt(pi)) * sum_k (-1)^k (2k-1)!! / (2x^2)^k,
 * whose terms shrink until k ~ x^2 = 100: it reaches DBL_EPSILON by k = 12. */
static double log_erfc(double x)
{
    if (x < 10) return log(erfc(x));
    double r = 1 / (2 * x * x), term = 1, sum = 1;
    for (int k = 1; k < 40 && fabs(term) > DBL_EPSILON * sum; k++) {
        term *= -(2 * k - 1) * r;
        sum += term;
    }
    return -x * x - log(x) - 0.5 * log(M_PI) + log(sum);
}

/* ---- log(A_alpha) -------------------------------------------------------------- */

/* Integer alpha >= 2. The binomial coefficient by its product recurrence, in logs:
 * C(alpha, i) = C(alpha, i-1) (alpha - i + 1) / i. */
static double log_a_int(double q, double sigma, int alpha)
{
    double log_a = -INFINITY, log_c = 0, lq = log(q), l1q = log1p(-q), two_s2 = 2 * sigma * sigma;
    for (int i = 0; i <= alpha; i++) {
        if (i > 0) log_c += log((double)(alpha - i + 1)) - log((double)i);
        double s = log_c + i * lq + (alpha - i) * l1q + ((double)i * i - i) / two_s2;
        log_a = log_add(log_a, s);
    }
    return log_a;
}

/* Fractional alpha: A = A0 + A1, the integrals over (-inf, z0] and [z0, inf), each an
 * alternating sum over i of C(alpha, i) (sign tracked, magnitude in logs) times a
 * Gaussian tail e0 = erfc((i - z0) / (sqrt(2) sigma)) / 2 or e1 = erfc((z0 - j) / ...) / 2,
 * j = alpha - i. NaN when a partial sum turns negative (rounding; never seen in range). */
static double log_a_frac(double q, double sigma, double alpha)
{
    double log_a0 = -INFINITY, log_a1 = -INFINITY, log_c = 0, sign = 1;
    double lq = log(q), l1q = log1p(-q), s2 = sigma * sigma, two_s2 = 2 * s2;
    double z0 = s2 * (l1q - lq) + 0.5, rs = sqrt(2) * sigma;
    for (int i = 0; i < FRAC_MAX_TERMS; i++) {
        if (i > 0) {
            double f = alpha - i + 1;  /* never 0: alpha is not an integer */
            log_c += log(fabs(f)) - log((double)i);
            if (f < 0) sign = -sign;
        }
        double j = alpha - i;
        double log_t0 = log_c + i * lq + j * l1q;
        double log_t1 = log_c + j * lq + i * l1q;
        double log_e0 = log(0.5) + log_erfc((i - z0) / rs);
        double log_e1 = log(0.5) + log_erfc((z0 - j) / rs);
        double log_s0 = log_t0 + ((double)i * i - i) / two_s2 + log_e0;
        double log_s1 = log_t1 + (j * j - j) / two_s2 + log_e1;
        if (sign > 0) {
            log_a0 = log_add(log_a0, log_s0);
            log_a1 = log_add(log_a1, log_s1);
        } else if (!log_sub(log_a0, log_s0, &log_a0) || !log_sub(log_a1, log_s1, &log_a1)) {
            return NAN;
        }
        if (isnan(log_a0) || isnan(log_a1)) return NAN;
        if (fmax(log_s0, log_s1) < FRAC_TERM_STOP) return log_add(log_a0, log_a1);
    }
    return NAN;
}

/* Opacus's _compute_rdp, with three cases it leaves to Python made definite:
 *   - sigma so large that sigma^2 overflows (> 1e154, or +inf): 0, the limit (the true
 *     value is below 1e-300; Opacus's z0 turns inf or NaN);
 *   - a NaN from the series (sigma so small that sigma^2 underflows, where Opacus divides
 *     by zero, or a partial sum turning negative, where it raises): +inf, no privacy
 *     claimed at this order, the safe side;
 *   - a result below 0, which only rounding makes (A_alpha >= 1; a large sigma's RDP is
 *     of the order of the rounding of a log-space sum): 0, so that a ledger's values are
 *     >= 0 (fed_rdp_check). */
double fed_rdp_gaussian(double q, double sigma, double alpha)
{
    CHECK(q >= 0 && q <= 1, "the sampling rate q is a probability");
    CHECK(sigma >= 0, "the noise multiplier is >= 0 (and not NaN)");
    CHECK(alpha > 1, "RDP orders are > 1");
    CHECK(alpha <= 1e6 || isinf(alpha), "orders up to 1e6: an integer order's sum has alpha + 1 terms");
    if (q == 0) return 0;
    if (sigma == 0) return INFINITY;
    if (q == 1) return alpha / (2 * sigma * sigma);
    if (isinf(alpha)) return INFINITY;
    if (isinf(sigma * sigma)) return 0;
    double log_a = alpha == floor(alpha) ? log_a_int(q, sigma, (int)alpha) : log_a_frac(q, sigma, alpha);
    double r = log_a / (alpha - 1);
    if (isnan(r)) return INFINITY;
    return r < 0 ? 0 : r;
}

/* ---- the ledger ---------------------------------------------------------------- */

void fed_rdp_compose(fed_rdp *a, double q, double sigma, int64_t steps)
{
    CHECK(q >= 0 && q <= 1, "the sampling rate q is a probability");
    CHECK(sigma >= 0, "the noise multiplier is >= 0 (and not NaN)");
    CHECK(steps >= 0 && steps <= INT64_MAX - a->steps, "a ledger counts 0..INT64_MAX rounds");
    /* no rounds add nothing (Opacus would multiply an infinite RDP by 0 into NaN) */
    if (steps == 0) return;
    /* Opacus: compute_rdp(...) = rdp * steps per history entry, entries summed */
    for (int k = 0; k < FED_RDP_NORDERS; k++)
        a->rdp[k] += fed_rdp_gaussian(q, sigma, fed_rdp_order_table[k]) * (double)steps;
    a->steps += steps;
}

/* Opacus's get_privacy_spent on one vector of RDP values: the conversion at every order,
 * then np.nanargmin (NaNs skipped, the first of equal minima); all NaN: +inf, order NaN. */
static double epsilon_of(const double *rdp, double delta, double *best_order)
{
    double best = NAN, order = NAN, log_delta = log(delta);
    for (int k = 0; k < FED_RDP_NORDERS; k++) {
        double al = fed_rdp_order_table[k];
        double e = rdp[k] - (log_delta + log(al)) / (al - 1) + log((al - 1) / al);
        if (!isnan(e) && (isnan(best) || e < best)) {
            best = e;
            order = al;
        }
    }
    if (best_order) *best_order = order;
    return isnan(best) ? INFINITY : best;
}

double fed_rdp_epsilon(const fed_rdp *a, double delta, double *best_order)
{
    CHECK(delta > 0 && delta < 1, "delta is a probability in (0, 1)");
    if (a->steps == 0) {  /* Opacus's accountant without history: (0, 0) */
        if (best_order) *best_order = 0;
        return 0;
    }
    return epsilon_of(a->rdp, delta, best_order);
}

status fed_rdp_check(const fed_rdp *a, char *why, size_t len)
{
    if (a->steps < 0) {
        snprintf(why, len, "the privacy ledger counts %lld rounds: a count is >= 0", (long long)a->steps);
        return STATUS_CORRUPT;
    }
    for (int k = 0; k < FED_RDP_NORDERS; k++) {
        double r = a->rdp[k];
        if (!(r >= 0) || (a->steps == 0 && r != 0)) {
            snprintf(why, len, "the privacy ledger's RDP at order %g is %g after %lld rounds: a value is >= 0 "
                     "(+inf allowed), and 0 before the first round", fed_rdp_order_table[k], r, (long long)a->steps);
            return STATUS_CORRUPT;
        }
    }
    return STATUS_OK;
}

/* ---- planning: the noise for a budget, the rounds a budget allows ------------------ */

/* Epsilon after `steps` rounds of (q, sigma), as a fresh ledger would give it. */
static double epsilon_after(double q, double sigma, int64_t steps, double delta)
{
    fed_rdp a;
    fed_rdp_init(&a);
    fed_rdp_compose(&a, q, sigma, steps);
    return fed_rdp_epsilon(&a, delta, NULL);
}

/* delta in (0, 1) and eps > 0 (NaN fails every comparison). */
static bool budget_ok(const char *fn, double delta, double eps)
{
    if (delta > 0 && delta < 1 && eps > 0) return true;
    log_error("%s: a privacy budget needs 0 < delta < 1 and epsilon > 0; got delta = %g, epsilon = %g", fn,
              delta, eps);
    return false;
}

/* Epsilon falls as sigma grows (RDP does at every order), so the smallest sigma is
 * bracketed by doubling from 1 and bisected; the bracket keeps eps(lo) > target >= eps(hi),
 * so the answer always meets the budget. */
status fed_rdp_sigma_for(double q, int64_t steps, double delta, double eps, double *sigma)
{
    if (!(q >= 0 && q <= 1) || steps < 1) {
        log_error("fed_rdp_sigma_for: needs a sampling rate q in [0, 1] and at least 1 round; got q = %g, "
                  "%lld rounds", q, (long long)steps);
        return STATUS_INPUT;
    }
    if (!budget_ok("fed_rdp_sigma_for", delta, eps)) return STATUS_INPUT;
    if (epsilon_after(q, 0, steps, delta) <= eps) {  /* q = 0: no noise needed */
        *sigma = 0;
        return STATUS_OK;
    }
    double lo = 0, hi = 1, e;
    while ((e = epsilon_after(q, hi, steps, delta)) > eps) {
        if (hi >= FED_RDP_SIGMA_MAX) {
            log_error("fed_rdp_sigma_for: no noise multiplier up to %g keeps epsilon <= %g after %lld rounds "
                      "at q = %g, delta = %g (sigma %g gives epsilon %g): allow a larger epsilon or delta, "
                      "fewer rounds or a smaller sampling rate", FED_RDP_SIGMA_MAX, eps, (long long)steps, q,
                      delta, hi, e);
            return STATUS_INPUT;
        }
        lo = hi;
        hi = fmin(2 * hi, FED_RDP_SIGMA_MAX);
    }
    while (hi - lo > FED_RDP_SIGMA_RTOL * hi) {
        double mid = 0.5 * (lo + hi);
        if (epsilon_after(q, mid, steps, delta) <= eps) hi = mid;
        else lo = mid;
    }
    *sigma = hi;
    return STATUS_OK;
}

/* Epsilon after n rounds from one round's RDP g: the ledger's 0 + g n is g n exactly, so
 * this equals fed_rdp_compose then fed_rdp_epsilon bit for bit, and it never falls as n
 * grows (each order's value does not, nor does their minimum). */
static double epsilon_steps(const double *g, int64_t n, double delta)
{
    double rdp[FED_RDP_NORDERS];
    for (int k = 0; k < FED_RDP_NORDERS; k++) rdp[k] = g[k] * (double)n;
    return epsilon_of(rdp, delta, NULL);
}

int64_t fed_rdp_steps_for(double q, double sigma, double delta, double eps)
{
    if (!(q >= 0 && q <= 1) || !(sigma >= 0)) {
        log_error("fed_rdp_steps_for: needs a sampling rate q in [0, 1] and a noise multiplier >= 0; got q = %g, "
                  "sigma = %g", q, sigma);
        return -1;
    }
    if (!budget_ok("fed_rdp_steps_for", delta, eps)) return -1;
    double g[FED_RDP_NORDERS];
    for (int k = 0; k < FED_RDP_NORDERS; k++) g[k] = fed_rdp_gaussian(q, sigma, fed_rdp_order_table[k]);
    if (epsilon_steps(g, 1, delta) > eps) return 0;
    /* eps(lo) <= target; double until a count exceeds it, then bisect (lo, hi] */
    int64_t lo = 1, hi = 0;
    while (hi == 0) {
        int64_t next = lo <= INT64_MAX / 2 ? 2 * lo : INT64_MAX;
        if (epsilon_steps(g, next, delta) > eps) hi = next;
        else if (next == INT64_MAX) return INT64_MAX;  /* no count exceeds it (q = 0) */
        else lo = next;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (epsilon_steps(g, mid, delta) <= eps) lo = mid;
        else hi = mid;
    }
    return lo;
}
