/* fed_audit — the privacy-audit figures of fed/audit.h: ROC AUC and TPR at a fixed FPR
 * over membership scores, Yeom et al.'s loss-threshold attack, the LiRA statistics of
 * Carlini et al. (S&P 2022), attribute-inference accuracy and its baseline, and the
 * similarity of a model-inversion reconstruction to its original (cosine, NCC, SSIM).
 *
 * The one design decision: every figure over score sets is one walk over SORTED copies
 * of the two sets (O(n log n) for the sort, O(n) for the walk, one malloc), never the
 * O(npos * nneg) pair count that defines it; tie groups are walked as groups, which is
 * what makes ties count 1/2 in the AUC and makes each ROC point one distinct threshold.
 * The pair count is the unit test's reference. All sums are in double. */
#include "audit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* log(2 pi), for the Gaussian log-density */
#define LOG_2PI 1.8378770664093454836
/* Past this many standard deviations erfc(z / sqrt 2) is near its underflow (about 38.5):
 * the log survival switches to the asymptotic series there. */
#define TAIL_Z 37.0

/* ---- score sets ----------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Expected trouble in a score set: empty, or a score that is not finite (a diverged
 * model's loss). A NULL array with a positive count is a caller bug. */
static status check_set(const double *x, int n, const char *what)
{
    CHECK(n <= 0 || x, "a score set is an array");
    if (n < 1) {
        log_error("privacy audit: the %s score set is empty", what);
        return STATUS_INPUT;
    }
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            log_error("privacy audit: %s score %d is %g; every score must be finite", what, i, x[i]);
            return STATUS_INPUT;
        }
    return STATUS_OK;
}

/* Both sets checked, copied into one buffer and each sorted ascending: *p = pos sorted,
 * *q = neg sorted (inside the buffer, which the caller frees as *p). */
static status sorted_copies(const double *pos, int npos, const double *neg, int nneg, double **p, double **q)
{
    TRY(check_set(pos, npos, "member"));
    TRY(check_set(neg, nneg, "non-member"));
    double *buf = malloc(((size_t)npos + (size_t)nneg) * sizeof *buf);
    if (!buf) {
        log_error("privacy audit: no memory to sort %d + %d scores", npos, nneg);
        return STATUS_NOMEM;
    }
    memcpy(buf, pos, (size_t)npos * sizeof *buf);
    memcpy(buf + npos, neg, (size_t)nneg * sizeof *buf);
    qsort(buf, (size_t)npos, sizeof *buf, cmp_double);
    qsort(buf + npos, (size_t)nneg, sizeof *buf, cmp_double);
    *p = buf;
    *q = buf + npos;
    return STATUS_OK;
}

status fed_audit_auc(const double *pos, int npos, const double *neg, int nneg, double *auc)
{
    double *p, *q;
    TRY(sorted_copies(pos, npos, neg, nneg, &p, &q));
    /* U = sum over member tie groups (value v, size g) of g * (#neg < v + #neg == v / 2).
     * Each term is a multiple of 1/2 below 2^53: exact in double. */
    double u = 0;
    int j = 0;  /* non-members below the current member value */
    for (int i = 0; i < npos;) {
        double v = p[i];
        int g = 0, e;
        while (i + g < npos && p[i + g] == v) g++;
        while (j < nneg && q[j] < v) j++;
        for (e = j; e < nneg && q[e] == v; e++) {}
        u += (double)g * ((double)j + 0.5 * (double)(e - j));
        i += g;
    }
    *auc = u / ((double)npos * (double)nneg);
    free(p);
    return STATUS_OK;
}

status fed_audit_tpr_at_fpr(const double *pos, int npos, const double *neg, int nneg, double fpr, double *tpr)
{
    if (isnan(fpr)) {
        log_error("privacy audit: the target false-positive rate is NaN");
        return STATUS_INPUT;
    }
    double *p, *q;
    TRY(sorted_copies(pos, npos, neg, nneg, &p, &q));
    /* Thresholds from the top: the ROC point of threshold t counts the scores >= t, so
     * i and j step down over whole tie groups (members and non-members alike). The FPR
     * never falls as t falls, so the first point past the target ends the walk, and the
     * TPR never falls either, so the last point within it has the largest TPR. The
     * point of t = +inf, (0, 0), counts when fpr >= 0. */
    int i = npos, j = nneg, best = 0;  /* scores >= t: npos - i members, nneg - j non-members */
    while (i > 0 || j > 0) {
        double t = i == 0 ? q[j - 1] : j == 0 ? p[i - 1] : fmax(p[i - 1], q[j - 1]);
        while (i > 0 && p[i - 1] >= t) i--;
        while (j > 0 && q[j - 1] >= t) j--;
        if ((double)(nneg - j) / (double)nneg > fpr) break;  /* the division roc_curve does */
        best = npos - i;
    }
    *tpr = (double)best / (double)npos;
    free(p);
    return STATUS_OK;
}

status fed_audit_loss_threshold(const double *member, int nm, const double *nonmember, int nn,
                                fed_audit_threshold *out)
{
    /* The score -loss makes members score high: its AUC is the U statistic with the roles
     * of the two loss sets exchanged (P(-Lm > -Ln) = P(Ln > Lm)), so no negated copies. */
    double auc;
    TRY(fed_audit_auc(nonmember, nn, member, nm, &auc));
    double sum = 0;
    for (int i = 0; i < nm; i++) sum += member[i];
    double thr = sum / nm;
    int tp = 0, fp = 0;
    for (int i = 0; i < nm; i++) tp += member[i] <= thr;
    for (int i = 0; i < nn; i++) fp += nonmember[i] <= thr;
    out->threshold = thr;
    out->tpr = (double)tp / nm;
    out->fpr = (double)fp / nn;
    out->accuracy = (double)(tp + nn - fp) / ((double)nm + nn);
    out->advantage = out->tpr - out->fpr;
    out->auc = auc;
    return STATUS_OK;
}

/* ---- LiRA ----------------------------------------------------------------------------- */

double fed_audit_logit_conf(double p)
{
    if (isnan(p)) return p;
    p = fmin(fmax(p, 0.0), 1.0);
    /* 1 - p is exact for p >= 1/2 (Sterbenz), so the upper floor lands on EPS itself, not
     * on 1 - fl(1 - EPS) (which is 1.00009e-12); log1p keeps small p accurate */
    double lq = p < 0.5 ? log1p(-p) : log(fmax(1.0 - p, FED_AUDIT_LOGIT_EPS));
    return log(fmax(p, FED_AUDIT_LOGIT_EPS)) - lq;
}

double fed_audit_logit_margin(const float *z, int C, int y)
{
    CHECK(z && C >= 2 && y >= 0 && y < C, "logits of at least two classes and a class index inside them");
    /* log sum_{j != y} exp(z_j) = m + log sum exp(z_j - m), m the largest of them: every
     * term <= 1 and one equals 1, so neither overflow nor a log of 0. */
    double m = -INFINITY;
    for (int j = 0; j < C; j++)
        if (j != y && (double)z[j] > m) m = z[j];  /* not fmax: aarch64 GCC 12 ICEs vectorising it */
    double s = 0;
    for (int j = 0; j < C; j++)
        if (j != y) s += exp((double)z[j] - m);
    return (double)z[y] - (m + log(s));
}

fed_audit_gauss fed_audit_gauss_fit(const double *x, int n)
{
    CHECK(n <= 0 || x, "shadow phis are an array");
    if (n < 1) return (fed_audit_gauss){ NAN, NAN };
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return (fed_audit_gauss){ mean, fmax(ss / n, FED_AUDIT_LIRA_VAR_MIN) };
}

/* log N(x; mean, var) */
static double gauss_logpdf(double x, double mean, double var)
{
    double d = x - mean;
    return -0.5 * (LOG_2PI + log(var)) - d * d / (2.0 * var);
}

double fed_audit_lira_online(double target, const double *in, int nin, const double *out, int nout)
{
    fed_audit_gauss gi = fed_audit_gauss_fit(in, nin), go = fed_audit_gauss_fit(out, nout);
    return gauss_logpdf(target, gi.mean, gi.var) - gauss_logpdf(target, go.mean, go.var);
}

double fed_audit_lira_online_global(double target, const double *in, int nin, const double *out, int nout,
                                    double var_in, double var_out)
{
    if (isnan(var_in) || isnan(var_out)) return NAN;  /* fmax would floor a NaN (an empty pool) */
    fed_audit_gauss gi = fed_audit_gauss_fit(in, nin), go = fed_audit_gauss_fit(out, nout);
    var_in = fmax(var_in, FED_AUDIT_LIRA_VAR_MIN);
    var_out = fmax(var_out, FED_AUDIT_LIRA_VAR_MIN);
    return gauss_logpdf(target, gi.mean, var_in) - gauss_logpdf(target, go.mean, var_out);
}

/* log Pr[Z > z], Z standard normal, with relative resolution over the whole line:
 * below 0 as log1p of minus the lower tail (so phis far below the OUT mean still rank),
 * up to TAIL_Z from erfc, past it from Q(z) ~ phi(z)/z (1 - 1/z^2 + 3/z^4 - 15/z^6 +
 * 105/z^8), whose next term, 945/z^10 < 3e-13 there, bounds the error (Abramowitz &
 * Stegun 26.2.12). */
static double log_normal_sf(double z)
{
    if (z < 0) return log1p(-0.5 * erfc(-z / sqrt(2.0)));
    if (z < TAIL_Z) return log(0.5 * erfc(z / sqrt(2.0)));
    double r = 1.0 / (z * z);
    double series = 1.0 - r * (1.0 - r * (3.0 - r * (15.0 - r * 105.0)));
    return -0.5 * z * z - log(z) - 0.5 * LOG_2PI + log(series);
}

double fed_audit_lira_offline_global(double target, const double *out, int nout, double var_out)
{
    if (isnan(var_out)) return NAN;
    fed_audit_gauss go = fed_audit_gauss_fit(out, nout);
    return -log_normal_sf((target - go.mean) / sqrt(fmax(var_out, FED_AUDIT_LIRA_VAR_MIN)));
}

double fed_audit_lira_offline(double target, const double *out, int nout)
{
    fed_audit_gauss go = fed_audit_gauss_fit(out, nout);
    return -log_normal_sf((target - go.mean) / sqrt(go.var));
}

void fed_audit_pool_add(fed_audit_pool *p, const double *x, int n)
{
    CHECK(p && (n <= 0 || x), "a pool and an array of phis");
    if (n < 1) return;
    double mean = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) p->ss += (x[i] - mean) * (x[i] - mean);
    p->count += n;
    p->groups++;
}

double fed_audit_pool_var(const fed_audit_pool *p)
{
    if (p->count <= p->groups) return NAN;  /* no degree of freedom: one phi per example */
    return fmax(p->ss / (double)(p->count - p->groups), FED_AUDIT_LIRA_VAR_MIN);
}

/* ---- attribute inference -------------------------------------------------------------- */

double fed_audit_attribute_accuracy(const int *guess, const int *truth, int n)
{
    CHECK(n <= 0 || (guess && truth), "guesses and true attributes are arrays");
    if (n < 1) return NAN;
    int hit = 0;
    for (int i = 0; i < n; i++) hit += guess[i] == truth[i];
    return (double)hit / n;
}

status fed_audit_attribute_baseline(const int *truth, int n, double *rate)
{
    CHECK(n <= 0 || truth, "true attributes are an array");
    if (n < 1) {
        log_error("privacy audit: no records for the attribute baseline");
        return STATUS_INPUT;
    }
    int *s = malloc((size_t)n * sizeof *s);
    if (!s) {
        log_error("privacy audit: no memory to sort %d attributes", n);
        return STATUS_NOMEM;
    }
    memcpy(s, truth, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_int);
    int most = 0;
    for (int i = 0; i < n;) {
        int run = 1;
        while (i + run < n && s[i + run] == s[i]) run++;
        if (run > most) most = run;
        i += run;
    }
    free(s);
    *rate = (double)most / n;
    return STATUS_OK;
}

/* ---- model inversion ------------------------------------------------------------------ */

/* dot / sqrt(aa * bb) clamped to [-1, 1] (rounding can pass 1 for identical inputs);
 * 0 when either norm is 0. */
static double cosine_of(double dot, double aa, double bb)
{
    if (aa == 0 || bb == 0) return 0;
    return fmin(1.0, fmax(-1.0, dot / (sqrt(aa) * sqrt(bb))));
}

double fed_audit_cosine(const float *a, const float *b, size_t n)
{
    CHECK(n == 0 || (a && b), "two vectors");
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        dot += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return cosine_of(dot, aa, bb);
}

double fed_audit_ncc(const float *a, const float *b, size_t n)
{
    CHECK(n == 0 || (a && b), "two images");
    if (n == 0) return 0;
    double ma = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
    }
    ma /= (double)n;
    mb /= (double)n;
    /* two passes: the one-pass sum x^2 - n mean^2 cancels for images far from 0 */
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        double da = a[i] - ma, db = b[i] - mb;
        dot += da * db;
        aa += da * da;
        bb += db * db;
    }
    return cosine_of(dot, aa, bb);
}

/* SSIM of the 7x7 window at (r, c) of two images of width w (row-major). */
static double ssim_window(const float *a, const float *b, int w, int r, int c, double C1, double C2)
{
    enum { K = FED_AUDIT_SSIM_WIN, NP = K * K };
    double ma = 0, mb = 0;
    for (int y = r; y < r + K; y++)
        for (int x = c; x < c + K; x++) {
            ma += a[(size_t)y * w + x];
            mb += b[(size_t)y * w + x];
        }
    ma /= NP;
    mb /= NP;
    double va = 0, vb = 0, cov = 0;  /* sums of squared / crossed deviations, two-pass */
    for (int y = r; y < r + K; y++)
        for (int x = c; x < c + K; x++) {
            double da = a[(size_t)y * w + x] - ma, db = b[(size_t)y * w + x] - mb;
            va += da * da;
            vb += db * db;
            cov += da * db;
        }
    va /= NP - 1;  /* sample (co)variances, as use_sample_covariance */
    vb /= NP - 1;
    cov /= NP - 1;
    return (2.0 * ma * mb + C1) * (2.0 * cov + C2) / ((ma * ma + mb * mb + C1) * (va + vb + C2));
}

double fed_audit_ssim(const float *a, const float *b, int h, int w, double range)
{
    enum { K = FED_AUDIT_SSIM_WIN };
    if (h < K || w < K || !(range > 0)) return NAN;
    CHECK(a && b, "two images");
    /* Wang et al. 2004, eq. 13 with K1 = 0.01, K2 = 0.03: the constants keep S finite
     * where a window is flat (both means or both variances near 0). */
    double C1 = (0.01 * range) * (0.01 * range), C2 = (0.03 * range) * (0.03 * range);
    double sum = 0;
    for (int r = 0; r + K <= h; r++)
        for (int c = 0; c + K <= w; c++) sum += ssim_window(a, b, w, r, c, C1, C2);
    return sum / ((double)(h - K + 1) * (double)(w - K + 1));
}
