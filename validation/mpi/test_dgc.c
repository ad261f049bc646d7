/* test_dgc — DGC-Pro at 1-4 ranks (virtual nodes with --ranks-per-node).
 *
 * The suite proves: the codec round-trips sparse messages (fp32 exactly, fp16 to
 * its rounding; gap widths 0..32) and dense ones, and refuses truncated or
 * inconsistent ones; the warm-up schedule; dgc_select and dgc_kth_abs against plain
 * loops; the sampled threshold selects about k; dgc_exchange equals, bit for bit,
 * a plain reference of DGC (node sums, momentum correction with the learning rate
 * folded in, exact top-k, masking, dense small tensors) summed densely — over 6 steps
 * through the warm-up and a changing rate, with and without momentum; conservation: everything sent plus every node's residual equals
 * everything accumulated (exact with fp32 values, to float rounding with fp16); the
 * sparse path sends less than a dense ring would; every rank ends with the same bits.
 * Gradients are integers, so every sum is exact in any order. At 2 ranks, the pipeline
 * stages of a process grid: each rank compressing its stage's tensors alone, with the
 * clipping norm summed over the stages (norm_comm), gives the whole model's result, and
 * the two stages' states have one size (rows_comm). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dgc/dgc.h"
#include "nn/param.h"
#include "base/runtime.h"
#define CHECK_MPI  /* check() agreed by every rank */
#include "../check.h"


static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- codec ------------------------------------------------------------------------ */

static void test_codec(const runtime *rt)
{
    char why[256] = "";
    bool ok = true;
    enum { N = 5000 };
    float *acc = calloc(N, sizeof(float)), *val = malloc(N * sizeof(float)), *dv = malloc(N * sizeof(float));
    uint32_t *idx = malloc(N * sizeof(uint32_t));
    uint8_t *msg = malloc(16 + 8 * N);
    uint64_t touched[N / 64 + 1];
    size_t runs[4] = { 100, 150, 4000, 4100 };  /* dense runs: [100,150) and [4000,4100) */
    for (int trial = 0; trial < 40 && ok; trial++) {
        dgc_values vk = trial % 2 ? DGC_VALUES_FP16 : DGC_VALUES_FP32;
        /* gaps of every width: trial 0 consecutive from 0 (width 0), later sparser */
        size_t count = 0;
        uint32_t at = trial == 0 ? 0 : (uint32_t)(mix((uint64_t)trial) % 7);
        uint32_t spread = trial < 2 ? 1 : 1u << (trial % 13);
        while (at < N && count < N) {
            bool in_run = (at >= 100 && at < 150) || (at >= 4000 && at < 4100);
            if (!in_run) {
                idx[count] = at;
                val[count] = (float)((int)(mix(at * 31u + (uint64_t)trial) % 20001) - 10000) / 64.0f;
                count++;
            }
            at += 1 + (trial == 0 ? 0 : (uint32_t)(mix(at + 7u * (uint64_t)trial) % spread));
        }
        for (int i = 0; i < 150; i++) dv[i] = (float)i * 0.5f - 3.0f;
        size_t len = dgc_encode_sparse(msg, dv, 150, idx, val, count, vk);
        ok = len == dgc_sparse_msg_bytes(150, idx, count, vk);
        memset(acc, 0, N * sizeof(float));
        memset(touched, 0, sizeof touched);
        ok = ok && dgc_decode_add(msg, len, acc, N, runs, 2, touched) == STATUS_OK;
        size_t j = 0, d = 0;
        for (size_t i = 0; i < N && ok; i++) {
            bool in_run = (i >= 100 && i < 150) || (i >= 4000 && i < 4100);
            float want = 0;
            bool mark = false;
            if (in_run) want = dv[d++];
            else if (j < count && idx[j] == i) want = dgc_round_value(val[j++], vk), mark = true;
            bool t = touched[i >> 6] >> (i & 63) & 1;
            if (acc[i] != want || t != mark) {
                snprintf(why, sizeof why, "trial %d element %zu: %g, want %g (touched %d)", trial, i, acc[i], want, t);
                ok = false;
            }
        }
        /* a truncated message and one whose dense part disagrees with the runs are refused */
        ok = ok && dgc_decode_add(msg, len - 1, acc, N, runs, 2, NULL) == STATUS_CORRUPT &&
             dgc_decode_add(msg, len, acc, N, runs, 1, NULL) == STATUS_CORRUPT;
        if (!ok && !why[0]) snprintf(why, sizeof why, "trial %d: length or refusal", trial);
    }
    check(rt, ok, "codec: sparse messages round-trip (fp32 exact, fp16 rounded; widths 0..13), bad ones refused", why);
    for (int i = 0; i < N; i++) dv[i] = (float)i - 77.25f;
    size_t len = dgc_encode_dense(msg, dv, N);
    memset(acc, 0, N * sizeof(float));
    ok = len == 16 + 4 * N && dgc_decode_add(msg, len, acc, N, NULL, 0, NULL) == STATUS_OK &&
         !memcmp(acc, dv, N * sizeof(float)) && dgc_decode_add(msg, len, acc, N - 1, NULL, 0, NULL) == STATUS_CORRUPT;
    check(rt, ok, "codec: dense messages round-trip exactly; a wrong length is refused", "");
    /* a 32-bit gap */
    idx[0] = 0, idx[1] = 0xfffffff0u, val[0] = 1, val[1] = 2;
    len = dgc_encode_sparse(msg, NULL, 0, idx, val, 2, DGC_VALUES_FP32);
    ok = msg[2] == 32 && len == 16 + 8 + 8;
    check(rt, ok, "codec: a gap of 2^32 - 17 packs at width 32", "");
    free(acc), free(val), free(dv), free(idx), free(msg);
}

static void test_schedule(const runtime *rt)
{
    dgc_options o = { .sparsity = 0.999, .warmup_steps = 40, .warmup_stages = 4, .warmup_sparsity = 0.75 };
    double want[] = { 0.25, 0.0625, 0.015625, 0.00390625, 0.001 };
    bool ok = true;
#define NEAR(a, b) (fabs((a) - (b)) <= 1e-15)  /* 1 - 0.999 is not 0.001 in binary */
    for (long s = 0; s < 50; s++) {
        double d = dgc_density_at(&o, s), w = want[s < 40 ? s / 10 : 4];
        if (!NEAR(d, w)) ok = false;
    }
    o.warmup_steps = 0;
    ok = ok && NEAR(dgc_density_at(&o, 0), 0.001);
    o.sparsity = 0.9, o.warmup_steps = 10, o.warmup_stages = 4;  /* stages below the final density stop there */
    ok = ok && NEAR(dgc_density_at(&o, 9), 0.1) && NEAR(dgc_density_at(&o, 0), 0.25);
    check(rt, ok, "warm-up: 75%, 93.75%, 98.4375%, 99.609% then 99.9% sparsity over 4 stages", "");
    /* starting at 93.75%: 3 stages of 100 steps, then the final sparsity */
    o = (dgc_options){ .sparsity = 0.999, .warmup_steps = 300, .warmup_stages = 3, .warmup_sparsity = 0.9375 };
    double from[] = { 0.0625, 0.015625, 0.00390625, 0.001 };
    ok = true;
    for (long s = 0; s < 400; s++)
        if (!NEAR(dgc_density_at(&o, s), from[s / 100])) ok = false;
    check(rt, ok, "warm-up from dgc.warmup_sparsity: 93.75%, 98.4375%, 99.609% then 99.9%", "");
}

static void test_select(const runtime *rt)
{
    enum { N = 1000003 };
    float *x = malloc(N * sizeof(float)), *s = malloc(N * sizeof(float));
    uint32_t *idx = malloc(N * sizeof(uint32_t));
    for (size_t i = 0; i < N; i++) {  /* a Gaussian-like bell from a sum of uniforms */
        double g = 0;
        for (int k = 0; k < 4; k++) g += (double)(mix(i * 4 + (uint64_t)k) >> 11) / 9007199254740992.0 - 0.5;
        x[i] = (float)g;
    }
    bool ok = true;
    char why[256] = "";
    for (int t = 0; t < 3 && ok; t++) {
        float thr = t == 0 ? 0.9f : t == 1 ? 0.5f : 1.7f;
        size_t got = dgc_select(x + t, N - (size_t)t, thr, idx, N), j = 0;
        for (size_t i = 0; i < N - (size_t)t && ok; i++)
            if (fabsf(x[t + i]) >= thr) {
                if (j >= got || idx[j] != i) ok = false;
                j++;
            }
        ok = ok && j == got;
        size_t capped = dgc_select(x, N, thr, idx, 5);
        ok = ok && capped == dgc_select(x, N, thr, idx, N);
        if (!ok) snprintf(why, sizeof why, "threshold %g", thr);
    }
    check(rt, ok, "dgc_select: every |x| >= thr, ascending, at any offset; counts past the capacity", why);
    size_t k = 1000;
    float kth = dgc_kth_abs(x, N, k, s);
    size_t above = 0, at_least = 0;
    for (size_t i = 0; i < N; i++) above += fabsf(x[i]) > kth, at_least += fabsf(x[i]) >= kth;
    ok = above < k && at_least >= k;
    float zeros[64] = { 0 };
    zeros[7] = -3, zeros[40] = 2;
    ok = ok && dgc_kth_abs(zeros, 64, 2, s) == 2 && dgc_kth_abs(zeros, 64, 5, s) == 0 && dgc_kth_abs(zeros, 64, 1, s) == 3;
    check(rt, ok, "dgc_kth_abs: the k-th largest magnitude (runs of zeros included)", "");
    float thr = dgc_sampled_threshold(x, N, 0.001, 0.01, 42, s);
    size_t got = dgc_select(x, N, thr, idx, N);
    snprintf(why, sizeof why, "selected %zu for k = %zu", got, k);
    check(rt, got >= k / 3 && got <= 3 * k, "sampled threshold (1% sample) selects about k at 0.1% density", why);
    free(x), free(s), free(idx);
}

/* ---- the exchange against a plain reference --------------------------------------- */

typedef struct fixture {
    param_table pt;
    float *grads, *params;
} fixture;

static void fixture_init(fixture *f)
{
    param_table_init(&f->pt);
    param_add(&f->pt, "a.weight", 0, true, 2, 64, 300, 0, 0);
    param_add(&f->pt, "a.bias", 0, false, 1, 300, 0, 0, 0);      /* dense: below min_numel */
    param_add(&f->pt, "b.weight", 1, true, 2, 30, 100, 0, 0);
    param_add(&f->pt, "c.weight", 2, true, 2, 200, 200, 0, 0);
    param_add(&f->pt, "c.bias", 2, false, 1, 200, 0, 0, 0);
    f->grads = calloc(f->pt.total, sizeof(float));
    f->params = calloc(f->pt.total, sizeof(float));
    for (size_t i = 0; i < f->pt.total; i++) f->params[i] = (float)((int)(i % 17) - 8);
}

/* Rank r's gradient at step t: integers in [-1000, 1000] on the tensors, 0 in padding. */
static void fill(const param_table *pt, float *g, int rank, long t)
{
    memset(g, 0, pt->total * sizeof(float));
    for (int e = 0; e < pt->count; e++)
        for (size_t i = 0; i < pt->entries[e].count; i++) {
            size_t at = pt->entries[e].offset + i;
            g[at] = (float)((int)(mix((uint64_t)at * 1000003u + (uint64_t)rank * 7919u + (uint64_t)t) % 2001) - 1000);
        }
}

static int cmp_desc(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Plain DGC over every node, from every rank's gradient (all[r * total]). */
typedef struct reference {
    float *u, *v;  /* [nnodes * total] */
} reference;

static void reference_step(const fixture *f, const dgc_options *o, reference *ref, const float *all, const int *node_of,
                           int world, int nnodes, long step, float lr_scale, float *out)
{
    const param_table *pt = &f->pt;
    size_t T = pt->total;
    float scale = 1.0f / (float)world;
    double density = dgc_density_at(o, step);
    memset(out, 0, T * sizeof(float));
    float *c = malloc(T * sizeof(float)), *tmp = malloc(T * sizeof(float));
    for (int k = 0; k < nnodes; k++) {
        memset(c, 0, T * sizeof(float));
        for (int r = 0; r < world; r++)
            if (node_of[r] == k)
                for (size_t i = 0; i < T; i++) c[i] += all[(size_t)r * T + i];
        float *u = ref->u + (size_t)k * T, *v = ref->v + (size_t)k * T;
        for (int e = 0; e < pt->count; e++) {
            const param_entry *pe = &pt->entries[e];
            size_t n = pe->count, a = pe->offset;
            if (n < o->min_numel) {
                for (size_t i = a; i < a + n; i++) out[i] += c[i] * scale;
                continue;
            }
            for (size_t i = a; i < a + n; i++) {
                float ci = c[i] * scale + (o->momentum > 0 && pe->decay ? (float)(o->weight_decay / nnodes) : 0.0f) *
                                              f->params[i];
                if (o->momentum > 0) {  /* the rate folded in (dgc.h: lr_scale) */
                    u[i] = (float)o->momentum * u[i] + ci;
                    v[i] += lr_scale * u[i];
                } else {
                    v[i] += ci;
                }
            }
            size_t kk = (size_t)ceil(density * (double)n);
            for (size_t i = 0; i < n; i++) tmp[i] = fabsf(v[a + i]);
            qsort(tmp, n, sizeof(float), cmp_desc);  /* the k-th largest, not by the library's selection */
            float thr = tmp[kk - 1];
            if (!(thr > 0)) thr = 1.17549435e-38f;
            for (size_t i = a; i < a + n; i++)
                if (fabsf(v[i]) >= thr) {
                    out[i] += v[i];
                    v[i] = 0;
                    u[i] = 0;
                }
        }
    }
    if (o->momentum > 0)  /* ... and taken out of the compressed tensors' sums */
        for (int e = 0; e < pt->count; e++)
            if (pt->entries[e].count >= o->min_numel)
                for (size_t i = pt->entries[e].offset; i < pt->entries[e].offset + pt->entries[e].count; i++)
                    out[i] *= 1.0f / lr_scale;
    free(c), free(tmp);
}

static void test_exchange(const runtime *rt, double momentum, dgc_values vk, const char *what)
{
    fixture f;
    fixture_init(&f);
    dgc_options o = { .mode = DGC_MODE_ON, .sparsity = 0.99, .warmup_steps = 4, .warmup_stages = 2, .warmup_sparsity = 0.75,
                      .sample_fraction = 0.01, .exact_topk = true, .momentum = momentum,
                      .weight_decay = momentum > 0 ? 0.5 : 0, .values = vk, .min_numel = 1000, .seed = 1,
                      .timeout_s = 300 };  /* the deadline is armed: a correct exchange never meets it */
    dgc *d;
    status st = dgc_init(&d, rt, &f.pt, &o);
    if (st != STATUS_OK) {
        check(rt, false, what, "dgc_init failed");
        return;
    }
    size_t T = f.pt.total;
    int world = rt->size, nnodes = rt->nnodes;
    int *node_of = malloc(sizeof(int) * (size_t)world);
    MPI_Allgather(&rt->node_id, 1, MPI_INT, node_of, 1, MPI_INT, rt->world);
    float *all = malloc(T * sizeof(float) * (size_t)world), *want = malloc(T * sizeof(float));
    reference ref = { calloc((size_t)nnodes * T, sizeof(float)), calloc((size_t)nnodes * T, sizeof(float)) };
    double *sent = calloc(T, sizeof(double)), *accum = calloc(T, sizeof(double)), *scale_of = calloc(T, sizeof(double));
    bool exact = true, same = true, smaller = true;
    char why[256] = "";
    for (long t = 0; t < 6; t++) {
        fill(&f.pt, f.grads, rt->rank, t);
        MPI_Allgather(f.grads, (int)T, MPI_FLOAT, all, (int)T, MPI_FLOAT, rt->world);
        for (size_t i = 0; i < T; i++)  /* each node's contribution: its (exact) sum times 1/world in float */
            for (int k = 0; k < nnodes; k++) {
                float s = 0;
                for (int r = 0; r < world; r++)
                    if (node_of[r] == k) s += all[(size_t)r * T + i];
                accum[i] += (double)(s * (1.0f / (float)world));
                scale_of[i] += fabs((double)(s * (1.0f / (float)world)));
            }
        dgc_stats ds;
        const float lr_scale = (float)(t % 3 == 0 ? 1.0 : t % 3 == 1 ? 0.5 : 0.25);  /* a decaying rate, restarted */
        st = dgc_exchange(d, f.grads, f.params, t, lr_scale, &ds);
        if (st != STATUS_OK) {
            exact = false;
            snprintf(why, sizeof why, "step %ld: %s", t, status_str(st));
            break;
        }
        for (size_t i = 0; i < T; i++) sent[i] += f.grads[i];
        /* every rank the same bits */
        float *first = malloc(T * sizeof(float));
        memcpy(first, f.grads, T * sizeof(float));
        MPI_Bcast(first, (int)T, MPI_FLOAT, 0, rt->world);
        if (memcmp(first, f.grads, T * sizeof(float))) same = false;
        free(first);
        if (vk == DGC_VALUES_FP32) {
            reference_step(&f, &o, &ref, all, node_of, world, nnodes, t, lr_scale, want);
            for (size_t i = 0; i < T && exact; i++)
                if (want[i] != f.grads[i]) {
                    snprintf(why, sizeof why, "step %ld element %zu: %.9g, reference %.9g", t, i, f.grads[i], want[i]);
                    exact = false;
                }
        }
        if (t >= 4 && nnodes > 1 && ds.bytes_sent >= ds.dense_bytes) {
            smaller = false;
            snprintf(why, sizeof why, "step %ld: sent %zu bytes, a dense ring %zu", t, ds.bytes_sent, ds.dense_bytes);
        }
    }
    char name[256];
    if (vk == DGC_VALUES_FP32) {
        snprintf(name, sizeof name, "%s: equals plain DGC summed densely, bit for bit, 6 steps", what);
        check(rt, exact, name, why);
    }
    snprintf(name, sizeof name, "%s: every rank holds the same bits", what);
    check(rt, same, name, "");
    if (nnodes > 1) {
        snprintf(name, sizeof name, "%s: at 1%% density the sparse exchange sends less than a dense ring", what);
        check(rt, smaller, name, why);
    }
    /* conservation (momentum 0): sent + residuals = accumulated */
    if (momentum == 0) {
        float *res = calloc(T, sizeof(float));
        size_t off, cnt;
        const float *r = dgc_residual(d, &off, &cnt);
        memcpy(res + off, r, cnt * sizeof(float));
        MPI_Allreduce(MPI_IN_PLACE, res, (int)T, MPI_FLOAT, MPI_SUM, rt->world);  /* disjoint per node; summed over nodes */
        double worst = 0;
        for (size_t i = 0; i < T; i++) {
            double err = fabs(sent[i] + res[i] - accum[i]) / (scale_of[i] + 1e-30);  /* relative to the terms */
            if (err > worst) worst = err;
        }
        snprintf(why, sizeof why, "worst relative error %.3g", worst);
        /* exact when 1/world is a power of two and the values fp32; else to float rounding */
        bool exactly = vk == DGC_VALUES_FP32 && (world & (world - 1)) == 0;
        snprintf(name, sizeof name, "%s: conservation, sent + residuals = accumulated (%s)", what,
                 exactly ? "exact" : "to float rounding");
        check(rt, exactly ? worst == 0 : worst < 1e-5, name, why);
        /* switching compression off: the flush hands over exactly the residual, times the factor */
        float *before = malloc(cnt * sizeof(float) + 1), *flushed = calloc(T, sizeof(float));
        memcpy(before, r, cnt * sizeof(float));
        dgc_flush(d, flushed, 2.0f, 0.5);  /* without momentum the rate is not folded in */
        bool ok = true;
        for (size_t i = 0; i < cnt; i++) ok = ok && flushed[off + i] == 2.0f * before[i] && r[i] == 0.0f;
        snprintf(name, sizeof name, "%s: dgc_flush hands over the residual and empties the state", what);
        check(rt, ok, name, "");
        free(before), free(flushed);
        free(res);
    }
    dgc_free(d);
    free(node_of), free(all), free(want), free(ref.u), free(ref.v), free(sent), free(accum), free(scale_of);
    free(f.grads), free(f.params);
    param_table_free(&f.pt);
}

/* Pro 2: a tensor with a few large entries gets a lower density than the schedule's,
 * a diffuse one a higher, the slice selects as many entries as the schedule allows,
 * and every node chooses the same. */
static void test_layer_ratios(const runtime *rt)
{
    param_table pt;
    param_table_init(&pt);
    param_add(&pt, "peaked.weight", 0, true, 2, 100, 400, 0, 0);
    param_add(&pt, "diffuse.weight", 1, true, 2, 100, 400, 0, 0);
    float *g = calloc(pt.total, sizeof(float)), *p = calloc(pt.total, sizeof(float));
    dgc_options o = { .mode = DGC_MODE_ON, .sparsity = 0.99, .sample_fraction = 0.05, .min_numel = 1000,
                      .layer_ratios = true, .seed = 3 };
    dgc *d;
    bool ok = dgc_init(&d, rt, &pt, &o) == STATUS_OK;
    for (long t = 0; t < 5 && ok; t++) {
        for (int e = 0; e < 2; e++)
            for (size_t i = 0; i < pt.entries[e].count; i++) {
                double u = (double)(mix(i * 131u + (uint64_t)t * 7u + (uint64_t)rt->rank) >> 11) / 9007199254740992.0;
                /* peaked: 0.5% of the entries carry nearly all the energy */
                g[pt.entries[e].offset + i] = (float)(e == 0 ? (i % 200 == 0 ? 100.0 : 0.01) * (0.5 + u) : 0.5 + u);
            }
        dgc_stats ds;
        ok = dgc_exchange(d, g, p, t, 1.0, &ds) == STATUS_OK;
    }
    float dens[2] = { 0, 0 }, conc[2] = { 0, 0 };
    uint8_t dense[2] = { 0, 0 };
    if (ok) ok = dgc_layer_table(d, dens, conc, dense, 5) == STATUS_OK;
    MPI_Bcast(dens, 2, MPI_FLOAT, 0, rt->world);
    char why[256];
    snprintf(why, sizeof why, "densities %g (peaked, concentration %g) and %g (diffuse, %g)", dens[0], conc[0], dens[1],
             conc[1]);
    double budget = (dens[0] + dens[1]) / 2;  /* equal sizes: the mean density is the budget */
    bool mine = true;
    if (rt->local_rank == 0) {
        float again[2] = { dens[0], dens[1] };
        float local[2], c2[2];
        uint8_t d2[2];
        status ls = dgc_layer_table(d, local, c2, d2, 5);
        mine = ls == STATUS_OK && memcmp(again, local, sizeof local) == 0;  /* this node chose what node 0 chose */
    } else {
        float local[2], c2[2];
        uint8_t d2[2];
        mine = dgc_layer_table(d, local, c2, d2, 5) == STATUS_OK;
    }
    ok = ok && dens[0] < 0.01 && dens[1] > 0.01 && fabs(budget - 0.01) < 1e-6 && mine && !dense[0] && !dense[1];
    check(rt, ok, "layer ratios: the peaked tensor sends less, the diffuse more, within the same budget, on every node",
          why);
    dgc_free(d);
    free(g), free(p);
    param_table_free(&pt);
}

/* Pro 3: a tensor whose second half never has a gradient (positions past the sequence,
 * padded vocabulary rows): those blocks are predicted zero from the second step, the
 * prediction is never wrong there, and the result is bit-identical to a run without it. */
static void test_zero_predict(const runtime *rt, double momentum, dgc_values vk)
{
    fixture f;
    fixture_init(&f);
    size_t T = f.pt.total;
    float *g2 = malloc(T * sizeof(float));
    dgc_options o = { .mode = DGC_MODE_ON, .sparsity = 0.99, .warmup_steps = 2, .warmup_stages = 2, .warmup_sparsity = 0.75,
                      .sample_fraction = 0.05, .momentum = momentum, .values = vk, .min_numel = 1000, .seed = 5,
                      .layer_ratios = true };
    dgc *on, *off;
    o.zero_predict = true;
    bool ok = dgc_init(&on, rt, &f.pt, &o) == STATUS_OK;
    o.zero_predict = false;
    ok = ok && dgc_init(&off, rt, &f.pt, &o) == STATUS_OK;
    const param_entry *c = &f.pt.entries[3];  /* c.weight, 200 x 200: rows 100.. never see a gradient */
    size_t skipped = 0, predicted = 0, hit = 0, truth = 0;
    char why[256] = "";
    for (long t = 0; t < 6 && ok; t++) {
        fill(&f.pt, f.grads, rt->rank, t);
        for (size_t i = c->count / 2; i < c->count; i++) f.grads[c->offset + i] = 0;
        memcpy(g2, f.grads, T * sizeof(float));
        dgc_stats a, b;
        ok = dgc_exchange(on, f.grads, f.params, t, 0.5, &a) == STATUS_OK &&
             dgc_exchange(off, g2, f.params, t, 0.5, &b) == STATUS_OK;
        if (ok && memcmp(f.grads, g2, T * sizeof(float))) {
            snprintf(why, sizeof why, "step %ld: results differ", t);
            ok = false;
        }
        skipped += a.zero_skipped, predicted += a.zero_predicted, hit += a.zero_hit, truth += a.zero_true;
    }
    size_t sums[4] = { skipped, predicted, hit, truth };
    MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_UNSIGNED_LONG, MPI_SUM, rt->world);
    if (ok) snprintf(why, sizeof why, "skipped %zu, predicted %zu, hit %zu, true %zu", sums[0], sums[1], sums[2], sums[3]);
    /* c.weight's zero half, blocks 20..39 of 1024 (the last of 64): 19520 entries skipped in steps 1..5 on
     * every node; the prediction is never wrong; block 19, half zero, is never predicted */
    ok = ok && sums[0] == (size_t)rt->nnodes * 5 * 19520 && sums[1] == sums[2] && sums[2] == sums[0] &&
         sums[3] >= sums[2];
    char name[160];
    snprintf(name, sizeof name, "zero prediction (momentum %g, %s): exact, precision 1, zero blocks skipped", momentum,
             vk == DGC_VALUES_FP16 ? "fp16" : "fp32");
    check(rt, ok, name, why);
    dgc_free(on), dgc_free(off);
    free(g2), free(f.grads), free(f.params);
    param_table_free(&f.pt);
}

/* Two "stages" (rank 0: tensor a, rank 1: tensor b, of other sizes), each compressing
 * alone (a data-parallel group of one) with the clipping norm summed over both, against
 * one rank compressing a and b together: the same clipped, selected values (exact top-k,
 * one density for all tensors, so a tensor's selection depends on its values and the
 * clipping scale only). Without the summed norm the scale differs (the check fails). */
static void test_norm_comm(const runtime *rt)
{
    param_table whole, stage;
    param_table_init(&whole);
    param_table_init(&stage);
    param_add(&whole, "a.weight", 0, true, 2, 20, 30, 0, 0);
    param_add(&whole, "b.weight", 1, true, 2, 20, 50, 0, 0);
    int mine = rt->rank;  /* the tensor of this stage */
    const param_entry *we = &whole.entries[mine];
    param_add(&stage, we->name, mine, true, 2, we->shape[0], we->shape[1], 0, 0);
    float *gw = calloc(whole.total, sizeof(float)), *gs = calloc(stage.total, sizeof(float));
    float *gn = calloc(stage.total, sizeof(float)), *p = calloc(whole.total, sizeof(float));
    for (int e = 0; e < 2; e++)
        for (size_t i = 0; i < whole.entries[e].count; i++)
            gw[whole.entries[e].offset + i] = (float)((double)(mix(i * 977u + (uint64_t)e) >> 11) / 9007199254740992.0 - 0.5);
    memcpy(gs, gw + we->offset, we->count * sizeof(float));
    memcpy(gn, gs, we->count * sizeof(float));
    runtime solo;
    runtime_sub_init(&solo, rt, MPI_COMM_SELF);
    dgc_options o = { .mode = DGC_MODE_ON, .sparsity = 0.9, .exact_topk = true, .min_numel = 1, .clip = 0.5, .seed = 9 };
    dgc *dw = NULL, *dn = NULL, *ds = NULL;
    bool ok = dgc_init(&dw, &solo, &whole, &o) == STATUS_OK && dgc_init(&dn, &solo, &stage, &o) == STATUS_OK;
    o.norm_comm = o.rows_comm = &rt->world;
    ok = ok && dgc_init(&ds, &solo, &stage, &o) == STATUS_OK;
    dgc_stats st;
    ok = ok && dgc_exchange(dw, gw, p, 0, 1.0, &st) == STATUS_OK && dgc_exchange(ds, gs, p, 0, 1.0, &st) == STATUS_OK &&
         dgc_exchange(dn, gn, p, 0, 1.0, &st) == STATUS_OK;
    double err = 0, err_alone = 0, norm = 0;
    for (size_t i = 0; ok && i < we->count; i++) {
        double ref = gw[we->offset + i];
        err = fmax(err, fabs(gs[i] - ref)), err_alone = fmax(err_alone, fabs(gn[i] - ref));
        norm = fmax(norm, fabs(ref));
    }
    unsigned long long bytes = ok ? dgc_state_bytes(ds) : 0, lo, hi;
    MPI_Allreduce(&bytes, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, rt->world);
    MPI_Allreduce(&bytes, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, rt->world);
    char why[256];
    snprintf(why, sizeof why, "stage %d: worst difference %.3g with the summed norm, %.3g alone (largest value %.3g); "
             "state bytes %llu .. %llu", mine, err, err_alone, norm, lo, hi);
    check(rt, ok && err <= 1e-6 * norm && err_alone > 1e-2 * norm && lo == hi,
          "grid stages: the clipping norm summed over the stages gives the whole model's result, one state size", why);
    dgc_free(dw), dgc_free(dn), dgc_free(ds);
    runtime_sub_free(&solo);
    free(gw), free(gs), free(gn), free(p);
    param_table_free(&whole), param_table_free(&stage);
}

int main(int argc, char **argv)
{
    runtime rt;
    mpi_test_start(&rt, &argc, &argv);
    if (rt.size == 1) {
        test_codec(&rt);
        test_schedule(&rt);
        test_select(&rt);
    }
    char what[128];
    snprintf(what, sizeof what, "exchange, %d nodes x %d", rt.nnodes, rt.local_size);
    test_exchange(&rt, 0, DGC_VALUES_FP32, what);
    snprintf(what, sizeof what, "exchange with momentum 0.5 and weight decay, %d nodes x %d", rt.nnodes, rt.local_size);
    test_exchange(&rt, 0.5, DGC_VALUES_FP32, what);
    snprintf(what, sizeof what, "exchange, fp16 values, %d nodes x %d", rt.nnodes, rt.local_size);
    test_exchange(&rt, 0, DGC_VALUES_FP16, what);
    test_layer_ratios(&rt);
    test_zero_predict(&rt, 0, DGC_VALUES_FP32);
    test_zero_predict(&rt, 0.5, DGC_VALUES_FP16);
    if (rt.size == 2) test_norm_comm(&rt);
    if (rt.rank == 0) printf("%s\n", failures ? "FAILED" : "PASSED");
    runtime_free(&rt);
    return failures ? 1 : 0;
}
