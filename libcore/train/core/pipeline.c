/* pipeline — what a pipeline-parallel run (parallel.pp > 1) adds to the trainer: the
 * stages' blocks, the 1F1B schedule of a step's micro-batches, and the tied embedding.
 *
 * The one design decision: the schedule is Megatron-LM's non-interleaved 1F1B
 * (Narayanan et al. 2021): stage s of p runs min(p - s - 1, m) forwards to fill the
 * pipe, then alternates one forward with one backward, then drains the backwards, so
 * at most p - s micro-batches are in flight and their activations held (nn_stage's
 * slots). Between neighbours, an activation sent on always travels with the gradient
 * received back in one exchange (comm_group_sendrecv on the grid's pp group), as Megatron's
 * send_forward_recv_backward does: two blocking calls in a row would each wait for the
 * other stage's matching call. Every micro-batch's gradients accumulate as with
 * train.micro_batch < the global batch; the buckets start from the last backward.
 *
 * The word embedding is also the output head (GPT-2's wte, BERT's tied MLM decoder):
 * the first and the last stage each hold a copy from the same init, the two gradients
 * are summed over the tie group before clipping, and both apply the same update, so the
 * copies stay equal (Megatron's embedding group). The checkpoint holds one copy, the
 * first stage's (hybrid.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

enum { PP_TAG_ACT = 0x5050, PP_TAG_GRAD = 0x5051 };

/* Splits L blocks into p contiguous stages minimising the largest stage's cost
 * (model_block_cost; dynamic programming over the split points, L and p are small).
 * first[s] = the first block of stage s, first[p] = L. */
static void pp_balance(const model_spec *ms, int L, int T, int p, int *first)
{
    double *pre = calloc((size_t)L + 1, sizeof *pre), *best = malloc(((size_t)p + 1) * ((size_t)L + 1) * sizeof *best);
    int *cut = malloc(((size_t)p + 1) * ((size_t)L + 1) * sizeof *cut);
    CHECK(pre && best && cut, "pipeline stage balance: out of memory");
    for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + model_block_cost(ms, T, l);
#define B_(s, n) best[(size_t)(s) * ((size_t)L + 1) + (size_t)(n)]
#define C_(s, n) cut[(size_t)(s) * ((size_t)L + 1) + (size_t)(n)]
    for (int n = 0; n <= L; n++) B_(1, n) = pre[n], C_(1, n) = 0;
    for (int s = 2; s <= p; s++)
        for (int n = s; n <= L; n++) {
            B_(s, n) = INFINITY;
            for (int k = s - 1; k < n; k++) {  /* the first s - 1 stages take blocks [0, k) */
                double v = fmax(B_(s - 1, k), pre[n] - pre[k]);
                if (v < B_(s, n)) B_(s, n) = v, C_(s, n) = k;
            }
        }
    first[p] = L;
    for (int s = p, n = L; s >= 1; s--) first[s - 1] = n = s == 1 ? 0 : C_(s, n);
#undef B_
#undef C_
    free(pre), free(best), free(cut);
}

status train_pp_plan(train_run *r)
{
    int p = r->grid.shape.pp, L = r->spec.family == MODEL_FAMILY_GPT2 ? r->spec.gpt2.num_layers : r->spec.bert.num_layers;
    r->stage = nn_stage_whole();
    r->tie_comm = MPI_COMM_NULL;
    if (p == 1) return STATUS_OK;
    int *first = malloc(((size_t)p + 1) * sizeof *first);
    if (!first) return STATUS_NOMEM;
    const char *spec = config_str(r->cfg, "parallel.stages");
    if (!spec[0]) {
        pp_balance(&r->spec, L, r->T, p, first);
    } else {  /* blocks per stage, e.g. "7,5" */
        const char *at = spec;
        int s = 0, sum = 0;
        first[0] = 0;
        while (*at && s < p) {
            char *end;
            long n = strtol(at, &end, 10);
            if (end == at || n < 1 || (*end && *end != ',')) break;
            sum += (int)n;
            first[++s] = sum;
            at = *end ? end + 1 : end;
        }
        if (s != p || *at || sum != L) {
            log_error0("parallel.stages = \"%s\" (%s): give the blocks of each of the parallel.pp = %d stages, "
                       "positive, comma-separated, summing to the %d blocks (model.n_layer), e.g. \"%d,%d\"; empty: "
                       "balanced by counted FLOPs", spec, config_origin(r->cfg, "parallel.stages"), p, L, L - L / p * (p - 1),
                       L / p);
            free(first);
            return STATUS_INPUT;
        }
    }
    int me = r->grid.pp_rank;
    r->stage = (nn_stage){ .first = first[me], .end = first[me + 1], .slots = p - me };
    if (r->rt->rank == 0) {
        printf("pipeline: %d stages of blocks", p);
        for (int s = 0; s < p; s++) printf(" %d..%d", first[s], first[s + 1] - 1);
        printf(" (%s), 1F1B schedule, %d micro-batch%s per step\n", spec[0] ? "parallel.stages" : "balanced by counted FLOPs",
               r->tb.accum, r->tb.accum == 1 ? "" : "es");
        if (r->tb.accum < p)
            log_warn("pipeline: %d micro-batch%s per step for %d stages: the stages mostly wait (1F1B's bubble is "
                     "(p - 1) / (m + p - 1) = %.2f); a larger train.global_batch or a smaller train.micro_batch "
                     "gives m >= p", r->tb.accum, r->tb.accum == 1 ? "" : "es", p,
                     (double)(p - 1) / (r->tb.accum + p - 1));
    }
    free(first);
    int ends = me == 0 || me == p - 1;
    MPI_CHECK(MPI_Comm_split(r->grid.pp_comm, ends ? 0 : MPI_UNDEFINED, me, &r->tie_comm));
    return STATUS_OK;
}

status train_pp_init(train_run *r)
{
    if (r->grid.shape.pp == 1) return STATUS_OK;
    int n = r->stage.slots;
    if (!(r->pp_batches = calloc((size_t)n, sizeof *r->pp_batches))) return STATUS_NOMEM;
    for (int k = 0; k < n; k++) TRY(model_batch_init(&r->pp_batches[k], &r->m));
    return STATUS_OK;
}

void train_pp_free(train_run *r)
{
    if (r->pp_batches)
        for (int k = 0; k < r->stage.slots; k++) model_batch_free(&r->pp_batches[k]);
    free(r->pp_batches);
    r->pp_batches = NULL;
    if (r->tie_comm != MPI_COMM_NULL) MPI_Comm_free(&r->tie_comm);
}

/* One step's schedule on this stage. */
typedef struct pp_sched {
    train_run *r;
    comm_group *g;             /* the pp group: activations and their gradients */
    comm_ctl ctl;              /* the pp group's communicator: the step's span (a scalar) */
    int s, p, m;               /* stage, stages, micro-batches */
    size_t n;                  /* floats of one boundary */
    double *loss;
    train_step_stats *ss;
    double busy_s;             /* forward and backward compute */
} pp_sched;

static bool pp_first(const pp_sched *q) { return q->s == 0; }
static bool pp_last(const pp_sched *q) { return q->s == q->p - 1; }

static model_batch *pp_batch(pp_sched *q, int k)
{
    train_run *r = q->r;
    return r->fixed_batch ? &r->batch : &r->pp_batches[k % r->stage.slots];
}

/* Micro-batch k's activation set (and batch) becomes the model's current one. */
static void pp_use(pp_sched *q, int k)
{
    model_set_slot(&q->r->m, k % q->r->stage.slots, pp_batch(q, k));
}

static status pp_forward(pp_sched *q, int k)
{
    train_run *r = q->r;
    model_batch *b = pp_batch(q, k);
    TRY(train_fill_into(r, r->train_data, k, b));
    pp_use(q, k);
    double t0 = train_now_s();
    TRY(model_forward(&r->m, b, true));
    TRY(model_tp_status(&r->m));
    double dt = train_now_s() - t0;
    q->busy_s += dt, q->ss->fwd_ms += dt * 1e3;
    if (pp_last(q)) *q->loss += model_loss(&r->m);
    return STATUS_OK;
}

static status pp_backward(pp_sched *q, int k)
{
    train_run *r = q->r;
    pp_use(q, k);
    /* the buckets start from the last backward (DDP's no_sync before it); DGC-Pro sends after it */
    train_set_hook(r, k == q->m - 1 && !(r->dgc && dgc_active(r->dgc)));
    double t0 = train_now_s();
    model_backward(&r->m);
    TRY(model_tp_status(&r->m));
    double dt = train_now_s() - t0;
    q->busy_s += dt, q->ss->bwd_ms += dt * 1e3;
    train_set_hook(r, false);
    return r->hook_status;
}

/* The neighbour exchanges (no-ops at the pipeline's ends). */
static status pp_recv_forward(pp_sched *q, int k)
{
    if (pp_first(q)) return STATUS_OK;
    pp_use(q, k);
    return comm_group_sendrecv(q->g, NULL, 0, -1, 0, model_stage_in(&q->r->m), q->n * sizeof(float), q->s - 1,
                               PP_TAG_ACT);
}

static status pp_send_forward(pp_sched *q)
{
    if (pp_last(q)) return STATUS_OK;
    return comm_group_sendrecv(q->g, model_stage_out(&q->r->m), q->n * sizeof(float), q->s + 1, PP_TAG_ACT, NULL, 0, -1,
                               0);
}

static status pp_recv_backward(pp_sched *q)
{
    if (pp_last(q)) return STATUS_OK;
    return comm_group_sendrecv(q->g, NULL, 0, -1, 0, model_stage_grad(&q->r->m), q->n * sizeof(float), q->s + 1,
                               PP_TAG_GRAD);
}

static status pp_send_backward(pp_sched *q)
{
    if (pp_first(q)) return STATUS_OK;
    return comm_group_sendrecv(q->g, model_stage_grad(&q->r->m), q->n * sizeof(float), q->s - 1, PP_TAG_GRAD, NULL, 0,
                               -1, 0);
}

/* The output of the current forward on, the gradient for the next backward back. */
static status pp_send_forward_recv_backward(pp_sched *q)
{
    if (pp_last(q)) return STATUS_OK;
    model *m = &q->r->m;
    return comm_group_sendrecv(q->g, model_stage_out(m), q->n * sizeof(float), q->s + 1, PP_TAG_ACT,
                               model_stage_grad(m), q->n * sizeof(float), q->s + 1, PP_TAG_GRAD);
}

/* The input gradient of the current backward back, the input of forward k on. */
static status pp_send_backward_recv_forward(pp_sched *q, int k)
{
    if (pp_first(q)) return STATUS_OK;
    model *m = &q->r->m;
    float *grad = model_stage_grad(m);  /* one buffer for every set */
    pp_use(q, k);
    return comm_group_sendrecv(q->g, grad, q->n * sizeof(float), q->s - 1, PP_TAG_GRAD, model_stage_in(m),
                               q->n * sizeof(float), q->s - 1, PP_TAG_ACT);
}

status train_pipeline(train_run *r, double *loss, train_step_stats *ss)
{
    pp_sched q = { .r = r, .s = r->grid.pp_rank, .p = r->grid.shape.pp, .m = r->tb.accum, .loss = loss, .ss = ss,
                   .n = model_stage_floats(&r->m),
                   .g = r->grid.pp_group,
                   .ctl = comm_ctl_watched(comm_ctl_named(r->grid.pp_comm, r->timeout_s, "pp"), r->rt->wd) };
    CHECK(q.n <= (size_t)INT32_MAX, "a pipeline boundary of more than 2^31 floats");
    int warm = q.p - q.s - 1 < q.m ? q.p - q.s - 1 : q.m, rest = q.m - warm;
    double t0 = train_now_s();
    for (int i = 0; i < warm; i++) {
        TRY(pp_recv_forward(&q, i));
        TRY(pp_forward(&q, i));
        TRY(pp_send_forward(&q));
    }
    if (rest > 0) TRY(pp_recv_forward(&q, warm));
    for (int i = 0; i < rest; i++) {
        TRY(pp_forward(&q, warm + i));
        TRY(pp_send_forward_recv_backward(&q));
        TRY(pp_backward(&q, i));
        if (i == rest - 1) TRY(pp_send_backward(&q));
        else TRY(pp_send_backward_recv_forward(&q, warm + i + 1));
    }
    for (int i = rest; i < q.m; i++) {
        TRY(pp_recv_backward(&q));
        TRY(pp_backward(&q, i));
        TRY(pp_send_backward(&q));
    }
    /* idle against the pipeline's makespan, the longest stage's (Narayanan et al.'s
       definition, which (p - 1) / (m + p - 1) is): a stage that ends early waits for the
       step like one that starts late (measured against its own span, the last stage of
       p = 2, m = 4 idles 1/13 where the first idles 3/15) */
    double wall = train_now_s() - t0;
    TRY(comm_ctl_allreduce(q.ctl, MPI_IN_PLACE, &wall, 1, MPI_DOUBLE, MPI_MAX));
    ss->bubble = wall > 0 ? 1 - q.busy_s / wall : 0;
    return STATUS_OK;
}

status train_pp_forward_only(train_run *r, model_batch *b)
{
    comm_group *g = r->grid.pp_group;
    int s = r->grid.pp_rank, p = r->grid.shape.pp;
    size_t bytes = model_stage_floats(&r->m) * sizeof(float);
    model_set_slot(&r->m, 0, b);
    if (s > 0) TRY(comm_group_sendrecv(g, NULL, 0, -1, 0, model_stage_in(&r->m), bytes, s - 1, PP_TAG_ACT));
    TRY(model_forward(&r->m, b, false));
    TRY(model_tp_status(&r->m));
    if (s < p - 1) TRY(comm_group_sendrecv(g, model_stage_out(&r->m), bytes, s + 1, PP_TAG_ACT, NULL, 0, -1, 0));
    return STATUS_OK;
}

bool train_pp_counted(const train_run *r, const param_entry *e)
{
    return r->grid.pp_rank == 0 || strcmp(e->name, model_tied_name(&r->spec)) != 0;
}

status train_pp_tie_grads(train_run *r, float *grads)
{
    if (r->tie_comm == MPI_COMM_NULL) return STATUS_OK;
    const param_table *pt = model_params(&r->m);
    int i = param_find(pt, model_tied_name(&r->spec));
    CHECK(i >= 0, "the first and last pipeline stage hold the tied embedding");
    const param_entry *e = &pt->entries[i];
    /* a group on the tie communicator: on the mpi backend nothing is communicated to make one */
    comm_group *g;
    comm_group_options o = { .backend = COMM_BACKEND_MPI, .timeout_s = r->timeout_s, .name = "tied embedding",
                             .wd = r->rt->wd };
    TRY(comm_group_init(&g, r->tie_comm, &o));
    status st = comm_group_allreduce(g, grads + e->offset, e->count, REDUCE_DTYPE_F32, REDUCE_OP_SUM);
    comm_group_free(g);
    return st;
}
