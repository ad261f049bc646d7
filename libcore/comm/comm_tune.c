/* comm_tune — the measured table behind COMM_ALGO_AUTO.
 *
 * Each size is timed for every algorithm in interleaved rounds (so drift on a
 * shared machine hits all algorithms alike); a round's time is the slowest rank's,
 * the table keeps the fastest round. Load from other jobs only ever adds time, so
 * the fastest round is the steadiest estimate of what an algorithm costs: with the
 * median, on a 2-core machine shared with another job, auto chose ring over hier
 * at 32-128 MiB in 2 of 3 runs although hier was 1.3x faster in the timed rows of
 * the same runs. Every rank computes the choice from the same all-reduced numbers,
 * so the choice is identical everywhere without a broadcast.
 * OpenMPI's own allreduce is kept unless a Nebula algorithm beats it by 5%: noise
 * must not flip a choice, and a tie is better served by the vendor's code.
 *
 * A timing-based choice can differ between runs and so change rounding; runs that
 * must be bit-identical load a saved table (comm.tune_file) or fix comm.algo. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"
#include "comm_impl.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void tune_insert(comm *c, const comm_tune_entry *e)
{
    int i = 0;
    while (i < c->ntune && c->tune[i].bytes < e->bytes) i++;
    if (i < c->ntune && c->tune[i].bytes == e->bytes) { c->tune[i] = *e; return; }
    if (c->ntune == COMM_TUNE_MAX) return;
    memmove(&c->tune[i + 1], &c->tune[i], (size_t)(c->ntune - i) * sizeof c->tune[0]);
    c->tune[i] = *e;
    c->ntune++;
}

/* A barrier with the comm deadline (MPI_Barrier could wait forever). */
static status tune_sync(comm *c)
{
    int32_t x = 0;
    return comm_allreduce(c, &x, 1, REDUCE_DTYPE_I32, REDUCE_OP_SUM, COMM_ALGO_MPI);
}

#define TUNE_MPI_START COMM_ALGO_COUNT  /* t's extra column: mpi started and waited */
#define TUNE_KINDS (COMM_ALGO_COUNT + 1)

/* One call of kind k: comm_allreduce with algorithm k, or (TUNE_MPI_START) an mpi op
 * started and waited, as the buckets run it. */
static status tune_call(comm *c, void *buf, size_t count, int k)
{
    if (k != TUNE_MPI_START) return comm_allreduce(c, buf, count, REDUCE_DTYPE_F32, REDUCE_OP_SUM, (comm_algo)k);
    TRY(comm_allreduce_start(c, &c->blocking, buf, count, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_MPI));
    return comm_wait(c, &c->blocking);
}

/* Times each algorithm over enough calls for about 2 ms per sample, in rounds whose
 * order rotates, so no algorithm always follows the barrier. mpi is timed twice, as
 * each entry point runs it: comm_allreduce makes OpenMPI's blocking MPI_Allreduce up
 * to 16 MiB (comm.c), a started op MPI_Iallreduce (libnbc: up to 3x slower at small
 * sizes), so each choice is made against the call it would make. t: [TUNE_KINDS][reps]. */
static status tune_one(comm *c, void *buf, size_t bytes, int reps, double *t)
{
    size_t count = bytes / sizeof(float);
    double t1 = 0;
    for (int w = 0; w < 3; w++)  /* warm-up: connections, scratch, first touch of pages */
        for (int a = COMM_ALGO_MPI; a < TUNE_KINDS; a++) {
            double t0 = MPI_Wtime();
            TRY(tune_call(c, buf, count, a));
            t1 = a == COMM_ALGO_MPI ? MPI_Wtime() - t0 : t1;
        }
    TRY(comm_allreduce(c, &t1, 1, REDUCE_DTYPE_F64, REDUCE_OP_MAX, COMM_ALGO_MPI));
    int iters = t1 > 0 ? (int)(2e-3 / t1) : 200;
    iters = iters < 1 ? 1 : iters > 200 ? 200 : iters;
    const int nkind = TUNE_KINDS - COMM_ALGO_MPI;
    for (int rep = 0; rep < reps; rep++) {
        for (int k = 0; k < nkind; k++) {
            int a = COMM_ALGO_MPI + (k + rep) % nkind;
            TRY(tune_sync(c));
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) TRY(tune_call(c, buf, count, a));
            t[a * reps + rep] = (MPI_Wtime() - t0) / iters;
        }
    }
    TRY(comm_allreduce(c, t, (size_t)(TUNE_KINDS * reps), REDUCE_DTYPE_F64, REDUCE_OP_MAX, COMM_ALGO_MPI));
    return STATUS_OK;
}

status comm_tune(comm *c, const size_t *bytes, int nsizes, int reps)
{
    CHECK(c->head == NULL, "comm_tune needs every rank idle: wait for the ops in flight first");
    if (comm_on_device(c)) {
        log_error0("comm_tune: the nccl backend has one algorithm (hier): nothing to tune");
        log_error0("HINT: tune with comm.backend=mpi");
        return STATUS_USAGE;
    }
    size_t max = 0;
    for (int i = 0; i < nsizes; i++) max = bytes[i] > max ? bytes[i] : max;
    float *buf = calloc(max / sizeof(float) + 1, sizeof(float));
    double *t = calloc((size_t)(TUNE_KINDS * reps), sizeof *t);
    status st = buf && t ? STATUS_OK : STATUS_NOMEM;
    for (int i = 0; i < nsizes && st == STATUS_OK; i++) {
        if (bytes[i] < sizeof(float)) continue;
        st = tune_one(c, buf, bytes[i], reps, t);
        if (st != STATUS_OK) break;
        comm_tune_entry e = { .bytes = bytes[i], .algo = COMM_ALGO_MPI, .algo_start = COMM_ALGO_MPI };
        for (int a = COMM_ALGO_MPI; a < TUNE_KINDS; a++)
            qsort(t + a * reps, (size_t)reps, sizeof *t, cmp_double);
        for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++)
            e.us[a] = t[a * reps] * 1e6;  /* the fastest round (the header says why) */
        e.us_mpi_start = t[TUNE_MPI_START * reps] * 1e6;
        for (int a = COMM_ALGO_FLAT; a < COMM_ALGO_COUNT; a++) {
            if (e.us[a] < 0.95 * e.us[COMM_ALGO_MPI] && e.us[a] < e.us[e.algo]) e.algo = (comm_algo)a;
            double best = e.algo_start == COMM_ALGO_MPI ? e.us_mpi_start : e.us[e.algo_start];
            if (e.us[a] < 0.95 * e.us_mpi_start && e.us[a] < best) e.algo_start = (comm_algo)a;
        }
        tune_insert(c, &e);
    }
    free(buf);
    free(t);
    return st;
}

status comm_tune_save(const comm *c, const char *path)
{
    return comm_tune_save_with(c, path, NULL);
}

static int tune_fill(void *ctx, int fd)
{
    return json_dumpfd(ctx, fd, JSON_INDENT(1)) == 0 ? 0 : -1;
}

status comm_tune_save_with(const comm *c, const char *path, const json_t *provenance)
{
    if (c->rt->rank != 0) return STATUS_OK;
    json_t *root = json_object(), *entries = json_array();
    json_object_set_new(root, "format", json_string("nebula-comm-tune"));
    if (provenance) json_object_set_new(root, "provenance", json_deep_copy(provenance));
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "world_size", json_integer(c->rt->size));
    json_object_set_new(root, "nnodes", json_integer(c->rt->nnodes));
    json_object_set_new(root, "max_local_size", json_integer(c->rt->max_local_size));
    json_object_set_new(root, "backend", json_string(c->be.describe));
    for (int i = 0; i < c->ntune; i++) {
        json_t *e = json_object(), *us = json_object();
        json_object_set_new(e, "bytes", json_integer((json_int_t)c->tune[i].bytes));
        json_object_set_new(e, "algo", json_string(comm_algo_name(c->tune[i].algo)));
        json_object_set_new(e, "algo_start", json_string(comm_algo_name(c->tune[i].algo_start)));
        for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++)
            json_object_set_new(us, comm_algo_name((comm_algo)a), json_real(c->tune[i].us[a]));
        json_object_set_new(us, "mpi_start", json_real(c->tune[i].us_mpi_start));
        json_object_set_new(e, "us", us);
        json_array_append_new(entries, e);
    }
    json_object_set_new(root, "entries", entries);
    /* Atomic: a reader sees the old table or the new one, never half of one. */
    status st = path_write_atomic(path, "tuning table", tune_fill, root);
    json_decref(root);
    return st;
}

/* Rank 0 reads the file and broadcasts its text, so every rank parses the same
 * table (a node-local path missing on one node cannot split the job). */
static status tune_read_bcast(comm *c, const char *path, char **text)
{
    long len = -1;
    char *buf = NULL;
    if (c->rt->rank == 0) {
        /* never blocks: a FIFO or a device as comm.tune_file is refused, not waited on */
        int fd;
        struct stat sb;
        char why[256];
        if (path_open_regular(path, &fd, &sb, (uint64_t)64 << 20, why, sizeof why) != 0) {
            log_error("the tuning table %s %s", path, why);
        } else {
            len = (long)sb.st_size;
            buf = malloc((size_t)len + 1);
            if (!buf || path_read_all_at(fd, buf, (size_t)len, 0) != 0) {
                log_error("cannot read the tuning table %s: %s", path, buf ? log_errno_str() : "out of memory");
                len = -1;
            }
            close(fd);
        }
    }
    MPI_CHECK(MPI_Bcast(&len, 1, MPI_LONG, 0, c->rt->world));
    if (len < 0) { free(buf); return STATUS_INPUT; }
    if (c->rt->rank != 0) buf = malloc((size_t)len + 1);
    CHECK(buf, "out of memory for the tuning table");
    MPI_CHECK(MPI_Bcast(buf, (int)len, MPI_CHAR, 0, c->rt->world));
    buf[len] = '\0';
    *text = buf;
    return STATUS_OK;
}

status comm_tune_load(comm *c, const char *path)
{
    char *text;
    TRY(tune_read_bcast(c, path, &text));
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    free(text);
    if (!root) {
        log_error0("%s:%d: cannot parse the tuning table: %s", path, err.line, err.text);
        return STATUS_INPUT;
    }
    status st = STATUS_OK;
    json_t *entries = json_object_get(root, "entries");
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, "nebula-comm-tune") || !json_is_array(entries)) {
        log_error0("%s: not a Nebula tuning table (expected \"format\": \"nebula-comm-tune\" and \"entries\")", path);
        st = STATUS_INPUT;
        goto free_root;
    }
    int ws = (int)json_integer_value(json_object_get(root, "world_size"));
    int nn = (int)json_integer_value(json_object_get(root, "nnodes"));
    if (ws != c->rt->size || nn != c->rt->nnodes) {
        log_warn0("%s was measured on %d ranks / %d nodes, this job has %d / %d: ignoring it (auto uses mpi)",
                  path, ws, nn, c->rt->size, c->rt->nnodes);
        goto free_root;
    }
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        comm_tune_entry t = { 0 };
        const char *name = json_string_value(json_object_get(e, "algo"));
        const char *name_start = json_string_value(json_object_get(e, "algo_start"));  /* version 2 */
        json_int_t b = json_integer_value(json_object_get(e, "bytes"));
        if (!name || !comm_algo_parse(name, &t.algo) || t.algo == COMM_ALGO_AUTO || b <= 0 ||
            (name_start && (!comm_algo_parse(name_start, &t.algo_start) || t.algo_start == COMM_ALGO_AUTO))) {
            log_error0("%s: entry %zu: needs \"bytes\" > 0 and \"algo\" (and \"algo_start\", where given) one of "
                       "mpi|flat|hier|ring", path, i);
            st = STATUS_INPUT;
            goto free_root;
        }
        if (!name_start) t.algo_start = t.algo;  /* a version-1 table made one choice for both */
        t.bytes = (size_t)b;
        for (int a = COMM_ALGO_MPI; a < COMM_ALGO_COUNT; a++)
            t.us[a] = json_real_value(json_object_get(json_object_get(e, "us"), comm_algo_name((comm_algo)a)));
        t.us_mpi_start = json_real_value(json_object_get(json_object_get(e, "us"), "mpi_start"));
        tune_insert(c, &t);
    }
free_root:
    json_decref(root);
    return st;
}
