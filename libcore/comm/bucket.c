/* bucket — gradient bucket manager; see bucket.h.
 *
 * Launch discipline: buckets start strictly in index order (next_launch), which is
 * what keeps every rank's collectives matched; they may finish in any order, so
 * completion is tracked per bucket and next_done only skips the finished prefix. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"

static const char *table_hint = "the tensor table must be sorted by offset, non-overlapping, with counts > 0";

/* The tensor table is the caller's invariant: any violation is a bug. */
static void table_check(const size_t *offsets, const size_t *counts, int n, size_t esz)
{
    char why[192];
    for (int t = 0; t < n; t++) {
        if (counts[t] == 0) {
            snprintf(why, sizeof why, "tensor %d has 0 elements", t);
            die("bucket_init(tensor table)", why, table_hint);
        }
        if (offsets[t] > SIZE_MAX / esz || counts[t] > SIZE_MAX / esz - offsets[t]) {
            snprintf(why, sizeof why, "tensor %d (offset %zu, count %zu) overflows size_t bytes", t, offsets[t],
                     counts[t]);
            die("bucket_init(tensor table)", why, table_hint);
        }
        if (t > 0 && offsets[t] < offsets[t - 1] + counts[t - 1]) {
            snprintf(why, sizeof why, "tensor %d [%zu, %zu) starts before tensor %d [%zu, %zu) ends", t, offsets[t],
                     offsets[t] + counts[t], t - 1, offsets[t - 1], offsets[t - 1] + counts[t - 1]);
            die("bucket_init(tensor table)", why, table_hint);
        }
    }
}

/* Bytes of the slice from the start of tensor lo to the end of tensor hi. */
static size_t span_bytes(const size_t *offsets, const size_t *counts, int lo, int hi, size_t esz)
{
    return (offsets[hi] + counts[hi] - offsets[lo]) * esz;
}

static bool lone_small(const size_t *counts, int lo, int hi, size_t esz)
{
    return lo == hi && counts[lo] * esz < BUCKET_SMALL_BYTES;
}

static void emit(bucket *out, int nb, int lo, int hi)
{
    if (!out) return;
    out[nb].first_tensor = lo;
    out[nb].last_tensor = hi;
}

/* One greedy pass from the last tensor to the first (the rules are in bucket.h).
 * Returns the number of buckets; fills out[] when it is not NULL. */
static int layout(const size_t *offsets, const size_t *counts, int n, size_t esz, size_t cap, bucket *out)
{
    int nb = 0, lo = -1, hi = -1; /* the open bucket is tensors [lo, hi]; hi < 0 when none */
    for (int t = n - 1; t >= 0; t--) {
        /* Close before t when t would overflow it, unless it is a lone small tensor. */
        if (hi >= 0 && span_bytes(offsets, counts, t, hi, esz) > cap && !lone_small(counts, lo, hi, esz)) {
            emit(out, nb++, lo, hi);
            hi = -1;
        }
        if (hi < 0) hi = t;
        lo = t;
        if (span_bytes(offsets, counts, lo, hi, esz) >= cap && !lone_small(counts, lo, hi, esz)) {
            emit(out, nb++, lo, hi);
            hi = -1;
        }
    }
    if (hi >= 0) {
        if (nb > 0 && lone_small(counts, lo, hi, esz)) {
            if (out) out[nb - 1].first_tensor = lo; /* trailing small tensor joins the previous bucket */
        } else {
            emit(out, nb++, lo, hi);
        }
    }
    return nb;
}

static void rearm(bucket_manager *bm)
{
    memset(bm->ready, 0, (size_t)bm->ntensors);
    bm->nready = 0;
    for (int b = 0; b < bm->nbuckets; b++) {
        bm->buckets[b].pending = bm->buckets[b].last_tensor - bm->buckets[b].first_tensor + 1;
        bm->buckets[b].state = BUCKET_STATE_FILLING;
    }
    bm->next_launch = 0;
    bm->next_done = 0;
}

status bucket_init(bucket_manager *bm, comm *c, void *grads, reduce_dtype dt, const size_t *offsets,
                   const size_t *counts, int ntensors, size_t bucket_bytes, comm_algo algo, double scale)
{
    memset(bm, 0, sizeof *bm);
    CHECK(c && grads && offsets && counts, "bucket_init needs a comm, a gradient buffer and a tensor table");
    CHECK(ntensors > 0, "a model has at least one tensor");
    CHECK(algo >= 0 && algo < COMM_ALGO_COUNT, "comm_algo out of range");
    CHECK(isfinite(scale), "the bucket scale must be finite");
    if ((dt == REDUCE_DTYPE_I32 || dt == REDUCE_DTYPE_I64) && scale != 1.0)
        die("bucket_init(scale)", "integer gradients cannot be scaled", "pass scale = 1 for integer dtypes");
    size_t esz = reduce_dtype_size(dt);
    table_check(offsets, counts, ntensors, esz);

    bm->c = c;
    bm->grads = grads;
    bm->dtype = dt;
    bm->esz = esz;
    bm->algo = algo;
    bm->scale = scale;
    bm->on_device = comm_on_device(c);
    bm->bucket_bytes = bucket_bytes ? bucket_bytes : BUCKET_DEFAULT_BYTES;
    bm->ntensors = ntensors;
    bm->nbuckets = layout(offsets, counts, ntensors, esz, bm->bucket_bytes, NULL);
    bm->buckets = calloc((size_t)bm->nbuckets, sizeof *bm->buckets);
    bm->tensor_bucket = calloc((size_t)ntensors, sizeof *bm->tensor_bucket);
    bm->ready = calloc((size_t)ntensors, 1);
    bm->launched = calloc((size_t)bm->nbuckets, sizeof *bm->launched);
    if (!bm->buckets || !bm->tensor_bucket || !bm->ready || !bm->launched) {
        log_error("cannot allocate the layout of %d gradient buckets for %d tensors", bm->nbuckets, ntensors);
        bucket_free(bm);
        return STATUS_NOMEM;
    }
    layout(offsets, counts, ntensors, esz, bm->bucket_bytes, bm->buckets);
    for (int b = 0; b < bm->nbuckets; b++) {
        bucket *k = &bm->buckets[b];
        k->offset = offsets[k->first_tensor];
        k->count = offsets[k->last_tensor] + counts[k->last_tensor] - k->offset;
        for (int t = k->first_tensor; t <= k->last_tensor; t++) bm->tensor_bucket[t] = b;
    }
    rearm(bm);
    return STATUS_OK;
}

/* Multiplies a finished slice by the scale (after the allreduce, per element).
 * Device buffers (nccl) were scaled by the allreduce itself (launch_ready). */
static void bucket_scale(bucket_manager *bm, bucket *k)
{
    if (bm->scale == 1.0 || bm->on_device) return;
    char *base = (char *)bm->grads + k->offset * bm->esz;
    size_t n = k->count;
    if (bm->dtype == REDUCE_DTYPE_F32) {
        float *g = (float *)base;
        double s = bm->scale; /* product in double: one rounding to float */
#pragma omp simd
        for (size_t i = 0; i < n; i++) g[i] = (float)(g[i] * s);
    } else if (bm->dtype == REDUCE_DTYPE_F64) {
        double *g = (double *)base, s = bm->scale;
#pragma omp simd
        for (size_t i = 0; i < n; i++) g[i] *= s;
    } else {
        die("bucket_scale", "integer gradients cannot be scaled", "pass scale = 1 for integer dtypes");
    }
}

static void bucket_finish(bucket_manager *bm, bucket *k)
{
    k->t_done = MPI_Wtime();  /* before the scaling: the reduction's own end */
    bucket_scale(bm, k);
    k->state = BUCKET_STATE_DONE;
    while (bm->next_done < bm->nbuckets && bm->buckets[bm->next_done].state == BUCKET_STATE_DONE) bm->next_done++;
}

/* Starts complete buckets in index order; stops at the first that is not complete. */
static status launch_ready(bucket_manager *bm)
{
    while (bm->next_launch < bm->nbuckets && bm->buckets[bm->next_launch].state == BUCKET_STATE_COMPLETE) {
        int b = bm->next_launch;
        bucket *k = &bm->buckets[b];
        void *slice = (char *)bm->grads + k->offset * bm->esz;
        k->t_start = MPI_Wtime();
        if (bm->on_device)  /* the host cannot touch device memory: the backend scales */
            TRY(comm_allreduce_start_scaled(bm->c, &k->op, slice, k->count, bm->dtype, bm->scale, bm->algo));
        else
            TRY(comm_allreduce_start(bm->c, &k->op, slice, k->count, bm->dtype, REDUCE_OP_SUM, bm->algo));
        k->state = BUCKET_STATE_INFLIGHT;
        if (b == 0) bm->nlaunched = 0; /* the log of the previous step ends here */
        bm->launched[bm->nlaunched++] = b;
        bm->next_launch++;
    }
    return STATUS_OK;
}

/* One progress pass over everything in flight, then collect the finished buckets:
 * the cost per call does not grow with the number of buckets in flight. */
status bucket_progress(bucket_manager *bm)
{
    TRY(comm_progress(bm->c));
    for (int b = bm->next_done; b < bm->next_launch; b++) {
        bucket *k = &bm->buckets[b];
        if (k->state == BUCKET_STATE_INFLIGHT && !k->op.active) bucket_finish(bm, k);
    }
    return STATUS_OK;
}

status bucket_mark_ready(bucket_manager *bm, int tensor)
{
    char why[128];
    if (tensor < 0 || tensor >= bm->ntensors) {
        snprintf(why, sizeof why, "tensor %d is outside the table of %d tensors", tensor, bm->ntensors);
        die("bucket_mark_ready", why, "mark each tensor index of the table passed to bucket_init");
    }
    if (bm->ready[tensor]) {
        snprintf(why, sizeof why, "tensor %d was marked ready twice in step %ld", tensor, bm->steps);
        die("bucket_mark_ready", why, "mark each tensor once per step, then call bucket_wait_all");
    }
    bm->ready[tensor] = 1;
    bm->nready++;
    bucket *k = &bm->buckets[bm->tensor_bucket[tensor]];
    if (--k->pending == 0) {
        k->state = BUCKET_STATE_COMPLETE;
        TRY(launch_ready(bm));
    }
    return bucket_progress(bm);
}

status bucket_wait_all(bucket_manager *bm)
{
    if (bm->nready != bm->ntensors) {
        int t = 0;
        while (t < bm->ntensors && bm->ready[t]) t++;
        char why[160];
        snprintf(why, sizeof why, "tensor %d (bucket %d) was never marked ready in step %ld (%d of %d marked)", t,
                 bm->tensor_bucket[t], bm->steps, bm->nready, bm->ntensors);
        die("bucket_wait_all", why, "backward must call bucket_mark_ready for every tensor of the table");
    }
    CHECK(bm->next_launch == bm->nbuckets, "every bucket is launched once all tensors are ready");
    for (int b = bm->next_done; b < bm->nbuckets; b++) {
        bucket *k = &bm->buckets[b];
        if (k->state != BUCKET_STATE_INFLIGHT) continue;
        TRY(comm_wait(bm->c, &k->op));
        bucket_finish(bm, k);
    }
    CHECK(bm->next_done == bm->nbuckets, "every bucket is done after waiting");
    bm->steps++;
    rearm(bm);
    return STATUS_OK;
}

void bucket_free(bucket_manager *bm)
{
    if (bm->buckets) {
        for (int b = 0; b < bm->nbuckets; b++)
            if (!bm->buckets[b].op.active) comm_op_free(&bm->buckets[b].op);
    }
    free(bm->buckets);
    free(bm->tensor_bucket);
    free(bm->ready);
    free(bm->launched);
    memset(bm, 0, sizeof *bm);
}

int bucket_count(const bucket_manager *bm)
{
    return bm->nbuckets;
}

void bucket_range(const bucket_manager *bm, int b, size_t *offset, size_t *count, int *first_tensor,
                  int *last_tensor)
{
    CHECK(b >= 0 && b < bm->nbuckets, "bucket index out of range");
    const bucket *k = &bm->buckets[b];
    if (offset) *offset = k->offset;
    if (count) *count = k->count;
    if (first_tensor) *first_tensor = k->first_tensor;
    if (last_tensor) *last_tensor = k->last_tensor;
}

void bucket_print(const bucket_manager *bm, FILE *f)
{
    for (int b = 0; b < bm->nbuckets; b++) {
        const bucket *k = &bm->buckets[b];
        size_t bytes = k->count * bm->esz;
        fprintf(f, "bucket %3d  tensors %5d..%-5d (%4d)  %12zu bytes  %9.3f MiB\n", b, k->first_tensor,
                k->last_tensor, k->last_tensor - k->first_tensor + 1, bytes, (double)bytes / (1024.0 * 1024.0));
    }
}
