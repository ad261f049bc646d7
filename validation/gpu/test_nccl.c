/* test_nccl — comm_nccl's allreduce on GPUs against the exact answer, and its deadline.
 *
 * Inputs are small integers stored as floats, so every partial sum is exact in any
 * order and the check is bit-exact; averaging is exact too when the world size is a
 * power of two (x * 1/size is then exact), else within the rounding of that product.
 * Counts: 0, 1, odd, not a multiple of the node size, exactly one and two buckets,
 * several buckets with a remainder. The device buffer sits between canaries.
 *
 * Deadline (2+ ranks): the last rank skips the allreduce for 6 s; the others must
 * return STATUS_TIMEOUT within the 2 s deadline plus the probe's grace and name it.
 * It then joins late, which completes the inter-node MPI step the others left
 * posted, so every rank reaches MPI_Finalize with nothing pending and exits 0.
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
#include "comm/comm_nccl.h"

#define BUCKET 4096                       /* floats per bucket here: several buckets stay cheap */
#define MAX_COUNT (5 * BUCKET + 123)      /* the largest case: 6 buckets, a remainder */
#define DEADLINE_S 2.0                    /* the deadline test's wait */
#define SKIP_S 6.0                        /* the skipping rank's absence: deadline + grace (<= 2 s) + margin */

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

/* Allreduce of `count` floats after an event on the test's own stream; compares every
 * value with the expected sum (or average) within atol, and the canaries bit for bit. */
static void run_case(const runtime *rt, comm_nccl *c, cuda_stream s, cuda_event ready, size_t count, bool average,
                     double atol, const char *what)
{
    float *h = malloc((count + 2 * GPU_GUARD) * sizeof(float)), *ref = malloc((count ? count : 1) * sizeof(float));
    CHECK(h && ref, "out of memory");
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        for (int r = 0; r < rt->size; r++) sum += input(i, r);
        h[i] = input(i, rt->rank);
        ref[i] = (float)(average ? sum / rt->size : sum);
    }
    cuda_stream_use(s);
    float *d = gpu_guarded(h, count);  /* uploaded on s */
    int e = cuda_event_record(ready, s);
    if (e) gpu_die("cuda_event_record", e);
    status st = comm_nccl_allreduce_start(c, d, count, ready);
    if (st == STATUS_OK) st = comm_nccl_wait(c, 0);
    char why[256] = "";
    bool ok = st == STATUS_OK;
    if (!ok) snprintf(why, sizeof why, "allreduce returned %s", status_str(st));
    if (ok && (e = cuda_memcpy_d2h(h, d - GPU_GUARD, (count + 2 * GPU_GUARD) * sizeof(float)))) gpu_die("d2h", e);
    for (size_t i = 0; ok && i < 2 * GPU_GUARD; i++) {
        uint32_t bits;
        memcpy(&bits, &h[i < GPU_GUARD ? i : count + i], 4);
        if (bits != GPU_CANARY_BITS) {
            ok = false;
            snprintf(why, sizeof why, "canary float %zu %s the buffer overwritten", i % GPU_GUARD,
                     i < GPU_GUARD ? "before" : "after");
        }
    }
    for (size_t i = 0; ok && i < count; i++) {
        double got = h[GPU_GUARD + i];
        if (!(fabs(got - ref[i]) <= atol)) {
            ok = false;
            snprintf(why, sizeof why, "[%zu] = %.9g, expected %.9g", i, got, (double)ref[i]);
        }
    }
    verdict(rt, ok, what, why);
    gpu_release(d, 1);
    free(h);
    free(ref);
}

/* The last rank is absent for SKIP_S; the others time out and name it; it then joins. */
static void run_deadline(const runtime *rt, comm_nccl *c)
{
    const size_t n = 256;  /* small: every message of the abandoned MPI step goes eagerly */
    float *h = calloc(n, sizeof(float)), *d = gpu_upload(h, n * sizeof(float));
    int victim = rt->size - 1;
    char why[256] = "", name[16];
    snprintf(name, sizeof name, "%d", victim);
    bool ok = true;
    MPI_Barrier(rt->world);  /* start together: the deadline is measured from here */
    if (rt->rank == victim) {
        usleep((useconds_t)(SKIP_S * 1e6));
        /* Late: completes the MPI step the others posted (with one GPU per node the
         * NCCL part is local); its own verdict does not depend on the outcome. */
        if (comm_nccl_allreduce_start(c, d, n, NULL) == STATUS_OK) comm_nccl_wait(c, DEADLINE_S);
    } else {
        double t0 = MPI_Wtime();
        status st = comm_nccl_allreduce_start(c, d, n, NULL);
        if (st == STATUS_OK) st = comm_nccl_wait(c, DEADLINE_S);
        double dt = MPI_Wtime() - t0;
        const char *late = comm_nccl_late_ranks(c);
        ok = st == STATUS_TIMEOUT && dt < DEADLINE_S + 2.0 + 1.0 && !strcmp(late, name);
        snprintf(why, sizeof why, "returned %s after %.2f s naming \"%s\" (expected TIMEOUT within %.1f s naming \"%s\")",
                 status_str(st), dt, late, DEADLINE_S + 3.0, name);
    }
    verdict(rt, ok, "a rank that skips the allreduce is named, the others return within the deadline", why);
    cuda_free(d);
    free(h);
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
    comm_nccl_options o = { .max_count = MAX_COUNT, .bucket_bytes = BUCKET * sizeof(float), .timeout_s = 60 };
    comm_nccl_options oa = o;
    oa.average = true;
    comm_nccl *c, *ca;
    status st = comm_nccl_init(&c, &rt, &o);
    if (st == STATUS_OK) st = comm_nccl_init(&ca, &rt, &oa);
    if (st != STATUS_OK) runtime_exit(&rt, st);  /* init said why (e.g. two ranks of a node on one GPU) */
    if (rt.rank == 0) {
        printf("# test_nccl: %d ranks, %d nodes of %d\n# %s\n", rt.size, rt.nnodes, rt.local_size,
               comm_nccl_describe(c));
        fflush(stdout);
    }
    cuda_stream s;
    cuda_event ready;
    if (cuda_stream_create(&s) || cuda_event_create(&ready)) gpu_die("stream/event", 1);

    size_t L = (size_t)rt.local_size;
    run_case(&rt, c, s, ready, 0, false, 0, "count 0 is a no-op");
    run_case(&rt, c, s, ready, 1, false, 0, "sum of 1 float, exact");
    run_case(&rt, c, s, ready, 7, false, 0, "sum of 7 floats (odd), exact");
    run_case(&rt, c, s, ready, 3 * L + 1, false, 0, "sum of 3L+1 floats (not a multiple of the node size), exact");
    run_case(&rt, c, s, ready, BUCKET, false, 0, "sum of exactly one bucket, exact");
    run_case(&rt, c, s, ready, 2 * BUCKET, false, 0, "sum of exactly two buckets, exact");
    run_case(&rt, c, s, ready, MAX_COUNT, false, 0, "sum of 6 buckets with a remainder, exact");
    run_case(&rt, c, s, ready, MAX_COUNT, false, 0, "the same again (events and staging reused), exact");

    /* x * (1/size) is exact for power-of-two sizes; otherwise each product rounds once
     * (half an ulp of 30/size) and the sum of `size` of them once per addition. */
    bool pow2 = (rt.size & (rt.size - 1)) == 0;
    double atol = pow2 ? 0.0 : 2.0 * rt.size * 32.0 * FLT_EPSILON;
    run_case(&rt, ca, s, ready, 7, true, atol, "average of 7 floats");
    run_case(&rt, ca, s, ready, MAX_COUNT, true, atol, "average of 6 buckets with a remainder");

    if (rt.size > 1) run_deadline(&rt, c);
    else if (rt.rank == 0) printf("# deadline: not tested with one rank (nobody to miss the allreduce)\n");

    comm_nccl_free(ca);
    comm_nccl_free(c);  /* after the deadline test: local frees only on the ranks that timed out */
    cuda_stream_use(NULL);
    cuda_event_destroy(ready);
    cuda_stream_destroy(s);
    int f = failures;
    if (rt.rank == 0) printf("test_nccl: %d ranks, %s\n", rt.size, f ? "FAILED" : "all checks passed");
    runtime_free(&rt);
    return f ? 1 : 0;
}
