/* fed_lira — the Likelihood Ratio Attack with shadow models (Carlini et al., "Membership
 * Inference Attacks From First Principles", S&P 2022, Algorithm 1) against the released
 * global model of a federated run: nebula-fed audit with audit.shadows = K.
 *
 * The pool is data.train (the members) followed by data.val (the non-members). Shadow k
 * holds each pool example with probability 1/2 (the stream (seed, FED_STREAM_SHADOW,
 * RNG_PURPOSE_FED, k)) and is trained by the very recipe of the target — this
 * configuration's clients, partition, rounds, optimizer, DP and secure aggregation — in
 * this process, with fed.seed + 1 + k as its seed, so its initialisation, partition,
 * sampling and noise are its own. Every pool example's logit-scaled confidence phi
 * (fed_audit_logit_margin; text: the sequence's mean log-likelihood, minus its loss) is
 * taken under every shadow; the target's phi is then scored
 * against the Gaussians of the IN and OUT phis (audit.h: the global variances, the
 * paper's choice below 64 shadows), online (IN and OUT) and offline (OUT only).
 *
 * The one design decision: the attacker gets the target's whole training recipe and a
 * pool that contains the target's members — Carlini et al.'s threat model, the strongest
 * in their paper — so a figure here bounds what a weaker attacker could do; DP's
 * guarantee holds against this one too, which is what the audit checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/audit.h"
#include "fed_impl.h"

#define FED_STREAM_SHADOW 0xFFFFFE03u  /* the shadows' membership draws (beside fed_impl.h's) */

/* The examples of a then b whose keep[] is set (keep NULL: all); text keeps each
 * window's source file, b's numbered after a's (by_file deals whole files). */
static status fed_pool_copy(const fed_data *a, const fed_data *b, const uint8_t *keep, fed_data *out)
{
    memset(out, 0, sizeof *out);
    int64_t n = 0, total = a->n + b->n;
    for (int64_t i = 0; i < total; i++) n += !keep || keep[i];
    size_t img = 3 * (size_t)a->H * (size_t)a->W, T = (size_t)a->T, m = (size_t)(n ? n : 1);
    out->n = n, out->images = a->images, out->H = a->H, out->W = a->W, out->T = a->T;
    out->nsources = a->nsources + b->nsources;
    if (a->images) {
        out->x = malloc(m * img * sizeof *out->x), out->labels = malloc(m * sizeof *out->labels);
        if (!out->x || !out->labels) return STATUS_NOMEM;
    } else {
        out->ids = malloc(m * T * sizeof *out->ids), out->targets = malloc(m * T * sizeof *out->targets);
        out->source = malloc(m * sizeof *out->source);
        if (!out->ids || !out->targets || !out->source) return STATUS_NOMEM;
    }
    int64_t j = 0;
    for (int64_t i = 0; i < total; i++) {
        if (keep && !keep[i]) continue;
        const fed_data *src = i < a->n ? a : b;
        int64_t s = i < a->n ? i : i - a->n;
        if (a->images) {
            memcpy(out->x + (size_t)j * img, src->x + (size_t)s * img, img * sizeof *out->x);
            out->labels[j] = src->labels[s];
        } else {
            memcpy(out->ids + (size_t)j * T, src->ids + (size_t)s * T, T * sizeof *out->ids);
            memcpy(out->targets + (size_t)j * T, src->targets + (size_t)s * T, T * sizeof *out->targets);
            out->source[j] = src->source[s] + (src == b ? a->nsources : 0);
        }
        j++;
    }
    return STATUS_OK;
}

/* Shadow k: trained on the kept examples; phi of every pool example under it. */
static status fed_shadow_run(fed_run *f, const fed_data *pool, const uint8_t *keep, int k, double *loss, double *phi)
{
    fed_data train;
    status st = fed_pool_copy(&f->train, &f->val, keep, &train);
    if (st != STATUS_OK) {
        fed_data_free(&train);
        return st;
    }
    fed_run *s = NULL;
    st = fed_setup_shadow(&s, f->cfg, f->rt, &train, f->seed + 1 + (uint64_t)k);
    fed_data_free(&train);  /* moved into s unless the setup failed first */
    if (st == STATUS_OK) st = fed_run_rounds(s);
    if (st == STATUS_OK) st = fed_sample_scores(s, pool, loss, phi);
    if (st != STATUS_OK) log_error0("nebula-fed audit: shadow run %d: %s", k, status_str(st));
    fed_free(s);
    return st;
}

/* The ROC figures of member scores sm[nm] against non-member scores sn[nn]. */
static status fed_lira_roc(const double *sm, int nm, const double *sn, int nn, double *auc, double *t1, double *t01)
{
    TRY(fed_audit_auc(sm, nm, sn, nn, auc));
    TRY(fed_audit_tpr_at_fpr(sm, nm, sn, nn, 0.01, t1));
    return fed_audit_tpr_at_fpr(sm, nm, sn, nn, 0.001, t01);
}

/* Scores every pool example with at least one IN and one OUT shadow: online into on[],
 * offline into off[], members first; *nm and *nn count them. */
static void fed_lira_score(const fed_run *f, int K, const uint8_t *keep, const double *phis, const double *target,
                           fed_lira_report *rep, double *on, double *off, int *nm, int *nn)
{
    int64_t P = f->train.n + f->val.n;
    double *in = malloc((size_t)K * sizeof *in), *out = malloc((size_t)K * sizeof *out);
    CHECK(in && out, "out of memory");
    fed_audit_pool pin = { 0 }, pout = { 0 };
    for (int pass = 0; pass < 2; pass++) {  /* the global variances, then the scores */
        *nm = *nn = 0;
        for (int64_t i = 0; i < P; i++) {
            int ni = 0, no = 0;
            for (int k = 0; k < K; k++) {
                double v = phis[(size_t)k * (size_t)P + (size_t)i];
                if (keep[(size_t)k * (size_t)P + (size_t)i]) in[ni++] = v;
                else out[no++] = v;
            }
            if (pass == 0) {
                fed_audit_pool_add(&pin, in, ni), fed_audit_pool_add(&pout, out, no);
                continue;
            }
            if (ni < 1 || no < 1) {
                rep->unscored++;
                continue;
            }
            int at = i < f->train.n ? (*nm)++ : (int)f->train.n + (*nn)++;
            on[at] = fed_audit_lira_online_global(target[i], in, ni, out, no, rep->var_in, rep->var_out);
            off[at] = fed_audit_lira_offline_global(target[i], out, no, rep->var_out);
        }
        if (pass == 0) rep->var_in = fed_audit_pool_var(&pin), rep->var_out = fed_audit_pool_var(&pout);
    }
    rep->scored = *nm + *nn;
    free(in), free(out);
}

status fed_audit_lira(fed_run *f, int K, fed_lira_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->shadows = K;
    if (f->val.n < 1 || K < 2) {
        log_error0("nebula-fed audit: LiRA needs held-out data (data.val: the non-members) and audit.shadows >= 2 (it "
                   "is %d): each example needs shadows with it and without it", K);
        return STATUS_INPUT;
    }
    int64_t P = f->train.n + f->val.n;
    size_t KP = (size_t)K * (size_t)P;
    fed_data pool = { 0 };
    uint8_t *keep = malloc(KP);
    double *phis = malloc(KP * sizeof *phis), *loss = malloc((size_t)P * sizeof *loss);
    double *target = malloc((size_t)P * sizeof *target);
    double *on = malloc((size_t)P * sizeof *on), *off = malloc((size_t)P * sizeof *off);
    status st = STATUS_NOMEM;
    if (!keep || !phis || !loss || !target || !on || !off) goto free_all;
    if ((st = fed_pool_copy(&f->train, &f->val, NULL, &pool)) != STATUS_OK) goto free_all;
    if ((st = fed_sample_scores(f, &pool, loss, target)) != STATUS_OK) goto free_all;  /* the released model */
    for (int k = 0; k < K; k++) {
        rng r;
        rng_init(&r, f->seed, FED_STREAM_SHADOW, RNG_PURPOSE_FED, (uint64_t)k);
        uint8_t *kk = keep + (size_t)k * (size_t)P;
        for (int64_t i = 0; i < P; i++) kk[i] = rng_u32(&r) >> 31;
        double t0 = MPI_Wtime();
        if ((st = fed_shadow_run(f, &pool, kk, k, loss, phis + (size_t)k * (size_t)P)) != STATUS_OK) goto free_all;
        printf("audit: LiRA shadow %d of %d trained and scored (%.1f s)\n", k + 1, K, MPI_Wtime() - t0);
        fflush(stdout);
    }
    int nm = 0, nn = 0;
    fed_lira_score(f, K, keep, phis, target, rep, on, off, &nm, &nn);
    if (nm < 1 || nn < 1) {
        log_error0("nebula-fed audit: LiRA scored %d members and %d non-members: every example needs a shadow with it "
                   "and one without it; raise audit.shadows (%d)", nm, nn, K);
        st = STATUS_INPUT;
        goto free_all;
    }
    const double *onn = on + f->train.n, *offn = off + f->train.n;
    if ((st = fed_lira_roc(on, nm, onn, nn, &rep->auc, &rep->tpr_1pct, &rep->tpr_01pct)) != STATUS_OK) goto free_all;
    st = fed_lira_roc(off, nm, offn, nn, &rep->off_auc, &rep->off_tpr_1pct, &rep->off_tpr_01pct);
free_all:
    fed_data_free(&pool);
    free(keep), free(phis), free(loss), free(target), free(on), free(off);
    return st;
}
