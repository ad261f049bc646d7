/* fed_part — client data partitions (fed/part.h): IID, Dirichlet label skew, whole
 * source files.
 *
 * The one design decision: every random choice comes from a stream addressed by
 * (seed, FED_PART_STREAM_*, RNG_PURPOSE_FED, class or 0), and each class has its own
 * streams, so one class's draws never shift another's and the owner array is the same
 * on every rank and after a restart. Shuffles are Fisher-Yates with unbiased bounded
 * integers; sums of proportions run in double in client order. */
#include "fed/part.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/rng.h"
#include "fed/update.h"

/* ---- random integers, shuffles, Gamma draws ---------------------------------------- */

/* Uniform on [0, n), n >= 1, unbiased: rng_below below 2^32, else rejection of the
 * 2^64 mod n lowest 64-bit values. */
static uint64_t part_below(rng *r, uint64_t n)
{
    if (n <= UINT32_MAX) return rng_below(r, (uint32_t)n);
    uint64_t threshold = (0 - n) % n;  /* 2^64 mod n */
    uint64_t x;
    do x = rng_u64(r);
    while (x < threshold);
    return x % n;
}

/* Fisher-Yates from the top: a[i] swaps with a[uniform 0..i]. */
static void part_shuffle_i32(int32_t *a, int64_t n, rng *r)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)part_below(r, (uint64_t)i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void part_shuffle_i64(int64_t *a, int64_t n, rng *r)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)part_below(r, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* log of a Gamma(a, 1) draw, a > 0. Marsaglia-Tsang for a >= 1: d = a - 1/3,
 * c = 1/sqrt(9d), v = (1 + c x)^3 for a normal x, accept when
 * ln u < x^2/2 + d - d v + d ln v (expected tries < 1.05); for a < 1 the boost
 * ln G(a + 1) + ln(U) / a with U in (0, 1] (in logs: U^(1/a) underflows for small a). */
static double part_log_gamma_draw(rng *r, double a)
{
    if (a < 1.0) {
        double u = ((double)(rng_u64(r) >> 11) + 1.0) * 0x1p-53;
        return part_log_gamma_draw(r, a + 1.0) + log(u) / a;
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = fed_normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = rng_uniform_double(r);  /* u = 0 gives ln u = -inf: accepted, as it should */
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return log(d) + log(v);
    }
}

/* p (clients) ~ Dirichlet(alpha, ..., alpha): Gamma draws normalised, from logs with the
 * largest subtracted, so the largest share is exp(0) = 1 before normalising. */
static void part_dirichlet_draw(double *p, int clients, double alpha, rng *r)
{
    double top = -INFINITY;
    for (int j = 0; j < clients; j++) {
        p[j] = part_log_gamma_draw(r, alpha);
        if (p[j] > top) top = p[j];
    }
    double sum = 0;
    for (int j = 0; j < clients; j++) {
        p[j] = exp(p[j] - top);
        sum += p[j];
    }
    for (int j = 0; j < clients; j++) p[j] /= sum;
}

/* ---- IID ----------------------------------------------------------------------------- */

static status part_check_clients(const char *fn, int64_t nsamples, int clients)
{
    if (clients < 1) {
        log_error("%s: clients = %d, must be >= 1", fn, clients);
        return STATUS_INPUT;
    }
    if ((int64_t)clients > nsamples) {
        log_error("%s: clients = %d is more than the %lld samples (every client needs one)", fn, clients,
                  (long long)nsamples);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status fed_part_iid(int32_t *owner, int64_t nsamples, int clients, uint64_t seed)
{
    TRY(part_check_clients("fed_part_iid", nsamples, clients));
    for (int64_t i = 0; i < nsamples; i++) owner[i] = (int32_t)(i % clients);
    rng r;
    rng_init(&r, seed, FED_PART_STREAM_IID, RNG_PURPOSE_FED, 0);
    part_shuffle_i32(owner, nsamples, &r);
    return STATUS_OK;
}

/* ---- Dirichlet label skew ------------------------------------------------------------ */

static status part_check_dirichlet(const int32_t *labels, int64_t nsamples, int classes, int clients, double alpha)
{
    const char *fn = "fed_part_dirichlet";
    if (!(alpha > 0) || !isfinite(alpha)) {
        log_error("%s: alpha = %g, must be a finite value > 0", fn, alpha);
        return STATUS_INPUT;
    }
    if (classes < 1) {
        log_error("%s: classes = %d, must be >= 1", fn, classes);
        return STATUS_INPUT;
    }
    TRY(part_check_clients(fn, nsamples, clients));
    for (int64_t i = 0; i < nsamples; i++)
        if (labels[i] < 0 || labels[i] >= classes) {
            log_error("%s: label %d of sample %lld is outside [0, %d)", fn, (int)labels[i], (long long)i, classes);
            return STATUS_INPUT;
        }
    return STATUS_OK;
}

/* cnt (clients) for one class of nc samples: the differences of floor(nc Q_j) with the
 * cumulative proportions Q_j (summed in client order); the last client takes the rest. */
static void part_cut(int64_t *cnt, const double *p, int clients, int64_t nc)
{
    double q = 0;
    int64_t prev = 0;
    for (int j = 0; j < clients - 1; j++) {
        q += p[j];
        int64_t cut = (int64_t)floor(q * (double)nc);
        if (cut > nc) cut = nc;  /* q may round above 1 */
        if (cut < prev) cut = prev;
        cnt[j] = cut - prev;
        prev = cut;
    }
    cnt[clients - 1] = nc - prev;
}

/* Gives every empty client one sample (part.h): cnt (classes, clients), tot (clients) the
 * column sums, kept in step. */
static void part_fill_empty(int64_t *cnt, int64_t *tot, int classes, int clients)
{
    for (int j = 0; j < clients; j++) {
        if (tot[j] > 0) continue;
        int donor = 0;
        for (int d = 1; d < clients; d++)
            if (tot[d] > tot[donor]) donor = d;
        CHECK(tot[donor] >= 2, "fed_part_dirichlet: a donor must keep a sample (nsamples >= clients)");
        int cls = 0;
        for (int c = 1; c < classes; c++)
            if (cnt[(size_t)c * clients + donor] > cnt[(size_t)cls * clients + donor]) cls = c;
        cnt[(size_t)cls * clients + donor]--;
        cnt[(size_t)cls * clients + j]++;
        tot[donor]--;
        tot[j]++;
    }
}

/* The work space of fed_part_dirichlet, allocated together. */
typedef struct part_space {
    int64_t *idx;    /* (nsamples) sample ids grouped by class, index order inside a class */
    int64_t *start;  /* (classes + 1) where each class begins in idx */
    int64_t *cnt;    /* (classes, clients) samples of class c for client j */
    int64_t *tot;    /* (clients) samples per client */
    double *p;       /* (clients) one class's proportions */
} part_space;

static void part_space_free(part_space *s)
{
    free(s->idx);
    free(s->start);
    free(s->cnt);
    free(s->tot);
    free(s->p);
}

static status part_space_alloc(part_space *s, int64_t nsamples, int classes, int clients)
{
    *s = (part_space){ 0 };
    s->idx = malloc((size_t)nsamples * sizeof *s->idx);
    s->start = calloc((size_t)classes + 1, sizeof *s->start);
    s->cnt = calloc((size_t)classes * (size_t)clients, sizeof *s->cnt);
    s->tot = calloc((size_t)clients, sizeof *s->tot);
    s->p = malloc((size_t)clients * sizeof *s->p);
    if (!s->idx || !s->start || !s->cnt || !s->tot || !s->p) {
        log_error("fed_part_dirichlet: out of memory for %lld samples, %d classes, %d clients", (long long)nsamples,
                  classes, clients);
        part_space_free(s);
        return STATUS_NOMEM;
    }
    return STATUS_OK;
}

status fed_part_dirichlet(int32_t *owner, const int32_t *labels, int64_t nsamples, int classes, int clients,
                          double alpha, uint64_t seed)
{
    TRY(part_check_dirichlet(labels, nsamples, classes, clients, alpha));
    part_space s;
    TRY(part_space_alloc(&s, nsamples, classes, clients));
    /* Counting sort by class, stable: idx[start[c] ..] are class c's samples in order. */
    for (int64_t i = 0; i < nsamples; i++) s.start[labels[i] + 1]++;
    for (int c = 0; c < classes; c++) s.start[c + 1] += s.start[c];
    for (int64_t i = 0; i < nsamples; i++) s.idx[s.start[labels[i]]++] = i;
    for (int c = classes; c > 0; c--) s.start[c] = s.start[c - 1];
    s.start[0] = 0;

    for (int c = 0; c < classes; c++) {
        rng r;
        rng_init(&r, seed, FED_PART_STREAM_DIRICHLET, RNG_PURPOSE_FED, (uint64_t)c);
        part_dirichlet_draw(s.p, clients, alpha, &r);
        int64_t *row = s.cnt + (size_t)c * clients;
        part_cut(row, s.p, clients, s.start[c + 1] - s.start[c]);
        for (int j = 0; j < clients; j++) s.tot[j] += row[j];
    }
    part_fill_empty(s.cnt, s.tot, classes, clients);

    /* Deal: class c's samples in a shuffled order, the first cnt[c][0] to client 0, ... */
    for (int c = 0; c < classes; c++) {
        rng r;
        rng_init(&r, seed, FED_PART_STREAM_SHUFFLE, RNG_PURPOSE_FED, (uint64_t)c);
        int64_t *cls = s.idx + s.start[c];
        part_shuffle_i64(cls, s.start[c + 1] - s.start[c], &r);
        int64_t at = 0;
        for (int j = 0; j < clients; j++)
            for (int64_t e = 0; e < s.cnt[(size_t)c * clients + j]; e++) owner[cls[at++]] = (int32_t)j;
    }
    part_space_free(&s);
    return STATUS_OK;
}

/* ---- whole source files -------------------------------------------------------------- */

static status part_check_sources(const int64_t *source_of_sample, int64_t nsamples, int64_t nsources, int clients)
{
    const char *fn = "fed_part_by_source";
    if (clients < 1) {
        log_error("%s: clients = %d, must be >= 1", fn, clients);
        return STATUS_INPUT;
    }
    if (nsources < clients) {
        log_error("%s: %lld source files for %d clients; each client needs a whole file", fn, (long long)nsources,
                  clients);
        return STATUS_INPUT;
    }
    for (int64_t i = 0; i < nsamples; i++)
        if (source_of_sample[i] < 0 || source_of_sample[i] >= nsources) {
            log_error("%s: source %lld of sample %lld is outside [0, %lld)", fn, (long long)source_of_sample[i],
                      (long long)i, (long long)nsources);
            return STATUS_INPUT;
        }
    return STATUS_OK;
}

status fed_part_by_source(int32_t *owner, const int64_t *source_of_sample, int64_t nsamples, int64_t nsources,
                          int clients, uint64_t seed)
{
    TRY(part_check_sources(source_of_sample, nsamples, nsources, clients));
    int64_t *client_of = calloc((size_t)nsources, sizeof *client_of);  /* samples, then the client */
    int64_t *order = malloc((size_t)nsources * sizeof *order);          /* the non-empty sources */
    if (!client_of || !order) {
        log_error("fed_part_by_source: out of memory for %lld sources", (long long)nsources);
        free(client_of);
        free(order);
        return STATUS_NOMEM;
    }
    for (int64_t i = 0; i < nsamples; i++) client_of[source_of_sample[i]]++;
    int64_t used = 0;
    for (int64_t f = 0; f < nsources; f++)
        if (client_of[f] > 0) order[used++] = f;
    if (used < clients) {
        log_error("fed_part_by_source: %lld of the %lld source files hold samples, fewer than the %d clients",
                  (long long)used, (long long)nsources, clients);
        free(client_of);
        free(order);
        return STATUS_INPUT;
    }
    rng r;
    rng_init(&r, seed, FED_PART_STREAM_SOURCE, RNG_PURPOSE_FED, 0);
    part_shuffle_i64(order, used, &r);
    for (int64_t q = 0; q < used; q++) client_of[order[q]] = q % clients;
    for (int64_t i = 0; i < nsamples; i++) owner[i] = (int32_t)client_of[source_of_sample[i]];
    free(client_of);
    free(order);
    return STATUS_OK;
}

void fed_part_counts(const int32_t *owner, int64_t n, int clients, int64_t *counts)
{
    for (int j = 0; j < clients; j++) counts[j] = 0;
    for (int64_t i = 0; i < n; i++) {
        CHECK(owner[i] >= 0 && owner[i] < clients, "fed_part_counts: an owner outside [0, clients)");
        counts[owner[i]]++;
    }
}
