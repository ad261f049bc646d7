/* test_fed_audit — the privacy-audit figures of libcore/fed/audit.h against their
 * definitions: AUC against the O(npos * nneg) pair count (ties 1/2) and hand examples,
 * TPR at FPR and Yeom's threshold attack on hand examples, LiRA on synthetic shadow
 * phis (members from the IN Gaussian are found; with IN = OUT nothing is), the offline
 * tail against erfc and across its switch to the series, attribute accuracy and its
 * baseline, and cosine / NCC / SSIM of identical, shifted, noised and flat images.
 * One line per check; exit 1 on any failure.
 *
 *   test_fed_audit           the checks
 *   test_fed_audit --eval    the reference mode of validation/reference/fed_audit_ref.py:
 *                            reads cases from stdin, prints the figures with %.17g
 *       roc NPOS NNEG NFPR <NFPR fprs> <NPOS member scores> <NNEG non-member scores>
 *           -> "auc A" then one "tpr FPR T" per fpr
 *       ssim H W RANGE <H*W pixels of a> <H*W pixels of b>
 *           -> "ssim S"
 *   (whitespace-separated numbers; exit 2 on a malformed case or a refused one) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/audit.h"
#include "../check.h"

#define SEED UINT64_C(20260321)

/* ---- the reference mode ------------------------------------------------------------- */

static bool read_doubles(double *x, int n)
{
    for (int i = 0; i < n; i++)
        if (scanf("%lf", &x[i]) != 1) return false;
    return true;
}

static int eval_roc(void)
{
    int npos, nneg, nfpr;
    if (scanf("%d %d %d", &npos, &nneg, &nfpr) != 3 || npos < 1 || nneg < 1 || nfpr < 0) return 2;
    double *fpr = malloc(((size_t)nfpr + 1) * sizeof *fpr);
    double *s = malloc(((size_t)npos + nneg) * sizeof *s);
    int rc = 2;
    double auc, tpr;
    if (!fpr || !s || !read_doubles(fpr, nfpr) || !read_doubles(s, npos + nneg)) goto free_bufs;
    if (fed_audit_auc(s, npos, s + npos, nneg, &auc) != STATUS_OK) goto free_bufs;
    printf("auc %.17g\n", auc);
    for (int k = 0; k < nfpr; k++) {
        if (fed_audit_tpr_at_fpr(s, npos, s + npos, nneg, fpr[k], &tpr) != STATUS_OK) goto free_bufs;
        printf("tpr %.17g %.17g\n", fpr[k], tpr);
    }
    rc = 0;
free_bufs:
    free(fpr);
    free(s);
    return rc;
}

static int eval_ssim(void)
{
    int h, w;
    double range;
    if (scanf("%d %d %lf", &h, &w, &range) != 3 || h < 1 || w < 1) return 2;
    size_t n = (size_t)h * w;
    double *d = malloc(2 * n * sizeof *d);
    float *f = malloc(2 * n * sizeof *f);
    int rc = 2;
    if (!d || !f || !read_doubles(d, (int)(2 * n))) goto free_bufs;
    for (size_t i = 0; i < 2 * n; i++) f[i] = (float)d[i];  /* float32 values, exact */
    printf("ssim %.17g\n", fed_audit_ssim(f, f + n, h, w, range));
    rc = 0;
free_bufs:
    free(d);
    free(f);
    return rc;
}

static int eval_main(void)
{
    char kind[16];
    while (scanf("%15s", kind) == 1) {
        int rc = !strcmp(kind, "roc") ? eval_roc() : !strcmp(kind, "ssim") ? eval_ssim() : 2;
        if (rc) {
            fprintf(stderr, "test_fed_audit --eval: malformed or refused '%s' case\n", kind);
            return rc;
        }
    }
    return 0;
}

/* ---- AUC -------------------------------------------------------------------------- */

/* The definition: pairs won plus half the pairs tied, over all pairs. */
static double auc_pairs(const double *pos, int npos, const double *neg, int nneg)
{
    double u = 0;
    for (int i = 0; i < npos; i++)
        for (int j = 0; j < nneg; j++) u += pos[i] > neg[j] ? 1.0 : pos[i] == neg[j] ? 0.5 : 0.0;
    return u / ((double)npos * nneg);
}

static double auc_of(const double *pos, int npos, const double *neg, int nneg)
{
    double auc = NAN;
    if (fed_audit_auc(pos, npos, neg, nneg, &auc) != STATUS_OK) return NAN;
    return auc;
}

/* n standard normals (double, Box-Muller of rng_uniform_double) times sd plus mean. */
static void normals(rng *r, double *x, int n, double mean, double sd)
{
    for (int i = 0; i < n; i++) {
        double u1 = 1.0 - rng_uniform_double(r), u2 = rng_uniform_double(r);
        x[i] = mean + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    }
}

static void test_auc(test_ctx *t, rng *r)
{
    double lo[4] = { 0.1, 0.2, 0.3, 0.4 }, hi[3] = { 0.5, 0.6, 7.0 };
    check(t, auc_of(hi, 3, lo, 4) == 1.0, "AUC: members all above non-members = 1");
    check(t, auc_of(lo, 4, hi, 3) == 0.0, "AUC: members all below non-members = 0");
    /* pos {1, 2, 2} against neg {2, 0}: 1>0, 2>0 twice, 2=2 twice: (3 + 2/2) / 6 */
    double p[3] = { 1, 2, 2 }, n[2] = { 2, 0 };
    check(t, auc_of(p, 3, n, 2) == 4.0 / 6.0, "AUC: ties count 1/2 (pos {1,2,2} vs neg {2,0} = 4/6)");
    double same = 3.0;
    check(t, auc_of(&same, 1, &same, 1) == 0.5, "AUC: one tied pair = 1/2");

    /* Under H0 the AUC has sd sqrt((npos + nneg + 1) / (12 npos nneg)) = 0.0091 here
     * (Mann-Whitney); 5 sd leaves a seeded run no room to fail by chance. */
    enum { N = 2000 };
    double *a = malloc(2 * N * sizeof *a);
    normals(r, a, 2 * N, 0.0, 1.0);
    double auc = auc_of(a, N, a + N, N), sd = sqrt((2.0 * N + 1) / (12.0 * N * N));
    check(t, fabs(auc - 0.5) <= 5 * sd, "AUC: one distribution, 2000 vs 2000: %.4f within 5 sd (%.4f) of 0.5", auc,
          5 * sd);

    /* against the pair count: sizes from 1, scores on a coarse grid (many ties) and
     * continuous; U is a sum of halves below 2^53, so both sides are exact */
    static const int sizes[][2] = { { 1, 1 }, { 1, 7 }, { 9, 1 }, { 13, 29 }, { 200, 150 }, { 500, 777 } };
    bool exact = true;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int grid = 0; grid < 2; grid++) {
            int np_ = sizes[k][0], nn_ = sizes[k][1];
            normals(r, a, np_ + nn_, 0.0, 1.0);
            for (int i = 0; i < np_; i++) a[i] += 0.3;
            if (grid)
                for (int i = 0; i < np_ + nn_; i++) a[i] = round(a[i] * 4) / 4;
            exact &= auc_of(a, np_, a + np_, nn_) == auc_pairs(a, np_, a + np_, nn_);
        }
    check(t, exact, "AUC equals the O(n^2) pair count exactly, 6 size pairs (1x1 to 500x777), with and without ties");
    free(a);

    double bad[2] = { 0.5, NAN }, x = 1;
    capture_begin(t);
    status s1 = fed_audit_auc(bad, 2, &x, 1, &auc), s2 = fed_audit_auc(&x, 1, bad, 0, &auc);
    bad[1] = INFINITY;
    status s3 = fed_audit_auc(&x, 1, bad, 2, &auc);
    capture_end(t, false);
    check(t, s1 == STATUS_INPUT && s2 == STATUS_INPUT && s3 == STATUS_INPUT,
          "AUC: a NaN score, an empty set and an infinite score are refused (STATUS_INPUT)");
}

/* ---- TPR at FPR, Yeom ----------------------------------------------------------------- */

static double tpr_of(const double *pos, int npos, const double *neg, int nneg, double fpr)
{
    double tpr = NAN;
    if (fed_audit_tpr_at_fpr(pos, npos, neg, nneg, fpr, &tpr) != STATUS_OK) return NAN;
    return tpr;
}

static void test_tpr_at_fpr(test_ctx *t)
{
    /* non-members 1..10, members {5.5, 9.5, 10, 11, 12}. From the top: t = 12, 11 catch
     * two members and no non-member; t = 10 one of each (fpr 0.1, tpr 0.6); t = 9.5 a
     * fourth member (0.1, 0.8); t = 7 (0.4, 0.8); t = 5.5 the last member at fpr 0.5. */
    double neg[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, pos[5] = { 5.5, 9.5, 10, 11, 12 };
    static const double want[][2] = { { 0, 0.4 }, { 0.05, 0.4 }, { 0.1, 0.8 }, { 0.4, 0.8 }, { 0.49, 0.8 },
                                      { 0.5, 1.0 }, { 1, 1.0 }, { -0.01, 0.0 } };
    bool ok = true;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) ok &= tpr_of(pos, 5, neg, 10, want[k][0]) == want[k][1];
    check(t, ok, "TPR at FPR: hand example at fpr 0, 0.05, 0.1, 0.4, 0.49, 0.5, 1 and -0.01 (0.4 ... 1, 0)");

    /* the tie groups (2: one of each), (1: one of each), (0: one of each) lie on the
     * diagonal: the point (1/3, 1/3) is a threshold with fpr <= 0.5, which
     * roc_curve's default drop_intermediate would remove (reading 0 there) */
    double d[3] = { 2, 1, 0 };
    check(t, tpr_of(d, 3, d, 3, 0.5) == 1.0 / 3.0, "TPR at FPR: a diagonal run of tied groups reads 1/3 at fpr 0.5");
    /* 1000 non-members: fpr 0.01 admits exactly 10 of them (10 / 1000 rounds to 0.01) */
    double *n1k = malloc(1000 * sizeof *n1k), m[2] = { 989.5, 988.5 };  /* 10 and 11 non-members above */
    for (int i = 0; i < 1000; i++) n1k[i] = i;
    check(t, tpr_of(m, 2, n1k, 1000, 0.01) == 0.5 && tpr_of(m, 2, n1k, 1000, 0.001) == 0.0,
          "TPR at FPR: 0.01 of 1000 non-members admits 10 exactly (not 9), 0.001 admits 1");
    free(n1k);
    double tpr;
    capture_begin(t);
    status st = fed_audit_tpr_at_fpr(pos, 5, neg, 10, NAN, &tpr);
    capture_end(t, false);
    check(t, st == STATUS_INPUT, "TPR at FPR: a NaN target rate is refused");
}

static void test_yeom(test_ctx *t)
{
    /* members {0.1, 0.2, 0.3, 1.0}: threshold 0.4, three members at or below it; of the
     * non-members {0.35, 0.5, 2, 3} one. tpr 3/4, fpr 1/4, advantage 1/2, accuracy
     * (3 + 3) / 8; AUC of -loss: member losses below non-member ones in 4+4+4+2 of 16. */
    double m[4] = { 0.1, 0.2, 0.3, 1.0 }, n[4] = { 0.35, 0.5, 2.0, 3.0 };
    fed_audit_threshold y;
    status st = fed_audit_loss_threshold(m, 4, n, 4, &y);
    check(t, st == STATUS_OK && fabs(y.threshold - 0.4) <= 1e-15 && y.tpr == 0.75 && y.fpr == 0.25 &&
             y.advantage == 0.5 && y.accuracy == 0.75 && y.auc == 14.0 / 16.0,
          "Yeom: threshold %.17g, tpr %g, fpr %g, advantage %g, accuracy %g, AUC %g (want 0.4 .75 .25 .5 .75 .875)",
          y.threshold, y.tpr, y.fpr, y.advantage, y.accuracy, y.auc);
}

/* ---- LiRA ----------------------------------------------------------------------------- */

static void test_logit(test_ctx *t)
{
    double top = -log(FED_AUDIT_LOGIT_EPS);
    check(t, fed_audit_logit_conf(0.5) == 0 && fabs(fed_audit_logit_conf(0.9) - log(9.0)) <= 1e-15 &&
             fed_audit_logit_conf(1.0) == top && fed_audit_logit_conf(0.0) == -top &&
             isnan(fed_audit_logit_conf(NAN)),
          "logit: phi(0.5) = 0, phi(0.9) = log 9, phi(1) and phi(0) clamped to +-%.2f, NaN stays NaN", top);
    /* the margin from logits equals phi of the softmax probability where both are exact */
    float z[4] = { 1.5f, -0.25f, 0.75f, 2.0f };
    double e = 0;
    for (int j = 0; j < 4; j++) e += exp((double)z[j]);
    double p = exp((double)z[2]) / e;
    check(t, fabs(fed_audit_logit_margin(z, 4, 2) - log(p / (1 - p))) <= 1e-13,
          "logit margin: z_y - logsumexp(z_others) = phi(softmax_y) (1e-13)");
    float big[3] = { 1000.0f, 990.0f, -1000.0f };
    check(t, fabs(fed_audit_logit_margin(big, 3, 0) - (10.0 - log1p(exp(-1990.0)))) <= 1e-12,
          "logit margin: logits of 1000 do not overflow (10 for a lead of 10)");
}

/* A synthetic audit: example i has its own difficulty d_i ~ N(0, 2^2) (why a global
 * threshold on phi does poorly), OUT phis ~ N(d_i, 1), IN phis ~ N(d_i + shift, 1); the
 * first half of the targets are members (phi from IN), the rest not. Writes the AUC of
 * online, online with global variances, offline, and the raw phi itself. */
enum { SHADOWS = 16 };
static void lira_aucs(rng *r, int nex, double shift, double auc[4])
{
    double *s = malloc(4 * (size_t)nex * sizeof *s), in[SHADOWS], out[SHADOWS], tgt;
    fed_audit_pool pin = { 0 }, pout = { 0 };
    double *d = malloc((size_t)nex * sizeof *d), *phi = malloc((size_t)nex * sizeof *phi);
    double *ins = malloc((size_t)nex * SHADOWS * sizeof *ins), *outs = malloc((size_t)nex * SHADOWS * sizeof *outs);
    for (int i = 0; i < nex; i++) {
        normals(r, &d[i], 1, 0.0, 2.0);
        normals(r, ins + (size_t)i * SHADOWS, SHADOWS, d[i] + shift, 1.0);
        normals(r, outs + (size_t)i * SHADOWS, SHADOWS, d[i], 1.0);
        normals(r, &tgt, 1, d[i] + (i < nex / 2 ? shift : 0.0), 1.0);
        phi[i] = tgt;
        fed_audit_pool_add(&pin, ins + (size_t)i * SHADOWS, SHADOWS);
        fed_audit_pool_add(&pout, outs + (size_t)i * SHADOWS, SHADOWS);
    }
    double vin = fed_audit_pool_var(&pin), vout = fed_audit_pool_var(&pout);
    for (int i = 0; i < nex; i++) {
        memcpy(in, ins + (size_t)i * SHADOWS, sizeof in);
        memcpy(out, outs + (size_t)i * SHADOWS, sizeof out);
        s[i] = fed_audit_lira_online(phi[i], in, SHADOWS, out, SHADOWS);
        s[nex + i] = fed_audit_lira_online_global(phi[i], in, SHADOWS, out, SHADOWS, vin, vout);
        s[2 * nex + i] = fed_audit_lira_offline(phi[i], out, SHADOWS);
        s[3 * nex + i] = phi[i];
    }
    int h = nex / 2;
    for (int k = 0; k < 4; k++) auc[k] = auc_of(s + (size_t)k * nex, h, s + (size_t)k * nex + h, nex - h);
    free(s), free(d), free(phi), free(ins), free(outs);
}

static void test_lira(test_ctx *t, rng *r)
{
    /* shift 3 sd: the ideal per-example test reaches Phi(3 / sqrt 2) = 0.983, phi alone
     * Phi(3 / sqrt(2 * 5)) = 0.83 (its spread is sqrt(2^2 + 1)) */
    double a[4];
    lira_aucs(r, 400, 3.0, a);
    check(t, a[0] > 0.93 && a[1] > 0.93 && a[2] > 0.93 && a[3] < 0.9 && a[0] > a[3] + 0.05,
          "LiRA, members from IN (shift 3 sd, 16+16 shadows, 200+200 targets): AUC online %.3f, global-variance "
          "%.3f, offline %.3f > 0.93; raw phi %.3f",
          a[0], a[1], a[2], a[3]);
    /* IN = OUT: no score carries membership; 5 sd of the H0 AUC (1000 vs 1000) */
    lira_aucs(r, 2000, 0.0, a);
    double b = 5 * sqrt(2001.0 / (12.0 * 1000 * 1000));
    check(t, fabs(a[0] - 0.5) <= b && fabs(a[1] - 0.5) <= b && fabs(a[2] - 0.5) <= b,
          "LiRA, IN = OUT: AUC online %.3f, global %.3f, offline %.3f within %.3f of 0.5", a[0], a[1], a[2], b);

    /* online hand value: IN {1, 3} (mean 2, var 1), OUT {-1, 1} (mean 0, var 1), target 1:
     * log N(1; 2, 1) - log N(1; 0, 1) = -1/2 + 1/2 = 0; target 2: 0 - (-2) = 2 */
    double in[2] = { 1, 3 }, out[2] = { -1, 1 };
    check(t, fed_audit_lira_online(1, in, 2, out, 2) == 0 && fed_audit_lira_online(2, in, 2, out, 2) == 2 &&
             isnan(fed_audit_lira_online(1, in, 0, out, 2)),
          "LiRA online: hand values 0 and 2; no IN shadow gives NaN");

    /* offline: OUT {-1, 1} is N(0, 1), so the score is -log Q(target). The reference is
     * erfc in long double; below z = -4, where Q rounds to 1 even there, the series
     * -log(1 - x) = x + x^2/2 + x^3/3 of the lower tail x = Q(-z) < 3.2e-5 (next term
     * below 1e-15 relative) */
    double worst = 0, prev = -INFINITY;
    bool rising = true;
    for (double z = -8; z <= 36; z += 0.25) {
        double got = fed_audit_lira_offline(z, out, 2);
        long double q = 0.5L * erfcl((long double)z / sqrtl(2.0L));
        double x = 0.5 * erfc(-z / sqrt(2.0));
        double ref = z >= -4 ? (double)-logl(q) : x + x * x / 2 + x * x * x / 3;
        worst = fmax(worst, fabs(got - ref) / fabs(ref));
        rising &= got > prev;
        prev = got;
    }
    check(t, worst <= 1e-13 && rising, "LiRA offline = -log Q(z), z in [-8, 36], rising: worst relative %.1e",
          worst);
    static const double zs[] = { 36.9, 36.999999, 37.0, 37.000001, 37.1, 40, 60, 1e3 };
    bool up = true;
    for (size_t k = 1; k < sizeof zs / sizeof zs[0]; k++)
        up &= fed_audit_lira_offline(zs[k], out, 2) > fed_audit_lira_offline(zs[k - 1], out, 2);
    double gap = fed_audit_lira_offline(37.0, out, 2) -
                 -log(0.5 * erfc(nextafter(37.0, 0) / sqrt(2.0)));  /* both sides of the switch */
    check(t, up && fabs(gap) <= 1e-9 && isfinite(fed_audit_lira_offline(1e3, out, 2)),
          "LiRA offline past z = 37 (the series): rising to z = 1000, finite, continuous at the switch (%.1e)", gap);

    /* pooled variance: {0, 2} and {10, 12, 14}: (2 + 8) / (5 - 2) */
    fed_audit_pool pool = { 0 };
    double g1[2] = { 0, 2 }, g2[3] = { 10, 12, 14 };
    fed_audit_pool_add(&pool, g1, 2);
    fed_audit_pool_add(&pool, g2, 3);
    fed_audit_pool one = { 0 };
    fed_audit_pool_add(&one, g1, 1);
    check(t, fabs(fed_audit_pool_var(&pool) - 10.0 / 3.0) <= 1e-15 && isnan(fed_audit_pool_var(&one)) &&
             fed_audit_lira_online_global(2, in, 2, out, 2, 1, 1) == 2 &&
             isnan(fed_audit_lira_online_global(2, in, 2, out, 2, fed_audit_pool_var(&one), 1)),
          "LiRA pooled variance: (2 + 8) / 3 over two examples; NaN with one phi per example, and the "
          "global-variance score of a NaN variance is NaN (not floored)");
}

/* ---- attribute inference, model inversion ------------------------------------------ */

static void test_attribute(test_ctx *t)
{
    int guess[4] = { 1, 2, 3, 1 }, truth[4] = { 1, 2, 0, 0 }, col[5] = { 0, 1, 1, 2, 1 };
    double base = NAN;
    status st = fed_audit_attribute_baseline(col, 5, &base);
    check(t, fed_audit_attribute_accuracy(guess, truth, 4) == 0.5 && st == STATUS_OK && base == 0.6 &&
             isnan(fed_audit_attribute_accuracy(guess, truth, 0)),
          "attribute: accuracy 2/4, baseline (majority class 1 of {0,1,1,2,1}) 3/5, no records NaN");
}

static void test_similarity(test_ctx *t, rng *r)
{
    enum { H = 32, W = 40, N = H * W };
    float *a = malloc(N * sizeof *a), *s = malloc(N * sizeof *s), *z = malloc(N * sizeof *z);
    float *c = malloc(N * sizeof *c), *u = malloc(N * sizeof *u);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            a[y * W + x] = (float)(0.5 + 0.25 * sin(0.4 * x) * cos(0.3 * y) + 0.1 * sin(1.7 * x + y));
            s[y * W + (x + 1) % W] = a[y * W + x];  /* shifted one pixel right, wrapped */
            c[y * W + x] = 2.0f * a[y * W + x] + 0.3f;
        }
    for (int i = 0; i < N; i++) {
        double e;
        normals(r, &e, 1, 0.0, 0.1);
        z[i] = a[i] + (float)e;
    }
    double cs = fed_audit_cosine(a, a, N), ns = fed_audit_ncc(a, a, N), ss = fed_audit_ssim(a, a, H, W, 1.0);
    check(t, fabs(cs - 1) <= 1e-15 && fabs(ns - 1) <= 1e-15 && fabs(ss - 1) <= 1e-15,
          "similarity of an image to itself: cosine %.17g, NCC %.17g, SSIM %.17g = 1", cs, ns, ss);
    double sh[3] = { fed_audit_cosine(a, s, N), fed_audit_ncc(a, s, N), fed_audit_ssim(a, s, H, W, 1.0) };
    double no[3] = { fed_audit_cosine(a, z, N), fed_audit_ncc(a, z, N), fed_audit_ssim(a, z, H, W, 1.0) };
    check(t, sh[0] < 1 && sh[1] < 0.99 && sh[2] < 0.95 && no[0] < 1 && no[1] < 0.95 && no[2] < 0.8,
          "shifted by a pixel: cosine %.4f, NCC %.4f, SSIM %.4f; noised (sd 0.1): %.4f, %.4f, %.4f (all below 1)",
          sh[0], sh[1], sh[2], no[0], no[1], no[2]);
    check(t, fed_audit_ssim(a, z, H, W, 1.0) == fed_audit_ssim(z, a, H, W, 1.0) &&
             fed_audit_ncc(a, z, N) == fed_audit_ncc(z, a, N),
          "SSIM and NCC are symmetric (bit for bit)");
    check(t, fabs(fed_audit_ncc(a, c, N) - 1) <= 1e-12 && fed_audit_ssim(a, c, H, W, 1.0) < 0.9,
          "brightness and contrast (2a + 0.3): NCC 1, SSIM %.4f (SSIM sees them)", fed_audit_ssim(a, c, H, W, 1.0));
    /* flat images 0.5 and 0.25 (range 1): variances and covariance 0, every window
     * (2 * 0.5 * 0.25 + C1) / (0.25 + 0.0625 + C1), C1 = 1e-4; the mean over the
     * (H - 6)(W - 6) windows rounds once per window */
    for (int i = 0; i < N; i++) a[i] = 0.5f, u[i] = 0.25f;
    double want = (0.25 + 1e-4) / (0.3125 + 1e-4);
    double tol = (H - 6) * (W - 6) * DBL_EPSILON;
    check(t, fabs(fed_audit_ssim(a, u, H, W, 1.0) - want) <= tol && fed_audit_ncc(a, u, N) == 0 &&
             fed_audit_cosine(a, a, 0) == 0,
          "flat images: SSIM = (2 m1 m2 + C1) / (m1^2 + m2^2 + C1) = %.6f, NCC 0, cosine of empty vectors 0", want);
    check(t, isnan(fed_audit_ssim(a, u, 6, W, 1.0)) && isnan(fed_audit_ssim(a, u, H, W, 0)) &&
             !isnan(fed_audit_ssim(a, u, 7, 7, 1.0)),
          "SSIM: an image under 7 pixels a side or range 0 gives NaN; 7x7 (one window) works");
    free(a), free(s), free(z), free(c), free(u);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--eval")) return eval_main();
    test_ctx t = { 0 };
    rng r;
    rng_init(&r, SEED, 0, RNG_PURPOSE_TEST, 0);
    test_auc(&t, &r);
    test_tpr_at_fpr(&t);
    test_yeom(&t);
    test_logit(&t);
    test_lira(&t, &r);
    test_attribute(&t);
    test_similarity(&t, &r);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
