/* fed_attack — the privacy audit of a released global model (nebula-fed audit): every
 * training sample of the clients (the members) and every held-out sample (the
 * non-members) through the model — for text, every sequence of data.seq_len — and the
 * membership-inference attacks scored with fed/audit.h: Yeom et al.'s loss threshold
 * (CSF 2018), the ROC of the loss as a score (AUC, TPR at 1% and 0.1% FPR, as Carlini et
 * al., S&P 2022 report them).
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

/* Text: each sequence alone (a micro-batch of one), its mean token loss; phi = -loss,
 * the sequence's mean log-likelihood (the statistic LiRA fits for a language model). */
static status fed_sequence_scores(fed_run *f, const fed_data *d, double *loss, double *phi)
{
    TRY(model_set_micro_batch(&f->ev, 1));
    status st = STATUS_OK;
    for (int64_t s = 0; s < d->n && st == STATUS_OK; s++) {
        fed_batch_put(&f->evbatch, 0, d, s);
        st = model_forward(&f->ev, &f->evbatch, false);
        loss[s] = model_loss(&f->ev), phi[s] = -loss[s];
    }
    status back = model_set_micro_batch(&f->ev, f->eval_batch);
    return st != STATUS_OK ? st : back;
}

/* Per-sample loss and logit-scaled confidence of the true class (phi) of every sample of
 * d under the global model held by f->ev (a classifier; text: fed_sequence_scores). */
status fed_sample_scores(fed_run *f, const fed_data *d, double *loss, double *phi)
{
    if (!d->images) return fed_sequence_scores(f, d, loss, phi);
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
    if (f->val.n < 1 || (f->train.images && f->val.n < f->eval_batch)) {
        log_error0("nebula-fed audit needs held-out data (data.val; images: at least one evaluation batch): the "
                   "held-out samples are the non-members");
        return STATUS_INPUT;
    }
    rep->images = f->train.images;
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
    /* images: phi > 0, the true class's p > 1/2; text: exp(-loss), the geometric mean of the
     * true next token's probability over the sequence */
    for (int64_t i = 0; i < nm; i++) hm += f->train.images ? pm[i] > 0 : exp(-lm[i]), l_m += lm[i];
    for (int64_t i = 0; i < nn; i++) hn += f->train.images ? pn[i] > 0 : exp(-ln[i]), l_n += ln[i];
    rep->member_loss = l_m / nm, rep->nonmember_loss = l_n / nn;
    rep->member_conf = hm / nm, rep->nonmember_conf = hn / nn;
free_scores:
    free(lm), free(pm), free(ln), free(pn), free(sm), free(sn);
    return st;
}
