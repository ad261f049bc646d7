/* train — see train.h: the run's setup (the run directory locked first, rundir.c; batch,
 * optimizer and schedule checked before anything big is allocated; then data, model,
 * ZeRO, buckets, DGC-Pro, checkpoint writer, the run directory's files), resume (with
 * a warning when the seed or seq_len differ from the checkpoint's), the rollback, the
 * setup table and free. Above the three sub-modules (train_impl.h): the one place that
 * sets up core, control and observe in turn and registers the sink of records first. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/path.h"
#include "cpu/blas.h"
#include "ckpt/tool/offline.h"
#include "nn/param.h"
#include "train_impl.h"

/* Per layer, the range of its tensors in the table (the three families add each
 * layer's tensors consecutively; anything else is a bug). The layers are the whole
 * model's on every pipeline stage (a stage's other layers hold no tensors), so the
 * per-layer tables (profile, TensorBoard) have the same rows on every rank. */
static status train_layers(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    int L = 0;
    for (int i = 0; i < pt->count; i++) L = pt->entries[i].layer + 1 > L ? pt->entries[i].layer + 1 : L;
    if (r->grid.shape.pp > 1) {
        comm_ctl c = comm_ctl_watched(comm_ctl_named(r->grid.pp_comm, r->timeout_s, "pp"), r->rt->wd);
        TRY(comm_ctl_allreduce(c, MPI_IN_PLACE, &L, 1, MPI_INT, MPI_MAX));
    }
    r->nlayers = L;
    r->layer_first = calloc((size_t)L, sizeof *r->layer_first);
    r->layer_count = calloc((size_t)L, sizeof *r->layer_count);
    if (!r->layer_first || !r->layer_count) return STATUS_NOMEM;
    for (int i = pt->count - 1; i >= 0; i--) {
        int l = pt->entries[i].layer;
        CHECK(l >= 0, "every tensor of a model belongs to a layer");
        CHECK(r->layer_count[l] == 0 || r->layer_first[l] == i + 1, "a layer's tensors are consecutive in the table");
        r->layer_first[l] = i;
        r->layer_count[l]++;
    }
    return STATUS_OK;
}

/* The time of one bucket pass without overlap: every tensor marked at once, then
 * waited; the grads are zero here. Median of 3: the communication a step would
 * expose with no overlap at all, against which comm_wait is reported. */
static status train_calibrate_comm(train_run *r)
{
    param_buffers *pb = model_buffers(&r->m);
    const param_table *pt = model_params(&r->m);
    double t[3];
    param_zero_grads(pb, pt);
    for (int k = 0; k < 3; k++) {
        TRY(comm_ctl_barrier(train_ctl(r)));
        double t0 = train_now_s();
        for (int i = pt->count - 1; i >= 0; i--) TRY(bucket_mark_ready(&r->bm, i));
        TRY(bucket_wait_all(&r->bm));
        t[k] = train_now_s() - t0;
    }
    double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
    double med = t[0] + t[1] + t[2] - lo - hi;
    TRY(comm_ctl_allreduce(train_ctl(r), &med, &r->comm_ms, 1, MPI_DOUBLE, MPI_MAX));
    r->comm_ms *= 1e3;
    return STATUS_OK;
}

/* The process grid of parallel.*: checked against the world and the model, the groups
 * split, and the gradient path over the replicas (a comm of its own when tp or pp > 1,
 * the program's otherwise). */
static status train_grid_setup(train_run *r)
{
    const config *cfg = r->cfg;
    grid_shape gs;
    grid_shape_from_config(cfg, &gs);
    TRY(grid_shape_resolve(&gs, r->rt->size, config_origin(cfg, "parallel.tp")));
    TRY(model_spec_check_grid(&r->spec, gs.tp, gs.pp));
    TRY(train_grid_allowed(cfg, &gs));
    TRY(grid_init(&r->grid, r->rt, &gs, r->timeout_s));
    if (gs.dp != r->rt->size) grid_print(&r->grid, r->rt, stdout);
    r->dpc = r->c;
    if (gs.dp != r->rt->size) {
        comm_options co;
        comm_options_from_config(cfg, &co);
        co.timeout_s = r->timeout_s;
        TRY(comm_init(&r->dpc_owned, &r->grid.dp_rt, &co));
        r->dpc = r->dpc_owned;
    }
    return STATUS_OK;
}

/* Collective: every rank returns the status rank 0's run-directory work found (the other
 * ranks pass STATUS_OK), so a refused lock or an unwritable file ends every rank the same
 * way instead of leaving them in the next collective. */
static status train_agree(const train_run *r, status mine)
{
    int st = (int)mine, all;
    TRY(comm_ctl_allreduce(train_ctl(r), &st, &all, 1, MPI_INT, MPI_MAX));
    return (status)all;
}

status train_setup(train_run *r, const config *cfg, const runtime *rt, comm *c, train_signals *signals)
{
    memset(r, 0, sizeof *r);
    train_metrics_attach(r);  /* the records' sink, before anything records */
    r->tie_comm = r->dgc_norm_comm = MPI_COMM_NULL;  /* not 0: train_free reads them whenever setup stopped */
    r->live = *cfg;
    r->cfg = &r->live, r->rt = rt, r->c = c;
    train_reload_init(r);
    train_ckpt_checks_register();  /* before any load: the value checks of control's blobs */
    r->signals = signals ? signals : &r->no_signals;
    r->timeout_s = config_float(cfg, "comm.timeout");
    r->heartbeat_fd = -1;
    r->lock_fd = r->metrics_fd = -1;
    r->seed = (uint64_t)config_int(cfg, "train.seed");
    r->steps = (long)config_int(cfg, "train.steps");
    r->opt.clip = config_float(cfg, "train.max_grad_norm");
    r->compat_dgc_unscaled_lr = config_bool(cfg, "compat.dgc_unscaled_lr");
    snprintf(r->run_dir, sizeof r->run_dir, "%s", config_str(cfg, "train.run_dir"));
    config_dump(cfg, r->config_text, sizeof r->config_text);
    r->threads = runtime_threads(rt, config_int(cfg, "train.threads"));
    omp_set_num_threads(r->threads);
    blas_set_threads(r->threads);
    TRY(fault_plan_init(&r->metrics_fault, "metrics"));
    TRY(fault_plan_init(&r->rundir_fault, "rundir"));
    /* The model runs on a GPU in nebula-bench model --device cuda; the loop's buckets,
     * DGC-Pro, ZeRO and checkpoints still read host memory. */
    TRY(device_open_from_config(&r->dev, cfg, rt->gpu));
    if (r->dev.kind != DEVICE_KIND_CPU) {
        log_error0("--device cuda: nebula-train's loop (buckets, DGC-Pro, ZeRO, checkpoints) runs on host memory "
                   "so far; GPT-2 on a GPU runs in nebula-bench model --device cuda\nHINT: use --device cpu");
        return STATUS_INPUT;
    }
    TRY(model_spec_from_config(&r->spec, cfg));
    TRY(train_grid_setup(r));
    TRY(train_batch_resolve(&r->tb, cfg, train_dp_size(r)));
    r->config_batch = r->tb.global_batch;
    r->elastic = (train_elastic){ r->tb.global_batch, 1.0 };
    r->T = model_spec_images(&r->spec) ? 0 : (int)config_int(cfg, "train.seq_len");
    TRY(model_spec_check_batch(&r->spec, r->tb.micro_batch, r->T ? r->T : 1, "train.micro_batch", "train.seq_len"));
    TRY(train_pp_plan(r));

    /* Optimizer and schedule, checked before anything big is allocated. */
    const char *opt = config_str(cfg, "optim.name");
    /* auto: SGD with momentum for the image classifiers (ResNet, MLP), AdamW for the language models */
    r->opt.use_sgd = !strcmp(opt, "sgd") || (!strcmp(opt, "auto") && model_spec_images(&r->spec));
    r->opt.adamw = (adamw_hparams){ .beta1 = config_float(cfg, "optim.beta1"), .beta2 = config_float(cfg, "optim.beta2"),
                                .eps = config_float(cfg, "optim.eps"),
                                .weight_decay = config_float(cfg, "optim.weight_decay") };
    r->opt.sgd = (sgd_hparams){ .momentum = config_float(cfg, "optim.momentum"),
                            .nesterov = config_bool(cfg, "optim.nesterov"),
                            .weight_decay = config_float(cfg, "optim.weight_decay") };
    if (r->opt.sgd.nesterov && r->opt.sgd.momentum == 0) {
        log_error0("optim.nesterov = true needs optim.momentum > 0");
        return STATUS_INPUT;
    }
    train_schedule_from_config(&r->sched, cfg);
    const char *why = NULL;
    if (!lr_schedule_valid(&r->sched, &why)) {
        log_error0("the learning-rate schedule is not usable: %s (see the [optim] keys)", why);
        return STATUS_INPUT;
    }
    TRY(train_alert_setup(r));

    r->use_zero = config_int(cfg, "zero.stage") == 1;
    if (r->use_zero && config_bool(cfg, "ckpt.async")) {
        log_error0("ckpt.async = true and zero.stage = 1 (%s) are not supported together: the asynchronous writer "
                   "stages every tensor on rank 0, which a ZeRO run does not hold (gathering the moments there "
                   "would undo the memory ZeRO saves); set ckpt.async = false (ZeRO checkpoints are written in "
                   "parallel, each rank its shards)", config_origin(cfg, "zero.stage"));
        return STATUS_INPUT;
    }

    /* ckpt.commit_to's repository exists (rank 0 opens it), before the run directory is made */
    TRY(train_commits_setup(r));

    /* The run directory is this run's before anything reads or writes in it: a second
     * run on it is refused here, after the checks of the config alone (which leave no
     * run directory behind) and before data or a checkpoint is loaded (exit 2). */
    TRY(train_agree(r, rt->rank == 0 ? train_rundir_lock(r) : STATUS_OK));

    /* Data before the model: a bad file fails fast. */
    TRY(train_open_data_agreed(r, &r->train_data, config_str(cfg, "data.train"), true));
    const char *val = config_str(cfg, "data.val");
    if (val[0]) TRY(train_open_data_agreed(r, &r->val_data, val, false));

    nn_tp tp = { .size = r->grid.shape.tp, .rank = r->grid.tp_rank, .failed = STATUS_OK,
                 .group = r->grid.tp_group };
    TRY(model_init_parallel(&r->m, &r->spec, r->tb.micro_batch, r->T, r->seed, true, &r->dev, &tp, &r->stage));
    TRY(train_pp_init(r));
    TRY(device_optim_init(&r->opt.dopt, &r->dev, model_params(&r->m)));
    TRY(model_batch_init(&r->batch, &r->m));
    if (r->fixed_batch) model_batch_synthetic(&r->batch, &r->m, r->seed);
    if (r->spec.family == MODEL_FAMILY_BERT) {
        r->raw_ids = malloc((size_t)r->tb.micro_batch * (size_t)r->T * sizeof *r->raw_ids);
        r->samples = malloc((size_t)r->tb.micro_batch * sizeof *r->samples);
        if (!r->raw_ids || !r->samples) return STATUS_NOMEM;
    }
    /* Identical initial weights everywhere (they are already: same seed; DDP broadcasts
     * anyway, and so does Nebula, so a rank can never start from another state). */
    param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    TRY(comm_ctl_bcast(train_dp_ctl(r), pb->params, (int)pt->total, MPI_FLOAT, 0));  /* a replica's shards */
    if (config_str(cfg, "optim.freeze")[0]) {  /* the same table on every rank (no pipeline stages): agreed */
        char why[512];
        int nf = param_freeze(pt, config_str(cfg, "optim.freeze"), why, sizeof why);
        if (nf < 0) {
            log_error0("optim.freeze (%s): %s", config_origin(cfg, "optim.freeze"), why);
            return STATUS_INPUT;
        }
        if (r->rt->rank == 0) printf("optim.freeze: %d of %d tensors frozen\n", nf, pt->count);
    }
    if (r->use_zero) {
        /* The moments live in zero's packed buffers, 1/N of them per rank. The models
         * allocate full ones when training (model_init has no flag to leave them out):
         * released here, before anything else is allocated. */
        free(pb->m), free(pb->v);
        pb->m = pb->v = NULL;
        zero_options zo = { (size_t)config_int(cfg, "zero.shard_numel"), (int)config_int(cfg, "zero.vnodes"),
                            r->opt.use_sgd ? 1 : 2, 0 };
        TRY(zero_init(&r->zero, r->grid.dp_comm, pt, &zo));
        TRY(zero_use_nodes(&r->zero, r->grid.dp_rt.node_id, r->timeout_s));  /* two levels across nodes */
    }
    TRY(train_tp_layout(r));  /* after ZeRO's shards: under ZeRO the moments' pieces are cut at them */

    TRY(train_layers(r));
    size_t *off = malloc((size_t)pt->count * sizeof *off), *cnt = malloc((size_t)pt->count * sizeof *cnt);
    if (!off || !cnt) return STATUS_NOMEM;
    param_table_slices(pt, off, cnt);
    status st = bucket_init(&r->bm, r->dpc, pb->grads, REDUCE_DTYPE_F32, off, cnt, pt->count,
                            (size_t)config_size(cfg, "train.bucket_bytes"), COMM_ALGO_AUTO,
                            1.0 / ((double)r->tb.accum * train_dp_size(r)));
    free(off), free(cnt);
    TRY(st);
    /* forced DGC-Pro never sends the dense gradient: no need to time it (slow links: minutes) */
    if (strcmp(config_str(cfg, "dgc.mode"), "on") != 0) TRY(train_calibrate_comm(r));
    TRY(train_dgc_setup(r));
    TRY(train_sched_setup(r));
    TRY(train_profile_setup(r));
    train_layer_timer_update(r);  /* the profiler's layer laps (the trace's too, once it is set up) */
    TRY(train_samples_setup(r));
    TRY(train_trace_setup(r));

    /* the run directory exists on every rank's view: rank 0 made it under the lock, agreed */
    {  /* the watchdog's beacons: where each rank is, so that a stuck job names who is missing */
        char path[4200];
        snprintf(path, sizeof path, "%s/beacons", r->run_dir);
        (void)watchdog_beacons(rt->wd, path);  /* without them a stuck job still ends (logged) */
    }
    if (config_int(cfg, "ckpt.every_steps") > 0 || config_float(cfg, "ckpt.every_minutes") > 0) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
        ckpt_content shape;
        train_ckpt_content(r, &shape);
        TRY(ckpt_writer_init(&r->ckpt, rt->world, dir, (int)config_int(cfg, "ckpt.keep_last"),
                             config_bool(cfg, "ckpt.async"), &shape));
    }
    status files = STATUS_OK;
    if (rt->rank == 0) {
        files = train_metrics_open(r);
        if (files == STATUS_OK) files = train_heartbeat_open(r);
        if (files == STATUS_OK) files = train_tensorboard_setup(r);
        if (files == STATUS_OK) train_rundir_write_config(r);
    }
    return train_agree(r, files);
}

/* The value of section.key in a config_dump text ("[section]" lines, "key = value"
 * lines) into out; false when it has none. */
static bool config_text_value(const char *text, const char *section, const char *key, char *out, size_t cap)
{
    char sect[64] = "";
    size_t klen = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        size_t len = strcspn(line, "\n");
        if (line[0] == '[') {
            snprintf(sect, sizeof sect, "%.*s", (int)(len > 2 ? len - 2 : 0), line + 1);
        } else if (!strcmp(sect, section) && !strncmp(line, key, klen) && !strncmp(line + klen, " =", 2)) {
            const char *v = line + klen + 2 + (line[klen + 2] == ' ');
            snprintf(out, cap, "%.*s", (int)(len - (size_t)(v - line)), v);
            return true;
        }
    }
    return false;
}

/* Rank 0 after a resume: the checkpoint's own config against this run's, for the keys
 * that change what the resumed steps read. A warning, not a refusal: both are legitimate
 * on purpose (a longer context to finish training, another seed to step past a bad
 * stretch of data), but the run no longer continues the one that wrote the checkpoint
 * (the loader's position counts samples of seq_len tokens, and the sample order is a
 * function of the seed), which a resume must never do silently. */
static void train_resume_compare(const train_run *r, const char *path)
{
    ckpt_catalog cat;
    if (ckpt_catalog_open(&cat, path) != STATUS_OK) return;  /* ckpt_load read it: not expected */
    char was[64], now[64];
    if (cat.config && config_text_value(cat.config, "train", "seed", was, sizeof was)) {
        snprintf(now, sizeof now, "%" PRIu64, r->seed);
        if (strcmp(was, now) != 0)
            log_warn0("resuming with train.seed = %s, but the checkpoint's run used %s: from here on the data order "
                      "(and augmentation, masking) is another one, so this is not the run that wrote the checkpoint "
                      "continued\nHINT: --seed %s continues it exactly", now, was, was);
    }
    if (r->T && cat.config && config_text_value(cat.config, "train", "seq_len", was, sizeof was)) {
        snprintf(now, sizeof now, "%d", r->T);
        if (strcmp(was, now) != 0)
            log_warn0("resuming with train.seq_len = %s, but the checkpoint's run used %s: the data position counts "
                      "samples, so the resumed steps read other tokens than that run would have (some skipped or "
                      "read twice)\nHINT: --seq-len %s continues it exactly", now, was, was);
    }
    ckpt_catalog_free(&cat);
}

status train_resume(train_run *r)
{
    const char *which = config_str(r->cfg, "ckpt.resume");
    char dir[4200], checkout[4300];
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    if (!strncmp(which, "model:", 6)) {  /* a commit of a model repository, checked out as a checkpoint */
        TRY(train_commits_checkout(r, which + 6, checkout, sizeof checkout));
        which = checkout;
    }
    ckpt_content c;
    train_ckpt_content(r, &c);
    train_tp_content(r, &c, true);
    ckpt_info info;
    TRY(ckpt_load(r->rt->world, dir, which, &c, &info));
    /* steps an earlier launch logged past where this one starts are redone (rank 0 knows) */
    long from = info.step < 0 ? 0 : (long)info.step;
    if (r->prev_step > from) r->redo_until = r->prev_step;
    if (info.step < 0) return STATUS_OK;
    r->step = (long)info.step;
    r->last_applied = r->step;  /* what a skip's message names as the parameters in force */
    TRY(train_reload_resume(r, &c));  /* first: the batch it may change is what elastic's is relative to */
    TRY(train_elastic_resume(r, &c));
    TRY(train_sched_resume(r, &c, &info));
    TRY(data_set_state(r->train_data, &r->loader_state));
    if (r->dgc && !train_ckpt_blob(&c, TRAIN_CKPT_DGC)->loaded) {
        dgc_state_reset(r->dgc);
        dgc_set_active(r->dgc, !strcmp(config_str(r->cfg, "dgc.mode"), "on"));
        log_warn0("dgc: the checkpoint holds no compression state for this layout (written without DGC-Pro, or "
                  "with another number of ranks per node or another process grid): residuals and velocities start from zero");
    } else if (r->dgc && (info.resharded || dgc_state_loaded(r->dgc) != STATUS_OK)) {
        dgc_state_reset(r->dgc);
        log_warn0("dgc: the checkpoint's compression state belongs to another layout of ranks or an older "
                  "state format; residuals and velocities start from zero (what they held is not applied)");
    }
    /* a grid's shards are its tensors' pieces: only a data-parallel run's ZeRO shards are
       the same across the two world sizes */
    if (r->use_zero && info.world_size != r->rt->size && train_dp_size(r) == r->rt->size) {
        double fs, fe;
        TRY(zero_moved_fraction(&r->zero, info.world_size, &fs, &fe));
        int a = info.world_size, b = r->rt->size;
        if (r->rt->rank == 0)
            printf("zero: resharded from %d to %d ranks: %.1f%% of the optimizer shards (%.1f%% of the floats) "
                   "change owner (consistent hashing; expected about 1 - %d/%d = %.1f%%)\n", a, b, 100 * fs, 100 * fe,
                   a < b ? a : b, a < b ? b : a, 100.0 * (1.0 - (double)(a < b ? a : b) / (a < b ? b : a)));
    }
    if (r->rt->rank == 0) train_resume_compare(r, info.path);
    if (info.version < CKPT_FORMAT_VERSION)  /* read as it is: no step of the load depends on the version */
        log_msg0(LOG_LEVEL_INFO, "checkpoint %s is format version %d (this build writes %d): read directly; "
                 "`nebula-ckpt upgrade` rewrites it as version %d", info.path, info.version, CKPT_FORMAT_VERSION,
                 CKPT_FORMAT_VERSION);
    if (strcmp(info.dtype, "float32") != 0)
        log_warn0("checkpoint %s stores its tensors as %s (an export copy): they were widened to float32, and this "
                  "run continues from rounded values, not bit-exactly from the run that wrote it", info.path,
                  info.dtype);
    /* metrics.jsonl is appended across launches: records of steps after this one that an
     * earlier launch wrote before it died were not committed, and are redone from here */
    train_emit(r, json_pack("{s:s, s:I, s:s, s:I}", "kind", "resume", "step", (json_int_t)r->step,
                                     "checkpoint", info.path, "redo_until", (json_int_t)(r->redo_until > r->step ?
                                                                                         r->redo_until : r->step)));
    if (r->rt->rank == 0)
        printf("resumed from %s at step %ld%s%s\n", info.path, r->step,
               info.resharded ? " (written at another world size: same global batch, accumulation recomputed)" : "",
               info.skipped ? " (newer checkpoints were skipped, see the warnings above)" : "");
    return STATUS_OK;
}

/* The initial state, from the seed alone (the design's promise: step 0 is a function of
 * train.seed), into the run's buffers: a scratch model of one sample gives the
 * parameters and ResNet's statistics; moments and compression state start at zero. */
static status train_reinit(train_run *r)
{
    model s;
    memset(&s, 0, sizeof s);
    nn_stage one = r->m.stage;
    one.slots = 1;
    TRY(model_init_parallel(&s, &r->spec, 1, r->T, r->seed, false, &r->dev, &r->m.tp, &one));
    const param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    memcpy(pb->params, model_buffers(&s)->params, pt->total * sizeof *pb->params);
    float *state = model_state(&r->m);
    if (state) memcpy(state, model_state(&s), model_state_table(&r->m)->total * sizeof *state);
    model_free(&s);
    if (pb->m) memset(pb->m, 0, pt->total * sizeof *pb->m);
    if (pb->v) memset(pb->v, 0, pt->total * sizeof *pb->v);
    if (r->use_zero && r->zero.m) memset(r->zero.m, 0, r->zero.owned * sizeof *r->zero.m);
    if (r->use_zero && r->zero.v) memset(r->zero.v, 0, r->zero.owned * sizeof *r->zero.v);
    if (r->dgc) dgc_state_reset(r->dgc);
    return STATUS_OK;
}

status train_rollback(train_run *r)
{
    long from = r->step;
    char dir[4200], path[4300] = "";
    int64_t at = -1;
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    if (r->ckpt) TRY(ckpt_wait(r->ckpt));  /* a background save commits (or fails) first */
    /* rank 0 picks, every rank loads the same one */
    long before = train_alert_floor(r) < from + 1 ? train_alert_floor(r) : from + 1;
    if (r->rt->rank == 0 && !(r->ckpt && ckpt_committed_before(dir, before, path, sizeof path, &at))) path[0] = '\0';
    TRY(comm_ctl_bcast_bytes(train_ctl(r), path, sizeof path, 0));
    data_state loader = r->loader_state;  /* the data of the undone steps is skipped */
    train_elastic elastic = r->elastic;
    train_alert_ckpt mon = r->alert_ck;
    char *history = malloc(sizeof r->reload.blob);  /* the live config and its history stay */
    if (!history) return STATUS_NOMEM;
    memcpy(history, r->reload.blob, sizeof r->reload.blob);
    if (path[0]) {
        ckpt_content c;
        train_ckpt_content(r, &c);
        train_tp_content(r, &c, true);
        ckpt_info info;
        status st = ckpt_load(r->rt->world, dir, path, &c, &info);
        memcpy(r->reload.blob, history, sizeof r->reload.blob);
        free(history);
        TRY(st);
        at = info.step;
        if (r->dgc && (!train_ckpt_blob(&c, TRAIN_CKPT_DGC)->loaded || dgc_state_loaded(r->dgc) != STATUS_OK))
            dgc_state_reset(r->dgc);
    } else {
        free(history);
        at = 0;
        TRY(train_reinit(r));
    }
    r->loader_state = loader, r->elastic = elastic, r->alert_ck = mon;
    r->alert_ck.rollbacks++;
    TRY(data_set_state(r->train_data, &r->loader_state));
    r->step = (long)at;
    train_alert_rolled_back(r, (long)at);
    r->skipped_in_a_row = 0;
    r->last_applied = r->step;
    if (r->redo_until < from) r->redo_until = from;
    int retired = r->rt->rank == 0 && r->ckpt ? ckpt_retire_after(dir, at) : 0;
    if (r->rt->rank != 0) return STATUS_OK;
    printf("rollback: step %ld -> %s (step %ld); the data of steps %ld-%ld is skipped%s (rollback %" PRId64
           " of monitor.max_rollbacks = %" PRId64 ")\n", from, path[0] ? path : "the initial state from train.seed",
           r->step, r->step + 1, from, retired ? "; newer checkpoints removed" : "", r->alert_ck.rollbacks,
           config_int(r->cfg, "monitor.max_rollbacks"));
    fflush(stdout);
    train_emit(r, json_pack("{s:s, s:I, s:I, s:o, s:I, s:I}", "kind", "rollback", "step", (json_int_t)from,
                                     "to_step", (json_int_t)r->step, "checkpoint",
                                     path[0] ? json_string(path) : json_null(), "checkpoints_removed",
                                     (json_int_t)retired, "rollbacks", (json_int_t)r->alert_ck.rollbacks));
    return STATUS_OK;
}

void train_print(const train_run *r, FILE *f)
{
    if (r->rt->rank != 0) return;
    model *m = (model *)&r->m;
    model_spec_print(&r->spec, f);
    int dp = train_dp_size(r);
    fprintf(f, "batch: global %d = micro-batch %d x accumulation %d x %d %srank%s%s; %d thread%s per rank\n",
            r->tb.global_batch, r->tb.micro_batch, r->tb.accum, dp, dp < r->rt->size ? "data-parallel " : "",
            dp == 1 ? "" : "s", r->T ? "" : " (images)", r->threads, r->threads == 1 ? "" : "s");
    fprintf(f, "device: %s\n", r->dev.describe);
    if (r->dev.gemm[0]) fprintf(f, "fp32 GEMMs: %s\n", r->dev.gemm);
    char line[512];
    data_describe(r->train_data, line, sizeof line);
    if (r->fixed_batch)
        fprintf(f, "data.train: %s: one synthetic batch (seed %" PRIu64 ") as every micro-batch; the position "
                "advances over %s\n", TRAIN_DATA_SYNTHETIC_FIXED, r->seed, line);
    else
        fprintf(f, "data.train: %s\n", line);
    if (r->val_data) {
        data_describe(r->val_data, line, sizeof line);
        fprintf(f, "data.val: %s\n", line);
    }
    if (r->use_zero) zero_print_memory(&r->zero, model_params(m), model_activation_bytes(m), 0, f);
    else param_print_memory(model_params(m), model_activation_bytes(m), 0, NULL, f);
    bucket_print(&r->bm, f);
    fflush(f);
}

void train_free(train_run *r)
{
    train_commits_free(r);  /* first: its report is a record */
    train_profile_free(r);
    train_samples_free(r);
    train_trace_free(r);
    if (r->ckpt) ckpt_writer_free(r->ckpt);
    dgc_free(r->dgc);
    train_sched_free(r);
    train_alert_free(r);
    if (r->dgc_norm_comm != MPI_COMM_NULL) MPI_Comm_free(&r->dgc_norm_comm);
    if (r->use_zero) zero_free(&r->zero);
    device_optim_free(&r->opt.dopt);
    train_tensorboard_free(r);
    train_metrics_close(r);
    if (r->heartbeat_fd >= 0) close(r->heartbeat_fd);
    train_rundir_unlock(r);  /* last of the run-directory files */
    bucket_free(&r->bm);
    if (r->dpc_owned) comm_free(r->dpc_owned);
    train_tp_free(r);
    train_pp_free(r);
    if (r->grid.shape.tp > 0) grid_free(&r->grid);  /* grid_init ran (a run that failed before has a zero shape) */
    free(r->layer_first), free(r->layer_count), free(r->raw_ids), free(r->samples);
    if (r->val_data) data_free(r->val_data);
    if (r->train_data) data_free(r->train_data);
    model_batch_free(&r->batch);
    if (r->m.spec.name[0]) model_free(&r->m);
    if (r->dev.ops) device_close(&r->dev);
    memset(r, 0, sizeof *r);
}
