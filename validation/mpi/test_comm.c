/* test_comm — every allreduce algorithm against the exact answer, at 1-4 ranks; the
 * phases each records (comm_op_phases); the control plane's deadline and clock offsets;
 * the vector ops of a comm_group (allreduce, reduce-scatter of unequal blocks,
 * all-gather with gaps and in place, all-to-all, a ring of send-receives) on the world,
 * the node and a split group, exact, and their deadline.
 *
 * Inputs are small integers (also in float), so every partial sum is exactly
 * representable and any reduction order gives the same bits: the check is exact.
 * Usage: test_comm [--ranks-per-node N] [--timeout-test ALGO]
 *   --timeout-test: the last rank sleeps 60 s, far past the 1 s deadline; the others
 *   must report it by name, free the comm without waiting for it, and end the job
 *   with exit code 1 long before it wakes (checked by the caller). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/ctl.h"
#include "base/runtime.h"

static int failures;

static void check(const runtime *rt, bool ok, const char *what)
{
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, rt->world);
    if (rt->rank == 0) printf("%s - %s\n", all_ok ? "ok" : "FAIL", what);
    if (!all_ok) failures++;
}

static double input(int rank, size_t i)
{
    return (double)((int)((i * 7 + (size_t)rank * 3) % 23) - 11);
}

static double expect(int size, size_t i, reduce_op op)
{
    double acc = input(0, i);
    for (int r = 1; r < size; r++) {
        double v = input(r, i);
        acc = op == REDUCE_OP_SUM ? acc + v : op == REDUCE_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}

static void fill(void *buf, size_t n, reduce_dtype dt, int rank)
{
    for (size_t i = 0; i < n; i++) reduce_set(buf, i, dt, input(rank, i));
}

static size_t count_wrong(const void *buf, size_t n, reduce_dtype dt, int size, reduce_op op)
{
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        wrong += reduce_get(buf, i, dt) != expect(size, i, op);
    }
    return wrong;
}

static void test_blocking(runtime *rt, comm *c)
{
    static const size_t counts[] = { 1, 2, 3, 5, 8, 63, 1000, 4097, 262147 };
    static const char *dt_names[] = { "f32", "f64", "i32", "i64" };
    static const char *op_names[] = { "sum", "max", "min" };
    void *buf = malloc(262147 * sizeof(double));
    for (int a = COMM_ALGO_AUTO; a < COMM_ALGO_COUNT; a++)
        for (int dt = 0; dt < 4; dt++)
            for (int op = 0; op < 3; op++) {
                size_t wrong = 0;
                status st = STATUS_OK;
                for (size_t k = 0; k < sizeof counts / sizeof counts[0] && st == STATUS_OK; k++) {
                    fill(buf, counts[k], (reduce_dtype)dt, rt->rank);
                    st = comm_allreduce(c, buf, counts[k], (reduce_dtype)dt, (reduce_op)op, (comm_algo)a);
                    wrong += count_wrong(buf, counts[k], (reduce_dtype)dt, rt->size, (reduce_op)op);
                }
                char what[128];
                snprintf(what, sizeof what, "%s allreduce %s %s exact at 9 sizes", comm_algo_name((comm_algo)a),
                         dt_names[dt], op_names[op]);
                check(rt, st == STATUS_OK && wrong == 0, what);
            }
    free(buf);
}

/* Many ops in flight at once, of mixed algorithms, waited in reverse order:
 * the phase-ordering rules must keep every rank's collectives matched. */
static void test_concurrent(runtime *rt, comm *c)
{
    enum { NOPS = 12, N = 5003 };
    float *bufs = malloc(sizeof(float) * NOPS * N);
    comm_op ops[NOPS];
    memset(ops, 0, sizeof ops);
    status st = STATUS_OK;
    for (int k = 0; k < NOPS && st == STATUS_OK; k++) {
        fill(bufs + k * N, N, REDUCE_DTYPE_F32, rt->rank);
        comm_algo a = (comm_algo)(COMM_ALGO_MPI + (k + rt->rank * 0) % 3);
        st = comm_allreduce_start(c, &ops[k], bufs + k * N, N - (size_t)k, REDUCE_DTYPE_F32, REDUCE_OP_SUM, a);
    }
    for (int k = NOPS - 1; k >= 0 && st == STATUS_OK; k--) st = comm_wait(c, &ops[k]);
    size_t wrong = 0;
    for (int k = 0; k < NOPS; k++) {
        wrong += count_wrong(bufs + k * N, N - (size_t)k, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM);
        comm_op_free(&ops[k]);
    }
    check(rt, st == STATUS_OK && wrong == 0, "12 concurrent mixed-algorithm ops waited in reverse order exact");
    free(bufs);
}

/* Larger than one hier pipeline chunk (4 MiB of shared memory per rank): the
 * chunking, the alternating result buffers and the ring/Rabenseifner paths. */
static void test_large(runtime *rt, comm *c)
{
    const size_t n = (10u << 20) / sizeof(float) + 7;
    float *buf = malloc(n * sizeof(float));
    for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++) {
        fill(buf, n, REDUCE_DTYPE_F32, rt->rank);
        status st = comm_allreduce(c, buf, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM, (comm_algo)a);
        size_t wrong = count_wrong(buf, n, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM);
        char what[128];
        snprintf(what, sizeof what, "%s allreduce of 10 MiB (3 pipeline chunks) exact", comm_algo_name((comm_algo)a));
        check(rt, st == STATUS_OK && wrong == 0, what);
    }
    /* Two multi-chunk hier ops in flight at once share the node segment in turn. */
    float *buf2 = malloc(n * sizeof(float));
    comm_op o1 = { 0 }, o2 = { 0 };
    fill(buf, n, REDUCE_DTYPE_F32, rt->rank);
    fill(buf2, n, REDUCE_DTYPE_F32, rt->rank);
    status st = comm_allreduce_start(c, &o1, buf, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_HIER);
    if (st == STATUS_OK) st = comm_allreduce_start(c, &o2, buf2, n - 3, REDUCE_DTYPE_F32, REDUCE_OP_MAX, COMM_ALGO_HIER);
    if (st == STATUS_OK) st = comm_wait(c, &o2);
    if (st == STATUS_OK) st = comm_wait(c, &o1);
    size_t wrong = count_wrong(buf, n, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM) +
                   count_wrong(buf2, n - 3, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_MAX);
    check(rt, st == STATUS_OK && wrong == 0, "two overlapping multi-chunk hier ops exact");
    comm_op_free(&o1);
    comm_op_free(&o2);
    free(buf2);
    free(buf);
}

/* NaN, NaN payloads and signed zeros: every rank must hold the same bits after the
 * allreduce (a found-inf flag or a norm that differs across ranks makes ranks take
 * different branches). Checked by gathering every rank's result. */
static void test_same_bits(runtime *rt, comm *c)
{
    enum { N = 8 };
    static const char *op_names[] = { "sum", "max", "min" };
    for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++)
        for (int op = 0; op < 3; op++) {
            float x[N];
            for (int i = 0; i < N; i++) {
                int k = (i + rt->rank) % 4;
                x[i] = k == 0 ? NAN : k == 1 ? -NAN : k == 2 ? 0.0f : -0.0f;
                if (i == 7) x[i] = (float)rt->rank;
            }
            status st = comm_allreduce(c, x, N, REDUCE_DTYPE_F32, (reduce_op)op, (comm_algo)a);
            float *all = malloc(sizeof x * (size_t)rt->size);
            MPI_Allgather(x, (int)sizeof x, MPI_BYTE, all, (int)sizeof x, MPI_BYTE, rt->world);
            bool same = true;
            for (int r = 1; r < rt->size; r++) same = same && memcmp(all, all + r * N, sizeof x) == 0;
            free(all);
            char what[128];
            snprintf(what, sizeof what, "%s %s with NaN and signed zeros: identical bits on every rank",
                     comm_algo_name((comm_algo)a), op_names[op]);
            check(rt, st == STATUS_OK && same, what);
        }
}

/* FNV-1a of the bytes, equal on every rank iff (almost surely) the bits are. */
static bool same_on_every_rank(const runtime *rt, const void *buf, size_t bytes)
{
    uint64_t h = 1469598103934665603ull, lo, hi;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ull;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, rt->world);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, rt->world);
    return lo == hi;
}

/* NaN with a payload that names the rank, at every fifth element: the result's
 * payload shows which operand came first, so two exchanges agree bit for bit only
 * if they reduce in the same order. */
static void fill_nan(void *buf, size_t n, reduce_dtype dt, int rank)
{
    fill(buf, n, dt, rank);
    for (size_t i = (size_t)rank % 5; i < n; i += 5) {
        if (dt == REDUCE_DTYPE_F32) {
            uint32_t bits = 0x7fc00000u | (uint32_t)(rank + 1);
            memcpy((float *)buf + i, &bits, 4);
        } else {
            uint64_t bits = 0x7ff8000000000000ull | (uint64_t)(rank + 1);
            memcpy((double *)buf + i, &bits, 8);
        }
    }
}

/* hier's two node exchanges: cma (peers' buffers read in place, where the kernel
 * permits it) and copy (through node shared memory, forced by
 * comm_options.hier_copy), at every dtype and op, at odd counts below, at and past
 * the 1 MiB reduction piece and the 4 MiB chunk of multi-node jobs: both exact, and
 * bit-identical to each other with NaN payloads (the same reduction order). */
static void test_hier_exchanges(runtime *rt, comm *c)
{
    static const size_t counts[] = { 1, 7, 4097, 131071, 262147, 786433, 1310719 };
    enum { NC = sizeof counts / sizeof counts[0], NMAX = 1310719 };
    static const char *dt_names[] = { "f32", "f64", "i32", "i64" };
    static const char *op_names[] = { "sum", "max", "min" };
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = 60, .hier_copy = true };
    comm *cc = NULL;
    status st = comm_init(&cc, rt, &opt);
    check(rt, st == STATUS_OK && strcmp(comm_hier_exchange(cc), "cma") != 0, "hier_copy forces the copy exchange");
    if (st != STATUS_OK) return;
    if (rt->rank == 0) printf("# hier exchange: %s (fallback: %s)\n", comm_hier_exchange(c), comm_hier_exchange(cc));
    void *a = malloc(NMAX * sizeof(double)), *b = malloc(NMAX * sizeof(double));
    for (int dt = 0; dt < 4; dt++)
        for (int op = 0; op < 3; op++) {
            size_t wrong = 0, differ = 0;
            bool same = true;
            for (int k = 0; k < NC && st == STATUS_OK; k++) {
                size_t n = counts[k], bytes = n * reduce_dtype_size((reduce_dtype)dt);
                for (int nan = 0; nan < (dt < 2 ? 2 : 1) && st == STATUS_OK; nan++) {
                    if (nan) fill_nan(a, n, (reduce_dtype)dt, rt->rank);
                    else fill(a, n, (reduce_dtype)dt, rt->rank);
                    memcpy(b, a, bytes);
                    st = comm_allreduce(c, a, n, (reduce_dtype)dt, (reduce_op)op, COMM_ALGO_HIER);
                    if (st == STATUS_OK) st = comm_allreduce(cc, b, n, (reduce_dtype)dt, (reduce_op)op, COMM_ALGO_HIER);
                    if (!nan) wrong += count_wrong(a, n, (reduce_dtype)dt, rt->size, (reduce_op)op) +
                                       count_wrong(b, n, (reduce_dtype)dt, rt->size, (reduce_op)op);
                    differ += memcmp(a, b, bytes) != 0;
                    same = same_on_every_rank(rt, a, bytes) && same;
                }
            }
            char what[160];
            snprintf(what, sizeof what, "hier %s %s: both exchanges exact at %d sizes, bit-identical with NaN payloads",
                     dt_names[dt], op_names[op], NC);
            check(rt, st == STATUS_OK && wrong == 0 && differ == 0 && same, what);
        }
    free(a);
    free(b);
    comm_free(cc);
}

/* comm_allreduce's blocking fast path (OpenMPI's MPI_Allreduce for small mpi
 * messages; taken without a deadline, as here, or under the runtime's watchdog):
 * exact at every dtype and op, also with ops of every algorithm in flight, which it
 * completes first. Rank 0 waits for those ops before its blocking call and the others
 * after theirs: a rank inside MPI_Allreduce must not be needed by a peer's wait. */
static void test_blocking_fast_path(runtime *rt)
{
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = 0 };
    comm *c;
    status st = comm_init(&c, rt, &opt);
    if (st != STATUS_OK) { check(rt, false, "comm without a deadline"); return; }
    enum { N = 4099, NOPS = 4 };
    double small[N];
    size_t wrong = 0;
    for (int dt = 0; dt < 4 && st == STATUS_OK; dt++)
        for (int op = 0; op < 3 && st == STATUS_OK; op++) {
            fill(small, 1000, (reduce_dtype)dt, rt->rank);
            st = comm_allreduce(c, small, 1000, (reduce_dtype)dt, (reduce_op)op, COMM_ALGO_MPI);
            wrong += count_wrong(small, 1000, (reduce_dtype)dt, rt->size, (reduce_op)op);
        }
    float *bufs = malloc(sizeof(float) * NOPS * N);
    comm_op ops[NOPS];
    memset(ops, 0, sizeof ops);
    for (int k = 0; k < NOPS && st == STATUS_OK; k++) {
        fill(bufs + k * N, N, REDUCE_DTYPE_F32, rt->rank);
        st = comm_allreduce_start(c, &ops[k], bufs + k * N, N, REDUCE_DTYPE_F32, REDUCE_OP_SUM,
                                  (comm_algo)(COMM_ALGO_MPI + k % (COMM_ALGO_COUNT - COMM_ALGO_MPI)));
    }
    if (rt->rank == 0)
        for (int k = 0; k < NOPS && st == STATUS_OK; k++) st = comm_wait(c, &ops[k]);
    fill(small, 7, REDUCE_DTYPE_F64, rt->rank);
    if (st == STATUS_OK) st = comm_allreduce(c, small, 7, REDUCE_DTYPE_F64, REDUCE_OP_SUM, COMM_ALGO_AUTO);
    wrong += count_wrong(small, 7, REDUCE_DTYPE_F64, rt->size, REDUCE_OP_SUM);
    for (int k = 0; k < NOPS && st == STATUS_OK; k++) st = comm_wait(c, &ops[k]);
    for (int k = 0; k < NOPS; k++) {
        wrong += count_wrong(bufs + k * N, N, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM);
        comm_op_free(&ops[k]);
    }
    check(rt, st == STATUS_OK && wrong == 0,
          "blocking fast path exact at every dtype and op, and with 4 ops in flight waited in either order");
    free(bufs);
    comm_free(c);
}

/* Thousands of ops in flight at once (a model with many small buckets). */
static void test_many_inflight(runtime *rt, comm *c)
{
    enum { NOPS = 3000, N = 3 };
    comm_op *ops = calloc(NOPS, sizeof *ops);
    float *bufs = malloc(sizeof(float) * NOPS * N);
    status st = STATUS_OK;
    for (int k = 0; k < NOPS && st == STATUS_OK; k++) {
        fill(bufs + k * N, N, REDUCE_DTYPE_F32, rt->rank);
        st = comm_allreduce_start(c, &ops[k], bufs + k * N, N, REDUCE_DTYPE_F32, REDUCE_OP_SUM,
                                  (comm_algo)(COMM_ALGO_MPI + k % 3));
    }
    for (int k = NOPS - 1; k >= 0 && st == STATUS_OK; k--) st = comm_wait(c, &ops[k]);
    size_t wrong = 0;
    for (int k = 0; k < NOPS; k++) {
        wrong += count_wrong(bufs + k * N, N, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM);
        comm_op_free(&ops[k]);
    }
    check(rt, st == STATUS_OK && wrong == 0, "3000 ops in flight at once, waited in reverse order, exact");
    free(ops);
    free(bufs);
}

/* Messages split into segments (here of 4000 bytes, the default is 1 GiB): mpi and
 * flat run each segment in turn, overlapping ops keep their segments in order. */
static void test_segments(runtime *rt)
{
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = 60, .segment_bytes = 4000 };
    comm *c;
    status st = comm_init(&c, rt, &opt);
    enum { N = 50001 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    size_t wrong = 0;
    for (int alg = COMM_ALGO_MPI; alg <= COMM_ALGO_FLAT && st == STATUS_OK; alg++) {
        comm_op o1 = { 0 }, o2 = { 0 };
        fill(a, N, REDUCE_DTYPE_F32, rt->rank);
        fill(b, N, REDUCE_DTYPE_F32, rt->rank);
        st = comm_allreduce_start(c, &o1, a, N, REDUCE_DTYPE_F32, REDUCE_OP_SUM, (comm_algo)alg);
        if (st == STATUS_OK) st = comm_allreduce_start(c, &o2, b, N - 11, REDUCE_DTYPE_F32, REDUCE_OP_MAX, (comm_algo)alg);
        if (st == STATUS_OK) st = comm_wait(c, &o2);
        if (st == STATUS_OK) st = comm_wait(c, &o1);
        wrong += count_wrong(a, N, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_SUM) +
                 count_wrong(b, N - 11, REDUCE_DTYPE_F32, rt->size, REDUCE_OP_MAX);
        comm_op_free(&o1);
        comm_op_free(&o2);
    }
    check(rt, st == STATUS_OK && wrong == 0, "mpi and flat in 4000-byte segments, two ops overlapping, exact");
    comm_free(c);
    free(a);
    free(b);
}

static void test_tune(runtime *rt, comm *c)
{
    size_t sizes[] = { 64, 65536 };
    status st = comm_tune(c, sizes, 2, 3);
    comm_algo a = comm_auto_choice(c, 64), b = comm_auto_choice(c, 60000);
    int agree[2] = { (int)a, (int)b }, mx[2];
    MPI_Allreduce(agree, mx, 2, MPI_INT, MPI_MAX, rt->world);
    check(rt, st == STATUS_OK && mx[0] == (int)a && mx[1] == (int)b && a != COMM_ALGO_AUTO,
          "tuning picks the same algorithm on every rank");
    char path[256];
    const char *tmpd = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/nebula-tune-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (rt->rank == 0) { int fd = mkstemp(path); close(fd); }
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, rt->world);
    st = comm_tune_save(c, path);
    MPI_Barrier(rt->world);
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = 30, .tune_file = path };
    comm *c2 = NULL;
    status st2 = comm_init(&c2, rt, &opt);
    comm_algo as = comm_auto_choice_start(c, 64), bs = comm_auto_choice_start(c, 60000);
    check(rt, st == STATUS_OK && st2 == STATUS_OK && comm_auto_choice(c2, 64) == a && comm_auto_choice(c2, 60000) == b &&
              comm_auto_choice_start(c2, 64) == as && comm_auto_choice_start(c2, 60000) == bs,
          "tuning table saved and loaded gives the same choices, blocking and started");
    comm_free(c2);
    MPI_Barrier(rt->world);

    /* Two choices per size: a started op follows algo_start, comm_allreduce algo; a
     * version-1 table (one choice) serves both. */
    if (rt->rank == 0) {
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"format\": \"nebula-comm-tune\", \"version\": 2, \"world_size\": %d, \"nnodes\": %d, "
                   "\"entries\": [{\"bytes\": 4096, \"algo\": \"mpi\", \"algo_start\": \"ring\"},"
                   " {\"bytes\": 1048576, \"algo\": \"flat\"}]}\n", rt->size, rt->nnodes);
        fclose(f);
    }
    MPI_Barrier(rt->world);
    st2 = comm_init(&c2, rt, &opt);
    float x[1024];
    for (int i = 0; i < 1024; i++) x[i] = (float)(rt->rank + i);
    comm_op o = { 0 };
    status st3 = st2 == STATUS_OK ? comm_allreduce_start(c2, &o, x, 1024, REDUCE_DTYPE_F32, REDUCE_OP_SUM,
                                                         COMM_ALGO_AUTO) : st2;
    comm_algo started = o.algo;
    if (st3 == STATUS_OK) st3 = comm_wait(c2, &o);
    int wrong = 0;
    for (int i = 0; i < 1024; i++) wrong += x[i] != (float)(rt->size * i + rt->size * (rt->size - 1) / 2);
    bool ok = st2 == STATUS_OK && st3 == STATUS_OK && wrong == 0;
    if (rt->size > 1)
        ok = ok && started == COMM_ALGO_RING && comm_auto_choice(c2, 4096) == COMM_ALGO_MPI &&
             comm_auto_choice_start(c2, 4096) == COMM_ALGO_RING && comm_auto_choice(c2, 1 << 20) == COMM_ALGO_FLAT &&
             comm_auto_choice_start(c2, 1 << 20) == COMM_ALGO_FLAT;
    check(rt, ok, "a started op takes the table's algo_start (ring), comm_allreduce its algo (mpi); a row without "
                  "algo_start serves both; the sum is exact");
    comm_op_free(&o);
    comm_free(c2);
    MPI_Barrier(rt->world);
    if (rt->rank == 0) unlink(path);
}

/* ctl's deadline: the last rank stays out of an allreduce until the others have
 * timed out (it waits in a barrier they enter only after), so every other rank gets
 * STATUS_TIMEOUT in about the deadline whatever the machine's load; then it joins the
 * allreduce the others left posted (MPI completes it during the barrier that follows),
 * so the job ends cleanly. On a duplicate communicator: the posted request never
 * mixes with later collectives. */
static void test_ctl_deadline(runtime *rt)
{
    if (rt->size < 2) return;
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(rt->world, &dup));
    int x = 1, sum = 0;
    bool late = rt->rank == rt->size - 1, ok = true;
    char what[160] = "ctl: a missing rank makes the others' allreduce return STATUS_TIMEOUT";
    if (!late) {
        double t0 = MPI_Wtime();
        status st = comm_ctl_allreduce(comm_ctl_named(dup, 0.3, "test"), &x, &sum, 1, MPI_INT, MPI_SUM);
        double t = MPI_Wtime() - t0;
        ok = st == STATUS_TIMEOUT && t >= 0.3;
        snprintf(what + strlen(what), sizeof what - strlen(what), " (%s after %.2f s)", status_str(st), t);
    }
    MPI_CHECK(MPI_Barrier(rt->world));
    if (late) ok = comm_ctl_allreduce(comm_ctl_make(dup, 0), &x, &sum, 1, MPI_INT, MPI_SUM) == STATUS_OK &&
                   sum == rt->size;
    MPI_CHECK(MPI_Barrier(rt->world));
    check(rt, ok, what);
}

/* comm_op_phases: a one-phase algorithm records one flat phase; hier records its three
 * phases in order per pipeline chunk (the inter-node one with several nodes only), or one
 * flat phase for its single-node small variant; every phase inside the op's life, in order. */
static void test_phases(runtime *rt, comm *c)
{
    static const comm_algo algos[] = { COMM_ALGO_MPI, COMM_ALGO_FLAT, COMM_ALGO_RING, COMM_ALGO_HIER };
    const size_t sizes[] = { 1000, 2621440 };  /* 4 KB; 10 MB: three 4 MiB chunks of hier */
    float *buf = malloc(sizes[1] * sizeof *buf);
    CHECK(buf, "out of memory");
    for (int a = 0; a < 4; a++)
        for (int k = 0; k < 2; k++) {
            comm_op o = { 0 };
            fill(buf, sizes[k], REDUCE_DTYPE_F32, rt->rank);
            status st = comm_allreduce_start(c, &o, buf, sizes[k], REDUCE_DTYPE_F32, REDUCE_OP_SUM, algos[a]);
            if (st == STATUS_OK) st = comm_wait(c, &o);
            double end = MPI_Wtime();
            int n = 0, lost = 0;
            const comm_phase *ph = comm_op_phases(&o, &n, &lost);
            bool ok = st == STATUS_OK && n >= 1 && lost == 0 && count_wrong(buf, sizes[k], REDUCE_DTYPE_F32, rt->size,
                                                                           REDUCE_OP_SUM) == 0;
            double at = o.t_start;
            int rs = 0;
            bool one = o.algo != COMM_ALGO_HIER || (rt->nnodes == 1 && rt->local_size > 1 && sizes[k] * 4 <= 8192);
            for (int i = 0; i < n && ok; i++) {
                ok = ph[i].t0 >= at && ph[i].t1 >= ph[i].t0 && ph[i].t1 <= end;
                at = ph[i].t1;
                comm_phase_kind want = COMM_PHASE_FLAT;
                if (!one) {  /* rs, (inter,) ag per chunk */
                    int cyc = rt->nnodes > 1 ? 3 : 2, j = i % cyc;
                    want = j == 0 ? COMM_PHASE_INTRA_REDUCE_SCATTER : j == cyc - 1 ? COMM_PHASE_INTRA_ALLGATHER
                                                                                  : COMM_PHASE_INTER_ALLREDUCE;
                    ok = ok && n % cyc == 0;
                }
                ok = ok && ph[i].kind == want;
                rs += ph[i].kind == COMM_PHASE_INTRA_REDUCE_SCATTER;
            }
            if (one) ok = ok && n == 1;
            /* several nodes cut a 10 MB message into chunks; one node reading in place (cma) does not */
            if (!one && k == 1 && rt->nnodes > 1) ok = ok && rs >= 2;
            char what[160];
            snprintf(what, sizeof what, "phases of %s (ran as %s) at %zu bytes: %d, in order, inside the op%s",
                     comm_algo_name(algos[a]), comm_algo_name(o.algo), sizes[k] * 4, n,
                     one ? ", one flat phase" : rt->nnodes > 1 ? ", reduce-scatter, inter, allgather per chunk"
                                                               : ", reduce-scatter, allgather per chunk");
            check(rt, ok, what);
            comm_op_free(&o);
        }
    free(buf);
}

/* comm_ctl_clock_offsets against clocks with known offsets: rank r's clock runs 10 s x r
 * ahead of CLOCK_MONOTONIC, which all ranks of one host share; the estimate is within half
 * the round trip of the truth. */
static double clock_skew_s;  /* this rank's known offset (a test: the clock argument has no context) */

static double skewed_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + clock_skew_s;
}

static void test_clock_offsets(runtime *rt)
{
    clock_skew_s = 10.0 * rt->rank;
    double *off = calloc((size_t)rt->size, sizeof *off), *rtt = calloc((size_t)rt->size, sizeof *rtt);
    double *at = calloc((size_t)rt->size, sizeof *at);
    CHECK(off && rtt && at, "out of memory");
    status st = comm_ctl_clock_offsets(comm_ctl_named(rt->world, 30, "world"), 0, 8, skewed_clock, off, rtt, at);
    bool ok = st == STATUS_OK;
    for (int k = 0; k < rt->size && rt->rank == 0 && ok; k++)
        ok = k == 0 ? off[0] == 0 && rtt[0] == 0
                    : rtt[k] > 0 && fabs(off[k] - 10.0 * k) <= rtt[k] / 2 + 1e-9 && at[k] > 0;
    char what[200];
    snprintf(what, sizeof what, "ctl: clock offsets by ping-pong within half the round trip of the truth "
             "(rank %d: %+.3f us off 10 s x rank, rtt %.1f us)", rt->size - 1,
             rt->rank == 0 ? (off[rt->size - 1] - 10.0 * (rt->size - 1)) * 1e6 : 0,
             rt->rank == 0 ? rtt[rt->size - 1] * 1e6 : 0);
    check(rt, ok, what);
    free(off), free(rtt), free(at);
}

/* Member r of a group: its world rank, for the expected values (the test's own MPI). */
static int *group_world_ranks(const runtime *rt, MPI_Comm g, int n)
{
    int *w = malloc(sizeof(int) * (size_t)n);
    CHECK(w, "oom");
    MPI_CHECK(MPI_Allgather(&rt->rank, 1, MPI_INT, w, 1, MPI_INT, g));
    return w;
}

/* The comm_group ops on `members` (host buffers, mpi backend), each against the exact answer. */
static void test_group_on(runtime *rt, MPI_Comm members, const char *name)
{
    comm_group_options o = { .backend = COMM_BACKEND_MPI, .timeout_s = 60, .name = name, .wd = NULL };
    comm_group *g;
    CHECK(comm_group_init(&g, members, &o) == STATUS_OK, "comm_group_init");
    int n = comm_group_size(g), me = comm_group_rank(g), *w = group_world_ranks(rt, members, n);
    char what[160];
    bool ok = true;
    /* allreduce: f32 sum, f64 sum, i32 max, in place */
    enum { N = 1001 };
    float f[N];
    double d[N];
    int32_t m[N];
    fill(f, N, REDUCE_DTYPE_F32, rt->rank), fill(d, N, REDUCE_DTYPE_F64, rt->rank), fill(m, N, REDUCE_DTYPE_I32, rt->rank);
    ok = ok && comm_group_allreduce(g, f, N, REDUCE_DTYPE_F32, REDUCE_OP_SUM) == STATUS_OK;
    ok = ok && comm_group_allreduce(g, d, N, REDUCE_DTYPE_F64, REDUCE_OP_SUM) == STATUS_OK;
    ok = ok && comm_group_allreduce(g, m, N, REDUCE_DTYPE_I32, REDUCE_OP_MAX) == STATUS_OK;
    for (size_t i = 0; i < N && ok; i++) {
        double sum = 0, mx = -1e9;
        for (int r = 0; r < n; r++) sum += input(w[r], i), mx = fmax(mx, input(w[r], i));
        ok = f[i] == (float)sum && d[i] == sum && m[i] == (int32_t)mx;
    }
    snprintf(what, sizeof what, "group %s (%d ranks): allreduce of f32, f64 sums and i32 max, exact", name, n);
    check(rt, ok, what);
    /* reduce-scatter of unequal blocks (member r's block: 3 + 2r floats) */
    int *counts = malloc(sizeof(int) * (size_t)n * 4), *displs = counts + n, *rc = counts + 2 * n, *rd = counts + 3 * n;
    size_t total = 0;
    for (int r = 0; r < n; r++) counts[r] = 3 + 2 * r, displs[r] = (int)total + r, total += (size_t)counts[r];
    float *send = malloc(sizeof(float) * (total + (size_t)n)), *recv = malloc(sizeof(float) * (total + (size_t)n));
    for (size_t i = 0; i < total; i++) send[i] = (float)input(rt->rank, i);
    size_t mine = 0;
    for (int r = 0; r < me; r++) mine += (size_t)counts[r];
    ok = comm_group_reduce_scatter(g, send, recv, counts, REDUCE_DTYPE_F32, REDUCE_OP_SUM) == STATUS_OK;
    for (int k = 0; k < counts[me] && ok; k++) {
        double sum = 0;
        for (int r = 0; r < n; r++) sum += input(w[r], mine + (size_t)k);
        ok = recv[k] == (float)sum;
    }
    snprintf(what, sizeof what, "group %s: reduce-scatter of blocks of 3 + 2r floats, exact", name);
    check(rt, ok, what);
    /* all-gather with a gap of one float after each block, from a send buffer and in place */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < total + (size_t)n; i++) recv[i] = -1;
        for (int k = 0; k < counts[me]; k++) send[k] = (float)(100 * me + k);
        if (pass == 1) memcpy(recv + displs[me], send, sizeof(float) * (size_t)counts[me]);
        ok = comm_group_allgatherv(g, pass ? NULL : send, recv, counts, displs, sizeof(float)) == STATUS_OK;
        for (int r = 0; r < n && ok; r++) {
            for (int k = 0; k < counts[r]; k++) ok = ok && recv[displs[r] + k] == (float)(100 * r + k);
            ok = ok && recv[displs[r] + counts[r]] == -1;  /* the gap is untouched */
        }
        snprintf(what, sizeof what, "group %s: allgatherv of unequal blocks with gaps%s, exact", name,
                 pass ? ", in place" : "");
        check(rt, ok, what);
    }
    /* all-to-all of bytes: (me + r) % 3 + 1 bytes each way */
    unsigned char sb[64], rb[64];
    int so = 0, ro = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = rc[r] = (me + r) % 3 + 1;
        displs[r] = so, rd[r] = ro;
        for (int k = 0; k < counts[r]; k++) sb[so + k] = (unsigned char)(me * 31 + r * 7 + k);
        so += counts[r], ro += rc[r];
    }
    ok = n <= 16 && comm_group_alltoallv(g, sb, counts, displs, rb, rc, rd, 1) == STATUS_OK;
    for (int r = 0; r < n && ok; r++)
        for (int k = 0; k < rc[r]; k++) ok = ok && rb[rd[r] + k] == (unsigned char)(r * 31 + me * 7 + k);
    snprintf(what, sizeof what, "group %s: alltoallv of bytes, exact", name);
    check(rt, ok, what);
    /* a ring of send-receives (the pipeline's exchange), tags apart each way */
    double out[3] = { me, 2.0 * me, 3.0 * me }, in[3] = { -1, -1, -1 };
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    uint64_t before = comm_group_bytes(g);
    ok = comm_group_sendrecv(g, out, sizeof out, next, 7, in, sizeof in, prev, 7) == STATUS_OK &&
         in[0] == prev && in[2] == 3.0 * prev;
    ok = ok && comm_group_sendrecv(g, NULL, 0, -1, 0, NULL, 0, -1, 0) == STATUS_OK;  /* an empty exchange */
    snprintf(what, sizeof what, "group %s: a ring of send-receives, exact; the bytes counted (%llu before it)", name,
             (unsigned long long)before);
    check(rt, ok && comm_group_bytes(g) == before + sizeof out && (n == 1 || before > 0), what);
    free(send), free(recv), free(counts), free(w);
    comm_group_free(g);
}

/* A member that does not arrive: the others' wait returns STATUS_TIMEOUT after the group's deadline. */
static void test_group_deadline(runtime *rt)
{
    if (rt->size < 2) return;
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(rt->world, &dup));
    comm_group_options o = { .backend = COMM_BACKEND_MPI, .timeout_s = 0.3, .name = "test group" };
    comm_group *g;
    CHECK(comm_group_init(&g, dup, &o) == STATUS_OK, "comm_group_init");
    float x[4] = { 1, 1, 1, 1 };
    bool late = rt->rank == rt->size - 1, ok = true;
    char what[160] = "group: a missing member makes the others' allreduce wait return STATUS_TIMEOUT";
    if (!late) {
        double t0 = MPI_Wtime();
        status st = comm_group_allreduce(g, x, 4, REDUCE_DTYPE_F32, REDUCE_OP_SUM);
        double t = MPI_Wtime() - t0;
        ok = st == STATUS_TIMEOUT && t >= 0.3;
        snprintf(what + strlen(what), sizeof what - strlen(what), " (%s after %.2f s)", status_str(st), t);
    }
    MPI_CHECK(MPI_Barrier(rt->world));
    if (late) {  /* joins late: completes the others' posted allreduce */
        comm_group_set_timeout(g, 0);
        ok = comm_group_allreduce(g, x, 4, REDUCE_DTYPE_F32, REDUCE_OP_SUM) == STATUS_OK && x[0] == rt->size;
    }
    MPI_CHECK(MPI_Barrier(rt->world));
    check(rt, ok, what);
    comm_group_free(g);
    MPI_CHECK(MPI_Comm_free(&dup));
}

static void test_groups(runtime *rt)
{
    test_group_on(rt, rt->world, "world");
    test_group_on(rt, rt->node, "node");
    MPI_Comm half;  /* a grid-like group: every other rank */
    MPI_CHECK(MPI_Comm_split(rt->world, rt->rank % 2, rt->rank, &half));
    test_group_on(rt, half, "every other rank");
    MPI_CHECK(MPI_Comm_free(&half));
    test_group_deadline(rt);
}

int main(int argc, char **argv)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    int timeout_test = 0;
    comm_algo timeout_algo = COMM_ALGO_MPI;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks-per-node") && i + 1 < argc) ro.ranks_per_node = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout-test") && i + 1 < argc && comm_algo_parse(argv[i + 1], &timeout_algo)) {
            timeout_test = 1;
            i++;
        }
    }
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    comm_options opt = { .algo = COMM_ALGO_AUTO, .timeout_s = timeout_test ? 1.0 : 60.0, .tune_file = NULL };
    comm *c;
    st = comm_init(&c, &rt, &opt);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.rank == 0)
        printf("# %d ranks, %d nodes (%d per node max), %s\n", rt.size, rt.nnodes, rt.max_local_size, comm_describe(c));
    if (timeout_test) {
        float x[1000] = { 0 };
        if (rt.rank == rt.size - 1) sleep(60);
        st = comm_allreduce(c, x, 1000, REDUCE_DTYPE_F32, REDUCE_OP_SUM, timeout_algo);
        comm_free(c);  /* must not wait for the sleeping rank */
        runtime_exit(&rt, st);
    }
    test_blocking(&rt, c);
    test_concurrent(&rt, c);
    test_large(&rt, c);
    test_same_bits(&rt, c);
    test_hier_exchanges(&rt, c);
    test_many_inflight(&rt, c);
    test_segments(&rt);
    test_blocking_fast_path(&rt);
    test_tune(&rt, c);
    test_ctl_deadline(&rt);
    test_phases(&rt, c);
    test_clock_offsets(&rt);
    test_groups(&rt);
    comm_free(c);
    int f = failures;
    runtime_free(&rt);
    return f ? 1 : 0;
}
