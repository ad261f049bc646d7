/* test_nccl — comm's nccl backend (comm.h with comm_options.backend = NCCL) on GPUs
 * against the exact answer, through the same calls and bucket manager as the MPI
 * backend, and its deadline.
 *
 * Inputs are small integers stored as floats, so every partial sum is exact in any
 * order and the check is bit-exact; averaging is exact too when the world size is a
 * power of two (x * 1/size is then exact), else within the rounding of that product.
 * Counts: 0, 1, odd, not a multiple of the node size, exactly one and two chunks,
 * several chunks with a remainder. The device buffer sits between canaries. Each op
 * waits for the upload on the test's stream through comm_set_stream only.
 * Ops in flight together (comm serialises them in start order) and a bucket manager
 * over a device gradient buffer (several buckets launched in order, waited, exact)
 * go through the same backend; host algorithms, non-f32 sums and host buffers are refused.
 * The vector ops of a comm_group with the nccl backend (comm.h: allreduce, reduce-scatter
 * of equal and unequal blocks, all-gather in place and with gaps, all-to-all, a ring
 * of send-receives) run on the world, the node and every other rank, device buffers,
 * bit-exact on the same integer inputs.
 *
 * Deadline (2+ ranks, a second comm with a 2 s comm.timeout): the last rank skips
 * the allreduce for 6 s; the others must return STATUS_TIMEOUT within the deadline
 * plus the probe's grace and name it (comm_late_ranks). It then joins late, which
 * completes the inter-node MPI step the others left posted, so every rank reaches
 * MPI_Finalize with nothing pending and exits 0.
 *
 * Usage (NCCL refuses two ranks of one communicator on one GPU; on one GPU make each
 * rank its own virtual node):
 *   mpirun -np 1 test_nccl
 *   mpirun -np 2 test_nccl --ranks-per-node 1
 * Without a CUDA device: rank 0 prints SKIP, every rank exits 77 (skipped). */
#include <float.h>
#include <unistd.h>

#define CHECK_GPU  /* the CUDA checks */
#define CHECK_MPI  /* check() agreed by every rank */
#include "../check.h"
#include "comm/bucket.h"
#include "comm/comm.h"

#define CHUNK 4096                        /* floats per pipeline chunk here: several chunks stay cheap */
#define MAX_COUNT (5 * CHUNK + 123)       /* the largest case: 6 chunks, a remainder */
#define DEADLINE_S 2.0                    /* the deadline test's comm.timeout */
#define SKIP_S 6.0                        /* the skipping rank's absence: deadline + grace (<= 2 s) + margin */
#define NOPS 3                            /* ops in flight together */

/* Rank r's element i: an integer in [-30, 30]. */
static float input(size_t i, int r)
{
    return (float)((int)((i * 7 + (size_t)r * 13) % 61) - 30);
}

/* Local verdict counted for check.h's GPU section, global verdict through its MPI check(). */
static void verdict(const runtime *rt, bool ok, const char *what, const char *why)
{
    ok ? gpu_passed++ : gpu_failed++;
    check(rt, ok, what, why);
}

/* The expected result of element i: the sum (or average) over ranks. */
static float expected(const runtime *rt, size_t i, bool average)
{
    double sum = 0;
    for (int r = 0; r < rt->size; r++) sum += input(i, r);
    return (float)(average ? sum * (1.0 / rt->size) : sum);
}

/* Rank's inputs of `count` floats uploaded between canaries on the current stream. */
static float *upload_inputs(const runtime *rt, size_t count)
{
    float *h = malloc((count ? count : 1) * sizeof(float));
    CHECK(h, "out of memory");
    for (size_t i = 0; i < count; i++) h[i] = input(i, rt->rank);
    float *d = gpu_guarded(h, count);
    free(h);
    return d;
}

/* Downloads d (guarded) and compares each value with `want(i)` within atol (gaps:
 * want is the rank's own input), the canaries bit for bit; "" when all match. */
static bool compare(const runtime *rt, const float *d, size_t count, const unsigned char *untouched, bool average,
                    double atol, char *why, size_t why_len)
{
    float *h = malloc((count + 2 * GPU_GUARD) * sizeof(float));
    CHECK(h, "out of memory");
    int e = cuda_memcpy_d2h(h, d - GPU_GUARD, (count + 2 * GPU_GUARD) * sizeof(float));
    if (e) gpu_die("d2h", e);
    bool ok = true;
    for (size_t i = 0; ok && i < 2 * GPU_GUARD; i++) {
        uint32_t bits;
        memcpy(&bits, &h[i < GPU_GUARD ? i : count + i], 4);
        if (bits != GPU_CANARY_BITS) {
            ok = false;
            snprintf(why, why_len, "canary float %zu %s the buffer overwritten", i % GPU_GUARD,
                     i < GPU_GUARD ? "before" : "after");
        }
    }
    for (size_t i = 0; ok && i < count; i++) {
        double got = h[GPU_GUARD + i], ref = untouched && untouched[i] ? input(i, rt->rank) : expected(rt, i, average);
        if (!(fabs(got - ref) <= atol)) {
            ok = false;
            snprintf(why, why_len, "[%zu] = %.9g, expected %.9g%s", i, got, ref,
                     untouched && untouched[i] ? " (a gap between buckets, never sent)" : "");
        }
    }
    free(h);
    return ok;
}

/* One allreduce of `count` floats: start + wait, or the blocking call. */
static void run_case(const runtime *rt, comm *c, size_t count, bool average, bool blocking, double atol,
                     const char *what)
{
    float *d = upload_inputs(rt, count);
    status st = blocking ? comm_allreduce(c, d, count, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO)
                         : STATUS_OK;
    comm_op op = { 0 };
    if (!blocking) {
        st = average ? comm_allreduce_start_scaled(c, &op, d, count, REDUCE_DTYPE_F32, 1.0 / rt->size, COMM_ALGO_AUTO)
                     : comm_allreduce_start(c, &op, d, count, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_HIER);
        if (st == STATUS_OK) st = comm_wait(c, &op);
    }
    char why[256] = "";
    bool ok = st == STATUS_OK;
    if (!ok) snprintf(why, sizeof why, "allreduce returned %s", status_str(st));
    if (ok) ok = compare(rt, d, count, NULL, average, atol, why, sizeof why);
    verdict(rt, ok, what, why);
    comm_op_free(&op);
    gpu_release(d, 1);
}

/* NOPS ops started back to back (comm runs them one at a time, in start order),
 * progressed together, waited newest first. */
static void run_in_flight(const runtime *rt, comm *c)
{
    static const size_t counts[NOPS] = { 3 * CHUNK + 5, 17, 2 * CHUNK };
    float *d[NOPS];
    comm_op op[NOPS] = { { 0 } };
    status st = STATUS_OK;
    for (int k = 0; k < NOPS; k++) d[k] = upload_inputs(rt, counts[k]);
    for (int k = 0; k < NOPS && st == STATUS_OK; k++)
        st = comm_allreduce_start(c, &op[k], d[k], counts[k], REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO);
    if (st == STATUS_OK) st = comm_progress(c);
    for (int k = NOPS - 1; k >= 0 && st == STATUS_OK; k--) st = comm_wait(c, &op[k]);
    char why[256] = "";
    bool ok = st == STATUS_OK;
    if (!ok) snprintf(why, sizeof why, "returned %s", status_str(st));
    for (int k = 0; k < NOPS && ok; k++) ok = compare(rt, d[k], counts[k], NULL, false, 0, why, sizeof why);
    verdict(rt, ok, "3 allreduces in flight together, waited newest first, exact", why);
    for (int k = 0; k < NOPS; k++) {
        comm_op_free(&op[k]);
        gpu_release(d[k], 1);
    }
}

/* A device gradient buffer of 9 tensors (one gap of 3 floats) in buckets of at most
 * 2 chunks: marked ready last tensor first as backward would, progressed between
 * marks, waited; buckets start in index order; every element exact, gaps untouched. */
static void run_buckets(const runtime *rt, comm *c, bool average, double atol, const char *what)
{
    enum { NT = 9 };
    static const size_t counts[NT] = { 1000, 7, 3000, 2500, 4096, 5, 8000, 1234, 2600 };
    size_t offsets[NT], total = 0;
    for (int t = 0; t < NT; t++) {
        offsets[t] = total;
        total += counts[t] + (t == 4 ? 3 : 0);  /* a gap after tensor 4 */
    }
    float *d = upload_inputs(rt, total);
    bucket_manager bm;
    status st = bucket_init(&bm, c, d, REDUCE_DTYPE_F32, offsets, counts, NT, 2 * CHUNK * sizeof(float),
                            COMM_ALGO_AUTO, average ? 1.0 / rt->size : 1.0);
    char why[256] = "";
    bool ok = st == STATUS_OK && bucket_count(&bm) >= 3;
    if (!ok) snprintf(why, sizeof why, "bucket_init returned %s with %d buckets", status_str(st),
                      st == STATUS_OK ? bucket_count(&bm) : 0);
    for (int step = 0; ok && step < 2; step++) {  /* twice: the manager rearms, ops reuse their state */
        if (step == 1) {  /* fresh inputs in the same buffer */
            float *h = malloc(total * sizeof(float));
            CHECK(h, "out of memory");
            for (size_t i = 0; i < total; i++) h[i] = input(i, rt->rank);
            int e = cuda_memcpy_h2d(d, h, total * sizeof(float));
            if (e) gpu_die("h2d", e);
            free(h);
        }
        for (int t = NT - 1; t >= 0 && st == STATUS_OK; t--) {
            st = bucket_mark_ready(&bm, t);
            if (st == STATUS_OK) st = bucket_progress(&bm);
        }
        if (st == STATUS_OK) st = bucket_wait_all(&bm);
        ok = st == STATUS_OK;
        if (!ok) snprintf(why, sizeof why, "step %d returned %s", step, status_str(st));
        for (int b = 0; ok && b < bm.nlaunched; b++)
            if (bm.launched[b] != b) {
                ok = false;
                snprintf(why, sizeof why, "bucket %d started in position %d", bm.launched[b], b);
            }
        if (ok && bm.nlaunched != bucket_count(&bm)) {
            ok = false;
            snprintf(why, sizeof why, "%d of %d buckets started", bm.nlaunched, bucket_count(&bm));
        }
        unsigned char *gap = calloc(total, 1);
        CHECK(gap, "out of memory");
        for (size_t i = 0; i < total; i++) gap[i] = 1;
        for (int b = 0; b < bucket_count(&bm); b++) {
            size_t off, n;
            bucket_range(&bm, b, &off, &n, NULL, NULL);
            memset(gap + off, 0, n);
        }
        if (ok) ok = compare(rt, d, total, gap, average, atol, why, sizeof why);
        free(gap);
    }
    verdict(rt, ok, what, why);
    if (st == STATUS_OK) bucket_free(&bm);
    gpu_release(d, 1);
}

/* Host algorithms and other reductions are refused on device buffers, by every rank alike. */
static void run_refusals(const runtime *rt, comm *c)
{
    float *d = upload_inputs(rt, 16);
    comm_op op = { 0 };
    status ring = comm_allreduce_start(c, &op, d, 16, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_RING);
    status max = comm_allreduce_start(c, &op, d, 16, REDUCE_DTYPE_F32, REDUCE_OP_MAX, COMM_ALGO_AUTO);
    status f64 = comm_allreduce_start(c, &op, d, 8, REDUCE_DTYPE_F64, REDUCE_OP_SUM, COMM_ALGO_AUTO);
    float host[16] = { 0 };
    status hb = comm_allreduce_start(c, &op, host, 16, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO);
    char why[160];
    snprintf(why, sizeof why, "ring: %s, max: %s, f64: %s, host buffer: %s", status_str(ring), status_str(max),
             status_str(f64), status_str(hb));
    verdict(rt, ring == STATUS_USAGE && max == STATUS_USAGE && f64 == STATUS_USAGE && hb == STATUS_USAGE && !op.active,
            "ring, max, f64 and host buffers are refused on the nccl backend (STATUS_USAGE)", why);
    gpu_release(d, 1);
}

/* The last rank is absent for SKIP_S; the others time out and name it; it then joins. */
static void run_deadline(const runtime *rt, comm *c)
{
    const size_t n = 256;  /* small: every message of the abandoned MPI step goes eagerly */
    float *h = calloc(n, sizeof(float)), *d = gpu_upload(h, n * sizeof(float));
    int victim = rt->size - 1;
    char why[256] = "", name[16];
    snprintf(name, sizeof name, "%d", victim);
    bool ok = true;
    comm_op op = { 0 };
    MPI_Barrier(rt->world);  /* start together: the deadline is measured from here */
    if (rt->rank == victim) {
        usleep((useconds_t)(SKIP_S * 1e6));
        /* Late: completes the MPI step the others posted (with one GPU per node the
         * NCCL part is local); its own verdict does not depend on the outcome. */
        if (comm_allreduce_start(c, &op, d, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO) == STATUS_OK)
            comm_wait(c, &op);
    } else {
        double t0 = MPI_Wtime();
        status st = comm_allreduce_start(c, &op, d, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO);
        if (st == STATUS_OK) st = comm_wait(c, &op);
        double dt = MPI_Wtime() - t0;
        const char *late = comm_late_ranks(c);
        ok = st == STATUS_TIMEOUT && dt < DEADLINE_S + 2.0 + 1.0 && !strcmp(late, name);
        snprintf(why, sizeof why, "returned %s after %.2f s naming \"%s\" (expected TIMEOUT within %.1f s naming \"%s\")",
                 status_str(st), dt, late, DEADLINE_S + 3.0, name);
    }
    verdict(rt, ok, "a rank that skips the allreduce is named, the others return within the deadline", why);
    cuda_free(d);
    free(h);
}

/* Device copy of host bytes, and back. */
static void *dev_of(const void *h, size_t bytes)
{
    void *d = NULL;
    int e = cuda_malloc(&d, bytes ? bytes : 1);
    if (e) gpu_die("cuda_malloc", e);
    if (bytes && (e = cuda_memcpy_h2d(d, h, bytes))) gpu_die("cuda_memcpy_h2d", e);
    return d;
}

static void host_of(void *h, const void *d, size_t bytes)
{
    int e = bytes ? cuda_memcpy_d2h(h, d, bytes) : 0;
    if (e) gpu_die("cuda_memcpy_d2h", e);
}

/* The comm_group ops on `members` with the nccl backend, device buffers, exact. */
static void run_group_on(const runtime *rt, MPI_Comm members, const char *name)
{
    comm_group_options o = { .backend = COMM_BACKEND_NCCL, .timeout_s = 60, .name = name };
    comm_group *g;
    CHECK(comm_group_init(&g, members, &o) == STATUS_OK, "comm_group_init with the nccl backend");
    int n = comm_group_size(g), me = comm_group_rank(g), *w = malloc(sizeof(int) * (size_t)n * 5);
    int *counts = w + n, *displs = w + 2 * n, *rc = w + 3 * n, *rd = w + 4 * n;
    MPI_Allgather(&rt->rank, 1, MPI_INT, w, 1, MPI_INT, members);
    char what[160], why[160] = "";
    enum { N = 777 };
    float h[2 * N + 64], r[2 * N + 64];
    /* allreduce, in place */
    for (size_t i = 0; i < N; i++) h[i] = input(i, rt->rank);
    float *d = dev_of(h, N * sizeof(float));
    bool ok = comm_group_allreduce(g, d, N, REDUCE_DTYPE_F32, REDUCE_OP_SUM) == STATUS_OK;
    host_of(r, d, N * sizeof(float));
    for (size_t i = 0; i < N && ok; i++) {
        double sum = 0;
        for (int q = 0; q < n; q++) sum += input(i, w[q]);
        if (r[i] != (float)sum) ok = false, snprintf(why, sizeof why, "[%zu] = %g, expected %g", i, r[i], sum);
    }
    snprintf(what, sizeof what, "nccl group %s (%d ranks): allreduce of %d floats, exact", name, n, N);
    verdict(rt, ok, what, why);
    gpu_release(d, 0);
    /* reduce-scatter: equal blocks (ncclReduceScatter in place of the caller's buffers), then 3 + 2r */
    for (int uneq = 0; uneq < 2; uneq++) {
        size_t total = 0, mine = 0;
        for (int q = 0; q < n; q++) counts[q] = uneq ? 3 + 2 * q : 5, total += (size_t)counts[q];
        for (int q = 0; q < me; q++) mine += (size_t)counts[q];
        for (size_t i = 0; i < total; i++) h[i] = input(i, rt->rank);
        float *ds = dev_of(h, total * sizeof(float)), *dr = dev_of(h, (size_t)counts[me] * sizeof(float));
        ok = comm_group_reduce_scatter(g, ds, dr, counts, REDUCE_DTYPE_F32, REDUCE_OP_SUM) == STATUS_OK;
        host_of(r, dr, (size_t)counts[me] * sizeof(float));
        for (int k = 0; k < counts[me] && ok; k++) {
            double sum = 0;
            for (int q = 0; q < n; q++) sum += input(mine + (size_t)k, w[q]);
            ok = r[k] == (float)sum;
        }
        snprintf(what, sizeof what, "nccl group %s: reduce-scatter of %s blocks, exact", name, uneq ? "unequal" : "equal");
        verdict(rt, ok, what, ok ? "" : "a wrong sum");
        gpu_release(ds, 0), gpu_release(dr, 0);
    }
    /* all-gather: equal back-to-back blocks in place (ncclAllGather in place), then 1 + r with gaps */
    for (int uneq = 0; uneq < 2; uneq++) {
        size_t total = 0;
        for (int q = 0; q < n; q++) {
            counts[q] = uneq ? 1 + q : 4;
            displs[q] = (int)total;
            total += (size_t)counts[q] + (uneq ? 1 : 0);
        }
        for (size_t i = 0; i < total; i++) h[i] = -1;
        for (int k = 0; k < counts[me]; k++) h[displs[me] + k] = (float)(100 * me + k);
        float *dr = dev_of(h, total * sizeof(float));
        ok = comm_group_allgatherv(g, NULL, dr, counts, displs, sizeof(float)) == STATUS_OK;
        host_of(r, dr, total * sizeof(float));
        for (int q = 0; q < n && ok; q++) {
            for (int k = 0; k < counts[q]; k++) ok = ok && r[displs[q] + k] == (float)(100 * q + k);
            if (uneq) ok = ok && r[displs[q] + counts[q]] == -1;
        }
        snprintf(what, sizeof what, "nccl group %s: allgatherv in place, %s, exact", name,
                 uneq ? "unequal blocks with gaps" : "equal blocks back to back");
        verdict(rt, ok, what, ok ? "" : "a wrong or clobbered block");
        gpu_release(dr, 0);
    }
    /* all-to-all of bytes and a ring of send-receives */
    unsigned char sb[64], rb[64];
    int so = 0, ro = 0;
    for (int q = 0; q < n; q++) {
        counts[q] = rc[q] = (me + q) % 3 + 1;
        displs[q] = so, rd[q] = ro;
        for (int k = 0; k < counts[q]; k++) sb[so + k] = (unsigned char)(me * 31 + q * 7 + k);
        so += counts[q], ro += rc[q];
    }
    void *ds = dev_of(sb, (size_t)so), *dr = dev_of(sb, (size_t)ro);
    ok = n <= 16 && comm_group_alltoallv(g, ds, counts, displs, dr, rc, rd, 1) == STATUS_OK;
    host_of(rb, dr, (size_t)ro);
    for (int q = 0; q < n && ok; q++)
        for (int k = 0; k < rc[q]; k++) ok = ok && rb[rd[q] + k] == (unsigned char)(q * 31 + me * 7 + k);
    snprintf(what, sizeof what, "nccl group %s: alltoallv of bytes (grouped ncclSend/ncclRecv), exact", name);
    verdict(rt, ok, what, ok ? "" : "a wrong byte");
    gpu_release(ds, 0), gpu_release(dr, 0);
    /* a ring of send-receives (a group of one has no peer: NCCL sends to no rank itself) */
    float out[3] = { (float)me, 2.0f * me, 3.0f * me }, in[3] = { (float)me, 2.0f * me, 3.0f * me };
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    float *dout = dev_of(out, sizeof out), *din = dev_of(out, sizeof out);
    ok = n == 1 || comm_group_sendrecv(g, dout, sizeof out, next, 1, din, sizeof in, prev, 1) == STATUS_OK;
    host_of(in, din, sizeof in);
    ok = ok && in[0] == (float)prev && in[2] == 3.0f * prev;
    snprintf(what, sizeof what, "nccl group %s: a ring of send-receives, exact", name);
    verdict(rt, ok, what, ok ? "" : "a wrong value");  /* every rank: check() is collective over the world */
    gpu_release(dout, 0), gpu_release(din, 0);
    free(w);
    comm_group_free(g);
}

static void run_groups(const runtime *rt)
{
    run_group_on(rt, rt->world, "world");
    run_group_on(rt, rt->node, "node");
    MPI_Comm half;
    MPI_Comm_split(rt->world, rt->rank % 2, rt->rank, &half);
    run_group_on(rt, half, "every other rank");
    MPI_Comm_free(&half);
}

int main(int argc, char **argv)
{
    runtime rt;
    mpi_test_start_gpus(&rt, &argc, &argv, cuda_device_count());
    int have = cuda_device_count() > 0;
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, rt.world);
    if (!have) {
        if (rt.rank == 0) printf("SKIP  test_nccl: no CUDA device visible to every rank; nothing was checked\n");
        runtime_free(&rt);
        return CHECK_SKIP;
    }
    comm_options o = { .backend = COMM_BACKEND_NCCL, .timeout_s = 60, .nccl_chunk_bytes = CHUNK * sizeof(float) };
    comm *c;
    status st = comm_init(&c, &rt, &o);
    if (st != STATUS_OK) runtime_exit(&rt, st);  /* init said why (e.g. two ranks of a node on one GPU) */
    if (rt.rank == 0) {
        printf("# test_nccl: %d ranks, %d nodes of %d\n# %s\n", rt.size, rt.nnodes, rt.local_size, comm_describe(c));
        fflush(stdout);
    }
    cuda_stream s;
    if (cuda_stream_create(&s)) gpu_die("stream", 1);
    cuda_stream_use(s);  /* uploads run on s; every op waits for them through comm_set_stream */
    if (comm_set_stream(c, s) != STATUS_OK) gpu_die("comm_set_stream", 1);
    check(&rt, comm_on_device(c) && comm_auto_choice(c, 1 << 20) == COMM_ALGO_HIER,
          "the nccl comm reduces device buffers and auto resolves to its hierarchical path", "");

    size_t L = (size_t)rt.local_size;
    run_case(&rt, c, 0, false, false, 0, "count 0 is a no-op");
    run_case(&rt, c, 1, false, false, 0, "sum of 1 float, exact");
    run_case(&rt, c, 7, false, true, 0, "sum of 7 floats (odd, blocking comm_allreduce), exact");
    run_case(&rt, c, 3 * L + 1, false, false, 0, "sum of 3L+1 floats (not a multiple of the node size), exact");
    run_case(&rt, c, CHUNK, false, false, 0, "sum of exactly one chunk, exact");
    run_case(&rt, c, 2 * CHUNK, false, false, 0, "sum of exactly two chunks, exact");
    run_case(&rt, c, MAX_COUNT, false, false, 0, "sum of 6 chunks with a remainder, exact");
    run_case(&rt, c, MAX_COUNT, false, true, 0, "the same again (events and staging reused), exact");

    /* x * (1/size) is exact for power-of-two sizes; otherwise each product rounds once
     * (half an ulp of 30/size) and the sum of `size` of them once per addition. */
    bool pow2 = (rt.size & (rt.size - 1)) == 0;
    double atol = pow2 ? 0.0 : 2.0 * rt.size * 32.0 * FLT_EPSILON;
    run_case(&rt, c, 7, true, false, atol, "average of 7 floats (scaled start)");
    run_case(&rt, c, MAX_COUNT, true, false, atol, "average of 6 chunks with a remainder (scaled start)");
    run_case(&rt, c, 2 * CHUNK + 3, false, false, 0, "a sum after averages (plain sum restored), exact");

    run_in_flight(&rt, c);
    run_buckets(&rt, c, false, 0, "bucket manager on a device buffer: buckets in order, 2 steps, exact sums");
    run_buckets(&rt, c, true, atol, "bucket manager with scale 1/world: averages on the device");
    run_refusals(&rt, c);
    run_groups(&rt);

    if (rt.size > 1) {
        comm_options od = o;
        od.timeout_s = DEADLINE_S;
        comm *cd;
        if ((st = comm_init(&cd, &rt, &od)) != STATUS_OK) runtime_exit(&rt, st);
        run_deadline(&rt, cd);
        comm_free(cd);  /* local frees only on the ranks that timed out */
    } else if (rt.rank == 0) {
        printf("# deadline: not tested with one rank (nobody to miss the allreduce)\n");
    }

    comm_free(c);
    cuda_stream_use(NULL);
    cuda_stream_destroy(s);
    int f = failures;
    if (rt.rank == 0) printf("test_nccl: %d ranks, %s\n", rt.size, f ? "FAILED" : "all checks passed");
    runtime_free(&rt);
    return f ? 1 : 0;
}
