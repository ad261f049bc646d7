/* fed_attack — the privacy audit of a released global model (nebula-fed audit): every
 * training sample of the clients (the members) and every held-out sample (the
 * non-members) through the model, and the membership-inference attacks scored with
 * fed/audit.h: Yeom et al.'s loss threshold (CSF 2018), the ROC of the loss as a
 * score (AUC, TPR at 1% and 0.1% FPR, as Carlini et al., S&P 2022 report them).
 *
 * The one design decision: the attacker sees what the server releases — the global
 * model's outputs — and nothing of the rounds; so the same audit applies to a run with
 * or without DP, and its numbers are comparable across privacy levels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/audit.h"
#include "fed_impl.h"

/* Per-sample loss and logit-scaled confidence of the true class (phi) of every sample of
 * d under the global model held by f->ev (images: a classifier). */
status fed_sample_scores(fed_run *f, const fed_data *d, double *loss, double *phi)
{
    int B = f->eval_batch;
    for (int64_t start = 0; start < d->n; start += B) {
        /* the last batch overlaps the one before (only its new samples count); a set smaller
         * than the batch fills it by repeating itself */
        int64_t s0 = start + B > d->n ? d->n - B : start;
        if (s0 < 0) s0 = 0;
        for (int j = 0; j < B; j++) fed_batch_put(&f->evbatch, j, d, (s0 + j) % d->n);
        TRY(model_forward(&f->ev, &f->evbatch, false));
        int C = 0;
        const float *z = model_class_logits(&f->ev, &C);
        for (int j = 0; j < B; j++) {
            int64_t s = s0 + j;
            if (s < start || s >= d->n) continue;
            const float *zj = z + (size_t)j * C;
            int y = d->labels[s];
            loss[s] = fed_class_xent(zj, C, y, NULL);
            phi[s] = fed_audit_logit_margin(zj, C, y);
        }
    }
    return STATUS_OK;
}

status fed_audit_membership(fed_run *f, fed_audit_report *rep)
{
    memset(rep, 0, sizeof *rep);
    if (!f->train.images || f->val.n < f->eval_batch || f->val.n < 1) {
        log_error0("nebula-fed audit needs an image classifier and held-out data (data.val) of at least one "
                   "evaluation batch: the held-out samples are the non-members");
        return STATUS_INPUT;
    }
    int64_t nm = f->train.n, nn = f->val.n;
    double *lm = malloc((size_t)nm * sizeof *lm), *pm = malloc((size_t)nm * sizeof *pm);
    double *ln = malloc((size_t)nn * sizeof *ln), *pn = malloc((size_t)nn * sizeof *pn);
    double *sm = malloc((size_t)nm * sizeof *sm), *sn = malloc((size_t)nn * sizeof *sn);
    status st = STATUS_NOMEM;
    if (!lm || !pm || !ln || !pn || !sm || !sn) goto free_scores;
    if ((st = fed_sample_scores(f, &f->train, lm, pm)) != STATUS_OK) goto free_scores;
    if ((st = fed_sample_scores(f, &f->val, ln, pn)) != STATUS_OK) goto free_scores;
    fed_audit_threshold y;
    if ((st = fed_audit_loss_threshold(lm, (int)nm, ln, (int)nn, &y)) != STATUS_OK) goto free_scores;
    for (int64_t i = 0; i < nm; i++) sm[i] = -lm[i];
    for (int64_t i = 0; i < nn; i++) sn[i] = -ln[i];
    rep->members = nm, rep->nonmembers = nn;
    rep->yeom_advantage = y.advantage, rep->yeom_accuracy = y.accuracy, rep->auc = y.auc;
    if ((st = fed_audit_tpr_at_fpr(sm, (int)nm, sn, (int)nn, 0.01, &rep->tpr_1pct)) != STATUS_OK) goto free_scores;
    if ((st = fed_audit_tpr_at_fpr(sm, (int)nm, sn, (int)nn, 0.001, &rep->tpr_01pct)) != STATUS_OK) goto free_scores;
    double hm = 0, hn = 0, l_m = 0, l_n = 0;
    for (int64_t i = 0; i < nm; i++) hm += pm[i] > 0, l_m += lm[i];  /* phi > 0: the true class's p > 1/2 */
    for (int64_t i = 0; i < nn; i++) hn += pn[i] > 0, l_n += ln[i];
    rep->member_loss = l_m / nm, rep->nonmember_loss = l_n / nn;
    rep->member_conf = hm / nm, rep->nonmember_conf = hn / nn;
free_scores:
    free(lm), free(pm), free(ln), free(pn), free(sm), free(sn);
    return st;
}
