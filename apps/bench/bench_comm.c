/* bench_comm — the allreduce sweep, in the manner of nccl-tests: warm-up, a timed
 * loop, a bit-exact correctness check outside the timed region, rows of
 * `size count type algo time algbw busbw #wrong`, non-zero exit on any wrong element.
 *
 * Fairness on a shared, noisy machine: every algorithm of a size runs in each of
 * `rounds` interleaved rounds, in an order rotated every round (so drift and
 * position effects hit all alike); a round's time is the
 * slowest rank's; the row shows the median round. The peer, `ompi`, is OpenMPI's
 * blocking MPI_Allreduce on the same communicator layout and buffer.
 *
 * Bus bandwidth: an allreduce moves 2(n-1)/n of the buffer through each rank's link
 * in a bandwidth-optimal algorithm, so busbw = algbw * 2(n-1)/n (nccl-tests'
 * PERFORMANCE.md), comparable across rank counts. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "bench.h"
#include "comm/ctl.h"

enum { ROW_OMPI = COMM_ALGO_COUNT, NROWKINDS };  /* row kinds: comm_algo values + the peer */

typedef struct bench_row {
    size_t bytes;          /* message size */
    size_t count;          /* elements */
    int kind;              /* comm_algo or ROW_OMPI */
    comm_algo picked;      /* for auto: what it resolved to */
    double us;             /* median time per call, slowest rank */
    size_t wrong;          /* wrong elements summed over ranks */
} bench_row;

static const char *kind_name(int kind)
{
    return kind == ROW_OMPI ? "ompi" : comm_algo_name((comm_algo)kind);
}

static reduce_dtype parse_dtype(const char *s)
{
    return !strcmp(s, "double") ? REDUCE_DTYPE_F64 : !strcmp(s, "int32") ? REDUCE_DTYPE_I32
         : !strcmp(s, "int64") ? REDUCE_DTYPE_I64 : REDUCE_DTYPE_F32;
}

static MPI_Datatype mpi_type(reduce_dtype dt)
{
    return dt == REDUCE_DTYPE_F64 ? MPI_DOUBLE : dt == REDUCE_DTYPE_I32 ? MPI_INT32_T
         : dt == REDUCE_DTYPE_I64 ? MPI_INT64_T : MPI_FLOAT;
}

static status run_once(runtime *rt, comm *c, int kind, void *buf, size_t count, reduce_dtype dt)
{
    if (kind == ROW_OMPI) {
        comm_mpi_allreduce_blocking(buf, (int)count, mpi_type(dt), MPI_SUM, rt->world);  /* the peer: no deadline, no polling */
        return STATUS_OK;
    }
    return comm_allreduce(c, buf, count, dt, REDUCE_OP_SUM, (comm_algo)kind);
}

/* Small integers: every partial sum is exact in any order, so the check is bit-exact. */
static double exact_input(int rank, size_t i)
{
    return (double)((int)((i * 5 + (size_t)rank * 7) % 17) - 8);
}

static status check_kind(runtime *rt, comm *c, comm_ctl ctl, int kind, void *buf, size_t count, reduce_dtype dt,
                         size_t *wrong)
{
    for (size_t i = 0; i < count; i++) reduce_set(buf, i, dt, exact_input(rt->rank, i));
    TRY(run_once(rt, c, kind, buf, count, dt));
    unsigned long long w = 0;
    for (size_t i = 0; i < count; i++) {
        double e = 0;
        for (int r = 0; r < rt->size; r++) e += exact_input(r, i);
        w += reduce_get(buf, i, dt) != e;
    }
    TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &w, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM));
    *wrong = (size_t)w;
    return STATUS_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times every kind at one size; fills rows[0..nkinds). */
static status bench_size(const config *cfg, runtime *rt, comm *c, const int *kinds, int nkinds, void *buf,
                         size_t bytes, reduce_dtype dt, bench_row *rows)
{
    size_t count = bytes / reduce_dtype_size(dt);
    int warmup = (int)config_int(cfg, "bench.warmup"), rounds = (int)config_int(cfg, "bench.rounds");
    int iters = (int)config_int(cfg, "bench.iters");
    comm_ctl ctl = comm_ctl_named(rt->world, config_float(cfg, "comm.timeout"), "bench world");  /* outside the timing */
    memset(buf, 0, bytes);
    for (int k = 0; k < nkinds; k++)
        for (int w = 0; w < warmup; w++) TRY(run_once(rt, c, kinds[k], buf, count, dt));
    if (iters == 0) {  /* enough iterations for about 0.1 s per round, agreed by all ranks */
        double t0 = MPI_Wtime();
        TRY(run_once(rt, c, kinds[0], buf, count, dt));
        double t = MPI_Wtime() - t0;
        TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX));
        iters = t > 0 ? (int)(0.1 / t) : 1000;
        iters = iters < 3 ? 3 : iters > 1000 ? 1000 : iters;
    }
    double *t = calloc((size_t)(nkinds * rounds), sizeof *t);
    CHECK(t, "out of memory for timings");
    for (int r = 0; r < rounds; r++)
        for (int kk = 0; kk < nkinds; kk++) {  /* rotate the order each round: no kind always runs first */
            int k = (kk + r) % nkinds;
            MPI_CHECK(MPI_Barrier(rt->world));
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) TRY(run_once(rt, c, kinds[k], buf, count, dt));
            t[k * rounds + r] = (MPI_Wtime() - t0) / iters;
        }
    TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, t, nkinds * rounds, MPI_DOUBLE, MPI_MAX));
    for (int k = 0; k < nkinds; k++) {
        qsort(t + k * rounds, (size_t)rounds, sizeof *t, cmp_double);
        rows[k] = (bench_row){ .bytes = bytes, .count = count, .kind = kinds[k],
                               .picked = kinds[k] == COMM_ALGO_AUTO ? comm_auto_choice(c, bytes) : (comm_algo)kinds[k],
                               .us = t[k * rounds + rounds / 2] * 1e6 };
        if (config_bool(cfg, "bench.check")) TRY(check_kind(rt, c, ctl, kinds[k], buf, count, dt, &rows[k].wrong));
    }
    free(t);
    return STATUS_OK;
}

static void print_row(const runtime *rt, const bench_row *row, double ompi_us, const char *type, bool csv)
{
    double algbw = (double)row->bytes / (row->us * 1e-6) / 1e9;
    double busbw = algbw * 2.0 * (rt->size - 1) / rt->size;
    char algo[32];
    if (row->kind == COMM_ALGO_AUTO) snprintf(algo, sizeof algo, "auto:%s", comm_algo_name(row->picked));
    else snprintf(algo, sizeof algo, "%s", kind_name(row->kind));
    double ratio = ompi_us > 0 ? row->us / ompi_us : 0;
    if (csv)
        printf("%zu,%zu,%s,%s,%.2f,%.4f,%.4f,%zu,%.3f\n", row->bytes, row->count, type, algo, row->us, algbw, busbw,
               row->wrong, ratio);
    else
        printf("%12zu %12zu %6s %10s %11.2f %10.3f %10.3f %7zu %8.3f\n", row->bytes, row->count, type, algo, row->us,
               algbw, busbw, row->wrong, ratio);
}

static json_t *rows_json(const runtime *rt, const comm *c, const bench_row *rows, int nrows, const char *type,
                         const json_t *prov)
{
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "provenance", json_deep_copy(prov));
    json_object_set_new(root, "world_size", json_integer(rt->size));
    json_object_set_new(root, "nnodes", json_integer(rt->nnodes));
    json_object_set_new(root, "backend", json_string(comm_describe(c)));
    json_object_set_new(root, "hier_exchange", json_string(comm_hier_exchange(c)));
    for (int i = 0; i < nrows; i++) {
        double algbw = (double)rows[i].bytes / (rows[i].us * 1e-6) / 1e9;
        json_t *o = json_object();
        json_object_set_new(o, "bytes", json_integer((json_int_t)rows[i].bytes));
        json_object_set_new(o, "count", json_integer((json_int_t)rows[i].count));
        json_object_set_new(o, "type", json_string(type));
        json_object_set_new(o, "algo", json_string(kind_name(rows[i].kind)));
        json_object_set_new(o, "picked", json_string(rows[i].kind == ROW_OMPI ? "ompi" : comm_algo_name(rows[i].picked)));
        json_object_set_new(o, "time_us", json_real(rows[i].us));
        json_object_set_new(o, "algbw_GBps", json_real(algbw));
        json_object_set_new(o, "busbw_GBps", json_real(algbw * 2.0 * (rt->size - 1) / rt->size));
        json_object_set_new(o, "wrong", json_integer((json_int_t)rows[i].wrong));
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "rows", arr);
    return root;
}

static int json_fill(void *ctx, int fd)
{
    return json_dumpfd(ctx, fd, JSON_INDENT(1)) == 0 ? 0 : -1;
}

static status write_json(const char *path, const runtime *rt, const comm *c, const bench_row *rows, int nrows,
                         const char *type, const json_t *prov)
{
    json_t *root = rows_json(rt, c, rows, nrows, type, prov);
    if (path) {  /* checked by the output rule at the start; written whole or not at all */
        status st = path_write_atomic(path, "bench table", json_fill, root);
        json_decref(root);
        return st;
    }
    int rc = json_dumpf(root, stdout, JSON_INDENT(1));
    json_decref(root);
    putchar('\n');
    if (rc != 0) {
        log_error("cannot write stdout: %s", log_errno_str());
        return STATUS_IO;
    }
    return STATUS_OK;
}

status bench_comm_run(const config *cfg, runtime *rt, comm *c, const json_t *prov)
{
    const char *which = config_str(cfg, "bench.algo"), *type = config_str(cfg, "bench.dtype");
    reduce_dtype dt = parse_dtype(type);
    size_t esz = reduce_dtype_size(dt), lo = config_size(cfg, "bench.min_bytes"), hi = config_size(cfg, "bench.max_bytes");
    size_t factor = (size_t)config_int(cfg, "bench.factor");
    if (lo > hi) {
        log_error0("bench.min_bytes (%zu) is larger than bench.max_bytes (%zu)", lo, hi);
        return STATUS_INPUT;
    }
    /* the outputs, before anything is measured (every rank: the same file system) */
    const char *tune_in = config_str(cfg, "comm.tune_file");
    if (config_str(cfg, "bench.out")[0]) TRY(path_output_check(config_str(cfg, "bench.out"), "--out", &tune_in, 1));
    if (config_str(cfg, "bench.save_tune")[0])
        TRY(path_output_check(config_str(cfg, "bench.save_tune"), "--save-tune", &tune_in, 1));
    int kinds[NROWKINDS], nkinds = 0;
    comm_algo one;
    if (!strcmp(which, "all")) {
        static const int all[] = { ROW_OMPI, COMM_ALGO_MPI, COMM_ALGO_FLAT, COMM_ALGO_HIER, COMM_ALGO_RING, COMM_ALGO_AUTO };
        memcpy(kinds, all, sizeof all);
        nkinds = (int)(sizeof all / sizeof all[0]);
    } else if (!strcmp(which, "ompi")) {
        kinds[nkinds++] = ROW_OMPI;
    } else {
        comm_algo_parse(which, &one);
        kinds[nkinds++] = ROW_OMPI;  /* the peer always runs beside, for the ratio column */
        kinds[nkinds++] = one;
    }
    bool tune = config_str(cfg, "comm.tune_file")[0] == '\0';
    const char *format = config_str(cfg, "bench.format");
    bool csv = !strcmp(format, "csv"), json = !strcmp(format, "json");
    FILE *info = csv || json ? stderr : stdout;
    void *buf = calloc(hi / esz + 1, esz);
    int maxrows = 64 * NROWKINDS;
    bench_row *rows = calloc((size_t)maxrows, sizeof *rows);
    if (!buf || !rows) {
        log_error("cannot allocate %zu bytes for the benchmark buffer", hi);
        free(buf); free(rows);
        return STATUS_NOMEM;
    }
    if (rt->rank == 0) {
        fprintf(info, "# nebula-bench comm: %d ranks on %d %snodes, %s, hier exchange %s\n", rt->size, rt->nnodes,
                rt->ranks_per_node ? "virtual " : "", comm_describe(c), comm_hier_exchange(c));
        fprintf(info, "# median of %d rotated rounds; time = slowest rank; busbw = algbw * 2(n-1)/n; "
                "vs_ompi = time / MPI_Allreduce time\n", (int)config_int(cfg, "bench.rounds"));
        if (csv) {
            (void)provenance_write_csv_line(stdout, prov);  /* stdout failing fails the rows too */
            printf("size,count,type,algo,time_us,algbw_GBps,busbw_GBps,wrong,vs_ompi\n");
        } else if (!json) printf("#%11s %12s %6s %10s %11s %10s %10s %7s %8s\n", "size", "count", "type", "algo", "time_us",
                    "algbw_GB/s", "busbw_GB/s", "#wrong", "vs_ompi");
    }
    status st = STATUS_OK;
    int nrows = 0;
    size_t total_wrong = 0;
    for (size_t bytes = lo; bytes <= hi && st == STATUS_OK && nrows + nkinds <= maxrows; bytes *= factor) {
        size_t b = bytes / esz * esz;
        if (b == 0) continue;
        if (tune) st = comm_tune(c, &b, 1, (int)config_int(cfg, "bench.rounds"));
        if (st == STATUS_OK) st = bench_size(cfg, rt, c, kinds, nkinds, buf, b, dt, rows + nrows);
        if (st != STATUS_OK) break;
        for (int k = 0; k < nkinds; k++) {
            total_wrong += rows[nrows + k].wrong;
            if (rt->rank == 0 && !json) print_row(rt, &rows[nrows + k], rows[nrows].us, type, csv);
        }
        if (rt->rank == 0) fflush(stdout);
        nrows += nkinds;
    }
    if (st == STATUS_OK && rt->rank == 0 && json) st = write_json(NULL, rt, c, rows, nrows, type, prov);
    if (st == STATUS_OK && rt->rank == 0 && config_str(cfg, "bench.out")[0])
        st = write_json(config_str(cfg, "bench.out"), rt, c, rows, nrows, type, prov);
    if (st == STATUS_OK && config_str(cfg, "bench.save_tune")[0])
        st = comm_tune_save_with(c, config_str(cfg, "bench.save_tune"), prov);
    if (st == STATUS_OK && total_wrong) {
        log_error0("%zu wrong elements (see the #wrong column)", total_wrong);
        st = STATUS_CORRUPT;
    }
    if (rt->rank == 0 && st == STATUS_OK) fprintf(info, "# 0 wrong elements in %d rows\n", nrows);
    free(buf);
    free(rows);
    return st;
}
