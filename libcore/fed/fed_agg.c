/* fed_agg — aggregation of k client updates (fed/update.h): weighted mean and sum
 * (FedAvg), coordinate-wise trimmed mean and median (Yin et al., ICML 2018).
 *
 * The one design decision: every output element is a sum in double over the clients in
 * client order, whatever the rule. The robust rules first find, per element, the two cut
 * values by selection on a scratch copy (the order selection leaves behind is never
 * summed); then one pass in client order sums the values strictly between the cuts and
 * adds the kept copies of the cut values. So the result is bit-identical run to run and
 * across thread counts, and no hostile input can make the selection quadratic. */
#include "fed/update.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/log.h"

/* ---- weighted mean and sum ---------------------------------------------------------- */

/* Elements per block of the weighted sums: the double accumulators (2 KiB) stay in L1
 * while the k client rows stream through, and each element still sums i = 0..k-1. */
#define AGG_BLOCK 256

/* out = (sum_i w_i u_i) / div per element (w NULL: ones). Reads a whole block of every
 * u_i before writing that block of out, so out may be one of the u_i. */
static void agg_weighted(float *out, const float *const *u, const double *w, int k, size_t n, double div)
{
    double acc[AGG_BLOCK];
    for (size_t j0 = 0; j0 < n; j0 += AGG_BLOCK) {
        size_t len = n - j0 < AGG_BLOCK ? n - j0 : AGG_BLOCK;
        for (size_t j = 0; j < len; j++) acc[j] = 0;
        for (int i = 0; i < k; i++) {
            double wi = w ? w[i] : 1.0;
            const float *ui = u[i] + j0;
            for (size_t j = 0; j < len; j++) acc[j] += wi * (double)ui[j];
        }
        for (size_t j = 0; j < len; j++) out[j0 + j] = (float)(acc[j] / div);
    }
}

/* sum_i w_i in order (k ones when w is NULL); dies on a negative, non-finite or all-zero
 * weight vector: the engine's weights are sample counts, so that is a bug. */
static double agg_weight_sum(const double *w, int k)
{
    if (!w) return (double)k;
    double s = 0;
    for (int i = 0; i < k; i++) {
        CHECK(w[i] >= 0 && isfinite(w[i]), "fed_agg: weights must be finite and >= 0");
        s += w[i];
    }
    return s;
}

void fed_agg_mean(float *out, const float *const *u, const double *w, int k, size_t n)
{
    CHECK(k >= 1, "fed_agg_mean: needs at least one client");
    double total = agg_weight_sum(w, k);
    CHECK(total > 0, "fed_agg_mean: the weights sum to 0");
    agg_weighted(out, u, w, k, n, total);
}

void fed_agg_sum(float *out, const float *const *u, const double *w, int k, size_t n)
{
    CHECK(k >= 1, "fed_agg_sum: needs at least one client");
    (void)agg_weight_sum(w, k);  /* the weights' check */
    agg_weighted(out, u, w, k, n, 1.0);
}

/* ---- selection under a total order -------------------------------------------------- */

/* The IEEE bits mapped to an unsigned key with the order of the values: negatives have
 * their bits flipped, positives their sign bit set. -0 < +0; NaNs land beyond +-inf. */
static inline uint32_t agg_key(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

static inline void agg_swap(float *a, int i, int j)
{
    float t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Moves h[root] down the max-heap h[0..end) (by key). */
static void agg_sift(float *h, int root, int end)
{
    for (int child; (child = 2 * root + 1) < end; root = child) {
        if (child + 1 < end && agg_key(h[child + 1]) > agg_key(h[child])) child++;
        if (agg_key(h[root]) >= agg_key(h[child])) return;
        agg_swap(h, root, child);
    }
}

/* Heapsort of a[lo..hi] by key: the fallback that bounds selection at O(k log k). */
static void agg_heapsort(float *a, int lo, int hi)
{
    float *h = a + lo;
    int len = hi - lo + 1;
    for (int start = len / 2 - 1; start >= 0; start--) agg_sift(h, start, len);
    for (int end = len - 1; end > 0; end--) {
        agg_swap(h, 0, end);
        agg_sift(h, 0, end);
    }
}

/* Puts the value of rank r (0-based, by key) of a[lo..hi] at a[r], with keys <= it
 * before and >= it after. Quickselect with a median-of-three pivot and a three-way
 * partition (ties, e.g. many zero updates, end a pass at once); past 2 log2(len) + 4
 * passes the rest is heapsorted, so the worst case is O(k log k). */
static void agg_select(float *a, int lo, int hi, int r)
{
    int budget = 4;
    for (int len = hi - lo + 1; len > 1; len >>= 1) budget += 2;
    while (hi > lo) {
        if (budget-- == 0) {
            agg_heapsort(a, lo, hi);
            return;
        }
        int mid = lo + (hi - lo) / 2;
        uint32_t x = agg_key(a[lo]), y = agg_key(a[mid]), z = agg_key(a[hi]);
        uint32_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        /* Dutch flag: [lo, lt) < p, [lt, i) == p, (gt, hi] > p */
        int lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            uint32_t kk = agg_key(a[i]);
            if (kk < p) agg_swap(a, lt++, i++);
            else if (kk > p) agg_swap(a, i, gt--);
            else i++;
        }
        if (r < lt) hi = lt - 1;
        else if (r > gt) lo = gt + 1;
        else return;
    }
}

/* ---- trimmed mean and median -------------------------------------------------------- */

/* One element: the mean of ranks trim .. k-1-trim of the k values col[i] = u[i][j].
 * s (k) holds the copy that selection reorders. */
static float agg_trimmed_one(const float *const *u, int k, size_t j, int trim, float *s)
{
    for (int i = 0; i < k; i++) s[i] = u[i][j];
    int top = k - 1 - trim;
    agg_select(s, 0, k - 1, trim);
    agg_select(s, trim, k - 1, top);  /* s[trim..] are all >= the first cut */
    float lo = s[trim], hi = s[top];
    uint32_t klo = agg_key(lo), khi = agg_key(hi);
    int kept = k - 2 * trim;
    if (klo == khi) return lo;  /* every kept value is this one */
    /* In client order: values strictly between the cuts are summed; those at a cut are
     * counted. Of the values <= lo, `trim` are dropped (the lowest ranks) and the rest
     * are copies of lo; likewise at hi. */
    double between = 0;
    int at_or_below_lo = 0, at_or_above_hi = 0;
    for (int i = 0; i < k; i++) {
        float v = u[i][j];
        uint32_t kv = agg_key(v);
        if (kv <= klo) at_or_below_lo++;
        else if (kv >= khi) at_or_above_hi++;
        else between += (double)v;
    }
    double sum = between + (double)(at_or_below_lo - trim) * (double)lo
               + (double)(at_or_above_hi - trim) * (double)hi;
    return (float)(sum / (double)kept);
}

void fed_agg_trimmed_mean(float *out, const float *const *u, int k, size_t n, int trim, float *scratch)
{
    CHECK(k >= 1 && trim >= 0 && 2 * trim < k, "fed_agg_trimmed_mean: needs 0 <= 2 trim < k");
    for (size_t j = 0; j < n; j++) out[j] = agg_trimmed_one(u, k, j, trim, scratch);
}

void fed_agg_median(float *out, const float *const *u, int k, size_t n, float *scratch)
{
    CHECK(k >= 1, "fed_agg_median: needs at least one client");
    fed_agg_trimmed_mean(out, u, k, n, (k - 1) / 2, scratch);
}
