/* eval — loss (perplexity for the language models, accuracy for the classifiers) on the
 * held-out data, in its file order, every rank its share of each global batch; the
 * sums meet in one allreduce with the control plane's deadline. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>

#include "core.h"

/* Loss (and perplexity or accuracy) over up to train.eval_batches global batches of
 * the held-out data, in its file order, every rank its share. */
static status train_eval_sums(train_run *r, double *loss, double *acc, long *samples)
{
    data_state start = { 0, 0 };
    TRY(data_set_state(r->val_data, &start));
    long nb = (long)config_int(r->cfg, "train.eval_batches");
    long have = (long)data_steps_per_epoch(r->val_data);
    if (nb > have) nb = have;
    double sums[3] = { 0, 0, 0 };  /* loss sum over micro-batches, correct labels, labels */
    for (long i = 0; i < nb; i++) {
        TRY(train_fill(r, r->val_data, 0));
        if (r->grid.shape.pp > 1) {
            TRY(train_pp_forward_only(r, &r->batch));  /* the stages in turn; the loss on the last */
            sums[0] += r->grid.pp_rank == r->grid.shape.pp - 1 ? model_loss(&r->m) : 0;
        } else {
            TRY(model_forward(&r->m, &r->batch, false));
            sums[0] += model_loss(&r->m);
        }
        int V = 0;
        const float *lg = model_class_logits(&r->m, &V);
        if (lg) {
            for (int n = 0; n < r->tb.micro_batch; n++) {
                int best = 0;
                for (int k = 1; k < V; k++)
                    if (lg[(size_t)n * V + k] > lg[(size_t)n * V + best]) best = k;
                sums[1] += best == r->batch.targets[n];
                sums[2] += 1;
            }
        }
        data_advance(r->val_data);
    }
    double tot[3];
    comm_ctl ctl = train_ctl(r);
    ctl.name = "world (evaluation)";
    TRY(comm_ctl_allreduce(ctl, sums, tot, 3, MPI_DOUBLE, MPI_SUM));
    *loss = nb ? tot[0] / ((double)nb * (r->rt->size / r->grid.shape.pp)) : NAN;
    *acc = tot[2] > 0 ? tot[1] / tot[2] : NAN;
    *samples = nb * r->tb.micro_batch * train_dp_size(r);
    return STATUS_OK;
}

static void train_log_eval(train_run *r, double loss, double acc, long samples)
{
    if (r->rt->rank != 0) return;
    bool classifier = model_num_classes(&r->spec) > 0;
    if (classifier)
        printf("eval step=%ld loss=%.6f acc=%.4f samples=%ld\n", r->step, loss, acc, samples);
    else
        printf("eval step=%ld loss=%.6f ppl=%.3f samples=%ld\n", r->step, loss, exp(loss), samples);
    /* a diverged loss and an infinite perplexity are null, the key kept (JSON has no NaN) */
    json_t *j = json_pack("{s:s, s:I, s:o, s:I}", "kind", "eval", "step", (json_int_t)r->step, "loss",
                          (json_t *)train_json_num(loss), "samples", (json_int_t)samples);
    if (classifier) json_object_set_new(j, "acc", train_json_num(acc));
    else json_object_set_new(j, "ppl", train_json_num(exp(loss)));
    train_emit(r, j);
    fflush(stdout);
}


status train_evaluate(train_run *r)
{
    double loss, acc;
    long n;
    TRY(train_eval_sums(r, &loss, &acc, &n));
    train_log_eval(r, loss, acc, n);
    r->eval_new = true;  /* the stagnation rule reads it at this step's end */
    r->last_eval = loss;
    r->last_eval_step = r->step;
    return STATUS_OK;
}
