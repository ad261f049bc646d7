/* test_optim — the parameter table and flat buffers, and the optimizers against PyTorch.
 *
 * Checks: table layout (aligned offsets, shapes, find, a pinned layout hash that
 * changes with a shape), buffers (alignment, zeroing, STATUS_NOMEM), bugs that
 * die (in forked children); AdamW, SGD (momentum, Nesterov, plain), all with
 * weight decay on the decay entries only, over 10 steps, and clip_grad_norm_
 * against torch 1.13 through validation/reference/optim_ref.py (one python3 run;
 * a missing torch is a FAIL, never a skip); lr_at against closed forms; and
 * bit-identical results for 1, 2 and 3 OpenMP threads and for the vector (AVX2 on
 * x86-64, NEON on aarch64) and portable inner loops. One line per check, exit 1 on
 * any failure. Run from the repository root (the script is also found next to the binary's tree). */
#include "nn/optim.h"
#include "nn/param.h"
#include "base/rng.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED  UINT64_C(0x6f7074696d697a65)
#define STEPS 10
#define REF_SCRIPT "validation/reference/optim_ref.py"

/* Tolerance against torch: |got - ref| <= ATOL + RTOL*|ref|.
 * Nebula mirrors torch's operations one by one, FMAs included, so on an AVX2
 * host the results are expected to be bit-identical (the lines report the ulp
 * distance). The tolerance is for hosts where torch rounds differently: its
 * non-AVX2 kernels and scalar tails may leave a multiply-add unfused, which
 * moves that result by <= 1 ulp (2^-24 ~ 6e-8 relative). An update touches
 * each value through ~5 such roundings (m, v, the decay product, the quotient,
 * the sum), so 10 steps accumulate at most ~50 ulp ~ 3e-6 of max(|p|, |update|):
 * RTOL = 1e-5 leaves a 3x margin. Near p = 0 the error is relative to the
 * updates instead (|update| <= lr*|m_hat/sqrt(v_hat)| ~ 0.05*3 per step here),
 * 10 steps x 0.15 x 5 ulp ~ 5e-7 < ATOL = 1e-6. clip_grad_norm_: torch sums in
 * float32 (relative error ~ log2(n) ulp ~ 1e-6 at most here) and rounds the
 * clip coefficient in float; both are within RTOL. */
#define ATOL 1e-6
#define RTOL 1e-5

typedef struct tally {
    int passed;  /* checks that held */
    int failed;  /* checks that did not */
} tally;

__attribute__((format(printf, 3, 4)))
static bool check(tally *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) t->passed++;
    else t->failed++;
    return ok;
}

/* ---- the table and the buffers --------------------------------------------- */

static void layout_table(param_table *pt, size_t d0, size_t d1)
{
    param_table_init(pt);
    param_add(pt, "wte.weight", -1, param_decay_default(2), 2, d0, d1, 0, 0);
    param_add(pt, "h.0.ln_1.weight", 0, param_decay_default(1), 1, 7, 0, 0, 0);
    param_add(pt, "h.0.attn.c_attn.weight", 0, true, 2, 7, 21, 0, 0);
    param_add(pt, "logit_scale", -1, false, 0, 0, 0, 0, 0);
}

static void test_table(tally *t)
{
    param_table pt, same, swapped;
    layout_table(&pt, 10, 7);
    static const size_t want_off[] = { 0, 80, 96, 256 }, want_count[] = { 70, 7, 147, 1 };
    bool offsets = pt.count == 4 && pt.total == 272;
    for (int i = 0; i < pt.count && offsets; i++)
        offsets = pt.entries[i].offset == want_off[i] && pt.entries[i].count == want_count[i] &&
                  pt.entries[i].offset % PARAM_ALIGN_FLOATS == 0 &&
                  (i == 0 || pt.entries[i].offset >= pt.entries[i - 1].offset + pt.entries[i - 1].count);
    check(t, offsets, "offsets 0, 80, 96, 256 (64-byte aligned, in call order), total 272");
    const param_entry *w = &pt.entries[2], *s = &pt.entries[3];
    check(t, w->ndim == 2 && w->shape[0] == 7 && w->shape[1] == 21 && w->shape[2] == 1 && w->shape[3] == 1 &&
                 s->ndim == 0 && s->count == 1 && w->layer == 0 && w->decay,
          "shapes are PyTorch's, unused dims 1, scalars count 1");
    check(t, pt.entries[0].decay && !pt.entries[1].decay && param_decay_default(4) && !param_decay_default(0),
          "default decay: ndim >= 2 decays, biases and norm weights do not");
    check(t, param_find(&pt, "h.0.attn.c_attn.weight") == 2 && param_find(&pt, "wte.weight") == 0 &&
                 param_find(&pt, "h.0.attn.c_attn.bias") == -1,
          "param_find returns the index or -1");
    check(t, param_numel(&pt) == 225, "param_numel counts tensors without padding (%zu)", param_numel(&pt));
    size_t off[4], cnt[4];
    param_table_slices(&pt, off, cnt);
    check(t, off[2] == 96 && cnt[2] == 147 && off[3] == 256, "param_table_slices fills offsets and counts");

    /* Known answer from an independent Python FNV-1a over the documented byte stream. */
    uint64_t h = param_table_hash(&pt);
    check(t, h == UINT64_C(0x245743288426cf15), "layout hash pinned (%016llx)", (unsigned long long)h);
    layout_table(&same, 10, 7);
    same.entries[0].decay = false;
    same.entries[1].layer = 5;
    check(t, param_table_hash(&same) == h, "hash ignores decay flags and layer indices");
    layout_table(&swapped, 7, 10);
    check(t, swapped.total == pt.total && swapped.entries[3].offset == 256 && param_table_hash(&swapped) != h,
          "hash changes when a shape changes (7x10 vs 10x7, same offsets)");
    snprintf(same.entries[3].name, sizeof same.entries[3].name, "logit_scalf");
    check(t, param_table_hash(&same) != h, "hash changes when a name changes");

    param_buffers pb;
    status st = param_buffers_init(&pb, &pt, true);
    bool aligned = st == STATUS_OK, zero = st == STATUS_OK;
    float *bufs[4] = { pb.params, pb.grads, pb.m, pb.v };
    for (int b = 0; b < 4 && aligned; b++) {
        aligned = bufs[b] && (uintptr_t)bufs[b] % PARAM_ALIGN_BYTES == 0;
        for (size_t i = 0; i < pt.total && zero; i++) zero = bufs[b][i] == 0.0f;
    }
    check(t, aligned && pb.total == 272, "four buffers, 64-byte aligned, total floats each");
    check(t, zero, "buffers start zeroed, padding included");
    for (size_t i = 0; i < pt.total; i++) pb.grads[i] = 1.0f + (float)i;
    param_zero_grads(&pb, &pt);
    zero = true;
    for (size_t i = 0; i < pt.total; i++) zero = zero && pb.grads[i] == 0.0f;
    check(t, zero, "param_zero_grads clears the whole gradient buffer");
    param_buffers_free(&pb);
    check(t, param_buffers_init(&pb, &pt, false) == STATUS_OK && pb.m == NULL && pb.v == NULL && pb.grads,
          "without moments only params and grads are allocated");
    param_buffers_free(&pb);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    param_print_memory(&pt, (size_t)3 << 20, (size_t)1 << 20, NULL, f);
    fclose(f);
    check(t, text && strstr(text, "params") && strstr(text, "grads") && strstr(text, "optimizer") &&
                 strstr(text, "activations") && strstr(text, "comm buffers") && strstr(text, "total") &&
                 strstr(text, "3.0") && strstr(text, "4.0"),
          "memory table has every row (activations 3.0 MiB, total 4.0 MiB)");
    free(text);

    /* another optimizer row (ZeRO's): its label, size and note, and the total with it */
    const param_optim_memory om = { (double)((size_t)2 << 20), "m", "a note" };
    f = open_memstream(&text, &len);
    param_print_memory(&pt, (size_t)3 << 20, (size_t)1 << 20, &om, f);
    fclose(f);
    check(t, text && strstr(text, "  optimizer (m)              2.0   (a note)\n") && strstr(text, "6.0"),
          "memory table with a given optimizer row (2.0 MiB, its note; total 6.0 MiB)");
    free(text);

    /* 2^55 floats = 2^57 bytes: more than any address space, so the allocation fails. */
    param_table huge;
    param_table_init(&huge);
    param_add(&huge, "huge.weight", 0, true, 2, (size_t)1 << 30, (size_t)1 << 25, 0, 0);
    fprintf(stderr, "(an error about 2^57 bytes follows; it is expected)\n");
    st = param_buffers_init(&pb, &huge, true);
    check(t, st == STATUS_NOMEM && !pb.params && !pb.grads && !pb.m && !pb.v,
          "an impossible allocation returns STATUS_NOMEM and leaves nothing allocated");
    param_table_free(&huge);
    param_table_free(&pt);
    param_table_free(&same);
    param_table_free(&swapped);
    check(t, pt.entries == NULL && pt.count == 0 && pt.total == 0, "param_table_free empties the table");
}

/* Bugs must die (abort), not return: run each in a child with stderr silenced.
 * The children must not enter an OpenMP region (libgomp's pool does not survive fork). */
static bool dies(void (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(1);
        fn();
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT;
}

static void dup_name(void)
{
    param_table pt;
    layout_table(&pt, 10, 7);
    param_add(&pt, "h.0.ln_1.weight", 0, false, 1, 7, 0, 0, 0);
}

static void long_name(void)
{
    char name[PARAM_NAME_MAX + 1];
    memset(name, 'x', PARAM_NAME_MAX);
    name[PARAM_NAME_MAX] = '\0';
    param_table pt;
    param_table_init(&pt);
    param_add(&pt, name, 0, false, 1, 7, 0, 0, 0);
}

static void zero_dim(void)
{
    param_table pt;
    param_table_init(&pt);
    param_add(&pt, "fc.weight", 0, true, 2, 7, 0, 0, 0);
}

/* Built by hand: libgomp's threads do not survive fork, so children use no OpenMP. */
static void adamw_without_moments(void)
{
    param_table pt;
    layout_table(&pt, 10, 7);
    param_buffers pb = { .params = calloc(pt.total, sizeof(float)), .grads = calloc(pt.total, sizeof(float)),
                         .total = pt.total };
    optim_adamw_step(&pt, &pb, &(adamw_hparams){ 0.9, 0.999, 1e-8, 0.01, false }, 1e-3, 1);
}

static void test_dies(tally *t)
{
    check(t, dies(dup_name), "a duplicate name dies");
    check(t, dies(long_name), "a name of PARAM_NAME_MAX characters dies");
    check(t, dies(zero_dim), "a zero dimension dies");
    check(t, dies(adamw_without_moments), "AdamW on buffers without moments dies");
}

/* ---- learning-rate schedules ------------------------------------------------ */

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-15 * fabs(b) + 1e-300;
}

static void test_lr(tally *t)
{
    const double base = 6e-4, lo = 6e-5, pi = acos(-1.0);
    lr_schedule c = { LR_SCHEDULE_COSINE, base, 10, 110, lo, 0, 0 };
    check(t, near(lr_at(&c, 0), base / 10) && near(lr_at(&c, 4), base * 5 / 10) && near(lr_at(&c, 9), base),
          "warmup: base*(step+1)/warmup (step 0 -> base/10, step 9 -> base)");
    check(t, near(lr_at(&c, 10), base) && near(lr_at(&c, 60), lo + 0.5 * (base - lo)) &&
                 near(lr_at(&c, 35), lo + 0.5 * (1 + cos(pi * 0.25)) * (base - lo)) &&
                 near(lr_at(&c, 110), lo) && near(lr_at(&c, 100000), lo),
          "cosine: base at the end of warmup, midpoint, quarter, min_lr at and after total_steps");
    lr_schedule l = { LR_SCHEDULE_LINEAR, base, 10, 110, lo, 0, 0 };
    check(t, near(lr_at(&l, 10), base) && near(lr_at(&l, 35), lo + 0.75 * (base - lo)) &&
                 near(lr_at(&l, 60), lo + 0.5 * (base - lo)) && near(lr_at(&l, 110), lo) &&
                 near(lr_at(&l, 5), base * 6 / 10),
          "linear: warmup, then a straight line to min_lr at total_steps");
    lr_schedule st = { LR_SCHEDULE_STEP, 0.1, 5, 0, 0, 30, 0.1 };
    check(t, near(lr_at(&st, 0), 0.02) && near(lr_at(&st, 5), 0.1) && near(lr_at(&st, 34), 0.1) &&
                 near(lr_at(&st, 35), 0.1 * 0.1) && near(lr_at(&st, 95), 0.1 * pow(0.1, 3)),
          "step: gamma every step_size steps after warmup");
    lr_schedule k = { LR_SCHEDULE_CONSTANT, base, 0, 0, 0, 0, 0 };
    check(t, near(lr_at(&k, 0), base) && near(lr_at(&k, 123456), base), "constant without warmup");

    const char *why = NULL;
    lr_schedule bad = c;
    bad.total_steps = 10;
    bool v1 = lr_schedule_valid(&c, &why) && why == NULL && lr_schedule_valid(&st, NULL);
    bool v2 = !lr_schedule_valid(&bad, &why) && why && strstr(why, "total_steps");
    bad = st;
    bad.step_size = 0;
    bool v3 = !lr_schedule_valid(&bad, &why) && strstr(why, "step_size");
    bad = c;
    bad.min_lr = 2 * base;
    bool v4 = !lr_schedule_valid(&bad, &why) && strstr(why, "min_lr");
    check(t, v1 && v2 && v3 && v4, "lr_schedule_valid names the bad field");
    lr_schedule_kind kind = LR_SCHEDULE_CONSTANT;
    check(t, lr_schedule_kind_parse("cosine", &kind) && kind == LR_SCHEDULE_COSINE &&
                 !lr_schedule_kind_parse("cos", &kind) && !strcmp(lr_schedule_kind_name(LR_SCHEDULE_STEP), "step"),
          "schedule kinds parse and print");
}

/* ---- against PyTorch ----------------------------------------------------------- */

typedef struct run {
    const char *name;     /* output file stem */
    bool adamw;           /* AdamW, else SGD */
    adamw_hparams adamw_hp; /* when adamw */
    sgd_hparams sgd_hp;   /* when SGD */
    lr_schedule sched;    /* lr per step */
    const char *what;     /* description for the check line */
} run;

static const run runs[] = {
    { .name = "adamw", .adamw = true, .adamw_hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 },
      .sched = { .kind = LR_SCHEDULE_COSINE, .base_lr = 0.05, .warmup_steps = 3, .total_steps = 10, .min_lr = 0.005 },
      .what = "AdamW betas (0.9, 0.95), eps 1e-8, wd 0.1, warmup+cosine lr" },
    { .name = "adamw_eps", .adamw = true, .adamw_hp = { .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-2, .weight_decay = 0.05 },
      .sched = { .kind = LR_SCHEDULE_STEP, .base_lr = 0.02, .step_size = 4, .gamma = 0.5 },
      .what = "AdamW betas (0.8, 0.99), eps 1e-2, wd 0.05, step lr" },
    { .name = "sgd", .sgd_hp = { .momentum = 0.9, .weight_decay = 1e-2 },
      .sched = { .kind = LR_SCHEDULE_LINEAR, .base_lr = 0.1, .warmup_steps = 2, .total_steps = 10, .min_lr = 0.01 },
      .what = "SGD momentum 0.9, wd 1e-2, warmup+linear lr" },
    { .name = "sgd_nesterov", .sgd_hp = { .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2 },
      .sched = { .kind = LR_SCHEDULE_CONSTANT, .base_lr = 0.05 }, .what = "SGD Nesterov momentum 0.9, wd 1e-2" },
    { .name = "sgd_plain", .sgd_hp = { .momentum = 0.0, .weight_decay = 5e-2 },
      .sched = { .kind = LR_SCHEDULE_CONSTANT, .base_lr = 0.1 }, .what = "SGD without momentum, wd 5e-2" },
};
#define NRUNS ((int)(sizeof runs / sizeof runs[0]))

static double clip_max_norm(int s)
{
    return s % 2 == 0 ? 1.0 : 1e6;  /* even steps clip, odd ones do not */
}

/* A weight that decays and a bias that does not; 299 and 13 floats leave SIMD tails. */
static void ref_table(param_table *pt)
{
    param_table_init(pt);
    param_add(pt, "fc.weight", 0, true, 2, 23, 13, 0, 0);
    param_add(pt, "fc.bias", 0, false, 1, 13, 0, 0, 0);
}

static void pack(const param_table *pt, const float *flat, float *packed)
{
    for (int i = 0; i < pt->count; i++) {
        memcpy(packed, flat + pt->entries[i].offset, pt->entries[i].count * sizeof(float));
        packed += pt->entries[i].count;
    }
}

static void unpack(const param_table *pt, const float *packed, float *flat)
{
    for (int i = 0; i < pt->count; i++) {
        memcpy(flat + pt->entries[i].offset, packed, pt->entries[i].count * sizeof(float));
        packed += pt->entries[i].count;
    }
}

/* Initial parameters ~ N(0, 0.5^2); gradients per step ~ N(0, 1) times an
 * element-dependent scale in [0.1, 10] (so v spans orders of magnitude), every
 * 17th exactly zero. All from Philox streams: the same on every run. */
static void make_data(size_t n, float *p0, float *grads)
{
    rng r;
    rng_init(&r, SEED, 0, RNG_PURPOSE_TEST, 0);
    for (size_t i = 0; i < n; i++) p0[i] = 0.5f * rng_normal(&r);
    for (int s = 0; s < STEPS; s++) {
        rng_init(&r, SEED, 0, RNG_PURPOSE_TEST, (uint64_t)s + 1);
        for (size_t i = 0; i < n; i++) {
            float scale = 0.1f * powf(100.0f, (float)(i % 7) / 6.0f);
            grads[(size_t)s * n + i] = i % 17 == 5 ? 0.0f : scale * rng_normal(&r);
        }
    }
}

static bool write_file(const char *dir, const char *name, const void *data, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f && fclose(f) != 0) ok = false;
    return ok;
}

/* Exactly n floats, or false. */
static bool read_floats(const char *dir, const char *name, float *data, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool ok = fread(data, sizeof(float), n, f) == n && fgetc(f) == EOF;
    fclose(f);
    return ok;
}

static bool write_config(const char *dir, const param_table *pt)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "{\"steps\": %d, \"entries\": [", STEPS);
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        fprintf(f, "%s{\"name\": \"%s\", \"decay\": %s, \"shape\": [", i ? ", " : "", e->name,
                e->decay ? "true" : "false");
        for (int k = 0; k < e->ndim; k++) fprintf(f, "%s%zu", k ? ", " : "", e->shape[k]);
        fprintf(f, "]}");
    }
    fprintf(f, "],\n \"runs\": [");
    for (int r = 0; r < NRUNS; r++) {
        const run *u = &runs[r];
        fprintf(f, "%s\n  {\"name\": \"%s\", \"optim\": \"%s\", ", r ? "," : "", u->name, u->adamw ? "adamw" : "sgd");
        if (u->adamw)
            fprintf(f, "\"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"weight_decay\": %.17g, ",
                    u->adamw_hp.beta1, u->adamw_hp.beta2, u->adamw_hp.eps, u->adamw_hp.weight_decay);
        else
            fprintf(f, "\"momentum\": %.17g, \"nesterov\": %s, \"weight_decay\": %.17g, ", u->sgd_hp.momentum,
                    u->sgd_hp.nesterov ? "true" : "false", u->sgd_hp.weight_decay);
        fprintf(f, "\"lr\": [");
        for (int s = 0; s < STEPS; s++) fprintf(f, "%s%.17g", s ? ", " : "", lr_at(&u->sched, s));
        fprintf(f, "]}");
    }
    fprintf(f, "],\n \"clip\": {\"max_norm\": [");
    for (int s = 0; s < STEPS; s++) fprintf(f, "%s%.17g", s ? ", " : "", clip_max_norm(s));
    fprintf(f, "]}}\n");
    return fclose(f) == 0;
}

/* Runs python3 on the reference script; true when it exits 0. */
static bool run_reference(const char *dir, int *exit_code)
{
    char script[1024] = REF_SCRIPT;
    if (access(script, R_OK) != 0) {
        char exe[900];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k > 0) {
            exe[k] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) *slash = '\0';
            snprintf(script, sizeof script, "%s/../../../%s", exe, REF_SCRIPT);  /* build/test/unit/ */
        }
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/usr/bin/python3", "python3", script, dir, (char *)NULL);
        perror("exec /usr/bin/python3");
        _exit(127);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) return false;
    *exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

/* Distance in units in the last place (ordered integer view of floats). */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return oa > ob ? oa - ob : ob - oa;
}

static bool compare(tally *t, const float *got, const float *ref, size_t n, const char *what)
{
    double worst = 0.0;
    int64_t max_ulp = 0;
    size_t differ = 0;
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)ref[i]), lim = ATOL + RTOL * fabs((double)ref[i]);
        if (!isfinite(got[i]) || !isfinite(ref[i])) finite = false;
        if (err / lim > worst) worst = err / lim;
        int64_t u = ulps(got[i], ref[i]);
        if (u > max_ulp) max_ulp = u;
        differ += u != 0;
    }
    return check(t, finite && worst <= 1.0,
                 "%s matches torch (worst |d|/(atol+rtol|ref|) = %.3g; %zu of %zu values differ, max %lld ulp)",
                 what, worst, differ, n, (long long)max_ulp);
}

/* Runs one configuration in Nebula over all steps; final params packed into out. */
static void run_nebula(const param_table *pt, const run *u, const float *p0, const float *grads, float *out)
{
    size_t n = param_numel(pt);
    param_buffers pb;
    CHECK(param_buffers_init(&pb, pt, true) == STATUS_OK, "test buffers are small");
    unpack(pt, p0, pb.params);
    for (int s = 0; s < STEPS; s++) {
        unpack(pt, grads + (size_t)s * n, pb.grads);
        if (u->adamw) optim_adamw_step(pt, &pb, &u->adamw_hp, lr_at(&u->sched, s), s + 1);
        else optim_sgd_step(pt, &pb, &u->sgd_hp, lr_at(&u->sched, s), s + 1);
    }
    pack(pt, pb.params, out);
    param_buffers_free(&pb);
}

static bool test_torch(tally *t)
{
    param_table pt;
    ref_table(&pt);
    size_t n = param_numel(&pt);
    float *p0 = malloc(n * sizeof *p0), *grads = malloc(STEPS * n * sizeof *grads);
    float *got = malloc(STEPS * n * sizeof *got), *ref = malloc(STEPS * n * sizeof *ref);
    CHECK(p0 && grads && got && ref, "test arrays are small");
    make_data(n, p0, grads);

    char dir[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_optim.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    bool ok = mkdtemp(dir) != NULL;
    ok = check(t, ok && write_config(dir, &pt) && write_file(dir, "params0.f32", p0, n * sizeof *p0) &&
                      write_file(dir, "grads.f32", grads, STEPS * n * sizeof *grads),
               "reference inputs written to %s", dir);
    int code = -1;
    if (ok) {
        bool ran = run_reference(dir, &code);
        ok = check(t, ran,
                   "/usr/bin/python3 %s ran (exit %d; exit 1 means python3-torch or python3-numpy is missing: "
                   "tools/deps.sh installs them)", REF_SCRIPT, code);
    }

    bool all = ok;
    for (int r = 0; r < NRUNS; r++) {
        char name[64], what[160];
        snprintf(name, sizeof name, "out_%s.f32", runs[r].name);
        snprintf(what, sizeof what, "%s over %d steps", runs[r].what, STEPS);
        run_nebula(&pt, &runs[r], p0, grads, got);
        if (!ok || !read_floats(dir, name, ref, n)) {
            all &= check(t, false, "%s: no torch result (%s/%s)", what, dir, name);
            continue;
        }
        all &= compare(t, got, ref, n, what);
    }

    /* clip_grad_norm_ per step on the packed table's buffers. */
    float norms_ref[STEPS];
    double norm_err = 0.0;
    bool clipped_as_torch = true;
    param_buffers pb;
    CHECK(param_buffers_init(&pb, &pt, false) == STATUS_OK, "test buffers are small");
    for (int s = 0; s < STEPS; s++) {
        double norm = 0.0;
        unpack(&pt, grads + (size_t)s * n, pb.grads);
        float scale = optim_clip_grad_norm(pb.grads, pb.total, clip_max_norm(s), &norm);
        pack(&pt, pb.grads, got + (size_t)s * n);
        norms_ref[s] = (float)norm;
        clipped_as_torch &= (s % 2 == 0) == (scale < 1.0f);
    }
    param_buffers_free(&pb);
    check(t, clipped_as_torch, "clip_grad_norm scales on the steps whose max_norm is below the norm only");
    float norms_torch[STEPS];
    if (!ok || !read_floats(dir, "clip_norms.f32", norms_torch, STEPS) ||
        !read_floats(dir, "clip_grads.f32", ref, STEPS * n)) {
        all &= check(t, false, "clip_grad_norm: no torch result in %s", dir);
    } else {
        for (int s = 0; s < STEPS; s++)
            norm_err = fmax(norm_err, fabs((double)norms_ref[s] - norms_torch[s]) / norms_torch[s]);
        all &= check(t, norm_err <= RTOL, "clip_grad_norm total norm matches torch over %d steps (rel %.3g)", STEPS,
                     norm_err);
        all &= compare(t, got, ref, STEPS * n, "clip_grad_norm gradients (max_norm 1 and 1e6)");
    }

    if (all) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        printf("# reference files kept in %s\n", dir);
    }
    free(p0);
    free(grads);
    free(got);
    free(ref);
    param_table_free(&pt);
    return all;
}

/* ---- determinism ------------------------------------------------------------- */

/* A bigger table, several lines per thread, with tails and a scalar. */
static void big_table(param_table *pt)
{
    param_table_init(pt);
    param_add(pt, "h.0.mlp.c_fc.weight", 0, true, 2, 301, 173, 0, 0);
    param_add(pt, "h.0.mlp.c_fc.bias", 0, false, 1, 173, 0, 0, 0);
    param_add(pt, "h.0.ln_2.weight", 0, false, 1, 77, 0, 0, 0);
    param_add(pt, "h.0.mlp.c_proj.weight", 0, true, 2, 173, 301, 0, 0);
    param_add(pt, "logit_scale", -1, false, 0, 0, 0, 0, 0);
}

/* AdamW, SGD Nesterov and clipping for 3 steps; out gets params, m, v and the norms. */
static void determinism_run(const param_table *pt, int threads, bool portable, float *out, double *norms)
{
    omp_set_num_threads(threads);
    param_buffers a, b;
    CHECK(param_buffers_init(&a, pt, true) == STATUS_OK && param_buffers_init(&b, pt, true) == STATUS_OK,
          "test buffers are small");
    rng r;
    rng_init(&r, SEED, 1, RNG_PURPOSE_TEST, 0);
    for (int e = 0; e < pt->count; e++)
        for (size_t i = 0; i < pt->entries[e].count; i++)
            a.params[pt->entries[e].offset + i] = b.params[pt->entries[e].offset + i] = rng_normal(&r);
    adamw_hparams ah = { 0.9, 0.95, 1e-8, 0.1, portable };
    sgd_hparams sh = { 0.9, true, 1e-2, portable, NULL };
    for (int s = 0; s < 3; s++) {
        rng_init(&r, SEED, 1, RNG_PURPOSE_TEST, (uint64_t)s + 1);
        for (int e = 0; e < pt->count; e++)
            for (size_t i = 0; i < pt->entries[e].count; i++)
                a.grads[pt->entries[e].offset + i] = b.grads[pt->entries[e].offset + i] = 3.0f * rng_normal(&r);
        optim_clip_grad_norm(a.grads, a.total, 50.0, &norms[s]);
        memcpy(b.grads, a.grads, a.total * sizeof(float));
        optim_adamw_step(pt, &a, &ah, 1e-2, s + 1);
        optim_sgd_step(pt, &b, &sh, 1e-2, s + 1);
    }
    size_t n = pt->total;
    memcpy(out, a.params, n * sizeof(float));
    memcpy(out + n, a.m, n * sizeof(float));
    memcpy(out + 2 * n, a.v, n * sizeof(float));
    memcpy(out + 3 * n, b.params, n * sizeof(float));
    memcpy(out + 4 * n, b.m, n * sizeof(float));
    param_buffers_free(&a);
    param_buffers_free(&b);
}

static void test_determinism(tally *t)
{
    param_table pt;
    big_table(&pt);
    size_t n = 5 * pt.total;
    float *one = malloc(n * sizeof(float)), *other = malloc(n * sizeof(float));
    CHECK(one && other, "test arrays are small");
    double norms1[3], norms[3];
    int saved = omp_get_max_threads();
    determinism_run(&pt, 1, false, one, norms1);
    check(t, norms1[0] > 50.0, "the determinism run clips (norm %.1f > max_norm 50)", norms1[0]);
    static const struct { int threads; bool portable; } cases[] = { { 2, false }, { 3, false }, { 1, true },
                                                                   { 2, true } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        determinism_run(&pt, cases[c].threads, cases[c].portable, other, norms);
        check(t, memcmp(one, other, n * sizeof(float)) == 0 && memcmp(norms1, norms, sizeof norms) == 0,
              "AdamW, SGD and clip_grad_norm bit-identical: 1 thread vector-if-present vs %d thread(s) %s loop",
              cases[c].threads, cases[c].portable ? "portable" : "vector-if-present (AVX2, NEON)");
    }
    omp_set_num_threads(saved);
    free(one);
    free(other);
    param_table_free(&pt);
}

int main(void)
{
    tally t = { 0, 0 };
    test_table(&t);
    test_dies(&t);
    test_lr(&t);
    test_determinism(&t);
    test_torch(&t);
    printf("%s: %d passed, %d failed\n", t.failed ? "FAIL" : "ok", t.passed, t.failed);
    return t.failed ? 1 : 0;
}
