/* nano_ops_norm — the reducing half of the edge runtime's light operators: BatchNorm,
 * LayerNorm, ReduceMean and the pools (nano_ops.h).
 *
 * The one design decision: every sum is a double accumulation in 16 fixed lanes (an
 * explicit inner loop of 16 that GCC vectorises without reassociating anything), so the
 * statistics are as good as a double loop's, and the same on every ISA and thread count;
 * only the element-wise epilogues run in float. Pools walk each kernel tap over the run
 * of output columns it touches inside the input (computed once per tap), so there is no
 * per-element bounds test and the unit-stride case is a plain vector loop. */
#include <math.h>
#include <string.h>

#include "nano/nano_ops.h"

#include "nano/nano_ops_impl.h"

enum { PAR_MIN = 32768, COLS = 256 };

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline float fsel(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)c;
    return u2f((f2u(a) & m) | (f2u(b) & ~m));
}

/* Σ x[0..n) in double, 16 lanes. */
static double sum_d(const float *x, int64_t n)
{
    double acc[16] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += x[i];
    return s;
}

/* Σ (x - m)² in double, 16 lanes. */
static double sumsq_d(const float *x, int64_t n, double m)
{
    double acc[16] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            double d = (double)x[i + j] - m;
            acc[j] += d * d;
        }
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
    return s;
}

/* Shape: x (N, C, inner...) -> y the same; y = (x - mean[c]) · scale[c]/sqrt(var[c] + eps) + bias[c]. */
void nano_batchnorm(const float *x, const nano_shape *xs, const float *scale, const float *bias,
                    const float *mean, const float *var, float eps, float *y, int nthreads)
{
    int64_t n = xs->d[0], c = xs->ndim > 1 ? xs->d[1] : 1, inner = 1;
    for (int i = 2; i < xs->ndim; i++) inner *= xs->d[i];
    int64_t rows = n * c;
    NANO_PAR_FOR(nthreads, nthreads > 1 && rows * inner >= PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t ch = r % c;
        float s = (float)((double)scale[ch] / sqrt((double)var[ch] + (double)eps));
        float m = mean[ch], b = bias[ch];
        const float *xr = x + r * inner;
        float *yr = y + r * inner;
        NANO_SIMD for (int64_t i = 0; i < inner; i++) yr[i] = (xr[i] - m) * s + b;
    }
}

/* Shape: x (rows, inner = the dims from axis on) -> y the same; scale, bias (inner). */
void nano_layernorm(const float *x, const nano_shape *xs, int axis, const float *scale, const float *bias,
                    float eps, float *y, int nthreads)
{
    int64_t rows = 1, inner = 1;
    for (int i = 0; i < axis; i++) rows *= xs->d[i];
    for (int i = axis; i < xs->ndim; i++) inner *= xs->d[i];
    NANO_PAR_FOR(nthreads, nthreads > 1 && rows * inner >= PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * inner;
        float *yr = y + r * inner;
        double mean = sum_d(xr, inner) / (double)inner;
        double var = sumsq_d(xr, inner, mean) / (double)inner;
        float m = (float)mean, rs = (float)(1.0 / sqrt(var + (double)eps));
        if (bias) {
            NANO_SIMD for (int64_t i = 0; i < inner; i++) yr[i] = (xr[i] - m) * rs * scale[i] + bias[i];
        } else {
            NANO_SIMD for (int64_t i = 0; i < inner; i++) yr[i] = (xr[i] - m) * rs * scale[i];
        }
    }
}

/* ---- ReduceMean ---------------------------------------------------------------------- */

/* An odometer over a few dims (sizes d, element strides s): off is the current offset. */
typedef struct odo {
    int n;
    int64_t d[NANO_MAX_DIMS], s[NANO_MAX_DIMS], i[NANO_MAX_DIMS], off;
} odo;

static void odo_seek(odo *o, int64_t k)
{
    o->off = 0;
    for (int j = o->n - 1; j >= 0; j--) {
        o->i[j] = k % o->d[j];
        k /= o->d[j];
        o->off += o->i[j] * o->s[j];
    }
}

static void odo_next(odo *o)
{
    for (int j = o->n - 1; j >= 0; j--) {
        o->off += o->s[j];
        if (++o->i[j] < o->d[j]) return;
        o->off -= o->d[j] * o->s[j];
        o->i[j] = 0;
    }
}

/* Shape: x -> y with the dims of axes_mask reduced (kept as 1 or dropped: the same
 * layout). Size-1 dims are dropped and neighbours of the same kind merged; then either
 * the last dim is reduced (each output sums contiguous runs) or kept (runs of outputs
 * accumulate together, vectorised across the run). */
void nano_reducemean(const float *x, const nano_shape *xs, int axes_mask, float *y, int nthreads)
{
    int64_t d[NANO_MAX_DIMS], s[NANO_MAX_DIMS];
    int red[NANO_MAX_DIMS], m = 0;
    for (int i = 0; i < xs->ndim; i++) {
        if (xs->d[i] == 1) continue;
        int r = (axes_mask >> i) & 1;
        if (m > 0 && red[m - 1] == r) {
            d[m - 1] *= xs->d[i];
        } else {
            d[m] = xs->d[i];
            red[m++] = r;
        }
    }
    if (m == 0) { /* one element */
        y[0] = x[0];
        return;
    }
    int64_t st = 1;
    for (int i = m - 1; i >= 0; i--) { s[i] = st; st *= d[i]; }
    odo ko = {0}, ro = {0}; /* kept dims, reduced dims (the last one left out of both) */
    int64_t cnt = 1, nout = 1;
    for (int i = 0; i < m; i++) {
        if (red[i]) cnt *= d[i]; else nout *= d[i];
        if (i == m - 1) break;
        odo *o = red[i] ? &ro : &ko;
        o->d[o->n] = d[i];
        o->s[o->n++] = s[i];
    }
    int64_t L = d[m - 1], nro = cnt / (red[m - 1] ? L : 1);
    double inv = 1.0 / (double)cnt;
    if (red[m - 1]) {
        NANO_PAR_FOR(nthreads, nthreads > 1 && nout * cnt >= PAR_MIN && nout > 1)
        for (int64_t o = 0; o < nout; o++) {
            odo k = ko, r = ro;
            odo_seek(&k, o);
            odo_seek(&r, 0);
            double acc = 0;
            for (int64_t q = 0; q < nro; q++) {
                acc += sum_d(x + k.off + r.off, L);
                odo_next(&r);
            }
            y[o] = (float)(acc * inv);
        }
        return;
    }
    int64_t nrow = nout / L, nb = (L + COLS - 1) / COLS;
    NANO_PAR_FOR(nthreads, nthreads > 1 && nout * cnt >= PAR_MIN && nrow * nb > 1)
    for (int64_t t = 0; t < nrow * nb; t++) {
        int64_t o = t / nb, j0 = (t % nb) * COLS, n = L - j0 < COLS ? L - j0 : COLS;
        odo k = ko, r = ro;
        odo_seek(&k, o);
        odo_seek(&r, 0);
        double acc[COLS];
        for (int64_t j = 0; j < n; j++) acc[j] = 0;
        for (int64_t q = 0; q < nro; q++) {
            const float *xr = x + k.off + r.off + j0;
            NANO_SIMD for (int64_t j = 0; j < n; j++) acc[j] += xr[j];
            odo_next(&r);
        }
        float *yr = y + o * L + j0;
        for (int64_t j = 0; j < n; j++) yr[j] = (float)(acc[j] * inv);
    }
}

/* ---- pools --------------------------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/* Taps i in [0, k) with lo <= start + i·step < hi. */
static int64_t taps_in(int64_t start, int64_t k, int64_t step, int64_t lo, int64_t hi, int64_t *first)
{
    int64_t i0 = ceil_div(lo - start, step), i1 = ceil_div(hi - start, step);
    i0 = i0 < 0 ? 0 : i0;
    i1 = i1 > k ? k : i1;
    *first = i0;
    return i1 > i0 ? i1 - i0 : 0;
}

typedef struct pool {
    int64_t H, W, OH, OW, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
} pool;

static pool pool_of(const nano_shape *xs, const nano_attrs *a, const nano_shape *ys)
{
    pool p;
    p.H = xs->d[2];
    p.W = xs->d[3];
    p.OH = ys->d[2];
    p.OW = ys->d[3];
    p.kh = a->kernel[0];
    p.kw = a->kernel[1];
    p.sh = a->stride[0] > 0 ? a->stride[0] : 1;
    p.sw = a->stride[1] > 0 ? a->stride[1] : 1;
    p.pt = a->pad[0];
    p.pl = a->pad[1];
    p.pb = a->pad[2];
    p.pr = a->pad[3];
    p.dh = a->dilation[0] > 0 ? a->dilation[0] : 1; /* 0: unset */
    p.dw = a->dilation[1] > 0 ? a->dilation[1] : 1;
    return p;
}

/* One output row oh of one plane: every tap inside the input folded into yr by max
 * (is_max) or sum. */
static void pool_row(const pool *p, const float *xp, float *yr, int64_t oh, int is_max)
{
    int64_t h0 = oh * p->sh - p->pt, i0;
    int64_t nh = taps_in(h0, p->kh, p->dh, 0, p->H, &i0);
    for (int64_t i = i0; i < i0 + nh; i++) {
        const float *xr = xp + (h0 + i * p->dh) * p->W;
        for (int64_t j = 0; j < p->kw; j++) {
            int64_t woff = j * p->dw - p->pl; /* input column of output column ow: ow·sw + woff */
            int64_t lo = ceil_div(-woff, p->sw), hi = floor_div(p->W - 1 - woff, p->sw) + 1;
            lo = lo < 0 ? 0 : lo;
            hi = hi > p->OW ? p->OW : hi;
            if (hi <= lo) continue;
            const float *xs = xr + woff;
            int64_t sw = p->sw;
            if (is_max) {
                NANO_SIMD for (int64_t ow = lo; ow < hi; ow++) yr[ow] = fsel(xs[ow * sw] > yr[ow], xs[ow * sw], yr[ow]);
            } else {
                NANO_SIMD for (int64_t ow = lo; ow < hi; ow++) yr[ow] += xs[ow * sw];
            }
        }
    }
}

/* Shape: x (N, C, H, W) -> y (N, C, OH, OW); windows clipped to the input, padding -inf. */
void nano_maxpool(const float *x, const nano_shape *xs, const nano_attrs *a, float *y, const nano_shape *ys,
                  int nthreads)
{
    pool p = pool_of(xs, a, ys);
    int64_t planes = xs->d[0] * xs->d[1];
    NANO_PAR_FOR(nthreads, nthreads > 1 && planes > 1 && planes * p.OH * p.OW * p.kh * p.kw >= PAR_MIN)
    for (int64_t q = 0; q < planes; q++) {
        for (int64_t oh = 0; oh < p.OH; oh++) {
            float *yr = y + (q * p.OH + oh) * p.OW;
            for (int64_t ow = 0; ow < p.OW; ow++) yr[ow] = -INFINITY;
            pool_row(&p, x + q * p.H * p.W, yr, oh, 1);
        }
    }
}

/* Shape: x (N, C, H, W) -> y (N, C, OH, OW). The divisor is the number of taps inside
 * the input, or with count_include_pad inside the padded input [-pad, size + pad). */
void nano_avgpool(const float *x, const nano_shape *xs, const nano_attrs *a, float *y, const nano_shape *ys,
                  int nthreads)
{
    pool p = pool_of(xs, a, ys);
    int64_t planes = xs->d[0] * xs->d[1];
    int incl = a->count_include_pad != 0;
    NANO_PAR_FOR(nthreads, nthreads > 1 && planes > 1 && planes * p.OH * p.OW * p.kh * p.kw >= PAR_MIN)
    for (int64_t q = 0; q < planes; q++) {
        for (int64_t oh = 0; oh < p.OH; oh++) {
            float *yr = y + (q * p.OH + oh) * p.OW;
            for (int64_t ow = 0; ow < p.OW; ow++) yr[ow] = 0.0f;
            pool_row(&p, x + q * p.H * p.W, yr, oh, 0);
            int64_t h0 = oh * p.sh - p.pt, f;
            int64_t ch = incl ? taps_in(h0, p.kh, p.dh, -p.pt, p.H + p.pb, &f) : taps_in(h0, p.kh, p.dh, 0, p.H, &f);
            for (int64_t ow = 0; ow < p.OW; ow++) {
                int64_t w0 = ow * p.sw - p.pl;
                int64_t cw = incl ? taps_in(w0, p.kw, p.dw, -p.pl, p.W + p.pr, &f) : taps_in(w0, p.kw, p.dw, 0, p.W, &f);
                int64_t cnt = ch * cw;
                yr[ow] = yr[ow] / (float)(cnt > 0 ? cnt : 1);
            }
        }
    }
}

/* Shape: x (N, C, spatial...) -> y (N, C, 1, ...). */
void nano_globalavgpool(const float *x, const nano_shape *xs, float *y, int nthreads)
{
    int64_t planes = xs->d[0] * (xs->ndim > 1 ? xs->d[1] : 1), hw = 1;
    for (int i = 2; i < xs->ndim; i++) hw *= xs->d[i];
    NANO_PAR_FOR(nthreads, nthreads > 1 && planes > 1 && planes * hw >= PAR_MIN)
    for (int64_t q = 0; q < planes; q++) y[q] = (float)(sum_d(x + q * hw, hw) / (double)hw);
}
