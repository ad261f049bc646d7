/* samples — what the run's pictures are drawn from besides the train records
 * (docs/pictures.md): every log interval each rank's step time, compute time, comm wait,
 * CPU use and resident memory ("ranks" records: the resource heatmap), and every
 * monitor.attention_interval steps the attention heads' entropy and largest weight on
 * a fixed probe batch ("attention": the head matrix of GPT-2 and BERT). Also the keys
 * of the two test hooks that plant an effect those pictures must show, which core's
 * step carries out: runtime.slowdown (one rank sleeps in every step's compute) and
 * runtime.zero_grad_layer (one layer's reduced gradient is zeroed, a cold row of the
 * gradient heatmap).
 *
 * The one design decision: the probe batch is read once at setup from the held-out data
 * (else the training file, in file order), so every sample of every launch looks at the
 * same tokens and the matrix changes only because the weights do. The probe forward runs
 * on rank 0 after the step's update, when the activations are free; it consumes no
 * random numbers and touches no state a checkpoint holds, so resume stays bit-exact. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "observe.h"

enum { SAMPLE_STEP_MS, SAMPLE_COMPUTE_MS, SAMPLE_WAIT_MS, SAMPLE_CPU_PCT, SAMPLE_RSS_MB, SAMPLE_N };

struct train_samples {
    double sum[3];             /* this rank's step, compute and wait ms since the last record */
    long n;                    /* steps in them */
    double t_wall, t_cpu;      /* wall and process CPU seconds at the last record */
    double *all;               /* rank 0: (world, SAMPLE_N) gathered */
    char *hosts;               /* rank 0: (world, 64) host names */
    int L, NH;                 /* attention: layers and heads; 0 without attention */
    bool probe_ok;             /* rank 0 holds the probe batch */
    model_batch probe;         /* rank 0: the fixed probe batch */
    double *entropy, *maxw;    /* rank 0: (L, NH) */
};


static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* runtime.slowdown = "RANK:MS" (empty: off), planted in the run for core's step. */
static status parse_slowdown(train_run *r)
{
    const char *v = config_str(r->cfg, "runtime.slowdown");
    r->slow_rank = -1, r->slow_us = 0;
    if (!v[0]) return STATUS_OK;
    int rank, n = 0;
    double ms;
    if (sscanf(v, "%d:%lf%n", &rank, &ms, &n) != 2 || v[n] || rank < 0 || rank >= r->rt->size || ms < 0 || ms > 6e4) {
        log_error0("runtime.slowdown = '%s' (%s): expected RANK:MS, a rank below the world size %d and at most 60000 "
                   "ms of sleep per step, e.g. 1:50", v, config_origin(r->cfg, "runtime.slowdown"), r->rt->size);
        return STATUS_INPUT;
    }
    r->slow_rank = rank, r->slow_us = (long)(ms * 1e3);
    return STATUS_OK;
}

/* Rank 0: the probe batch, micro-batch 0 of data.val (else data.train) in file order. */
static status probe_read(train_run *r, train_samples *s)
{
    TRY(model_batch_init(&s->probe, &r->m));
    size_t bt = (size_t)r->tb.micro_batch * (size_t)r->T;
    if (r->fixed_batch && !config_str(r->cfg, "data.val")[0]) {  /* synthetic-fixed: the one batch there is */
        memcpy(s->probe.ids, r->batch.ids, bt * sizeof *s->probe.ids);
        memcpy(s->probe.targets, r->batch.targets, bt * sizeof *s->probe.targets);  /* the loss reads them */
        if (s->probe.mask) memcpy(s->probe.mask, r->batch.mask, bt * sizeof *s->probe.mask);
        s->probe_ok = true;
        return STATUS_OK;
    }
    const char *path = config_str(r->cfg, "data.val");
    if (!path[0]) path = config_str(r->cfg, "data.train");
    data_loader *d = NULL;
    TRY(train_open_data(r, &d, path, false));
    model_batch keep = r->batch;
    r->batch = s->probe;
    status st = train_fill(r, d, 0);
    r->batch = keep;
    data_free(d);
    s->probe_ok = st == STATUS_OK;
    return st;
}

status train_samples_setup(train_run *r)
{
    train_samples *s = calloc(1, sizeof *s);
    if (!s) return STATUS_NOMEM;
    r->smp = s;
    TRY(parse_slowdown(r));
    r->zero_layer = (int)config_int(r->cfg, "runtime.zero_grad_layer");
    if (r->zero_layer >= r->nlayers) {
        log_error0("runtime.zero_grad_layer = %d (%s): the model has layers 0 to %d (-1: off)", r->zero_layer,
                   config_origin(r->cfg, "runtime.zero_grad_layer"), r->nlayers - 1);
        return STATUS_INPUT;
    }
    r->zero_on = r->zero_layer >= 0;
    s->t_wall = train_now_s(), s->t_cpu = cpu_seconds();
    int world = r->rt->size;
    if (r->rt->rank == 0) {
        s->all = calloc((size_t)world * SAMPLE_N, sizeof *s->all);
        s->hosts = calloc((size_t)world, 64);
        if (!s->all || !s->hosts) return STATUS_NOMEM;
    }
    char me[64] = { 0 };
    snprintf(me, sizeof me, "%s", r->rt->host);
    TRY(comm_ctl_gather(train_ctl(r), me, 64, MPI_CHAR, s->hosts, 64, MPI_CHAR, 0));
    /* not for a tensor-parallel shard or a pipeline stage: rank 0 holds NH/tp heads or
     * its stage's blocks, and its probe forward would need the group's exchanges while
     * the other ranks go on */
    if (r->rt->rank == 0 && config_int(r->cfg, "monitor.attention_interval") > 0 && r->m.tp.size == 1 &&
        r->m.stage.end == 0 &&
        model_attention_shape(&r->spec, &s->L, &s->NH) && !device_is_gpu(&r->dev)) {
        s->entropy = calloc((size_t)s->L * s->NH, sizeof *s->entropy);
        s->maxw = calloc((size_t)s->L * s->NH, sizeof *s->maxw);
        if (!s->entropy || !s->maxw) return STATUS_NOMEM;
        TRY(probe_read(r, s));
    }
    return STATUS_OK;
}

static json_t *json_row(const double *v, int n, int stride)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, train_json_num(v[(size_t)i * stride]));
    return a;
}

/* Collective at a log step: every rank's figures to rank 0, one "ranks" record. */
static status samples_ranks(train_run *r, train_samples *s)
{
    double now = train_now_s(), cpu = cpu_seconds(), wall = now - s->t_wall;
    double mine[SAMPLE_N] = {
        s->n ? s->sum[0] / s->n : 0, s->n ? s->sum[1] / s->n : 0, s->n ? s->sum[2] / s->n : 0,
        wall > 0 ? 100 * (cpu - s->t_cpu) / wall : 0, train_rss() / 1e6,
    };
    s->t_wall = now, s->t_cpu = cpu, s->n = 0;
    memset(s->sum, 0, sizeof s->sum);
    comm_ctl ctl = train_ctl(r);
    ctl.name = "world (rank samples)";
    TRY(comm_ctl_gather(ctl, mine, SAMPLE_N, MPI_DOUBLE, s->all, SAMPLE_N, MPI_DOUBLE, 0));
    if (r->rt->rank != 0) return STATUS_OK;
    int world = r->rt->size;
    json_t *hosts = json_array();
    for (int k = 0; k < world; k++) json_array_append_new(hosts, json_string(s->hosts + (size_t)k * 64));
    json_t *j = json_pack("{s:s, s:I, s:o}", "kind", "ranks", "step", (json_int_t)r->step, "host", hosts);
    json_object_set_new(j, "step_ms", json_row(s->all + SAMPLE_STEP_MS, world, SAMPLE_N));
    json_object_set_new(j, "compute_ms", json_row(s->all + SAMPLE_COMPUTE_MS, world, SAMPLE_N));
    json_object_set_new(j, "comm_wait_ms", json_row(s->all + SAMPLE_WAIT_MS, world, SAMPLE_N));
    json_object_set_new(j, "cpu_pct", json_row(s->all + SAMPLE_CPU_PCT, world, SAMPLE_N));
    json_object_set_new(j, "rss_mb", json_row(s->all + SAMPLE_RSS_MB, world, SAMPLE_N));
    train_emit(r, j);
    return STATUS_OK;
}

/* Rank 0: the probe forward and one "attention" record. */
static status samples_attention(train_run *r, train_samples *s)
{
    TRY(model_forward(&r->m, &s->probe, false));
    if (!model_attention_stats(&r->m, s->entropy, s->maxw)) return STATUS_OK;
    json_t *ent = json_array(), *mx = json_array();
    for (int l = 0; l < s->L; l++) {
        json_array_append_new(ent, json_row(s->entropy + (size_t)l * s->NH, s->NH, 1));
        json_array_append_new(mx, json_row(s->maxw + (size_t)l * s->NH, s->NH, 1));
    }
    train_emit(r, json_pack("{s:s, s:I, s:i, s:i, s:o, s:o}", "kind", "attention", "step",
                                     (json_int_t)r->step, "layers", s->L, "heads", s->NH, "entropy", ent,
                                     "max_weight", mx));
    return STATUS_OK;
}

status train_samples_step(train_run *r, const train_step_stats *ss, bool log_now)
{
    train_samples *s = r->smp;
    s->sum[0] += ss->step_ms, s->sum[1] += ss->step_ms - ss->comm_wait_ms, s->sum[2] += ss->comm_wait_ms;
    s->n++;
    if (log_now) TRY(samples_ranks(r, s));
    long every = (long)config_int(r->cfg, "monitor.attention_interval");
    if (s->probe_ok && every > 0 && (r->step % every == 0 || r->step == r->steps)) TRY(samples_attention(r, s));
    return STATUS_OK;
}

void train_samples_free(train_run *r)
{
    train_samples *s = r->smp;
    if (!s) return;
    if (s->probe.ids || s->probe.images) model_batch_free(&s->probe);
    free(s->all), free(s->hosts), free(s->entropy), free(s->maxw), free(s);
    r->smp = NULL;
}
