/* step — one optimizer step: the micro-batches forward and backward (the buckets
 * launched from the last backward's layer hook, DDP's no_sync before it), the wait
 * for the buckets or DGC-Pro's exchange, the loss sum, clipping, the update (ZeRO's
 * owned shards and all-gather, or the whole buffer), ResNet's statistics from rank 0.
 * train_step is what nebula-train runs and what nebula-bench model times on the CPU;
 * train_step_batch is the GPU-only twin of nebula-bench model --device cuda, built
 * from the same helpers (zeroing, forward + backward, update).
 *
 * The one design decision: AdamW goes through the device table's optimizer
 * (device_optim), whose CPU step is optim_adamw_step itself, so the trainer and the
 * benchmark run one update and the CPU results stay bit-identical; SGD with momentum
 * (and ZeRO's ranges, DGC-Pro's plain entries) is host-only so far. The phase timings
 * cost a few clock reads per micro-batch and no synchronisation on the CPU. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/optim.h"  /* grad_scale */
#include "core.h"

/* Zeroes the gradients (on the device that holds them); returns the milliseconds. */
static double train_zero_grads(const device *dev, const param_table *pt, param_buffers *w)
{
    double t0 = train_now_s();
    if (device_is_gpu(dev)) dev->ops->zero(w->grads, pt->total);
    else param_zero_grads(w, pt);
    return (train_now_s() - t0) * 1e3;
}

/* Forward and backward of one micro-batch (the backward ADDS into the gradients);
 * adds the loss to *loss and the phase times to ss->fwd_ms, ss->bwd_ms. On a GPU
 * the forward ends with the losses copied back and the backward with a device
 * synchronisation, so the host clock times the device's work. */
static status train_forward_backward(model *m, const model_batch *b, const device *dev, double *loss,
                                     train_step_stats *ss)
{
    double t0 = train_now_s();
    TRY(model_forward(m, b, true));
    TRY(model_tp_status(m));  /* a tensor-parallel reduction that timed out or lost its peer */
    double t1 = train_now_s();
    *loss += model_loss(m);
    model_backward(m);
    TRY(model_tp_status(m));
    if (device_is_gpu(dev)) TRY(device_sync(dev));
    double t2 = train_now_s();
    ss->fwd_ms += (t1 - t0) * 1e3, ss->bwd_ms += (t2 - t1) * 1e3;
    return STATUS_OK;
}

/* The update of the whole flat buffer at rate lr, step t (from 1): SGD on the host,
 * AdamW through the device table (on a GPU with loss scaling's own step count, then
 * a synchronisation). */
static status train_optim_update(train_optim *o, const param_table *pt, param_buffers *pb, double lr, long t)
{
    if (o->use_sgd) {
        optim_sgd_step(pt, pb, &o->sgd, lr, t);
    } else if (device_is_gpu(o->dopt.dev)) {
        bool skipped;
        device_optim_adamw_step_scaled(&o->dopt, pb, &o->adamw, lr, &skipped);
        TRY(device_sync(o->dopt.dev));
    } else {
        device_optim_adamw_step(&o->dopt, pb, &o->adamw, lr, t);
    }
    return STATUS_OK;
}

/* The global gradient norm on a process grid, and clipping to max_norm (INFINITY: none)
 * as optim_clip_grad_norm does: the split tensors' squares summed over the tp group, the
 * whole tensors' (equal on every tp rank) counted once, then the stages' sums over the
 * pp group (the tied embedding once, the first stage's). */
static status train_clip_grid(train_run *r, const param_table *pt, float *grads, double max_norm, double *norm)
{
    double sq[2] = { 0, 0 };  /* split, whole */
    double *sqz = NULL;       /* ZeRO-1: each tensor's squares from its owned shards (zero.h) */
    if (r->use_zero) {
        sqz = malloc((size_t)pt->count * sizeof *sqz);
        CHECK(sqz, "out of memory");
        double all;
        TRY(zero_grad_norm_sq(&r->zero, pt, grads, r->timeout_s, &all, sqz));
    }
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        if (train_pp_counted(r, e)) sq[e->tp_dim < 0] += sqz ? sqz[i] : grad_norm_sq(grads + e->offset, e->count);
    }
    free(sqz);
    comm_ctl tc = comm_ctl_watched(comm_ctl_named(r->grid.tp_comm, r->timeout_s, "tp"), r->rt->wd);
    if (r->grid.shape.tp > 1) TRY(comm_ctl_allreduce(tc, MPI_IN_PLACE, sq, 1, MPI_DOUBLE, MPI_SUM));
    double stage = sq[0] + sq[1];
    comm_ctl pc = comm_ctl_watched(comm_ctl_named(r->grid.pp_comm, r->timeout_s, "pp"), r->rt->wd);
    if (r->grid.shape.pp > 1) TRY(comm_ctl_allreduce(pc, MPI_IN_PLACE, &stage, 1, MPI_DOUBLE, MPI_SUM));
    double total = sqrt(stage);
    *norm = total;
    double coef = max_norm / (total + 1e-6);
    if (isfinite(total) && coef < 1.0) grad_scale(grads, pt->total, (float)coef);
    return STATUS_OK;
}

/* The hook a model's backward calls as each layer's gradients become final: marks
 * the layer's tensors, which launches every bucket they complete. */
static void train_layer_done(void *ctx, int layer)
{
    train_run *r = ctx;
    if (r->hook_status != STATUS_OK || layer < 0 || layer >= r->nlayers) return;
    for (int i = 0; i < r->layer_count[layer]; i++) {
        status st = bucket_mark_ready(&r->bm, r->layer_first[layer] + i);
        if (st != STATUS_OK) {
            r->hook_status = st;
            return;
        }
    }
}

void train_set_hook(train_run *r, bool on)
{
    /* ZeRO-1 launches no buckets: its gradient is reduce-scattered after the backward */
    model_set_layer_hook(&r->m, (param_layer_hook){ on && !r->use_zero ? train_layer_done : NULL, r });
}

/* CHAOS build: whether the step switch var (base/fault.h) names this step. */
static bool chaos_at(const train_run *r, const char *var)
{
    return fault_step_at(var, r->ticks + 1, r->step + 1, r->rt->rank == 0);
}

/* runtime.zero_grad_layer: that layer's reduced gradient set to 0 (every rank), a
 * planted effect the gradient pictures must show. */
static void zero_planted_layer(train_run *r, float *grads)
{
    if (!r->zero_on) return;
    const param_table *pt = model_params(&r->m);
    int first = r->layer_first[r->zero_layer], n = r->layer_count[r->zero_layer];
    for (int i = first; i < first + n; i++)
        memset(grads + pt->entries[i].offset, 0, pt->entries[i].count * sizeof *grads);
}

/* This step's learning rate relative to the peak: DGC-Pro folds it into what it
 * accumulates (dgc_exchange), so a delayed coordinate gets the rates of the steps
 * that produced it. */
static double train_lr_scale(const train_run *r)
{
    if (r->compat_dgc_unscaled_lr) return 1.0;  /* before 2b0c7fc: v += u, the exchange's sums as they came */
    double s = lr_at(&r->sched, r->step) * r->elastic.lr_factor * r->alert_ck.lr_scale / r->sched.base_lr;
    return s > 0 ? s : 1.0;
}

/* One optimizer step: A micro-batches forward and backward (buckets launched from
 * the last backward), the wait for the buckets, clipping, the update. Phases in ss:
 * fwd = zeroing the gradients + the forwards, bwd = the backwards (with the bucket
 * launches), comm_wait = the wait for the buckets or DGC-Pro's exchange, opt = the
 * loss sum, clipping, the update and ResNet's statistics (and at the steps of
 * monitor.histogram_interval rank 0's histograms, tensorboard.c); step = all of it
 * with the data. */
status train_step(train_run *r, train_step_stats *ss)
{
    param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    long step = r->step + 1;  /* the step this call computes, as its metrics line names it */
    /* ResNet's forward moves the running statistics before the step is decided: the
     * copy is what a skipped step puts back */
    float *state = model_state(&r->m);
    size_t nstate = state ? model_state_table(&r->m)->total : 0;
    if (state) memcpy(model_state_saved(&r->m), state, nstate * sizeof *state);
    train_lap_begin(r);
    double t0 = train_now_s(), loss = 0;
    ss->fwd_ms = train_zero_grads(&r->dev, pt, pb), ss->bwd_ms = 0, ss->bubble = 0;
    train_lap(r, TRAIN_PROFILE_ZERO);
    if (r->dgc_flush) {  /* DGC-Pro was switched off: its residuals go out with this dense step */
        dgc_flush(r->dgc, pb->grads, (float)(r->tb.accum * train_dp_size(r)), train_lr_scale(r));
        r->dgc_flush = false;
    }
    r->hook_status = STATUS_OK;
    bool compress = r->dgc && dgc_active(r->dgc);
    if (r->grid.shape.pp > 1) TRY(train_pipeline(r, &loss, ss));  /* the micro-batches in the 1F1B order */
    /* this rank's micro-batches: A of b samples, or its share's under sched.mode (sched.c),
       each micro-batch's gradient weighted by its samples / b, the loss likewise */
    int nmb = r->grid.shape.pp == 1 ? train_micro_batches(r) : 0, b = r->tb.micro_batch;
    for (int a = 0; a < nmb; a++) {
        int n = train_micro_batch_size(r, a);
        double la = 0;
        TRY(train_fill(r, r->train_data, a));
        if (r->share.mode != TRAIN_SCHED_MODE_OFF) {
            TRY(model_set_micro_batch(&r->m, n));
            model_set_loss_scale(&r->m, (float)n / (float)b);
        }
        train_lap(r, TRAIN_PROFILE_DATA);  /* the layers' laps follow, from the model's timer */
        train_set_hook(r, !compress && a == nmb - 1);  /* earlier micro-batches only accumulate (DDP's no_sync) */
        if (a == 0 && r->slow_us > 0 && r->rt->rank == r->slow_rank)
            usleep((useconds_t)r->slow_us);  /* a planted straggler: inside the first layer's forward lap */
        TRY(train_forward_backward(&r->m, &r->batch, &r->dev, &la, ss));
        loss += n == b ? la : la * n / b;
        TRY(r->hook_status);
    }
    if (r->share.mode != TRAIN_SCHED_MODE_OFF) {  /* back to the whole micro-batch (evaluation, probes) */
        TRY(model_set_micro_batch(&r->m, b));
        model_set_loss_scale(&r->m, 1.0f);
        for (int i = pt->count - 1; i >= 0 && nmb == 0 && !compress && !r->use_zero; i--)  /* an empty share: zeros to the sum */
            TRY(bucket_mark_ready(&r->bm, i));
    }
    train_set_hook(r, false);
    double t1 = train_now_s();
    /* summed over the ranks: the loss, and the non-finite values of the statistics (and,
     * under DGC-Pro, of the local gradients: the exchange would fold them into the
     * residuals, so the verdict comes before it) */
    double part[4] = { loss / r->tb.accum, state ? (double)train_count_nonfinite(state, nstate) : 0, 0, ss->bubble },
           sum[4];
    if (chaos_at(r, "NEBULA_CHAOS_NAN")) part[0] = NAN;  /* CHAOS build only: the alert rules' tests */
    if (chaos_at(r, "NEBULA_CHAOS_SPIKE")) part[0] *= 10;
    if (chaos_at(r, "NEBULA_CHAOS_SLOW")) usleep(500000);
    if (chaos_at(r, "NEBULA_CHAOS_LEAK")) {  /* 64 MiB touched and never freed */
        char *leak = malloc(64u << 20);
        if (leak) memset(leak, 1, 64u << 20);
    }
    bool summed = false, exchanged = false;
    if (compress) {
        if (r->tb.accum > 1) grad_scale(pb->grads, pt->total, 1.0f / (float)r->tb.accum);
        part[2] = (double)train_count_nonfinite(pb->grads, pt->total);
        TRY(comm_ctl_allreduce(train_ctl(r), part, sum, 4, MPI_DOUBLE, MPI_SUM));
        summed = true;
        if (isfinite(sum[0]) && sum[1] == 0 && sum[2] == 0) {
            TRY(dgc_exchange(r->dgc, pb->grads, pb->params, r->step, train_lr_scale(r), &r->dstats));
            TRY(train_pp_tie_grads(r, pb->grads));  /* pp > 1: the two copies' exchanged gradients summed */
            r->dgc_sent += (double)r->dstats.bytes_sent;
            r->dgc_dense += (double)r->dstats.dense_bytes;
            exchanged = true;
        }
    } else if (r->use_zero) {  /* each rank receives its own shards' sums only */
        TRY(zero_reduce_scatter_grads(&r->zero, pb->grads, r->bm.scale, r->timeout_s));
        TRY(train_pp_tie_grads(r, pb->grads));  /* the owned shards of the copies: same owner at both ends */
    } else {
        TRY(bucket_wait_all(&r->bm));
        TRY(train_pp_tie_grads(r, pb->grads));  /* pp > 1: the tied embedding's two copies */
    }
    double t2 = train_now_s();
    train_lap(r, TRAIN_PROFILE_COMM_WAIT);
    ss->comm_wait_ms = (t2 - t1) * 1e3;
    zero_planted_layer(r, pb->grads);
    param_zero_frozen(pt, pb->grads);  /* optim.freeze: out of the norm, the observers and the update */
    if (!summed) TRY(comm_ctl_allreduce(train_ctl(r), part, sum, 4, MPI_DOUBLE, MPI_SUM));
    ss->loss = sum[0] / (r->rt->size / r->grid.shape.pp);  /* the last stages' losses; 0 from the others */
    ss->bubble = sum[3] / r->rt->size;
    ss->gnorm = NAN;  /* DGC-Pro's step skipped before the exchange has no global gradient */
    /* the norm either way; DGC clipped each node's contribution before compressing */
    if (!compress || exchanged) {
        for (int i = 0; i < r->nobservers; i++)  /* the averaged gradient, complete on every rank, not clipped yet */
            if (r->observers[i].grads) r->observers[i].grads(r->observers[i].ctx, step);
        double clip = r->opt.clip > 0 && !compress ? r->opt.clip : INFINITY;
        if (r->grid.shape.tp > 1 || r->grid.shape.pp > 1 || r->use_zero)
            TRY(train_clip_grid(r, pt, pb->grads, clip, &ss->gnorm));
        else optim_clip_grad_norm(pb->grads, pt->total, clip, &ss->gnorm);
    }
    ss->lr = lr_at(&r->sched, r->step) * r->elastic.lr_factor * r->alert_ck.lr_scale;
    train_lap(r, TRAIN_PROFILE_CLIP);
    ckpt_fence(r->ckpt);  /* an async checkpoint's background copy of the state must be done */
    bool skip = !isfinite(ss->loss) || !isfinite(ss->gnorm) || sum[1] > 0 || sum[2] > 0;
    ss->skipped = skip, ss->state_bad = sum[1], ss->grads_bad = sum[2];  /* the verdict, for the loop */
    if (skip) {
        if (state) memcpy(state, model_state_saved(&r->m), nstate * sizeof *state);
    } else if (r->use_zero) {
        /* only the owned shards; then every rank's to every rank, through the gradient
         * buffer, which nothing reads after the update (zeroed at the next step) */
        if (r->opt.use_sgd) zero_sgd_step(&r->zero, pt, pb, &r->opt.sgd, ss->lr, r->step + 1);
        else zero_adamw_step(&r->zero, pt, pb, &r->opt.adamw, ss->lr, r->step + 1);
        TRY(zero_allgather_params(&r->zero, pb->params, pb->grads, r->timeout_s));
    } else {
        r->opt.sgd.plain = compress ? dgc_plain_entries(r->dgc) : NULL;
        TRY(train_optim_update(&r->opt, pt, pb, ss->lr, r->step + 1));
    }
    /* ResNet's running statistics: rank 0's everywhere, as DDP's broadcast_buffers. */
    if (model_state_table(&r->m))
        TRY(comm_ctl_bcast(train_ctl(r), model_state(&r->m), (int)model_state_table(&r->m)->total, MPI_FLOAT, 0));
    for (int i = 0; i < r->nobservers; i++)  /* e.g. a histogram step's updated weights */
        if (r->observers[i].applied) r->observers[i].applied(r->observers[i].ctx);
    double t3 = train_now_s();
    train_lap(r, TRAIN_PROFILE_OPTIM);
    ss->opt_ms = (t3 - t2) * 1e3;
    data_advance(r->train_data);
    r->loader_state = data_get_state(r->train_data);
    train_lap(r, TRAIN_PROFILE_DATA);
    r->step++;
    ss->step_ms = (train_now_s() - t0) * 1e3;
    return STATUS_OK;
}

/* DGC-Pro: off, forced on, or auto — ruled out here for small models and single
 * nodes; the rest of auto's decision (communication against compute) is taken after
 * the first steps have been measured (train_dgc_decide). */
void train_dgc_options(const train_run *r, dgc_options *o)
{
    dgc_options_from_config(r->cfg, o);
    o->momentum = r->opt.use_sgd ? r->opt.sgd.momentum : 0;
    o->nesterov = r->opt.use_sgd && r->opt.sgd.nesterov;
    o->weight_decay = r->opt.use_sgd ? r->opt.sgd.weight_decay : 0;
    o->clip = r->opt.clip;
    o->seed = r->seed;
    o->norm_comm = r->dgc_norm_comm != MPI_COMM_NULL ? &r->dgc_norm_comm : NULL;
    o->rows_comm = o->norm_comm ? &r->rt->world : NULL;
}

status train_dgc_setup(train_run *r)
{
    dgc_options o;
    dgc_options_from_config(r->cfg, &o);
    if (o.mode == DGC_MODE_OFF) return STATUS_OK;
    if (r->use_zero) {
        if (o.mode == DGC_MODE_ON) {
            log_error0("dgc.mode = on and zero.stage = 1 (%s) are not supported together: DGC-Pro's momentum "
                       "correction keeps full-size per-rank state and applies the update itself; set dgc.mode = off "
                       "or zero.stage = 0", config_origin(r->cfg, "zero.stage"));
            return STATUS_INPUT;
        }
        if (r->rt->rank == 0) printf("dgc: off (auto): not with zero.stage = 1\n");
        return STATUS_OK;
    }
    const param_table *pt = model_params(&r->m);
    size_t nparams = 0;
    for (int e = 0; e < pt->count; e++) nparams += pt->entries[e].count;
    /* on a grid DGC-Pro runs over each replica's data-parallel group, its nodes those
       of the group (dp_rt) */
    bool grid = train_dp_size(r) != r->rt->size;
    const runtime *drt = grid ? &r->grid.dp_rt : r->rt;
    const char *why = NULL;
    char buf[256];
    if (o.mode == DGC_MODE_AUTO && drt->nnodes == 1) {
        why = "one node: its gradients are reduced densely in shared memory";
    } else if (o.mode == DGC_MODE_AUTO && (int64_t)nparams < o.min_params) {
        snprintf(buf, sizeof buf, "%zu parameters is below dgc.min_params = %" PRId64 " (set dgc.mode = on to force)",
                 nparams, o.min_params);
        why = buf;
    }
    if (why) {
        if (r->rt->rank == 0) printf("dgc: off (auto): %s\n", why);
        return STATUS_OK;
    }
    if (grid)  /* collective over the world: the dp node index as colour */
        MPI_CHECK(MPI_Comm_split(r->rt->world, drt->node_id, r->rt->rank, &r->dgc_norm_comm));
    train_dgc_options(r, &o);
    TRY(dgc_init(&r->dgc, drt, pt, &o));
    dgc_set_active(r->dgc, o.mode == DGC_MODE_ON);
    if (r->rt->rank == 0)
        printf("dgc: %s: sparsity %.4g after %ld warm-up steps in %d stages from %.4g, %s values, %s threshold, momentum correction %s, "
               "%d nodes x %d ranks\n", o.mode == DGC_MODE_ON ? "on" : "auto (decided in the first 5 steps)",
               o.sparsity, o.warmup_steps, o.warmup_stages, o.warmup_sparsity, o.values == DGC_VALUES_FP16 ? "fp16" : "fp32",
               o.exact_topk ? "exact top-k" : "sampled", o.momentum > 0 ? "on" : "off (AdamW: plain accumulation)",
               drt->nnodes, drt->local_size);
    return STATUS_OK;
}

/* Auto mode, in the first steps of a fresh run. After dense steps 1-3: off when dense
 * communication is under dgc.min_comm_fraction of the compute; otherwise steps 4-5 run
 * compressed as a trial, and after step 5 DGC-Pro stays on only if its steps were
 * faster than the dense ones (steps 2-3; step 1 warms up). Switching off flushes the
 * residuals into the next dense step, so nothing accumulated is lost. Rank 0 decides
 * for everyone; the decision is part of the checkpointed state. */
status train_dgc_auto(train_run *r, const train_step_stats *ss, long first)
{
    long k = r->step - first;  /* steps of this run */
    if (first != 0 || k > 5) return STATUS_OK;  /* a resumed run keeps what its checkpoint says */
    if (strcmp(config_str(r->cfg, "dgc.mode"), "auto") != 0) return STATUS_OK;
    if (k >= 2 && k <= 3) r->dense_ms += ss->step_ms / 2, r->compute_ms += (ss->step_ms - ss->comm_wait_ms) / 2;
    if (k >= 4) r->trial_ms += ss->step_ms / 2;
    dgc_options o;
    dgc_options_from_config(r->cfg, &o);
    int on = -1;
    char why[256] = "";
    if (k == 3) {
        on = r->comm_ms >= o.min_comm_fraction * r->compute_ms;
        snprintf(why, sizeof why, "dense communication %.1f ms is %.0f%% of compute %.1f ms (dgc.min_comm_fraction = %g)%s",
                 r->comm_ms, 100 * r->comm_ms / r->compute_ms, r->compute_ms, o.min_comm_fraction,
                 on ? "; trying it for 2 steps" : "");
    } else if (k == 5) {
        on = r->trial_ms < r->dense_ms;
        snprintf(why, sizeof why, "its steps took %.1f ms against %.1f ms dense", r->trial_ms, r->dense_ms);
    }
    if (on < 0) return STATUS_OK;
    TRY(comm_ctl_bcast(train_ctl(r), &on, 1, MPI_INT, 0));
    if (!on && dgc_active(r->dgc)) r->dgc_flush = true;
    dgc_set_active(r->dgc, on);
    if (r->rt->rank == 0) printf("dgc: %s (auto): %s\n", on ? "on" : "off", why);
    return STATUS_OK;
}


status train_optim_init_default(train_optim *o, model *m, const device *dev)
{
    memset(o, 0, sizeof *o);
    /* SGD with momentum for the image classifiers (ResNet, MLP), AdamW otherwise
     * (nebula-train's optim.name = auto); on a GPU AdamW for every family: the device
     * table has no SGD step yet */
    o->use_sgd = model_spec_images(&m->spec) && !device_is_gpu(dev);
    o->adamw = (adamw_hparams){ .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    o->sgd = (sgd_hparams){ .momentum = 0.9, .weight_decay = 1e-4 };
    o->clip = 0;
    static const device cpu = { .kind = DEVICE_KIND_CPU, .precision = PRECISION_FP32, .ordinal = -1,
                                .ops = &nn_ops_cpu, .describe = "cpu" };
    return device_optim_init(&o->dopt, dev ? dev : &cpu, model_params(m));
}

void train_optim_free(train_optim *o)
{
    device_optim_free(&o->dopt);
}

status train_grad_batch(model *m, train_optim *o, const model_batch *b, double *loss, train_step_stats *ss)
{
    const device *dev = o->dopt.dev;
    ss->fwd_ms = train_zero_grads(dev, model_params(m), model_device_buffers(m)), ss->bwd_ms = 0;
    model_set_loss_scale(m, device_optim_loss_scale(&o->dopt));  /* 1 unless fp16 */
    *loss = 0;
    return train_forward_backward(m, b, dev, loss, ss);
}

status train_update_batch(model *m, train_optim *o, double lr, long t, train_step_stats *ss)
{
    const param_table *pt = model_params(m);
    param_buffers *w = model_device_buffers(m);
    double t0 = train_now_s();
    ss->gnorm = NAN;
    if (o->clip > 0) optim_clip_grad_norm(w->grads, pt->total, o->clip, &ss->gnorm);
    TRY(train_optim_update(o, pt, w, lr, t));
    ss->opt_ms = (train_now_s() - t0) * 1e3;
    return STATUS_OK;
}

/* The GPU-only path (nebula-bench model --device cuda) until the trainer runs on a
 * device: train_setup refuses device.kind = cuda, so train_step cannot be timed there
 * yet. It shares train_step's helpers (zeroing, forward + backward, the update); on
 * the CPU nebula-bench times train_step itself. */
status train_step_batch(model *m, train_optim *o, const model_batch *b, double lr, long t, train_step_stats *ss)
{
    double t0 = train_now_s(), loss = 0;
    TRY(train_grad_batch(m, o, b, &loss, ss));
    TRY(train_update_batch(m, o, lr, t, ss));
    ss->loss = loss;
    ss->lr = lr;
    ss->comm_wait_ms = 0;
    ss->step_ms = (train_now_s() - t0) * 1e3;
    return STATUS_OK;
}
