/* embed — see embed.h. */
#include "embed.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/log.h"

/* Below this many elements of out/dout a call runs on one thread. */
#define EMBED_PAR_MIN (1 << 16)

/* Dies naming ids[n] and the range it left. */
static _Noreturn void embedding_bad_id(const int32_t *ids, int n, const char *range)
{
    char why[128];
    snprintf(why, sizeof why, "ids[%d] = %d is outside %s", n, (int)ids[n], range);
    die("embedding lookup", why, "token ids must be in [0, V): check that the tokenizer and the model's V match");
}

void embedding_check_ids(const int32_t *ids, int N, int V)
{
    char range[48];
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V) {
            snprintf(range, sizeof range, "[0, %d)", V);
            embedding_bad_id(ids, n, range);
        }
}

/* The kernels' own check: without V only the lower bound is known. */
static void embedding_check_nonneg(const int32_t *ids, int N)
{
    for (int n = 0; n < N; n++)
        if (ids[n] < 0) embedding_bad_id(ids, n, "[0, V)");
}

void embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C, int accumulate)
{
    embedding_check_nonneg(ids, N);
    if (N <= 0 || C <= 0) return;
    #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= EMBED_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        const float *row = table + (size_t)ids[n] * C;
        if (accumulate) {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] += row[c];
        } else {
            memcpy(o, row, (size_t)C * sizeof(float));
        }
    }
}

void embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C)
{
    embedding_check_nonneg(ids, N);
    if (N <= 0 || C <= 0) return;
    /* Each thread owns a contiguous column range and walks all n in order. */
    #pragma omp parallel if ((size_t)N * (size_t)C >= EMBED_PAR_MIN)
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        int c0 = (int)((long long)C * t / nt), c1 = (int)((long long)C * (t + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *d = dtable + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            #pragma omp simd
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

void embedding_forward_rows(float *out, const int32_t *ids, const float *shard, int N, int C, int lo, int rows)
{
    embedding_check_nonneg(ids, N);
    if (N <= 0 || C <= 0) return;
    #pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= EMBED_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        int row = ids[n] - lo;
        if (row >= 0 && row < rows) memcpy(o, shard + (size_t)row * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));
    }
}

void embedding_backward_rows(float *dshard, const float *dout, const int32_t *ids, int N, int C, int lo, int rows)
{
    embedding_check_nonneg(ids, N);
    if (N <= 0 || C <= 0) return;
    #pragma omp parallel if ((size_t)N * (size_t)C >= EMBED_PAR_MIN)
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        int c0 = (int)((long long)C * t / nt), c1 = (int)((long long)C * (t + 1) / nt);
        for (int n = 0; n < N; n++) {
            int row = ids[n] - lo;
            if (row < 0 || row >= rows) continue;
            float *d = dshard + (size_t)row * C;
            const float *g = dout + (size_t)n * C;
            #pragma omp simd
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

void embedding_forward_ref(double *out, const int32_t *ids, const double *table, int N, int C, int accumulate)
{
    embedding_check_nonneg(ids, N);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double v = table[(size_t)ids[n] * C + c];
            out[(size_t)n * C + c] = accumulate ? out[(size_t)n * C + c] + v : v;
        }
}

void embedding_backward_ref(double *dtable, const double *dout, const int32_t *ids, int N, int C)
{
    embedding_check_nonneg(ids, N);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dtable[(size_t)ids[n] * C + c] += dout[(size_t)n * C + c];
}
