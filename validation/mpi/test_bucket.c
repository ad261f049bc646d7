/* test_bucket — gradient bucket layout invariants and exact bucketed allreduce, at 1-4 ranks.
 *
 * Gradients are small integers (also in float), so every partial sum is exactly
 * representable and the reduced buffer is checked bit-exact; scaling by 1/size is
 * exact for power-of-two sizes and checked to 1 ulp otherwise. Ranks mark tensors
 * in different (rank-seeded) orders: if buckets were not launched in bucket order
 * on every rank, the collectives would mismatch and the sums would be wrong or hang.
 * Usage: test_bucket [--ranks-per-node N] */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bucket.h"
#include "comm/comm.h"
#include "base/runtime.h"
#define CHECK_MPI  /* check() agreed by every rank */
#include "../check.h"

enum { MAXT = 512 };


/* A tensor table over a flat buffer; offsets are aligned, which leaves gaps. */
typedef struct model {
    int n;                  /* tensors */
    size_t offsets[MAXT];   /* element offset of each tensor */
    size_t counts[MAXT];    /* elements of each tensor */
    size_t total;           /* elements of the flat buffer, padding included */
} model;

static void model_add(model *m, size_t count, size_t align)
{
    size_t off = (m->total + align - 1) / align * align;
    m->offsets[m->n] = off;
    m->counts[m->n] = count;
    m->n++;
    m->total = off + count;
}

/* ~60 tensors like a small network: a tiny first tensor, biases of 64..1000
 * floats, medium tensors of 8-20 KB, six matrices of 100k+ floats and one tensor
 * larger than the 1 MiB bucket. Offsets aligned to 16 elements (64 B). */
static void model_synthetic(model *m)
{
    memset(m, 0, sizeof *m);
    model_add(m, 10, 16);
    for (int i = 1; i < 60; i++) {
        size_t n;
        if (i == 37) n = 300000;                                 /* 1.2 MB > bucket */
        else if (i % 10 == 5) n = 100000 + (size_t)i * 1000;     /* matrices */
        else if (i % 7 == 3) n = 2048 + (size_t)i * 37;          /* medium */
        else n = 64 + (size_t)(i * 137) % 937;                   /* biases */
        model_add(m, n, 16);
    }
}

static bool small_tensor(const model *m, int t, size_t esz)
{
    return m->counts[t] * esz < BUCKET_SMALL_BYTES;
}

static size_t span(const model *m, int lo, int hi, size_t esz)
{
    return (m->offsets[hi] + m->counts[hi] - m->offsets[lo]) * esz;
}

/* The layout contract of bucket.h, checked from the outside. */
static bool layout_ok(const bucket_manager *bm, const model *m, size_t esz, size_t cap, char *why, size_t len)
{
    int nb = bucket_count(bm), expect_hi = m->n - 1;
    if (nb < 1) { snprintf(why, len, "no buckets"); return false; }
    for (int b = 0; b < nb; b++) {
        size_t off, cnt;
        int lo, hi;
        bucket_range(bm, b, &off, &cnt, &lo, &hi);
        if (hi != expect_hi || lo > hi || lo < 0) {
            snprintf(why, len, "bucket %d holds tensors %d..%d, expected it to end at %d", b, lo, hi, expect_hi);
            return false;
        }
        if (off != m->offsets[lo] || cnt != m->offsets[hi] + m->counts[hi] - off) {
            snprintf(why, len, "bucket %d slice [%zu,+%zu) is not tensors %d..%d", b, off, cnt, lo, hi);
            return false;
        }
        if (lo == hi && m->n > 1 && small_tensor(m, lo, esz)) {
            snprintf(why, len, "bucket %d is the lone small tensor %d (%zu B)", b, lo, m->counts[lo] * esz);
            return false;
        }
        if (cnt * esz > cap) {
            /* Over the size only by merged small tensors: one at the high end, and in
             * the last bucket the trailing tensor 0 at the low end. */
            int a = lo, z = hi;
            if (z > a && small_tensor(m, z, esz)) z--;
            if (b == nb - 1 && z > a && small_tensor(m, a, esz)) a++;
            if (z > a && span(m, a, z, esz) > cap) {
                snprintf(why, len, "bucket %d (tensors %d..%d) has %zu B > %zu B", b, lo, hi, cnt * esz, cap);
                return false;
            }
        }
        /* Greedy: a bucket closes only when full or when the next tensor would overflow it. */
        if (b < nb - 1 && span(m, lo, hi, esz) < cap && span(m, lo - 1, hi, esz) <= cap) {
            snprintf(why, len, "bucket %d (tensors %d..%d) closed early at %zu B", b, lo, hi, cnt * esz);
            return false;
        }
        expect_hi = lo - 1;
    }
    if (expect_hi != -1) { snprintf(why, len, "tensors 0..%d are in no bucket", expect_hi); return false; }
    return true;
}

static double input(int rank, size_t i, int step)
{
    return (double)((int)((i * 7 + (size_t)rank * 3 + (size_t)step * 5) % 23) - 11);
}

static void fill(void *buf, size_t n, reduce_dtype dt, int rank, int step)
{
    for (size_t i = 0; i < n; i++) reduce_set(buf, i, dt, input(rank, i, step));
}

static double get(const void *buf, size_t i, reduce_dtype dt)
{
    return reduce_get(buf, i, dt);
}

/* Elements inside a bucket hold sum*scale (bit-exact when `exact`, else within
 * eps*|ref|: one rounding of the product plus the rounding of 1/size); elements
 * between buckets (boundary padding) must be untouched. */
static size_t count_wrong(const bucket_manager *bm, const model *m, const void *buf, reduce_dtype dt,
                          const runtime *rt, int step, double scale, bool exact)
{
    size_t wrong = 0, prev_end = 0;
    double eps = dt == REDUCE_DTYPE_F32 ? FLT_EPSILON : DBL_EPSILON;
    for (int b = bucket_count(bm) - 1; b >= 0; b--) { /* buckets in address order */
        size_t off, cnt;
        bucket_range(bm, b, &off, &cnt, NULL, NULL);
        for (size_t i = prev_end; i < off; i++) wrong += get(buf, i, dt) != input(rt->rank, i, step);
        for (size_t i = off; i < off + cnt; i++) {
            double sum = 0;
            for (int r = 0; r < rt->size; r++) sum += input(r, i, step);
            double ref = sum * scale, got = get(buf, i, dt);
            if (exact) wrong += got != ref;
            else wrong += fabs(got - ref) > eps * fabs(ref);
        }
        prev_end = off + cnt;
    }
    for (size_t i = prev_end; i < m->total; i++) wrong += get(buf, i, dt) != input(rt->rank, i, step);
    return wrong;
}

static volatile double fake_sink;

/* Stands in for the backward of one layer. */
static void fake_compute(int t)
{
    double a = 0;
    for (int i = 0; i < 2000 + 50 * (t % 7); i++) a += 1.0 / (i + 1);
    fake_sink += a;
}

static void order_reverse(int *order, int n)
{
    for (int k = 0; k < n; k++) order[k] = n - 1 - k;
}

/* A permutation that differs per rank (seeded LCG, Fisher-Yates). */
static void order_scrambled(int *order, int n, unsigned seed)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (int k = 0; k < n; k++) order[k] = k;
    for (int k = n - 1; k > 0; k--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((s >> 33) % (uint64_t)(k + 1));
        int tmp = order[k]; order[k] = order[j]; order[j] = tmp;
    }
}

/* One training step: fill, mark in `order` with compute in between, wait.
 * After every mark the started buckets must be exactly the leading complete ones;
 * afterwards the launch log must read 0,1,2,... with increasing collective numbers. */
static status run_step(const runtime *rt, bucket_manager *bm, const model *m, const int *order, int step,
                       bool *order_ok)
{
    unsigned char marked[MAXT] = { 0 };
    int nb = bucket_count(bm);
    fill(bm->grads, m->total, bm->dtype, rt->rank, step);
    *order_ok = true;
    for (int k = 0; k < m->n; k++) {
        fake_compute(order[k]);
        TRY(bucket_mark_ready(bm, order[k]));
        marked[order[k]] = 1;
        if (k % 3 == 0) TRY(bucket_progress(bm));
        int lead = 0, lo, hi;
        for (; lead < nb; lead++) {
            bucket_range(bm, lead, NULL, NULL, &lo, &hi);
            int t = lo;
            while (t <= hi && marked[t]) t++;
            if (t <= hi) break;
        }
        if (bm->next_launch != lead) *order_ok = false;
    }
    TRY(bucket_wait_all(bm));
    if (bm->nlaunched != nb) *order_ok = false;
    for (int i = 0; i < bm->nlaunched; i++) {
        if (bm->launched[i] != i) *order_ok = false;
        if (i > 0 && bm->buckets[i].op.seq <= bm->buckets[i - 1].op.seq) *order_ok = false;
    }
    return STATUS_OK;
}

static void test_layout(const runtime *rt, comm *c)
{
    model m;
    model_synthetic(&m);
    float *g = calloc(m.total, sizeof *g);
    size_t cap = 1 << 20;
    bucket_manager bm;
    char why[256] = "", what[256];
    status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m.offsets, m.counts, m.n, cap, COMM_ALGO_AUTO, 1.0);
    bool ok = st == STATUS_OK && layout_ok(&bm, &m, sizeof(float), cap, why, sizeof why);
    snprintf(what, sizeof what, "layout of %d tensors (%.2f MiB) in %d buckets of 1 MiB: reverse order, contiguous, "
             "no lone small tensor, none over size but a big tensor", m.n, (double)m.total * 4 / 1048576,
             bucket_count(&bm));
    check(rt, ok, what, why);

    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    bucket_print(&bm, f);
    fclose(f);
    int lines = 0;
    for (size_t i = 0; i < text_len; i++) lines += text[i] == '\n';
    snprintf(why, sizeof why, "%d lines for %d buckets", lines, bucket_count(&bm));
    check(rt, lines == bucket_count(&bm) && strstr(text, "bucket   0") != NULL, "bucket_print writes one line per bucket", why);
    free(text);
    bucket_free(&bm);
    free(g);
}

/* Edge cases of the rules, layout only: small-big-small, all small, many biases
 * over several buckets (f64), a tensor of exactly the bucket size, a bucket
 * smaller than BUCKET_SMALL_BYTES, tensors that each fill a bucket, one tensor. */
static void test_layout_edges(const runtime *rt, comm *c)
{
    enum { NCASE = 7 };
    static const size_t caps[NCASE] = { 1 << 20, 1 << 20, 1 << 16, 1 << 20, 4096, 12000, 1 << 20 };
    static const int expect_nb[NCASE] = { 1, 1, -1, 2, -1, 5, 1 };
    bool ok = true;
    char why[256] = "";
    for (int k = 0; k < NCASE; k++) { /* no early exit: a rank that stopped would leave the others hanging */
        model m;
        memset(&m, 0, sizeof m);
        reduce_dtype dt = k == 2 ? REDUCE_DTYPE_F64 : REDUCE_DTYPE_F32;
        size_t esz = reduce_dtype_size(dt);
        switch (k) {
        case 0: model_add(&m, 10, 1); model_add(&m, 300000, 16); model_add(&m, 10, 16); break;
        case 1: for (int i = 0; i < 5; i++) model_add(&m, 10, 1); break;
        case 2: for (int i = 0; i < 300; i++) model_add(&m, 500 + (size_t)(i % 5) * 100, 8); break;
        case 3: model_add(&m, 1 << 18, 1); model_add(&m, 1 << 18, 1); model_add(&m, 100, 1); break;
        case 4: for (int i = 0; i < 21; i++) model_add(&m, i % 3 ? 500 : 1500, 4); break;
        case 5: for (int i = 0; i < 5; i++) model_add(&m, 3000, 1); break;
        case 6: model_add(&m, 10, 1); break;
        }
        void *g = calloc(m.total, esz);
        bucket_manager bm;
        status st = bucket_init(&bm, c, g, dt, m.offsets, m.counts, m.n, caps[k], COMM_ALGO_AUTO, 1.0);
        char sub[200] = "";
        bool ok_k = st == STATUS_OK && layout_ok(&bm, &m, esz, caps[k], sub, sizeof sub);
        if (ok_k && expect_nb[k] >= 0 && bucket_count(&bm) != expect_nb[k]) {
            snprintf(sub, sizeof sub, "%d buckets, expected %d", bucket_count(&bm), expect_nb[k]);
            ok_k = false;
        }
        if (ok_k && k == 2 && bucket_count(&bm) < 10) {
            snprintf(sub, sizeof sub, "only %d buckets", bucket_count(&bm));
            ok_k = false;
        }
        if (ok_k) { /* the layout is the same on every rank, so every rank gets here */
            int order[MAXT];
            bool order_ok = false;
            order_scrambled(order, m.n, (unsigned)(rt->rank * 3 + k));
            st = run_step(rt, &bm, &m, order, 5 + k, &order_ok);
            size_t wrong = st == STATUS_OK ? count_wrong(&bm, &m, g, dt, rt, 5 + k, 1.0, true) : 1;
            if (st != STATUS_OK || wrong || !order_ok) {
                snprintf(sub, sizeof sub, "status %s, %zu wrong, launch order %s", status_str(st), wrong,
                         order_ok ? "ok" : "wrong");
                ok_k = false;
            }
        }
        if (!ok_k && ok) snprintf(why, sizeof why, "case %d: %s", k, sub);
        ok = ok && ok_k;
        bucket_free(&bm);
        free(g);
    }
    check(rt, ok, "7 edge-case models (small-big-small, all small, cap < 8 KB, one tensor): layout rules hold, "
          "scrambled marking exact", why);
}

/* Marks in reverse layer order (as backward does) for each algorithm, scale 1. */
static void test_exact(const runtime *rt, comm *c, const model *m)
{
    float *g = malloc(m->total * sizeof *g);
    int order[MAXT];
    order_reverse(order, m->n);
    for (int a = COMM_ALGO_AUTO; a < COMM_ALGO_COUNT; a++) {
        comm_algo algo = (comm_algo)a;
        bucket_manager bm;
        bool order_ok = false;
        size_t wrong = 1;
        status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m->offsets, m->counts, m->n, 1 << 20, algo, 1.0);
        if (st == STATUS_OK) st = run_step(rt, &bm, m, order, 0, &order_ok);
        if (st == STATUS_OK) wrong = count_wrong(&bm, m, g, REDUCE_DTYPE_F32, rt, 0, 1.0, true);
        char what[160], why[160];
        snprintf(what, sizeof what, "%s: reverse-order marking with compute between marks, every element exact",
                 comm_algo_name(algo));
        snprintf(why, sizeof why, "status %s, %zu wrong, launch order %s", status_str(st), wrong,
                 order_ok ? "ok" : "wrong");
        check(rt, st == STATUS_OK && wrong == 0 && order_ok, what, why);
        bucket_free(&bm);
    }
    free(g);
}

/* Averaging: scale 1/size, exact when size is a power of two. */
static void test_scale(const runtime *rt, comm *c, const model *m)
{
    float *g = malloc(m->total * sizeof *g);
    int order[MAXT];
    order_reverse(order, m->n);
    double scale = 1.0 / rt->size;
    bool exact = (rt->size & (rt->size - 1)) == 0;
    bucket_manager bm;
    bool order_ok = false;
    size_t wrong = 1;
    status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m->offsets, m->counts, m->n, 1 << 20, COMM_ALGO_HIER, scale);
    if (st == STATUS_OK) st = run_step(rt, &bm, m, order, 1, &order_ok);
    if (st == STATUS_OK) wrong = count_wrong(&bm, m, g, REDUCE_DTYPE_F32, rt, 1, scale, exact);
    char what[160], why[160];
    snprintf(what, sizeof what, "scale 1/%d applied after each bucket: %s", rt->size,
             exact ? "exact" : "within 1 ulp of sum/size");
    snprintf(why, sizeof why, "status %s, %zu wrong", status_str(st), wrong);
    check(rt, st == STATUS_OK && wrong == 0 && order_ok, what, why);
    bucket_free(&bm);
    free(g);
}

/* Every rank marks in its own scrambled order: buckets still start in bucket order. */
static void test_scrambled(const runtime *rt, comm *c, const model *m)
{
    float *g = malloc(m->total * sizeof *g);
    int order[MAXT];
    bool ok = true;
    char why[200] = "";
    for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++) {
        order_scrambled(order, m->n, (unsigned)(rt->rank * 7 + a));
        bucket_manager bm;
        bool order_ok = false;
        size_t wrong = 1;
        status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m->offsets, m->counts, m->n, 1 << 20,
                                (comm_algo)a, 1.0);
        if (st == STATUS_OK) st = run_step(rt, &bm, m, order, 2, &order_ok);
        if (st == STATUS_OK) wrong = count_wrong(&bm, m, g, REDUCE_DTYPE_F32, rt, 2, 1.0, true);
        bool ok_a = st == STATUS_OK && wrong == 0 && order_ok;
        if (!ok_a && ok)
            snprintf(why, sizeof why, "%s: status %s, %zu wrong, launch order %s", comm_algo_name((comm_algo)a),
                     status_str(st), wrong, order_ok ? "ok" : "wrong");
        ok = ok && ok_a;
        bucket_free(&bm);
    }
    check(rt, ok, "rank-dependent scrambled marking (mpi, flat, hier): exact, launched in bucket order 0,1,2,...",
          why);
    free(g);
}

/* Two steps on one manager: exact both times, ready state rearmed, scratch reused. */
static void test_two_steps(const runtime *rt, comm *c, const model *m)
{
    float *g = malloc(m->total * sizeof *g);
    int order[MAXT];
    bucket_manager bm;
    bool ok = true, order_ok = false;
    char why[200] = "";
    status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m->offsets, m->counts, m->n, 1 << 20, COMM_ALGO_HIER, 1.0);
    void *scratch[MAXT];
    size_t scratch_bytes[MAXT];
    for (int step = 0; step < 2 && st == STATUS_OK; step++) {
        if (step == 0) order_reverse(order, m->n);
        else order_scrambled(order, m->n, (unsigned)rt->rank + 100);
        st = run_step(rt, &bm, m, order, 10 + step, &order_ok);
        size_t wrong = st == STATUS_OK ? count_wrong(&bm, m, g, REDUCE_DTYPE_F32, rt, 10 + step, 1.0, true) : 1;
        bool rearmed = bm.next_launch == 0 && bm.nready == 0 && bm.steps == step + 1;
        for (int b = 0; b < bucket_count(&bm); b++) {
            if (bm.buckets[b].state != BUCKET_STATE_FILLING || bm.buckets[b].op.active) rearmed = false;
            if (step == 0) { scratch[b] = bm.buckets[b].op.scratch; scratch_bytes[b] = bm.buckets[b].op.scratch_bytes; }
            else if (scratch[b] != bm.buckets[b].op.scratch || scratch_bytes[b] != bm.buckets[b].op.scratch_bytes) {
                snprintf(why, sizeof why, "bucket %d reallocated its scratch in step 2", b);
                ok = false;
            }
        }
        if (st != STATUS_OK || wrong || !order_ok || !rearmed) {
            snprintf(why, sizeof why, "step %d: status %s, %zu wrong, launch order %s, rearmed %d", step + 1,
                     status_str(st), wrong, order_ok ? "ok" : "wrong", rearmed);
            ok = false;
        }
    }
    check(rt, ok && st == STATUS_OK, "two steps on one manager: exact both, ready state rearmed, scratch reused", why);
    bucket_free(&bm);
    free(g);
}

/* A model of one tensor of 10 floats: one bucket, exact, averaged. */
static void test_tiny(const runtime *rt, comm *c)
{
    model m;
    memset(&m, 0, sizeof m);
    model_add(&m, 10, 1);
    float g[10];
    int order[1] = { 0 };
    bool exact = (rt->size & (rt->size - 1)) == 0, order_ok = false;
    double scale = 1.0 / rt->size;
    bucket_manager bm;
    size_t wrong = 1;
    status st = bucket_init(&bm, c, g, REDUCE_DTYPE_F32, m.offsets, m.counts, 1, 0, COMM_ALGO_AUTO, scale);
    if (st == STATUS_OK) st = run_step(rt, &bm, &m, order, 3, &order_ok);
    if (st == STATUS_OK) wrong = count_wrong(&bm, &m, g, REDUCE_DTYPE_F32, rt, 3, scale, exact);
    char why[160];
    snprintf(why, sizeof why, "status %s, %d buckets, %zu wrong", status_str(st), bucket_count(&bm), wrong);
    check(rt, st == STATUS_OK && bucket_count(&bm) == 1 && wrong == 0 && order_ok,
          "one-tensor model (10 floats): one bucket, averaged result correct", why);
    bucket_free(&bm);
}

/* Other dtypes: f64 averaged, i32 summed (integer gradients need scale 1). */
static void test_dtypes(const runtime *rt, comm *c, const model *m)
{
    static const reduce_dtype dts[2] = { REDUCE_DTYPE_F64, REDUCE_DTYPE_I32 };
    void *g = malloc(m->total * sizeof(double));
    int order[MAXT];
    bool ok = true;
    char why[160] = "";
    for (int k = 0; k < 2; k++) {
        order_scrambled(order, m->n, (unsigned)rt->rank + 200);
        double scale = dts[k] == REDUCE_DTYPE_F64 ? 1.0 / rt->size : 1.0;
        bool exact = dts[k] == REDUCE_DTYPE_I32 || (rt->size & (rt->size - 1)) == 0, order_ok = false;
        bucket_manager bm;
        size_t wrong = 1;
        status st = bucket_init(&bm, c, g, dts[k], m->offsets, m->counts, m->n, 1 << 20, COMM_ALGO_FLAT, scale);
        if (st == STATUS_OK) st = run_step(rt, &bm, m, order, 4, &order_ok);
        if (st == STATUS_OK) wrong = count_wrong(&bm, m, g, dts[k], rt, 4, scale, exact);
        bool ok_k = st == STATUS_OK && wrong == 0 && order_ok;
        if (!ok_k && ok) snprintf(why, sizeof why, "dtype %d: status %s, %zu wrong", (int)dts[k], status_str(st), wrong);
        ok = ok && ok_k;
        bucket_free(&bm);
    }
    check(rt, ok, "f64 averaged and i32 summed buckets correct", why);
    free(g);
}

int main(int argc, char **argv)
{
    runtime rt;
    mpi_test_start(&rt, &argc, &argv);
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = 60.0, .tune_file = NULL };
    comm *c;
    status st = comm_init(&c, &rt, &opt);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.rank == 0)
        printf("# %d ranks, %d nodes (%d per node max), %s\n", rt.size, rt.nnodes, rt.max_local_size, comm_describe(c));

    model m;
    model_synthetic(&m);
    test_layout(&rt, c);
    test_layout_edges(&rt, c);
    test_exact(&rt, c, &m);
    test_scale(&rt, c, &m);
    test_scrambled(&rt, c, &m);
    test_two_steps(&rt, c, &m);
    test_tiny(&rt, c);
    test_dtypes(&rt, c, &m);

    comm_free(c);
    int f = failures;
    runtime_free(&rt);
    return f ? 1 : 0;
}
