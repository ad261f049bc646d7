/* fed_update — checks of client updates, clipping, Gaussian noise, adaptive clipping and
 * the server optimizers of fed/update.h (aggregation rules are in fed_agg.c).
 *
 * The one design decision: every draw is addressed, not sequential. A normal used for
 * element i of a vector, or for the clip-norm bits of a round, is a function of
 * (seed, stream, RNG_PURPOSE_FED, index, i) alone (base/rng.h's Philox streams), so
 * noise can be added in slices by any number of threads and is redrawn identically
 * after a restart. Reductions (norms) are summed in double in index order. */
#include "fed/update.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/rng.h"

/* ---- checks ------------------------------------------------------------------------ */

const char *fed_reject_name(fed_reject r)
{
    switch (r) {
    case FED_REJECT_NONE: return "none";
    case FED_REJECT_SIZE: return "size";
    case FED_REJECT_NONFINITE: return "nonfinite";
    case FED_REJECT_STALE: return "stale";
    case FED_REJECT_NORM: return "norm";
    }
    return "unknown";
}

double fed_l2norm(const float *x, size_t n)
{
    /* |x_i|^2 <= (2^128)^2 = 2^256 and n < 2^64, so the sum stays below 2^320 < DBL_MAX:
     * it is non-finite only when some x_i is. */
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return sqrt(s);
}

fed_reject fed_update_check(const float *u, size_t n, size_t expect_n, int64_t round, int64_t expect_round,
                            double norm_limit, double *norm)
{
    CHECK(norm_limit >= 0, "fed_update_check: norm_limit is a norm (> 0) or 0 for none");
    if (norm) *norm = NAN;
    if (n != expect_n || (n > 0 && u == NULL)) return FED_REJECT_SIZE;
    /* One pass: the norm is non-finite exactly when a value is (fed_l2norm). */
    double nrm = fed_l2norm(u, n);
    if (!isfinite(nrm)) return FED_REJECT_NONFINITE;
    if (norm) *norm = nrm;
    if (round != expect_round) return FED_REJECT_STALE;
    if (norm_limit > 0 && nrm > norm_limit) return FED_REJECT_NORM;
    return FED_REJECT_NONE;
}

/* ---- clipping ---------------------------------------------------------------------- */

/* x *= scale (0 < scale < 1), each product formed in double and rounded toward zero, so
 * |x_i| never grows past |x_i| * scale: the exact norm after is <= scale * ||x||. */
static void scale_toward_zero(float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        double y = (double)x[i] * scale;
        float f = (float)y;
        if (fabs((double)f) > fabs(y)) f = nextafterf(f, 0.0f);
        x[i] = f;
    }
}

double fed_clip(float *x, size_t n, double C)
{
    CHECK(C > 0 && isfinite(C), "fed_clip: the clip norm must be positive and finite");
    double norm = fed_l2norm(x, n);
    if (!(norm > C) || !isfinite(norm)) return norm;  /* small enough, or hostile (NaN/inf) */
    /* Rounding toward zero bounds the exact norm by C (1 + the relative error of the
     * computed norm, ~n 2^-53); the recomputed norm has its own ~n 2^-53. Verify, and in
     * the rare case that still reads above C, shrink by the ratio again (each pass only
     * lowers |x_i|, and the excess left is of the order of the last pass's rounding). */
    double scale = C / norm;
    for (int pass = 0;; pass++) {
        scale_toward_zero(x, n, scale);
        double after = fed_l2norm(x, n);
        if (after <= C) break;
        CHECK(pass < 16, "fed_clip: the norm did not come under C");
        scale = C / after;
    }
    return norm;
}

/* ---- noise ------------------------------------------------------------------------- */

void fed_normal2(rng *r, double *z0, double *z1)
{
    /* u1 in (0, 1] so the log is finite: |z| <= sqrt(-2 ln 2^-53) ~ 8.57. */
    double u1 = ((double)(rng_u64(r) >> 11) + 1.0) * 0x1p-53;
    double theta = 6.283185307179586476925 * rng_u64_to_double(rng_u64(r));
    double radius = sqrt(-2.0 * log(u1));
    *z0 = radius * cos(theta);
    if (z1 != NULL) *z1 = radius * sin(theta);
}

double fed_normal(rng *r)
{
    double z0;
    fed_normal2(r, &z0, NULL);
    return z0;
}

void fed_noise_add_at(float *x, size_t first, size_t n, double std, uint64_t seed, uint32_t stream,
                      uint64_t index)
{
    CHECK(std >= 0 && isfinite(std), "fed_noise_add: the standard deviation must be finite and >= 0");
    if (std == 0 || n == 0) return;
    rng r;
    rng_init(&r, seed, stream, RNG_PURPOSE_FED, index);
    /* Element g takes branch g % 2 of pair g / 2; a pair is 4 outputs. */
    rng_skip(&r, 4 * (uint64_t)(first / 2));
    double z0, z1;
    size_t i = 0;
    if (first % 2 == 1) {
        fed_normal2(&r, &z0, &z1);
        x[0] = (float)((double)x[0] + std * z1);
        i = 1;
    }
    for (; i + 1 < n; i += 2) {
        fed_normal2(&r, &z0, &z1);
        x[i] = (float)((double)x[i] + std * z0);
        x[i + 1] = (float)((double)x[i + 1] + std * z1);
    }
    if (i < n) {
        fed_normal2(&r, &z0, NULL);
        x[i] = (float)((double)x[i] + std * z0);
    }
}

void fed_noise_add(float *x, size_t n, double std, uint64_t seed, uint32_t stream, uint64_t index)
{
    fed_noise_add_at(x, 0, n, std, seed, stream, index);
}

/* ---- adaptive clipping ------------------------------------------------------------- */

int fed_clip_bit(double norm, double C)
{
    return norm <= C ? 1 : 0;  /* a NaN norm counts as above */
}

double fed_clip_fraction(const fed_clip_state *s, int64_t bits, double m, uint64_t seed, uint32_t stream,
                         uint64_t index)
{
    CHECK(m > 0 && isfinite(m), "fed_clip_fraction: the expected number of clients must be positive");
    CHECK(s->sigma_b >= 0 && isfinite(s->sigma_b), "fed_clip_fraction: sigma_b must be finite and >= 0");
    double noise = 0;
    if (s->sigma_b > 0) {
        rng r;
        rng_init(&r, seed, stream, RNG_PURPOSE_FED, index);
        noise = s->sigma_b * fed_normal(&r);
    }
    return ((double)bits + noise) / m;
}

void fed_clip_adapt(fed_clip_state *s, double b)
{
    CHECK(isfinite(b), "fed_clip_adapt: the fraction must be finite");
    CHECK(s->C > 0 && s->lr >= 0, "fed_clip_adapt: C must be positive and lr >= 0");
    /* Geometric: log C moves by -lr (b - gamma), a step on the pinball loss of the
     * gamma-quantile in log space (Andrew et al.); C stays positive. */
    s->C *= exp(-s->lr * (b - s->quantile));
}

double fed_clip_sigma_update(double sigma_total, double sigma_b)
{
    if (!(sigma_total > 0) || !isfinite(sigma_total) || !(sigma_b > 0)) return NAN;
    double two_b = 2.0 * sigma_b;
    double rest = 1.0 / (sigma_total * sigma_total) - 1.0 / (two_b * two_b);  /* 0 share when sigma_b = inf */
    if (!(rest > 0)) return NAN;
    return 1.0 / sqrt(rest);
}

/* ---- server optimizers ------------------------------------------------------------- */

void fed_server_init(fed_server_opt *o, fed_server_kind kind, double lr, double beta1, double beta2, double tau,
                     float *m, float *v, size_t n)
{
    CHECK(kind == FED_SERVER_AVG || kind == FED_SERVER_ADAM || kind == FED_SERVER_YOGI,
          "fed_server_init: unknown optimizer kind");
    bool adaptive = kind != FED_SERVER_AVG;
    CHECK(!adaptive || (m != NULL && v != NULL) || n == 0, "fed_server_init: FedAdam and FedYogi need m and v");
    CHECK(!adaptive || (beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && tau > 0),
          "fed_server_init: betas in [0, 1) and tau > 0");
    *o = (fed_server_opt){ .kind = kind, .lr = lr, .beta1 = beta1, .beta2 = beta2, .tau = tau, .t = 0,
                           .m = adaptive ? m : NULL, .v = adaptive ? v : NULL };
    if (!adaptive) return;
    float v0 = (float)(tau * tau);
    for (size_t i = 0; i < n; i++) {
        m[i] = 0.0f;
        v[i] = v0;
    }
}

/* FedAdam and FedYogi: moments and the step in double, each stored value rounded once. */
static void server_step_adaptive(fed_server_opt *o, float *global, const float *delta, size_t n)
{
    const double b1 = o->beta1, b2 = o->beta2, lr = o->lr, tau = o->tau;
    const bool yogi = o->kind == FED_SERVER_YOGI;
    for (size_t i = 0; i < n; i++) {
        double d = delta[i], d2 = d * d, v_old = o->v[i];
        double m = b1 * (double)o->m[i] + (1.0 - b1) * d;
        double v;
        if (yogi) {
            /* Yogi (Zaheer et al., NeurIPS 2018): v moves toward d^2 by (1 - b2) d^2, an
             * additive step instead of Adam's multiplicative one; sign(0) = 0. */
            double sgn = (v_old > d2) - (v_old < d2);
            v = v_old - (1.0 - b2) * d2 * sgn;
        } else {
            v = b2 * v_old + (1.0 - b2) * d2;
        }
        o->m[i] = (float)m;
        o->v[i] = (float)v;
        global[i] = (float)((double)global[i] + lr * m / (sqrt(v) + tau));
    }
}

void fed_server_step(fed_server_opt *o, float *global, const float *delta, size_t n)
{
    switch (o->kind) {
    case FED_SERVER_AVG:
        for (size_t i = 0; i < n; i++) global[i] = (float)((double)global[i] + o->lr * (double)delta[i]);
        break;
    case FED_SERVER_ADAM:
    case FED_SERVER_YOGI:
        CHECK((o->m != NULL && o->v != NULL) || n == 0, "fed_server_step: FedAdam and FedYogi need m and v");
        server_step_adaptive(o, global, delta, n);
        break;
    default:
        die("fed_server_step", "unknown optimizer kind", "set fed_server_opt.kind with fed_server_init");
    }
    o->t++;
}
