/* profile — the trainer's profiler mode; see profile.h and docs/profile.md.
 *
 * Samples are one per profiled step (a layer's forward summed over the step's
 * micro-batches), taken after the launch's first step (the warm-up: first-touch
 * page faults, BLAS buffers). The first-run rule: profile.mode = auto profiles the
 * first profile.steps steps when the shape key (model and its sizes, micro-batch,
 * sequence length, ranks, precision) is not yet in the record of seen shapes
 * (profile.shapes, by default RUN_DIR/profile-shapes), prints the one-screen
 * profile, writes profile.json, records the shape and switches itself off. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"
#include "profile.h"
#include "observe.h"

#define TP_NV (5 + TRAIN_PROFILE_EVENTS_MAX)  /* per timer and rank: count, total, min, median, max, counters */

void train_profile_lap_(train_profile *p, int id)
{
    double t = train_profile_now_ms();
    train_profile_timer *tm = &p->timers[id];
    tm->cur += t - p->t_mark;
    tm->touched = true;
    p->t_mark = t;
    train_profile_papi *pp = &p->papi;
    if (pp->ncounting) {
        train_profile_papi_read(pp);
        for (int e = 0; e < pp->n; e++)
            if (pp->slot[e] >= 0) tm->ev_cur[e] += (double)(pp->now[pp->slot[e]] - pp->last[pp->slot[e]]);
        memcpy(pp->last, pp->now, sizeof pp->last);
    }
}

void train_profile_step_begin_(train_profile *p)
{
    p->in_step = true;
    if (p->papi.ncounting) {
        train_profile_papi_read(&p->papi);
        memcpy(p->papi.last, p->papi.now, sizeof p->papi.last);
    }
    p->t_step0 = p->t_mark = train_profile_now_ms();
}

static const char *const phase_names[TRAIN_PROFILE_NPHASES] = { "zero_grads", "data", "comm_wait", "loss+clip",
                                                                "optimizer" };

const char *train_profile_phase_name(int id)
{
    return id >= 0 && id < TRAIN_PROFILE_NPHASES ? phase_names[id] : "?";
}

void train_profile_layer_lap(train_profile *p, int layer, bool backward)
{
    if (!p->in_step) return;  /* an evaluation's forward */
    if (layer == PARAM_LAYER_LAST || layer >= p->nlayers) layer = p->nlayers - 1;
    train_profile_lap_(p, (backward ? p->bwd0 : p->fwd0) + layer);
}

static void timer_add(train_profile_timer *tm, double ms)
{
    tm->ring[tm->count % TRAIN_PROFILE_RING] = ms;
    if (tm->count == 0 || ms < tm->min) tm->min = ms;
    if (tm->count == 0 || ms > tm->max) tm->max = ms;
    tm->total += ms;
    tm->count++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the ring (the last TRAIN_PROFILE_RING samples); 0 without samples. */
static double timer_median(const train_profile_timer *tm)
{
    int n = tm->count < TRAIN_PROFILE_RING ? (int)tm->count : TRAIN_PROFILE_RING;
    if (n == 0) return 0;
    double v[TRAIN_PROFILE_RING];
    memcpy(v, tm->ring, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A layer's name from the parameter table: the dotted prefix its tensors share
 * ("h.3"), else their first components joined ("wte+wpe"). */
void train_layer_name(const train_run *r, int l, char *out, size_t cap)
{
    const param_table *pt = model_params((model *)&r->m);
    int first = r->layer_first[l], n = r->layer_count[l];
    if (n == 0) {
        snprintf(out, cap, "layer %d", l);
        return;
    }
    const char *a = pt->entries[first].name;
    size_t common = strlen(a);
    for (int i = 1; i < n; i++) {
        const char *b = pt->entries[first + i].name;
        size_t k = 0;
        while (k < common && a[k] == b[k]) k++;
        common = k;
    }
    while (common > 0 && a[common - 1] != '.') common--;  /* whole components only */
    if (common > 1) {
        snprintf(out, cap, "%.*s", (int)(common - 1), a);
        return;
    }
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *b = pt->entries[first + i].name;
        int len = (int)strcspn(b, ".");
        char part[TRAIN_PROFILE_NAME];
        snprintf(part, sizeof part, "%.*s", len, b);
        if (strstr(out, part)) continue;
        size_t at = strlen(out);
        snprintf(out + at, cap - at, "%s%s", at ? "+" : "", part);
    }
}

static void timer_init(train_profile_timer *tm, train_profile_kind kind, int layer, const char *fmt, const char *arg)
{
    memset(tm, 0, sizeof *tm);
    tm->kind = kind;
    tm->layer = layer;
    snprintf(tm->name, sizeof tm->name, fmt, arg);
}

/* The first-run rule's key: what makes a profile differ. */
static void shape_key(const train_run *r, char *out, size_t cap)
{
    const model_spec *s = &r->spec;
    char arch[160];
    if (s->family == MODEL_FAMILY_GPT2)
        snprintf(arch, sizeof arch, "n_layer=%d n_head=%d n_embd=%d vocab=%d", s->gpt2.num_layers, s->gpt2.num_heads,
                 s->gpt2.channels, s->gpt2.vocab_size);
    else if (s->family == MODEL_FAMILY_BERT)
        snprintf(arch, sizeof arch, "n_layer=%d n_head=%d n_embd=%d vocab=%d", s->bert.num_layers, s->bert.num_heads,
                 s->bert.channels, s->bert.vocab_size);
    else if (s->family == MODEL_FAMILY_MLP)
        snprintf(arch, sizeof arch, "classes=%d image=%d hidden=%d layers=%d", s->mlp.num_classes, s->image_size,
                 s->mlp.hidden, s->mlp.layers);
    else
        snprintf(arch, sizeof arch, "classes=%d image=%d", model_num_classes(s), s->image_size);
    snprintf(out, cap, "model=%s %s micro_batch=%d seq_len=%d ranks=%d precision=%s", s->name, arch,
             r->tb.micro_batch, r->T, r->rt->size, precision_kind_name(r->dev.precision));
}

#define SHAPES_MAX ((uint64_t)1 << 20)  /* the record of seen shapes: one short line per shape */

/* Rank 0: the record's text ("" when there is none yet), NULL when it cannot be read: a
 * regular file only (never blocking on a FIFO), and the default one in the run directory
 * never through a link. */
static char *shapes_read(const train_profile *p)
{
    int fd;
    struct stat sb;
    char why[256];
    int rc = p->shapes_own ? path_open_own(p->shapes_path, &fd, &sb, SHAPES_MAX, why, sizeof why)
                           : path_open_regular(p->shapes_path, &fd, &sb, SHAPES_MAX, why, sizeof why);
    if (rc != 0 && errno == ENOENT) return strdup("");
    if (rc != 0) {
        log_warn("profile: the record of seen shapes %s %s", p->shapes_path, why);
        return NULL;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    if (text && path_read_all_at(fd, text, (size_t)sb.st_size, 0) != 0) {
        log_warn("profile: cannot read the record of seen shapes %s: %s", p->shapes_path,
                 errno ? strerror(errno) : "it shrank while being read");
        free(text);
        text = NULL;
    }
    close(fd);
    if (text) text[sb.st_size] = '\0';
    return text;
}

/* Rank 0: whether the shape key is a line of the record. */
static bool shape_seen(const train_profile *p)
{
    char *text = shapes_read(p);
    size_t n = strlen(p->shape);
    bool seen = false;
    for (const char *l = text; l && *l && !seen; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        seen = !strncmp(l, p->shape, n) && (l[n] == '\n' || l[n] == '\0');
    free(text);
    return seen;
}

typedef struct shapes_fill_ctx {
    const char *old, *key;
} shapes_fill_ctx;

static int shapes_fill(void *ctx, int fd)
{
    const shapes_fill_ctx *c = ctx;
    if (path_write_all(fd, c->old, strlen(c->old)) != 0) return -1;
    if (c->old[0] && c->old[strlen(c->old) - 1] != '\n' && path_write_all(fd, "\n", 1) != 0) return -1;
    if (path_write_all(fd, c->key, strlen(c->key)) != 0 || path_write_all(fd, "\n", 1) != 0) return -1;
    return 0;
}

/* Rank 0: the train command's input files (its config files, data, tuning table), which
 * profile.shapes must not be: `store` holds the names, `list` points at them. */
static int train_inputs(const config *cfg, char store[][CONFIG_ORIGIN_MAX], const char **list, int cap)
{
    static const char *const keys[] = { "data.train", "data.val", "comm.tune_file" };
    int n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && n < cap; i++)
        snprintf(store[n], CONFIG_ORIGIN_MAX, "%s", config_str(cfg, keys[i])), n++;
    for (int k = 0; k < cfg->nkeys && n < cap; k++) {  /* "FILE:LINE": the config files read */
        const char *o = cfg->values[k].origin, *colon = strrchr(o, ':');
        if (!colon || colon == o || strspn(colon + 1, "0123456789") != strlen(colon + 1)) continue;
        snprintf(store[n], CONFIG_ORIGIN_MAX, "%.*s", (int)(colon - o), o);
        bool dup = false;
        for (int j = 0; j < n && !dup; j++) dup = !strcmp(store[j], store[n]);
        if (!dup) n++;
    }
    for (int i = 0; i < n; i++) list[i] = store[i];
    return n;
}

/* Rank 0: the record may be read and then replaced (the output rule, base/path.h). */
static status shapes_check(const train_run *r, const train_profile *p)
{
    if (p->shapes_own) {
        /* the run's own file, which the output rule refuses to anyone else: only what the
         * rename of path_write_atomic cannot replace (a link it can) is refused here */
        struct stat sb;
        if (lstat(p->shapes_path, &sb) != 0 || S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) return STATUS_OK;
        log_error0("profile.shapes (RUN_DIR/profile-shapes) %s: it is %s; the run writes its record of seen shapes "
                   "only as a regular file\nHINT: remove it, or give profile.shapes another path", p->shapes_path,
                   path_kind(sb.st_mode));
        return STATUS_INPUT;
    }
    char store[16][CONFIG_ORIGIN_MAX];
    const char *list[16];
    int n = train_inputs(r->cfg, store, list, 16);
    return path_output_check(p->shapes_path, "profile.shapes", list, n);
}

/* The step's laps, as an observer of the step (train_observe). */
static void profile_begin(void *ctx)
{
    train_profile_step_begin(ctx);
}
static void profile_lap(void *ctx, int id)
{
    train_profile_lap(ctx, id);
}

status train_profile_setup(train_run *r)
{
    const config *cfg = r->cfg;
    const char *mode = config_str(cfg, "profile.mode");
    if (!strcmp(mode, "off")) return STATUS_OK;
    train_profile *p = calloc(1, sizeof *p);
    if (!p) return STATUS_NOMEM;
    r->prof = p;
    TRY(train_profile_papi_init(&p->papi, config_str(cfg, "profile.events")));
    shape_key(r, p->shape, sizeof p->shape);
    const char *shapes = config_str(cfg, "profile.shapes");
    if (shapes[0]) snprintf(p->shapes_path, sizeof p->shapes_path, "%s", shapes);
    else snprintf(p->shapes_path, sizeof p->shapes_path, "%s/profile-shapes", r->run_dir);
    p->shapes_own = !shapes[0];
    if (!strcmp(mode, "auto")) {
        /* checked before it is read: a FIFO there is refused at once, never opened */
        int v[2] = { 0, 0 };  /* refused, fresh */
        if (r->rt->rank == 0) v[0] = shapes_check(r, p) != STATUS_OK;
        if (r->rt->rank == 0 && !v[0]) v[1] = !shape_seen(p);
        TRY(comm_ctl_bcast(train_ctl(r), v, 2, MPI_INT, 0));
        if (v[0]) return STATUS_INPUT;
        if (!v[1]) {
            train_profile_free(r);
            return STATUS_OK;
        }
        p->first_run = true;
        p->window = (long)config_int(cfg, "profile.steps");
    }
    p->nlayers = r->nlayers;
    /* dense steps (DGC-Pro's auto mode may switch back to them); the most of any rank, as
     * the report gathers the same rows from every rank (a pipeline stage has its own) */
    int nb = bucket_count(&r->bm);
    TRY(comm_ctl_allreduce(train_ctl(r), MPI_IN_PLACE, &nb, 1, MPI_INT, MPI_MAX));
    p->nbuckets = nb;
    p->fwd0 = TRAIN_PROFILE_NPHASES;
    p->bwd0 = p->fwd0 + p->nlayers;
    p->step_id = p->bwd0 + p->nlayers;
    p->trainer_id = p->step_id + 1;
    p->bucket0 = p->trainer_id + 1;
    p->dgc0 = p->bucket0 + p->nbuckets;
    p->ckpt0 = p->dgc0 + (r->dgc ? 3 : 0);
    p->ntimers = p->ckpt0 + 3;
    p->timers = calloc((size_t)p->ntimers, sizeof *p->timers);
    if (!p->timers) return STATUS_NOMEM;
    for (int i = 0; i < TRAIN_PROFILE_NPHASES; i++)
        timer_init(&p->timers[i], TRAIN_PROFILE_KIND_PHASE, -1, "%s", phase_names[i]);
    /* a pipeline stage holds some layers only: each name from the ranks that hold it (a
     * bytewise MAX over the ranks, those without the layer giving zeros) */
    unsigned char *names = calloc((size_t)p->nlayers, TRAIN_PROFILE_NAME);
    if (!names) return STATUS_NOMEM;
    for (int l = 0; l < p->nlayers; l++)
        if (r->layer_count[l] > 0) train_layer_name(r, l, (char *)names + (size_t)l * TRAIN_PROFILE_NAME, TRAIN_PROFILE_NAME - 16);
    status st = comm_ctl_allreduce(train_ctl(r), MPI_IN_PLACE, names, p->nlayers * TRAIN_PROFILE_NAME, MPI_UNSIGNED_CHAR,
                                   MPI_MAX);
    for (int l = 0; l < p->nlayers && st == STATUS_OK; l++) {
        char name[TRAIN_PROFILE_NAME];
        memcpy(name, names + (size_t)l * TRAIN_PROFILE_NAME, TRAIN_PROFILE_NAME - 16);
        name[TRAIN_PROFILE_NAME - 16] = 0;
        if (!name[0]) train_layer_name(r, l, name, sizeof name - 16);  /* held by no rank: "layer N" */
        if (l == p->nlayers - 1 && r->spec.family == MODEL_FAMILY_GPT2) strcat(name, "+head");  /* the tied head */
        timer_init(&p->timers[p->fwd0 + l], TRAIN_PROFILE_KIND_FORWARD, l, "forward %s", name);
        timer_init(&p->timers[p->bwd0 + l], TRAIN_PROFILE_KIND_BACKWARD, l, "backward %s", name);
    }
    free(names);
    TRY(st);
    timer_init(&p->timers[p->step_id], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "step (profiler clock)");
    timer_init(&p->timers[p->trainer_id], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "step (trainer's step_ms)");
    for (int b = 0; b < p->nbuckets; b++) {
        char num[16];
        snprintf(num, sizeof num, "%d", b);
        timer_init(&p->timers[p->bucket0 + b], TRAIN_PROFILE_KIND_DETAIL, -1, "bucket %s reduction", num);
    }
    if (r->dgc) {
        timer_init(&p->timers[p->dgc0], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "dgc select");
        timer_init(&p->timers[p->dgc0 + 1], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "dgc encode");
        timer_init(&p->timers[p->dgc0 + 2], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "dgc exchange");
    }
    timer_init(&p->timers[p->ckpt0], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "checkpoint stall");
    timer_init(&p->timers[p->ckpt0 + 1], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "checkpoint copy");
    timer_init(&p->timers[p->ckpt0 + 2], TRAIN_PROFILE_KIND_DETAIL, -1, "%s", "checkpoint write");
    p->active = true;  /* the layer timer is installed by train.c (trace.c's, shared with the trace) */
    train_observe(r, &(train_step_observer){ .begin = profile_begin, .lap = profile_lap, .ctx = p });
    return STATUS_OK;
}

static status train_profile_report(train_run *r);

status train_profile_step(train_run *r, const train_step_stats *ss)
{
    train_profile *p = r->prof;
    if (!p || !p->active) return STATUS_OK;
    p->in_step = false;
    bool warm = p->seen++ == 0;
    for (int i = 0; i < p->ntimers; i++) {
        train_profile_timer *tm = &p->timers[i];
        if (tm->touched && !warm) {
            timer_add(tm, tm->cur);
            for (int e = 0; e < p->papi.n; e++) tm->ev_total[e] += tm->ev_cur[e];
        }
        tm->cur = 0, tm->touched = false;
        memset(tm->ev_cur, 0, sizeof tm->ev_cur);
    }
    if (warm) return STATUS_OK;
    timer_add(&p->timers[p->step_id], p->t_mark - p->t_step0);
    timer_add(&p->timers[p->trainer_id], ss->step_ms);
    bool compressed = r->dgc && dgc_active(r->dgc);
    for (int b = 0; b < p->nbuckets && !compressed; b++) {
        const bucket *k = &r->bm.buckets[b];
        timer_add(&p->timers[p->bucket0 + b], (k->t_done - k->t_start) * 1e3);
    }
    if (compressed) {
        timer_add(&p->timers[p->dgc0], r->dstats.select_s * 1e3);
        timer_add(&p->timers[p->dgc0 + 1], r->dstats.encode_s * 1e3);
        timer_add(&p->timers[p->dgc0 + 2], r->dstats.exchange_s * 1e3);
    }
    if (p->first_run && p->timers[p->step_id].count >= p->window) {
        TRY(train_profile_report(r));
        p->active = false;  /* the rest of the run is not profiled */
        train_layer_timer_update(r);
    }
    return STATUS_OK;
}

void train_profile_ckpt(train_run *r, double stall_ms)
{
    train_profile *p = r->prof;
    if (!p || !p->active || !r->ckpt) return;
    timer_add(&p->timers[p->ckpt0], stall_ms);
    ckpt_stats cs;
    ckpt_get_stats(r->ckpt, &cs);
    if (cs.copy_s > 0 && cs.copy_s != p->ckpt_copy_seen) timer_add(&p->timers[p->ckpt0 + 1], cs.copy_s * 1e3);
    if (cs.write_s > 0 && cs.write_s != p->ckpt_write_seen) timer_add(&p->timers[p->ckpt0 + 2], cs.write_s * 1e3);
    p->ckpt_copy_seen = cs.copy_s, p->ckpt_write_seen = cs.write_s;
}

status train_profile_finish(train_run *r)
{
    train_profile *p = r->prof;
    if (!p || p->reported) return STATUS_OK;
    if (r->ckpt) {  /* an async save's background copy and write, finished by now */
        ckpt_stats cs;
        ckpt_get_stats(r->ckpt, &cs);
        if (cs.copy_s > 0 && cs.copy_s != p->ckpt_copy_seen) timer_add(&p->timers[p->ckpt0 + 1], cs.copy_s * 1e3);
        if (cs.write_s > 0 && cs.write_s != p->ckpt_write_seen) timer_add(&p->timers[p->ckpt0 + 2], cs.write_s * 1e3);
    }
    return train_profile_report(r);
}

void train_profile_free(train_run *r)
{
    train_profile *p = r->prof;
    if (!p) return;
    train_profile_papi_free(&p->papi);
    free(p->timers);
    free(p);
    r->prof = NULL;
    if (r->m.base) train_layer_timer_update(r);  /* the trace's, or none */
}

/* ---- the report: gathered figures, the table, advice, profile.json ---- */

/* What rank 0 shows of timer i: the ranks' figures combined. */
typedef struct tp_row {
    double count, total, min, median, max;  /* total and median: the mean over the ranks with samples */
    double slow_total;                      /* the largest total of a rank */
    int slow_rank;
    double ev[TRAIN_PROFILE_EVENTS_MAX];    /* counter per sample, summed over the ranks */
} tp_row;

static void tp_rows(const train_profile *p, const double *all, int nranks, tp_row *rows)
{
    for (int i = 0; i < p->ntimers; i++) {
        tp_row *w = &rows[i];
        memset(w, 0, sizeof *w);
        w->min = INFINITY, w->max = -INFINITY, w->slow_total = -1;
        int with = 0;  /* ranks with samples (a checkpoint's background copy and write: rank 0's) */
        for (int k = 0; k < nranks; k++) with += all[((size_t)k * (size_t)p->ntimers + (size_t)i) * TP_NV] > 0;
        for (int k = 0; k < nranks; k++) {
            const double *v = all + ((size_t)k * (size_t)p->ntimers + (size_t)i) * TP_NV;
            if (v[0] == 0) continue;
            w->count = fmax(w->count, v[0]);
            w->total += v[1] / with, w->median += v[3] / with;
            w->min = fmin(w->min, v[2]), w->max = fmax(w->max, v[4]);
            if (v[1] > w->slow_total) w->slow_total = v[1], w->slow_rank = k;
            for (int e = 0; e < p->papi.n; e++) w->ev[e] += v[5 + e] / v[0];
        }
        if (w->count == 0) w->min = w->max = 0;
    }
}

/* Batch advice from the measured figures; each line names the numbers behind it. */
static int tp_advice(const train_run *r, const train_profile *p, const tp_row *rows, char adv[][400], int cap)
{
    int n = 0;
    double step = rows[p->step_id].total, wait = rows[TRAIN_PROFILE_COMM_WAIT].total;
    double data = rows[TRAIN_PROFILE_DATA].total, fb = 0;
    for (int l = 0; l < 2 * p->nlayers; l++) fb += rows[p->fwd0 + l].total;
    int b = r->tb.micro_batch, A = r->tb.accum;
    if (step <= 0) return 0;
    /* the GEMMs' rows: micro-batch x seq_len for the transformers, the micro-batch for the fc of a ResNet */
    int rows_m = r->T > 0 ? b * r->T : b, unit = 8;
    if (r->T > 0) for (int t = r->T; t % 2 == 0 && unit > 1; t /= 2) unit /= 2;  /* b multiple of unit: b T of 8 */
    if (rows_m % 8 && n < cap)
        snprintf(adv[n++], 400, "%s %d is not a multiple of 8: the GEMM kernels block rows by 8 and 16, so "
                 "forward + backward (%.0f%% of the step) wastes part of each tile; try --micro-batch %d",
                 r->T > 0 ? "micro-batch x seq_len" : "micro-batch", rows_m, 100 * fb / step,
                 (b + unit - 1) / unit * unit);
    if (r->T > 0 && r->T % 8 && n < cap)
        snprintf(adv[n++], 400, "seq_len %d is not a multiple of 8 (attention and GEMM blocks): try %d", r->T,
                 (r->T + 7) / 8 * 8);
    double compute = step - wait;
    if (wait / step > 0.15 && compute > 0 && n < cap) {
        /* A-fold accumulation keeps one reduction per step: the wait stays, compute grows A' / A times */
        int k = (int)ceil(9 * wait / (compute / A));
        if (k <= A) k = A * 2;
        snprintf(adv[n++], 400, "comm_wait is %.0f%% of the step (%.1f of %.1f ms per step): the reduction is not "
                 "hidden by the backward; accumulation amortises it: --accum %d (from %d) would bring it near %.0f%% "
                 "at the same micro-batch (global batch x%.1f), or raise train.bucket_bytes", 100 * wait / step,
                 wait / rows[p->step_id].count, step / rows[p->step_id].count, k, A,
                 100 * wait / (wait + compute * k / A), (double)k / A);
    }
    if (data / step > 0.05 && n < cap)
        snprintf(adv[n++], 400, "data is %.0f%% of the step (%.2f ms per step): the loader is on the critical path; "
                 "prepare the data into token files (nebula-train prepare) or use fewer, larger micro-batches",
                 100 * data / step, data / rows[p->step_id].count);
    /* memory headroom: activations scale with the micro-batch */
    long avail_kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &avail_kb) == 1) break;
    if (f) fclose(f);
    double act = (double)model_activation_bytes((model *)&r->m), avail = (double)avail_kb * 1024 / r->rt->max_local_size;
    if (act > 0 && avail > 0 && A > 1 && n < cap) {
        int fit = (int)((act + 0.8 * avail) / act);  /* micro-batches of activations that fit in 80% of it */
        if (fit >= 2)
            snprintf(adv[n++], 400, "memory: %.0f MiB of activations per micro-batch, %.0f MiB available per rank: "
                     "--micro-batch %d --accum %d keeps the global batch with fewer, larger GEMMs", act / 1048576,
                     avail / 1048576, b * (A % 2 == 0 ? 2 : A), A % 2 == 0 ? A / 2 : 1);
    }
    if (n == 0 && n < cap)
        snprintf(adv[n++], 400, "no batch change suggested: micro-batch %d, comm_wait %.0f%%, data %.0f%% of the "
                 "step", b, 100 * wait / step, 100 * data / step);
    return n;
}

static bool tp_in_step(train_profile_kind k)
{
    return k != TRAIN_PROFILE_KIND_DETAIL;
}

/* share: of the step, for the phases and layers that tile it; "-" for the rest, which
 * overlaps them (the buckets' reductions run during the backward and each other) or
 * lies outside the step (checkpoints); counters are charged to the tiles only */
static void tp_print_row(const train_profile *p, const tp_row *w, const char *name, double step, bool tile)
{
    char pct[16] = "      -";
    if (tile && step > 0) snprintf(pct, sizeof pct, "%6.1f%%", 100 * w->total / step);
    printf("  %-30s %6.0f %10.1f %s %9.2f %9.2f %9.2f", name, w->count, w->total, pct, w->min, w->median, w->max);
    for (int e = 0; e < p->papi.n; e++)
        if (p->papi.slot[e] >= 0) {
            if (tile) printf(" %16.4g", w->ev[e]);
            else printf(" %16s", "-");
        }
    printf("\n");
}

/* The table on rank 0. compact (the first-run profile): the transformer blocks or
 * residual blocks collapsed into one row each way, the buckets into one. */
static void tp_print(const train_run *r, const train_profile *p, const tp_row *rows, bool compact, char adv[][400],
                     int nadv)
{
    double step = rows[p->step_id].total;
    if (rows[p->step_id].count == 0) {
        printf("profile: no step was profiled: the first step of a launch is its warm-up (run at least 2 steps)\n");
        return;
    }
    printf("profile: %s%s, %.0f steps after 1 warm-up step, %d ranks (total and median: the mean over the ranks)\n",
           p->first_run ? "first run of " : "", p->shape, rows[p->step_id].count, r->rt->size);
    printf("  %-30s %6s %10s %7s %9s %9s %9s", "phase / layer", "count", "total_ms", "share", "min_ms", "median_ms",
           "max_ms");
    for (int e = 0; e < p->papi.n; e++)
        if (p->papi.slot[e] >= 0) printf(" %16.16s", p->papi.name[e]);
    printf("\n");
    double sum = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < p->ntimers; i++) {
            const train_profile_timer *tm = &p->timers[i];
            if (tp_in_step(tm->kind) != (pass == 0) || rows[i].count == 0) continue;
            if (pass == 0) sum += rows[i].total;
            bool block = tm->layer > 0 && tm->layer < p->nlayers - 1;
            bool bucket = i >= p->bucket0 && i < p->bucket0 + p->nbuckets;
            if (compact && (block || bucket)) {
                bool firstof = bucket ? i == p->bucket0 : tm->layer == 1;
                if (!firstof) continue;
                tp_row agg = { 0 };  /* every figure the sum of the rows' */
                int n = bucket ? p->nbuckets : p->nlayers - 2;
                for (int j = 0; j < n; j++) {
                    const tp_row *x = &rows[i + j];
                    agg.count = fmax(agg.count, x->count), agg.total += x->total, agg.median += x->median;
                    agg.min += x->min, agg.max += x->max;
                    for (int e = 0; e < p->papi.n; e++) agg.ev[e] += x->ev[e];
                }
                char name[80];
                snprintf(name, sizeof name, "%s (%d, summed)", bucket ? "buckets" : tm->kind == TRAIN_PROFILE_KIND_FORWARD
                         ? "forward blocks" : "backward blocks", n);
                tp_print_row(p, &agg, name, step, !bucket);
                continue;
            }
            tp_print_row(p, &rows[i], tm->name, step, tp_in_step(tm->kind));
        }
        if (pass == 0)
            printf("  %-30s %6s %10.1f %6.1f%%   (the step by the trainer's clock: %.1f ms)\n", "= phases and layers", "",
                   sum, step > 0 ? 100 * sum / step : 0, rows[p->trainer_id].total);
        if (pass == 0 && r->grid.shape.pp > 1)
            printf("  (pipeline: a layer's figures are the mean over the ranks of its stage, and the %d stages run at "
                   "once, so the layers add up to more than one step)\n", r->grid.shape.pp);
    }
    for (int e = 0; e < p->papi.n; e++)
        printf("  counter %s: %s\n", p->papi.name[e], p->papi.slot[e] >= 0 ? "per step, summed over the ranks (main "
               "threads)" : p->papi.why[e]);
    for (int a = 0; a < nadv; a++) printf("  advice: %s\n", adv[a]);
    printf("  full profile: %s/profile.json%s\n", r->run_dir, p->first_run ? " (every layer: --profile)" : "");
}

static json_t *tp_json_row(const train_profile *p, const train_profile_timer *tm, const tp_row *w, const double *all,
                           int nranks, int i, double step)
{
    static const char *const kinds[] = { "phase", "forward", "backward", "detail" };
    json_t *j = json_pack("{s:s, s:s, s:o, s:I, s:o, s:o, s:o, s:o, s:o}", "name", tm->name, "kind", kinds[tm->kind],
                          "layer", tm->layer >= 0 ? json_integer(tm->layer) : json_null(), "count",
                          (json_int_t)w->count, "total_ms", train_json_num(w->total), "share_pct",
                          step > 0 && tp_in_step(tm->kind) ? train_json_num(100 * w->total / step) : json_null(), "min_ms",
                          train_json_num(w->min), "median_ms", train_json_num(w->median), "max_ms", train_json_num(w->max));
    json_t *ev = json_object();
    for (int e = 0; e < p->papi.n; e++)
        json_object_set_new(ev, p->papi.name[e], p->papi.slot[e] >= 0 && tp_in_step(tm->kind) ? train_json_num(w->ev[e]) : json_null());
    json_object_set_new(j, "counters_per_step", ev);
    json_t *ranks = json_array();
    for (int k = 0; k < nranks; k++) {
        const double *v = all + ((size_t)k * (size_t)p->ntimers + (size_t)i) * TP_NV;
        json_array_append_new(ranks, json_pack("{s:I, s:o, s:o, s:o, s:o}", "count", (json_int_t)v[0], "total_ms",
                                               train_json_num(v[1]), "min_ms", train_json_num(v[2]), "median_ms",
                                               train_json_num(v[3]), "max_ms", train_json_num(v[4])));
    }
    json_object_set_new(j, "ranks", ranks);
    return j;
}

static int tp_json_fill(void *ctx, int fd)
{
    return json_dumpfd(ctx, fd, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0 && write(fd, "\n", 1) == 1 ? 0 : -1;
}

static void tp_write_json(const train_run *r, const train_profile *p, const tp_row *rows, const double *all,
                          char adv[][400], int nadv)
{
    double step = rows[p->step_id].total;
    json_t *j = json_pack("{s:i, s:s, s:s, s:b, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:I}", "version", 1, "model",
                          r->spec.name, "shape", p->shape, "first_run", p->first_run, "mode",
                          config_str(r->cfg, "profile.mode"), "ranks", r->rt->size, "micro_batch", r->tb.micro_batch,
                          "accum", r->tb.accum, "seq_len", r->T, "threads", r->threads, "warmup_steps", 1, "steps",
                          (json_int_t)rows[p->step_id].count);
    json_object_set_new(j, "step_ms", tp_json_row(p, &p->timers[p->step_id], &rows[p->step_id], all, r->rt->size,
                                                  p->step_id, 0));
    json_object_set_new(j, "trainer_step_ms", tp_json_row(p, &p->timers[p->trainer_id], &rows[p->trainer_id], all,
                                                          r->rt->size, p->trainer_id, 0));
    json_t *timers = json_array();
    for (int i = 0; i < p->ntimers; i++)
        if (i != p->step_id && i != p->trainer_id)
            json_array_append_new(timers, tp_json_row(p, &p->timers[i], &rows[i], all, r->rt->size, i, step));
    json_object_set_new(j, "timers", timers);
    json_t *ev = json_array();
    for (int e = 0; e < p->papi.n; e++)
        json_array_append_new(ev, json_pack("{s:s, s:b, s:s}", "name", p->papi.name[e], "counted", p->papi.slot[e] >= 0,
                                            "status", p->papi.slot[e] >= 0 ? "ok" : p->papi.why[e]));
    json_object_set_new(j, "events", ev);
    json_t *a = json_array();
    for (int k = 0; k < nadv; k++) json_array_append_new(a, json_string(adv[k]));
    json_object_set_new(j, "advice", a);
    char path[4300];
    snprintf(path, sizeof path, "%s/profile.json", r->run_dir);
    if (path_write_atomic(path, "profile", tp_json_fill, j) != STATUS_OK)
        log_warn("profile: %s could not be written (the table above holds the figures)", path);
    json_decref(j);
}

/* Collective: every rank's figures to rank 0, which prints and writes them. */
static status train_profile_report(train_run *r)
{
    train_profile *p = r->prof;
    p->reported = true;
    int n = p->ntimers * TP_NV, nranks = r->rt->size;
    double *mine = calloc((size_t)n, sizeof *mine);
    double *all = r->rt->rank == 0 ? calloc((size_t)n * (size_t)nranks, sizeof *all) : NULL;
    tp_row *rows = calloc((size_t)p->ntimers, sizeof *rows);
    if (!mine || !rows || (r->rt->rank == 0 && !all)) {
        free(mine), free(all), free(rows);
        return STATUS_NOMEM;
    }
    for (int i = 0; i < p->ntimers; i++) {
        const train_profile_timer *tm = &p->timers[i];
        double *v = mine + (size_t)i * TP_NV;
        v[0] = (double)tm->count, v[1] = tm->total, v[2] = tm->min, v[3] = timer_median(tm), v[4] = tm->max;
        for (int e = 0; e < p->papi.n; e++) v[5 + e] = tm->ev_total[e];
    }
    status st = comm_ctl_gather(train_ctl(r), mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0);
    if (st == STATUS_OK && r->rt->rank == 0) {
        tp_rows(p, all, nranks, rows);
        char adv[6][400];
        int nadv = tp_advice(r, p, rows, adv, 6);
        tp_print(r, p, rows, p->first_run, adv, nadv);
        tp_write_json(r, p, rows, all, adv, nadv);
        if (p->first_run) {  /* read again: another run sharing the record may have added a line */
            char *old = shapes_read(p);
            shapes_fill_ctx c = { old ? old : "", p->shape };
            if (!old || path_write_atomic(p->shapes_path, "profile shapes", shapes_fill, &c) != STATUS_OK)
                log_warn("profile: the shape could not be recorded in %s: the next run profiles it again",
                         p->shapes_path);
            free(old);
        }
        fflush(stdout);
    }
    free(mine), free(all), free(rows);
    return st;
}
