/* fed_invert — the two attacks of nebula-fed audit beside membership inference, both
 * black-box on the released global model (its class outputs, nothing else):
 *
 *   attribute inference  Yeom, Giacomelli, Fredrikson, Jha, "Privacy Risk in Machine
 *                        Learning: Analyzing the Connection to Overfitting", CSF 2018,
 *                        Section 5: the adversary knows a record's label and every
 *                        feature but one, tries each candidate value of the hidden one
 *                        and keeps the value whose loss under the model is lowest. The
 *                        hidden feature is one pixel (all channels), its value one of L
 *                        equal-width bins; the advantage is the accuracy on members less
 *                        the accuracy on non-members (what the model tells about its
 *                        training records beyond what it tells about anyone).
 *   model inversion      Fredrikson, Jha, Ristenpart, "Model Inversion Attacks that
 *                        Exploit Confidence Information and Basic Countermeasures", CCS
 *                        2015, MI-FACE: gradient descent on 1 - p_y(x) (here its
 *                        log form, the cross-entropy -log p_y(x)) from the blank image
 *                        (all-zero once normalised: the per-channel mean), per class
 *                        y; the reconstruction is scored against the class's mean
 *                        member image (fed/audit.h: SSIM, NCC, cosine) and counts as
 *                        identified when it correlates best with its own class's mean.
 *
 * The one design decision: every forward goes through the evaluation model f->ev in full
 * batches of f->eval_batch images, because the attacker only queries: the attribute
 * candidates (L per record) and the inversion's finite-difference probes (2 per input
 * coordinate and class: 2 x 3HW x classes per step) are laid end to end over the records
 * or classes and cut into batches, so only the very last batch of a pass is padded. The
 * gradient is a central difference, never model_backward: an attacker holding only the
 * API has no backward pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/audit.h"
#include "fed_impl.h"

/* The inversion's finite-difference step on the normalised image: 1e-2 x std_c x 255 is
 * under one 8-bit grey level for std_c < 0.39, near the cube root of float's epsilon
 * (4.9e-3) that balances rounding of float32 logits against truncation at unit scale, and
 * large enough that a ReLU network's kinks rarely fall inside a probe pair. */
#define FED_INV_FD_STEP 1e-2

/* Cross-entropy of each of the first n images staged in f->evbatch (targets set) under
 * the global model: loss[n], nats. */
static status fed_batch_losses(fed_run *f, int n, double *loss)
{
    TRY(model_forward(&f->ev, &f->evbatch, false));
    int C = 0;
    const float *z = model_class_logits(&f->ev, &C); /* (B, C) */
    for (int j = 0; j < n; j++) loss[j] = fed_class_xent(z + (size_t)j * C, C, f->evbatch.targets[j], NULL);
    return STATUS_OK;
}

/* ---- attribute inference ----------------------------------------------------------------- */

/* The hidden attribute: a pixel and the bins of its value per channel. */
typedef struct fed_attr_bins {
    int pixel;       /* row-major index y W + x into one (H, W) channel */
    int levels;      /* L bins */
    double lo[3];    /* per channel: the pixel's minimum over data.train, normalised units */
    double width[3]; /* per channel: (max - min) / L; 0 for a constant pixel (every value is bin 0) */
} fed_attr_bins;

/* Bin of value v (equal-width bins of `width` from lo), clamped to [0, L): a non-member's
 * value outside the members' range falls in an end bin. */
static int fed_attr_bin(double v, double lo, double width, int L)
{
    if (!(width > 0)) return 0;
    double k = floor((v - lo) / width);
    return k < 0 ? 0 : k >= L ? L - 1 : (int)k;
}

/* The pixel of largest variance over data.train (channel 0, the first on ties) and its
 * per-channel [min, max] cut into L bins. */
static void fed_attr_choose(const fed_data *d, int L, fed_attr_bins *a)
{
    size_t hw = (size_t)d->H * d->W, img = 3 * hw;
    double best = -1;
    a->pixel = 0, a->levels = L;
    for (size_t p = 0; p < hw; p++) {
        double mean = 0, ss = 0;  /* Welford's update: one pass, no cancellation */
        for (int64_t i = 0; i < d->n; i++) {
            double v = d->x[(size_t)i * img + p], dv = v - mean;
            mean += dv / (double)(i + 1);
            ss += dv * (v - mean);
        }
        if (ss > best) best = ss, a->pixel = (int)p;
    }
    for (int c = 0; c < 3; c++) {
        const float *x = d->x + (size_t)c * hw + (size_t)a->pixel;
        double lo = x[0], hi = x[0];
        for (int64_t i = 1; i < d->n; i++) {
            double v = x[(size_t)i * img];
            lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        a->lo[c] = lo, a->width[c] = (hi - lo) / L;
    }
}

/* Guesses the hidden bin of every record of d: candidate k of record i is laid at index
 * i L + k of one long sequence cut into eval batches; guess[i] = the k of least loss
 * (the lowest k on ties), truth[i] = the channel-0 bin of the record's own value. */
static status fed_attr_guess(fed_run *f, const fed_data *d, const fed_attr_bins *a, int *guess, int *truth)
{
    int B = f->eval_batch, L = a->levels;
    size_t hw = (size_t)d->H * d->W, img = 3 * hw;
    int64_t total = d->n * L;
    double *loss = malloc((size_t)B * sizeof *loss), *best = malloc((size_t)d->n * sizeof *best);
    status st = STATUS_NOMEM;
    if (!loss || !best) goto free_loss;
    for (int64_t i = 0; i < d->n; i++) {
        best[i] = INFINITY, guess[i] = 0;
        truth[i] = fed_attr_bin(d->x[(size_t)i * img + a->pixel], a->lo[0], a->width[0], L);
    }
    for (int64_t g0 = 0; g0 < total; g0 += B) {
        int n = total - g0 < B ? (int)(total - g0) : B;
        for (int j = 0; j < B; j++) {
            int64_t g = (g0 + j) % total;  /* slots past the end repeat candidates; not counted */
            int64_t i = g / L;
            int k = (int)(g % L);
            fed_batch_put(&f->evbatch, j, d, i);
            float *x = f->evbatch.images + (size_t)j * img; /* (3, H, W) */
            for (int c = 0; c < 3; c++) x[(size_t)c * hw + a->pixel] = (float)(a->lo[c] + (k + 0.5) * a->width[c]);
        }
        if ((st = fed_batch_losses(f, n, loss)) != STATUS_OK) goto free_loss;
        for (int j = 0; j < n; j++) {
            int64_t i = (g0 + j) / L;
            if (loss[j] < best[i]) best[i] = loss[j], guess[i] = (int)((g0 + j) % L);
        }
    }
    st = STATUS_OK;
free_loss:
    free(loss), free(best);
    return st;
}

status fed_audit_attribute(fed_run *f, fed_attr_report *rep)
{
    memset(rep, 0, sizeof *rep);
    if (!f->train.images || f->val.n < 1) {
        log_error0("nebula-fed audit: attribute inference needs an image classifier and held-out data (data.val): "
                   "the hidden attribute is a pixel, and the held-out samples are the non-members");
        return STATUS_INPUT;
    }
    fed_attr_bins a;
    fed_attr_choose(&f->train, (int)config_int(f->cfg, "audit.attribute_levels"), &a);
    int64_t nm = f->train.n, nn = f->val.n;
    int *gm = malloc((size_t)nm * sizeof *gm), *tm = malloc((size_t)nm * sizeof *tm);
    int *gn = malloc((size_t)nn * sizeof *gn), *tn = malloc((size_t)nn * sizeof *tn);
    status st = STATUS_NOMEM;
    if (!gm || !tm || !gn || !tn) goto free_guesses;
    if ((st = fed_attr_guess(f, &f->train, &a, gm, tm)) != STATUS_OK) goto free_guesses;
    if ((st = fed_attr_guess(f, &f->val, &a, gn, tn)) != STATUS_OK) goto free_guesses;
    if ((st = fed_audit_attribute_baseline(tm, (int)nm, &rep->baseline)) != STATUS_OK) goto free_guesses;
    rep->members = nm, rep->nonmembers = nn;
    rep->levels = a.levels, rep->pixel = a.pixel;
    rep->member_acc = fed_audit_attribute_accuracy(gm, tm, (int)nm);
    rep->nonmember_acc = fed_audit_attribute_accuracy(gn, tn, (int)nn);
    rep->advantage = rep->member_acc - rep->nonmember_acc;
free_guesses:
    free(gm), free(tm), free(gn), free(tn);
    return st;
}

/* ---- model inversion --------------------------------------------------------------------- */

/* From data.train: each coordinate's [lo, hi], lo and hi (3, H, W) — the attacker's
 * knowledge of the pixel range, which the reconstruction is projected into — and, for the
 * auditor's scoring only, each class's mean member image (the class's representative a
 * reconstruction is compared with), mean (C, 3, H, W), and its members, count[C]. */
static status fed_inv_targets(const fed_data *d, int C, float *lo, float *hi, float *mean, int64_t *count)
{
    size_t img = 3 * (size_t)d->H * d->W;
    double *sum = calloc((size_t)C * img, sizeof *sum); /* (C, 3, H, W) */
    if (!sum) return STATUS_NOMEM;
    memcpy(lo, d->x, img * sizeof *lo), memcpy(hi, d->x, img * sizeof *hi);
    memset(count, 0, (size_t)C * sizeof *count);
    for (int64_t i = 0; i < d->n; i++) {
        const float *x = d->x + (size_t)i * img;
        int y = d->labels[i];
        CHECK(y >= 0 && y < C, "a label within the model's classes");
        count[y]++;
        for (size_t p = 0; p < img; p++) {
            lo[p] = x[p] < lo[p] ? x[p] : lo[p], hi[p] = x[p] > hi[p] ? x[p] : hi[p];
            sum[(size_t)y * img + p] += x[p];
        }
    }
    for (size_t k = 0; k < (size_t)C * img; k++) {
        int64_t n = count[k / img];
        mean[k] = n ? (float)(sum[k] / (double)n) : 0;
    }
    free(sum);
    return STATUS_OK;
}

/* One gradient step for every class at once: probe q of class slot s (s < ns, class
 * cls[s]) is x_s +- FED_INV_FD_STEP e_i (i = q / 2, the sign from q's parity), the
 * probes of all slots end to end and cut into eval batches; grad (ns, D) gets the central
 * differences, then x (ns, D) steps by -lr grad and is projected into [lo, hi] (the
 * attacker knows the range each pixel takes; MI-FACE likewise keeps pixels in [0, 1]). */
static status fed_inv_step(fed_run *f, float *x, const int *cls, int ns, size_t D, double lr, const float *lo,
                           const float *hi, double *grad, double *loss)
{
    int B = f->eval_batch;
    int64_t per = 2 * (int64_t)D, total = per * ns;
    for (int64_t g0 = 0; g0 < total; g0 += B) {
        int n = total - g0 < B ? (int)(total - g0) : B;
        for (int j = 0; j < B; j++) {
            int64_t g = (g0 + j) % total, s = g / per, i = (g % per) / 2;  /* past the end: repeats, not counted */
            float *p = f->evbatch.images + (size_t)j * D; /* (3, H, W) */
            memcpy(p, x + (size_t)s * D, D * sizeof *p);
            p[i] += g % 2 ? -(float)FED_INV_FD_STEP : (float)FED_INV_FD_STEP;
            f->evbatch.targets[j] = cls[s];
        }
        TRY(fed_batch_losses(f, n, loss));
        for (int j = 0; j < n; j++) {
            int64_t g = g0 + j, s = g / per, i = (g % per) / 2;
            grad[(size_t)s * D + i] += (g % 2 ? -loss[j] : loss[j]) / (2 * FED_INV_FD_STEP);
        }
    }
    for (size_t k = 0; k < (size_t)ns * D; k++) {
        size_t p = k % D;
        float v = (float)(x[k] - lr * grad[k]);
        x[k] = v < lo[p] ? lo[p] : v > hi[p] ? hi[p] : v;
        grad[k] = 0;
    }
    return STATUS_OK;
}

/* The scores of the reconstructions x (ns, D) of classes cls[ns] against the class means
 * (C, D) of the classes with members: SSIM on channel 0, NCC and cosine over the image,
 * and identification (NCC with its own class's mean above every other class's). */
static void fed_inv_score(const fed_data *d, const float *x, const int *cls, int ns, const float *mean,
                          const int64_t *count, int C, const float *lo, const float *hi, fed_inv_report *rep)
{
    size_t hw = (size_t)d->H * d->W, D = 3 * hw;
    double cmin = lo[0], cmax = hi[0];  /* channel 0's range over data.train: SSIM's L */
    for (size_t p = 1; p < hw; p++) cmin = lo[p] < cmin ? lo[p] : cmin, cmax = hi[p] > cmax ? hi[p] : cmax;
    double ssim = 0, ncc = 0, cosine = 0;
    int hit = 0;
    for (int s = 0; s < ns; s++) {
        const float *r = x + (size_t)s * D, *m = mean + (size_t)cls[s] * D;
        ssim += fed_audit_ssim(r, m, d->H, d->W, cmax - cmin);
        double own = fed_audit_ncc(r, m, D);
        ncc += own, cosine += fed_audit_cosine(r, m, D);
        bool best = true;
        for (int k = 0; k < C; k++)
            if (k != cls[s] && count[k] > 0 && fed_audit_ncc(r, mean + (size_t)k * D, D) >= own) best = false;
        hit += best;
    }
    rep->ssim = ssim / ns, rep->ncc = ncc / ns, rep->cosine = cosine / ns;
    rep->identified = (double)hit / ns;
}

status fed_audit_inversion(fed_run *f, fed_inv_report *rep)
{
    memset(rep, 0, sizeof *rep);
    int C = model_num_classes(&f->spec);
    if (!f->train.images || C < 2 || f->train.n < 1) {
        log_error0("nebula-fed audit: model inversion needs an image classifier (a model with classes, image data "
                   "in data.train): it reconstructs a class's image from the model's outputs");
        return STATUS_INPUT;
    }
    const fed_data *d = &f->train;
    size_t D = 3 * (size_t)d->H * d->W;
    int steps = (int)config_int(f->cfg, "audit.inversion_steps");
    /* default 0.1 (normalised units per unit of gradient): on the digits MLP, 100 steps at
     * 0.1 reach the NCC of 1000 steps at 0.01 (0.72), where 100 at 0.01 stop at 0.54; a
     * larger step sharpens the image (SSIM) without changing which class it matches */
    double lr = config_float(f->cfg, "audit.inversion_lr");
    float *lo = malloc(D * sizeof *lo), *hi = malloc(D * sizeof *hi);
    float *mean = malloc((size_t)C * D * sizeof *mean), *x = calloc((size_t)C * D, sizeof *x);
    int64_t *count = malloc((size_t)C * sizeof *count);
    int *cls = malloc((size_t)C * sizeof *cls);
    double *grad = calloc((size_t)C * D, sizeof *grad), *loss = malloc((size_t)f->eval_batch * sizeof *loss);
    status st = STATUS_NOMEM;
    if (!lo || !hi || !mean || !x || !count || !cls || !grad || !loss) goto free_inv;
    if ((st = fed_inv_targets(d, C, lo, hi, mean, count)) != STATUS_OK) goto free_inv;
    int ns = 0;
    for (int y = 0; y < C; y++)
        if (count[y] > 0) cls[ns++] = y;
    /* x starts at 0 in every slot: the normalised image of the per-channel mean (data.mean) */
    for (int t = 0; t < steps; t++)
        if ((st = fed_inv_step(f, x, cls, ns, D, lr, lo, hi, grad, loss)) != STATUS_OK) goto free_inv;
    rep->classes = ns, rep->skipped = C - ns, rep->steps = steps;
    fed_inv_score(d, x, cls, ns, mean, count, C, lo, hi, rep);
    st = STATUS_OK;
free_inv:
    free(lo), free(hi), free(mean), free(x), free(count), free(cls), free(grad), free(loss);
    return st;
}
