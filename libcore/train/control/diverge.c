/* diverge — what the step does with non-finite numbers: a step whose loss or gradient
 * norm is NaN or Inf is skipped (nothing it computed reaches the parameters, the
 * optimizer's moments, the batch-norm statistics or DGC-Pro's residuals); more than
 * train.max_skipped_steps of them in a row end the run as diverged (exit 1), as
 * Megatron-LM stops after too many skipped iterations where PyTorch's GradScaler would
 * skip forever. A checkpoint's values are checked as it loads (train_ckpt_check_values:
 * one written by a diverged run is refused naming the tensor, and `auto` falls back past
 * it); the parameters and optimizer moments before every checkpoint (a finite gradient
 * can still overflow them: AdamW's v holds g^2), which ends the run instead of saving
 * them; and no checkpoint is committed while steps are being skipped (the weights then
 * are those that just gave a non-finite loss), so the last commit before the streak
 * stays what a rollback and the final hint point at. Non-finite
 * parameters show up in the next step's loss anyway; checking them at every step
 * instead would cost a read of two model-sized buffers per step (about as much memory
 * traffic as the AdamW update itself) for an earlier stop by a few steps.
 *
 * The one design decision: every rank reaches the same verdict without another
 * collective — the loss, the non-finite counts (summed in the loss's allreduce) and the
 * gradient norm are global, the parameters replicated (ZeRO's sharded moments add one
 * small allreduce) — so every rank skips, stops or goes on at the same step. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"



/* The first tensor of t holding non-finite values of buf: its index, and its count in
 * *count; -1 when there is none. */
static int train_first_nonfinite(const param_table *t, const float *buf, size_t *count)
{
    for (int e = 0; e < t->count; e++) {
        size_t n = train_count_nonfinite(buf + t->entries[e].offset, t->entries[e].count);
        if (n) {
            *count = n;
            return e;
        }
    }
    return -1;
}


bool train_last_commit(const train_run *r, char *path, size_t len, int64_t *step)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    return ckpt_last_committed(dir, path, len, step);
}

bool train_ckpt_withheld(train_run *r)
{
    if (r->skipped_in_a_row == 0) return false;
    if (r->rt->rank == 0) {
        char path[4300] = "";
        int64_t at = -1;
        if (!train_last_commit(r, path, sizeof path, &at)) snprintf(path, sizeof path, "none yet");
        log_warn0("step %ld: no checkpoint written: %ld step(s) in a row were skipped for non-finite values, and the "
                  "weights are those that gave them; the last committed checkpoint (%s) stays the newest", r->step,
                  r->skipped_in_a_row, path);
    }
    return true;
}

/* Rank 0: why the run stops, where its last good state is, and what to do. */
static void train_log_diverged(train_run *r, long step, const char *why)
{
    if (r->ckpt) (void)ckpt_wait(r->ckpt);  /* a background save still running commits first */
    if (r->rt->rank != 0) return;
    train_emit(r, json_pack("{s:s, s:I, s:s}", "kind", "diverged", "step", (json_int_t)step, "reason", why));
    log_error("step %ld: the run diverged: %s; no checkpoint holds non-finite values", step, why);
    char dir[4200], path[4300];
    int64_t at;
    double lr = config_float(r->cfg, "optim.lr");
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    if (r->ckpt && ckpt_last_committed(dir, path, sizeof path, &at))
        log_error("HINT: the last committed checkpoint is step %" PRId64 " at %s; lower optim.lr (now %g) or set "
                  "train.max_grad_norm and resume from step %" PRId64 " (--set ckpt.resume=%s)", at, path, lr, at, path);
    else
        log_error("HINT: no checkpoint is committed%s; lower optim.lr (now %g) or set train.max_grad_norm and start again",
                  r->ckpt ? "" : " (checkpoints are off)", lr);
}

/* Where the update of a finite gradient overflowed: the parameters (replicated), or the
 * moments (AdamW's v holds g^2: it overflows first), this rank's ZeRO shard or the
 * whole buffer; "" when nothing did. Collective under ZeRO. */
static status train_overflow(train_run *r, char *what, size_t len)
{
    const param_table *pt = model_params(&r->m);
    const param_buffers *pb = model_buffers(&r->m);
    /* AdamW's first moment cannot overflow before its second (g^2 overflows at |g| >
     * 1.8e19, m only near 3.4e38): v is checked in its place; SGD's momentum is m */
    const char *names[2] = { "", pb->v ? "the optimizer's second moment of " : "the optimizer's momentum of " };
    const float *bufs[2] = { pb->params, pb->v ? pb->v : pb->m };
    what[0] = '\0';
    if (r->use_zero) {
        bufs[1] = NULL;
        double bad = (r->zero.m ? (double)train_count_nonfinite(r->zero.m, r->zero.owned) : 0) +
                     (r->zero.v ? (double)train_count_nonfinite(r->zero.v, r->zero.owned) : 0);
        TRY(comm_ctl_allreduce(train_ctl(r), MPI_IN_PLACE, &bad, 1, MPI_DOUBLE, MPI_SUM));
        if (bad > 0) snprintf(what, len, "the optimizer's moments (ZeRO shards) hold %.0f NaN or Inf value(s)", bad);
    }
    for (int b = 0; b < 2 && !what[0]; b++) {
        size_t n = 0;
        int e = bufs[b] && train_count_nonfinite(bufs[b], pt->total) ? train_first_nonfinite(pt, bufs[b], &n) : -1;
        if (e >= 0) snprintf(what, len, "%s%s holds %zu NaN or Inf value(s)", names[b], pt->entries[e].name, n);
    }
    return STATUS_OK;
}

static void train_step_applied(train_run *r, long step)
{
    r->skipped_in_a_row = 0;
    r->last_applied = step;
}

status train_check_state(train_run *r)
{
    char what[320];
    TRY(train_overflow(r, what, sizeof what));
    if (!what[0]) return STATUS_OK;
    char why[512];
    snprintf(why, sizeof why, "an update since the last checkpoint overflowed (the last step had loss %g, gradient "
             "norm %g): %s; the checkpoint of step %ld is not written", r->last_loss, r->last_gnorm, what, r->step);
    train_log_diverged(r, r->step, why);
    return STATUS_DIVERGED;
}

static status train_skip(train_run *r, long step, double loss, double gnorm, double state_bad, double grads_bad,
                         bool guarded, bool *past)
{
    long limit = (long)config_int(r->cfg, "train.max_skipped_steps");
    r->skipped_in_a_row++;
    char what[160];
    if (state_bad > 0)
        snprintf(what, sizeof what, "%.0f batch-norm running statistic(s) became NaN or Inf", state_bad);
    else if (grads_bad > 0)
        snprintf(what, sizeof what, "the loss is %g and %.0f gradient value(s) are NaN or Inf (found before DGC-Pro's "
                 "exchange)", loss, grads_bad);
    else
        snprintf(what, sizeof what, "the loss is %g and the gradient norm %g", loss, gnorm);
    if (r->skipped_in_a_row <= limit) {
        train_emit(r, json_pack("{s:s, s:I, s:s, s:I}", "kind", "skipped", "step", (json_int_t)step,
                                         "reason", what, "in_a_row", (json_int_t)r->skipped_in_a_row));
        log_error0("step %ld: %s; the step is skipped (%ld in a row, train.max_skipped_steps = %ld)", step, what,
                   r->skipped_in_a_row, limit);
        return STATUS_OK;
    }
    if (guarded) {  /* the divergence guard: monitor.nonfinite_action decides */
        train_emit(r, json_pack("{s:s, s:I, s:s, s:I}", "kind", "skipped", "step", (json_int_t)step,
                                         "reason", what, "in_a_row", (json_int_t)r->skipped_in_a_row));
        log_error0("step %ld: %s; the step is skipped (%ld in a row, more than train.max_skipped_steps = %ld): "
                   "monitor.nonfinite_action = %s", step, what, r->skipped_in_a_row, limit,
                   config_str(r->cfg, "monitor.nonfinite_action"));
        *past = true;
        return STATUS_OK;
    }
    char why[512];
    snprintf(why, sizeof why, "%s: %ld step(s) in a row skipped for non-finite values (more than "
             "train.max_skipped_steps = %ld); the parameters are those after step %ld", what, r->skipped_in_a_row,
             limit, r->last_applied);
    return train_diverged(r, step, why);
}

status train_diverged(train_run *r, long step, const char *why)
{
    train_log_diverged(r, step, why);
    return STATUS_DIVERGED;
}

status train_step_verdict(train_run *r, const train_step_stats *ss, bool guarded, bool *past)
{
    long step = r->step;  /* train_step counted it already */
    *past = false;
    if (ss->skipped) TRY(train_skip(r, step, ss->loss, ss->gnorm, ss->state_bad, ss->grads_bad, guarded, past));
    else train_step_applied(r, step);
    r->last_loss = ss->loss;
    r->last_gnorm = ss->gnorm;
    return STATUS_OK;
}
