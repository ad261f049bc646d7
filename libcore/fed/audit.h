/* audit — the measurement side of a privacy audit of federated training: the figures the
 * literature reports, computed from attack scores that the audit driver produces by
 * running models (this module runs none).
 *
 *   membership inference   ROC AUC (Mann-Whitney, ties 1/2), TPR at a fixed low FPR
 *                          (Carlini et al., "Membership Inference Attacks From First
 *                          Principles", S&P 2022, report 1% and 0.1%), the loss-threshold
 *                          attack of Yeom et al. ("Privacy Risk in Machine Learning:
 *                          Analyzing the Connection to Overfitting", CSF 2018) and the
 *                          scores of LiRA (Carlini et al. 2022), online and offline
 *   attribute inference    success rate and its baseline, the majority-class rate
 *   model inversion        cosine similarity, normalised cross-correlation and SSIM
 *                          (Wang, Bovik, Sheikh, Simoncelli, "Image Quality Assessment:
 *                          From Error Visibility to Structural Similarity", IEEE TIP 2004)
 *
 * Score convention: a higher score means "member" everywhere; a loss is turned into the
 * score -loss by the caller (or by fed_audit_loss_threshold).
 *
 * The one design decision: two kinds of function. Figures over score SETS sort a copy
 * of their input (O(n log n); one malloc of the set sizes, freed before return), so they
 * can fail: they return a status (STATUS_NOMEM; STATUS_INPUT for an empty set or a
 * non-finite score, logged) and write the figure through a pointer. Per-sample and
 * per-pair formulas (LiRA, similarities, attribute accuracy) allocate nothing and return
 * the value itself, NaN where the figure is undefined (said per function). A count below 1
 * is an empty set; a NULL array with a positive count is a bug (die).
 *
 * validation/unit/test_fed_audit.c checks the definitions; validation/cli/test_fed_audit.sh
 * checks AUC and TPR at FPR against scikit-learn (roc_auc_score, roc_curve) and SSIM
 * against scikit-image's structural_similarity where it is installed. */
#ifndef NEBULA_FED_AUDIT_H
#define NEBULA_FED_AUDIT_H

#include <stddef.h>

#include "base/log.h"

/* ---- membership inference over score sets ---------------------------------------- */

/* ROC AUC of member scores pos[npos] against non-member scores neg[nneg]: the
 * probability that a random member outscores a random non-member, ties counted 1/2
 * (the Mann-Whitney U statistic over npos*nneg; equals the trapezoidal area under the
 * ROC curve, sklearn's roc_auc_score). 1 = separable, 0.5 = chance, 0 = reversed.
 * STATUS_INPUT when a set is empty or a score is not finite. */
status fed_audit_auc(const double *pos, int npos, const double *neg, int nneg, double *auc);

/* The largest true-positive rate over thresholds t ("member" when score >= t) whose
 * false-positive rate is <= fpr: sklearn's roc_curve(..., drop_intermediate=False)
 * read at its last point with fpr <= target (the default drop_intermediate=True can
 * drop such a point inside a run of tied groups, and reads lower there). Rates are
 * count / set size in double, so fpr = 0.01 over 1000 non-members admits 10 exactly.
 * fpr < 0 leaves no threshold (0 is written); fpr >= 1 gives 1. STATUS_INPUT as for
 * fed_audit_auc, and for a NaN fpr. */
status fed_audit_tpr_at_fpr(const double *pos, int npos, const double *neg, int nneg, double fpr,
                            double *tpr);

/* Yeom et al.'s loss-threshold attack (CSF 2018; the adversary that knows the average
 * training loss): "member" when loss <= threshold, threshold = the mean member loss. */
typedef struct fed_audit_threshold {
    double threshold;  /* mean of the member losses, the loss unit */
    double tpr;        /* members with loss <= threshold / members */
    double fpr;        /* non-members with loss <= threshold / non-members */
    double accuracy;   /* correct calls / (members + non-members); 1/2 + advantage/2 when the sets are equal */
    double advantage;  /* Yeom's membership advantage, tpr - fpr, in [-1, 1] */
    double auc;        /* ROC AUC of the score -loss over every threshold (fed_audit_auc) */
} fed_audit_threshold;

/* The attack on member losses member[nm] and non-member losses nonmember[nn]. STATUS_INPUT
 * as for fed_audit_auc. */
status fed_audit_loss_threshold(const double *member, int nm, const double *nonmember, int nn,
                                fed_audit_threshold *out);

/* ---- LiRA (Carlini et al. 2022, Algorithm 1) --------------------------------------- */

/* p and 1 - p are each floored at EPS before the logit, so phi lies within
 * +-log(1 / EPS) = +-27.6: a float softmax rounds confident predictions to 1.0f, whose
 * logit would be +inf. fed_audit_logit_margin has no such ceiling. */
#define FED_AUDIT_LOGIT_EPS 1e-12
/* The smallest variance a fitted Gaussian is given (phi units squared): one shadow model,
 * or shadows that agree exactly, fit a variance of 0 (the paper's code adds 1e-30 to the
 * standard deviation for the same reason). Use the global variance when shadows are few. */
#define FED_AUDIT_LIRA_VAR_MIN 1e-12

/* phi(p) = log(p / (1 - p)), p = the model's probability of the true class: the logit
 * scaling that makes the confidence of one example over shadow models close to
 * Gaussian. p outside [0, 1] is clamped into it, then p and 1 - p are floored at
 * FED_AUDIT_LOGIT_EPS; NaN in, NaN out. */
double fed_audit_logit_conf(double p);

/* The same phi from the logits z[C] of one example with true class y, without a
 * probability in between: z_y - log(sum_{j != y} exp(z_j)), computed shifted by the
 * maximum (no overflow). The paper's recommended stable form; unclamped. C >= 2. */
double fed_audit_logit_margin(const float *z, int C, int y);

/* A Gaussian fitted by maximum likelihood: the mean and the variance with divisor n (the
 * paper's code: numpy's mean and std), the variance floored at FED_AUDIT_LIRA_VAR_MIN. */
typedef struct fed_audit_gauss {
    double mean;  /* phi units */
    double var;   /* phi units squared, >= FED_AUDIT_LIRA_VAR_MIN */
} fed_audit_gauss;

/* The fit of x[n]; n < 1 gives NaN mean and variance. */
fed_audit_gauss fed_audit_gauss_fit(const double *x, int n);

/* Online LiRA: the log-likelihood ratio log N(target; in) - log N(target; out) of the
 * target model's phi under Gaussians fitted to the phis of the shadow models trained
 * WITH the example (in[nin]) and WITHOUT it (out[nout]), each with its own per-example
 * variance. Higher = member. NaN when nin < 1 or nout < 1. */
double fed_audit_lira_online(double target, const double *in, int nin, const double *out, int nout);

/* The same with the paper's global (fixed) variance, its choice when shadow models are
 * few (below about 64 per-example variances are too noisy): the means come from in[] and
 * out[], the variances var_in and var_out are shared by every example
 * (fed_audit_pool_var), floored at FED_AUDIT_LIRA_VAR_MIN; a NaN variance gives NaN. */
double fed_audit_lira_online_global(double target, const double *in, int nin, const double *out, int nout,
                                    double var_in, double var_out);

/* Offline LiRA (OUT shadows only): the one-sided test of Algorithm 1, score
 * -log Pr[Z > target], Z ~ N(mean, var) fitted to out[nout]. The paper's 1 - Pr[Z > target]
 * up to an increasing map (so the same ROC), but a strong member keeps its own score where
 * 1 - Pr would round to 1: the log survival is taken from erfc, and past 37 standard
 * deviations (where erfc underflows) from its asymptotic series, relative error < 1e-12.
 * Higher = member. NaN when nout < 1. */
double fed_audit_lira_offline(double target, const double *out, int nout);
/* The same with a global variance var_out (as in fed_audit_lira_online_global). */
double fed_audit_lira_offline_global(double target, const double *out, int nout, double var_out);

/* The pooled within-example variance for the global-variance variants: each example's
 * shadow phis added with fed_audit_pool_add (IN and OUT phis in two pools), the
 * variance is sum of squared deviations from each example's own mean over
 * (count - examples) degrees of freedom. Zero-initialise; a plain accumulator. */
typedef struct fed_audit_pool {
    double ss;    /* sum over examples of sum (x - example mean)^2, phi units squared */
    long count;   /* phis added */
    long groups;  /* examples added (with at least one phi) */
} fed_audit_pool;

void fed_audit_pool_add(fed_audit_pool *p, const double *x, int n);
/* The pooled variance, floored at FED_AUDIT_LIRA_VAR_MIN; NaN while count <= groups. */
double fed_audit_pool_var(const fed_audit_pool *p);

/* ---- attribute inference ----------------------------------------------------------- */

/* The share of the n records whose guessed attribute equals the true one; NaN when n < 1. */
double fed_audit_attribute_accuracy(const int *guess, const int *truth, int n);

/* The baseline of an attribute attack: the share of the most frequent value in
 * truth[n], i.e. the accuracy of always guessing the majority class (sorts a copy).
 * STATUS_INPUT when n < 1. */
status fed_audit_attribute_baseline(const int *truth, int n, double *rate);

/* ---- model inversion: a reconstruction against the original ----------------------- */

/* Cosine similarity a.b / (|a| |b|) of two vectors of n, accumulated in double; 0 when
 * either is all zero (no direction: nothing recovered). In [-1, 1]. */
double fed_audit_cosine(const float *a, const float *b, size_t n);

/* Normalised cross-correlation (Pearson's r) of two images of n pixels: the cosine of
 * the mean-removed images, so invariant to brightness and contrast. 0 when either is
 * constant. In [-1, 1]. */
double fed_audit_ncc(const float *a, const float *b, size_t n);

/* Window side of fed_audit_ssim, pixels. */
#define FED_AUDIT_SSIM_WIN 7

/* Mean SSIM of two single-channel images (h, w), row-major, pixel values spanning
 * range (the dynamic range L: 1 for [0, 1], 255 for 8-bit): Wang et al. 2004's
 * S = (2 mu_a mu_b + C1)(2 cov + C2) / ((mu_a^2 + mu_b^2 + C1)(var_a + var_b + C2)),
 * C1 = (0.01 L)^2, C2 = (0.03 L)^2, over every 7x7 uniform window that lies inside the
 * image (sample (co)variances, divisor 48), averaged: scikit-image's
 * structural_similarity with its defaults (win_size 7, gaussian_weights False,
 * use_sample_covariance True). A colour image is the mean over its channels, as
 * scikit-image's channel_axis does. Symmetric in a and b; 1 for identical images.
 * NaN when h or w < 7 or range <= 0. */
double fed_audit_ssim(const float *a, const float *b, int h, int w, double range);

#endif
