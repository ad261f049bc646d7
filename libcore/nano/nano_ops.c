/* nano_ops — the element-wise half of the edge runtime's light operators: activations,
 * Erf and Sqrt, the broadcasting binary ops and Where, and Softmax (the ops that need
 * exp). Normalisation and pools are in nano_ops_norm.c, the data movers in
 * nano_ops_move.c.
 *
 * The one design decision: the transcendental functions are our own branch-free float
 * kernels (exp by 2^k range reduction and a degree-6 polynomial; erfc as
 * t·exp(P(t) - z²) with t = 1/(1 + z/2) and a degree-10 polynomial fitted by Chebyshev
 * interpolation; tanh and erf near 0 as odd polynomials), with every select written as an
 * integer bit mask. GCC -O2 then vectorises the loops (marked omp simd: its default cost
 * model at -O2 refuses loops of unknown trip count, and a float ?: counts as control flow
 * under -ftrapping-math), and since nothing is contracted or reassociated the results are
 * the same on every ISA. Each function is within a few ulp of the double-precision
 * value; GELU is computed as x·Φ(x) with Φ of a negative argument taken from erfc, not
 * 1 + erf, so its negative tail keeps its relative accuracy. */
#include <math.h>
#include <string.h>

#include "nano/nano_ops.h"

#include "nano/nano_ops_impl.h"

enum { PAR_MIN = 32768, /* elements below which one thread does the work */
       BLK = 16384,     /* elements per parallel work item of the flat loops */
       OP_ERF = 100, OP_SQRT = 101 };

/* ---- scalar building blocks (inlined into the vector loops) -------------------------- */

NANO_INLINE uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
NANO_INLINE float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* c ? a : b without control flow (c is 0 or 1) */
NANO_INLINE float fsel(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)c;
    return u2f((f2u(a) & m) | (f2u(b) & ~m));
}
NANO_INLINE float fabs_bits(float x) { return u2f(f2u(x) & 0x7fffffffu); }
/* |a| with the sign of s */
NANO_INLINE float with_sign(float a, float s) { return u2f(f2u(a) | (f2u(s) & 0x80000000u)); }

/* exp(x + lo) = p·s1·s2 (|lo| tiny next to |x|): x = k·ln2 + r, |r| <= ln2/2, p = e^r by a degree-6 polynomial (2.5e-9),
 * and 2^k as two normal factors s1, s2, so that a product f·exp(x) taken as ((f·p)·s1)·s2
 * rounds once even where it is subnormal. Overflows to inf above 88.72, is exactly 0 below
 * -120; NaN stays NaN. */
NANO_INLINE float nexp_parts(float x, float lo, float *s1, float *s2)
{
    int under = x < -120.0f; /* e^x < 2^-173: 0, even times a factor below 2^22 */
    x = fsel(under, -120.0f, x);
    x = fsel(x > 88.8f, 88.8f, x);
    float kf = x * 1.44269504088896341f + 0x1.8p23f; /* rounds x/ln2 to an integer */
    int32_t k = (int32_t)f2u(kf) - 0x4B400000;
    kf -= 0x1.8p23f;
    float r = x - kf * 0.693145751953125f; /* ln2 in 16 bits: exact product */
    r = (r - kf * 1.42860682030941723212e-6f) + lo; /* lo: a low-order part of x, if any */
    float p = 1.394110845e-03f;
    p = p * r + 8.375126398e-03f;
    p = p * r + 4.166635290e-02f;
    p = p * r + 1.666641551e-01f;
    p = p * r + 5.000000047e-01f;
    p = p * r + 1.000000038e+00f;
    p = fsel(under, 0.0f, p * r + 1.0f);
    int32_t k1 = k / 2, k2 = k - k1; /* each in [-87, 64] */
    *s1 = u2f((uint32_t)(k1 + 127) << 23);
    *s2 = u2f((uint32_t)(k2 + 127) << 23);
    return p;
}

NANO_INLINE float nexp(float x)
{
    float s1, s2, p = nexp_parts(x, 0.0f, &s1, &s2);
    return p * s1 * s2;
}

/* erfc(z) = t·exp(P(t) - z²) for z >= 0, t = 1/(1 + z/2): sets *t and returns P(t).
 * P is log(erfc(z)·e^{z²}/t) on z in [0, 10.1] (erfc underflows beyond) to 1e-8. */
NANO_INLINE float erfc_logpart(float z, float *t)
{
    float tt = 1.0f / (1.0f + 0.5f * z);
    float u = tt * 2.3960396039603959f - 1.3960396039603959f; /* t's range onto [-1, 1] */
    float p = -2.439868892e-05f;
    p = p * u + 5.601842272e-05f;
    p = p * u + 1.337202986e-04f;
    p = p * u - 5.421793226e-04f;
    p = p * u - 2.750867139e-04f;
    p = p * u + 3.740897197e-03f;
    p = p * u - 1.082378575e-03f;
    p = p * u - 2.960965388e-02f;
    p = p * u + 1.594364459e-02f;
    p = p * u + 5.711973812e-01f;
    p = p * u - 5.595379644e-01f;
    *t = tt;
    return p;
}

/* erf: z·E(z²) for |z| < 1 (E fitted on [0, 1], 1.3e-9), else ±(1 - erfc(|z|)). */
NANO_INLINE float nerf(float x)
{
    float a = fabs_bits(x), s = x * x;
    float e = 7.875875047e-05f;
    e = e * s - 8.016864282e-04f;
    e = e * s + 5.189087423e-03f;
    e = e * s - 2.685421201e-02f;
    e = e * s + 1.128359472e-01f;
    e = e * s - 3.761262667e-01f;
    e = e * s + 1.128379166e+00f;
    float t, p = erfc_logpart(a, &t);
    float big = with_sign(1.0f - t * nexp(p - a * a), x);
    return fsel(a < 1.0f, x * e, big);
}

/* Exact GELU x·Φ(x). Φ(-a) = erfc(a/√2)/2 = t·exp(P(t) - a²/2)/2, with a² split as
 * ah² + al·(2ah + al), ah = a to 12 bits, so that -ah²/2 is exact and the rest is carried
 * into exp as a low-order part: the tail keeps its relative accuracy (1 + erf would cancel,
 * and a rounded a²/2 would cost U·a²/2). Φ(x) = 1 - Φ(-x) for x >= 0. */
NANO_INLINE float ngelu(float x)
{
    float a = fabs_bits(x);
    a = fsel(a < 20.0f, a, 20.0f); /* Φ(-20) is 0 in float; keeps inf out of a² */
    float ah = u2f(f2u(a) & 0xfffff000u), al = a - ah;
    float t, p = erfc_logpart(a * 0.70710678118654752f, &t);
    /* exp(A + B), A = -ah²/2 exact, B = P - al(ah + al/2): A + B = hi + lo exactly (2Sum) */
    float A = -0.5f * (ah * ah), B = p - al * (ah + 0.5f * al);
    float hi = A + B, bb = hi - A, lo = (A - (hi - bb)) + (B - bb);
    float s1, s2, pe = nexp_parts(hi, lo, &s1, &s2), c = 0.5f * t;
    /* x·Φ(x); for x < 0 the exp's scale comes last, so that a subnormal result rounds once */
    return fsel(x < 0.0f, x * c * pe * s1 * s2, x * (1.0f - c * pe * s1 * s2));
}

/* tanh-approximated GELU 0.5x(1 + tanh(v/2)) = x·σ(v), v = 2√(2/π)(x + 0.044715x³): no
 * cancellation for negative x, and e^{-|v|} never overflows. */
NANO_INLINE float ngelu_tanh(float x)
{
    float v = x * (1.5957691216057308f + 0.0713548162726f * (x * x));
    float s1, s2, p = nexp_parts(-fabs_bits(v), 0.0f, &s1, &s2);
    float r = 1.0f / (1.0f + p * s1 * s2); /* σ(v) = r, or e^{-|v|}·r for v < 0 */
    return fsel(v >= 0.0f, x * r, x * r * p * s1 * s2);
}

NANO_INLINE float nsigmoid(float x)
{
    float e = nexp(-fabs_bits(x)), r = 1.0f / (1.0f + e);
    return fsel(x >= 0.0f, r, e * r);
}

/* tanh: x·T(x²) for |x| < 0.625 (T fitted, 4e-9), else ±(1 - e)/(1 + e), e = exp(-2|x|). */
NANO_INLINE float ntanh(float x)
{
    float a = fabs_bits(x), s = x * x;
    float p = -5.657135206e-03f;
    p = p * s + 2.058819148e-02f;
    p = p * s - 5.372010766e-02f;
    p = p * s + 1.333111406e-01f;
    p = p * s - 3.333325986e-01f;
    p = p * s + 9.999999960e-01f;
    float e = nexp(-2.0f * a);
    return fsel(a < 0.625f, x * p, with_sign((1.0f - e) / (1.0f + e), x));
}

/* ---- element-wise ---------------------------------------------------------------------- */

/* y[0..n) = f(x[0..n)), one thread (x == y allowed). */
NANO_CLONES static void act_run(int act, float lo, float hi, const float *x, float *y, size_t n)
{
    switch (act) {
    case NANO_ACT_RELU:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = fsel(x[i] < 0.0f, 0.0f, x[i]);
        break;
    case NANO_ACT_CLIP:
        NANO_SIMD for (size_t i = 0; i < n; i++) {
            float v = fsel(x[i] < lo, lo, x[i]);
            y[i] = fsel(v > hi, hi, v);
        }
        break;
    case NANO_ACT_GELU:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = ngelu(x[i]);
        break;
    case NANO_ACT_GELU_TANH:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = ngelu_tanh(x[i]);
        break;
    case NANO_ACT_SIGMOID:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = nsigmoid(x[i]);
        break;
    case NANO_ACT_TANH:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = ntanh(x[i]);
        break;
    case OP_ERF:
        NANO_SIMD for (size_t i = 0; i < n; i++) y[i] = nerf(x[i]);
        break;
    case OP_SQRT: /* libm: correctly rounded (does not vectorise with errno) */
        for (size_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
        break;
    default: /* NANO_ACT_NONE */
        if (x != y) memmove(y, x, n * sizeof *y);
        break;
    }
}

/* Splits n elements into BLK pieces over the threads. */
static void flat_run(int act, float lo, float hi, const float *x, float *y, size_t n, int nthreads)
{
    int64_t nb = (int64_t)((n + BLK - 1) / BLK);
    NANO_PAR_FOR(nthreads, nthreads > 1 && n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        size_t i0 = (size_t)b * BLK, len = n - i0 < BLK ? n - i0 : BLK;
        act_run(act, lo, hi, x + i0, y + i0, len);
    }
}

void nano_act_rows(int act, float lo, float hi, float *c, size_t ld, int m, int n)
{
    for (int i = 0; i < m; i++) act_run(act, lo, hi, c + (size_t)i * ld, c + (size_t)i * ld, (size_t)n);
}

void nano_act_apply(int act, float lo, float hi, const float *x, float *y, size_t n, int nthreads)
{
    flat_run(act, lo, hi, x, y, n, nthreads);
}

void nano_erf(const float *x, float *y, size_t n, int nthreads)
{
    flat_run(OP_ERF, 0, 0, x, y, n, nthreads);
}

void nano_sqrt(const float *x, float *y, size_t n, int nthreads)
{
    flat_run(OP_SQRT, 0, 0, x, y, n, nthreads);
}

/* ---- broadcasting ------------------------------------------------------------------------ */

/* The output's iteration space with up to 3 operands: size-1 output dims dropped, then
 * neighbouring dims merged wherever every operand steps through them as one. The last
 * dim (length d[nd-1]) is then contiguous (stride 1) or broadcast (stride 0) in each
 * operand; the others are walked as rows. */
typedef struct bwalk {
    int nd, nin;
    int64_t d[NANO_MAX_DIMS];
    int64_t s[3][NANO_MAX_DIMS]; /* element strides of each operand, 0 where broadcast */
} bwalk;

static void bw_init(bwalk *w, const nano_shape *ys, const nano_shape *const *in, int nin)
{
    int64_t s[3][NANO_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        int off = ys->ndim - in[k]->ndim;
        int64_t st = 1;
        for (int i = ys->ndim - 1; i >= 0; i--) {
            int64_t n = i >= off ? in[k]->d[i - off] : 1;
            s[k][i] = n == 1 ? 0 : st;
            st *= n;
        }
    }
    w->nd = 0;
    w->nin = nin;
    for (int i = 0; i < ys->ndim; i++) {
        if (ys->d[i] == 1) continue;
        int j = w->nd;
        int merge = j > 0;
        for (int k = 0; k < nin && merge; k++) merge = w->s[k][j - 1] == s[k][i] * ys->d[i];
        if (merge) {
            w->d[j - 1] *= ys->d[i];
            for (int k = 0; k < nin; k++) w->s[k][j - 1] = s[k][i];
        } else {
            w->d[j] = ys->d[i];
            for (int k = 0; k < nin; k++) w->s[k][j] = s[k][i];
            w->nd++;
        }
    }
    if (w->nd == 0) { /* a single element */
        w->nd = 1;
        w->d[0] = 1;
        for (int k = 0; k < nin; k++) w->s[k][0] = 0;
    }
}

/* Positions idx and operand offsets off at row r (rows: every dim but the last). */
static void bw_seek(const bwalk *w, int64_t r, int64_t *idx, int64_t *off)
{
    for (int k = 0; k < w->nin; k++) off[k] = 0;
    for (int i = w->nd - 2; i >= 0; i--) {
        idx[i] = r % w->d[i];
        r /= w->d[i];
        for (int k = 0; k < w->nin; k++) off[k] += idx[i] * w->s[k][i];
    }
}

/* The next row. */
static void bw_next(const bwalk *w, int64_t *idx, int64_t *off)
{
    for (int i = w->nd - 2; i >= 0; i--) {
        for (int k = 0; k < w->nin; k++) off[k] += w->s[k][i];
        if (++idx[i] < w->d[i]) return;
        for (int k = 0; k < w->nin; k++) off[k] -= w->d[i] * w->s[k][i];
        idx[i] = 0;
    }
}

/* Work items: row ranges when there are enough rows, else column blocks of each row. */
typedef struct bsplit {
    int64_t rows, cols, ntask, cb; /* cb: columns per task (cols when tasks are row ranges) */
} bsplit;

static bsplit bw_split(const bwalk *w, int nthreads)
{
    bsplit p;
    p.cols = w->d[w->nd - 1];
    p.rows = 1;
    for (int i = 0; i < w->nd - 1; i++) p.rows *= w->d[i];
    int64_t total = p.rows * p.cols;
    int nt = nthreads > 1 && total >= PAR_MIN ? nthreads : 1;
    if (nt == 1 || p.rows >= 4 * nt) {
        p.cb = p.cols;
        p.ntask = p.rows < 4 * nt ? p.rows : 4 * nt;
        if (nt == 1) p.ntask = 1;
    } else {
        int64_t per = (total + 4 * nt - 1) / (4 * nt);
        p.cb = per < p.cols ? per : p.cols;
        p.cb = (p.cb + 15) & ~(int64_t)15;
        p.ntask = p.rows * ((p.cols + p.cb - 1) / p.cb);
    }
    return p;
}

/* The row range and column range of task t. */
static void bw_task(const bsplit *p, int64_t t, int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1)
{
    if (p->cb == p->cols) {
        *r0 = p->rows * t / p->ntask;
        *r1 = p->rows * (t + 1) / p->ntask;
        *c0 = 0;
        *c1 = p->cols;
    } else {
        int64_t ncb = (p->cols + p->cb - 1) / p->cb;
        *r0 = t / ncb;
        *r1 = *r0 + 1;
        *c0 = (t % ncb) * p->cb;
        *c1 = *c0 + p->cb < p->cols ? *c0 + p->cb : p->cols;
    }
}

/* y[0..n) = a OP b, a and b stepping by sa, sb (0 or 1). */
#define BIN_LOOPS(EXPR)                                                            \
    do {                                                                           \
        if (sa && sb) {                                                            \
            NANO_SIMD for (int64_t i = 0; i < n; i++) { float u = a[i], v = b[i]; y[i] = (EXPR); } \
        } else if (sa) {                                                           \
            float v = b[0];                                                        \
            NANO_SIMD for (int64_t i = 0; i < n; i++) { float u = a[i]; y[i] = (EXPR); } \
        } else if (sb) {                                                           \
            float u = a[0];                                                        \
            NANO_SIMD for (int64_t i = 0; i < n; i++) { float v = b[i]; y[i] = (EXPR); } \
        } else {                                                                   \
            float u = a[0], v = b[0], r = (EXPR);                                  \
            for (int64_t i = 0; i < n; i++) y[i] = r;                              \
        }                                                                          \
    } while (0)

static void bin_inner(int op, const float *a, int sa, const float *b, int sb, float *y, int64_t n)
{
    switch (op) {
    case NANO_OP_ADD: BIN_LOOPS(u + v); break;
    case NANO_OP_SUB: BIN_LOOPS(u - v); break;
    case NANO_OP_MUL: BIN_LOOPS(u * v); break;
    case NANO_OP_DIV: BIN_LOOPS(u / v); break;
    default: /* NANO_OP_POW: x² exactly as powf(x, 2) rounds it; libm otherwise */
        if (!sb && b[0] == 2.0f) {
            int64_t sa64 = sa;
            NANO_SIMD for (int64_t i = 0; i < n; i++) y[i] = a[i * sa64] * a[i * sa64];
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = powf(a[sa ? i : 0], b[sb ? i : 0]);
        }
        break;
    }
}

/* Shapes: a, b broadcast (numpy, right-aligned) to ys; y contiguous (ys). */
void nano_binary(int op, const float *a, const nano_shape *as, const float *b, const nano_shape *bs,
                 float *y, const nano_shape *ys, int act, float lo, float hi, int nthreads)
{
    const nano_shape *in[2] = {as, bs};
    bwalk w;
    bw_init(&w, ys, in, 2);
    bsplit p = bw_split(&w, nthreads);
    int sa = w.s[0][w.nd - 1] != 0, sb = w.s[1][w.nd - 1] != 0;
    NANO_PAR_FOR(nthreads, p.ntask > 1)
    for (int64_t t = 0; t < p.ntask; t++) {
        int64_t r0, r1, c0, c1, idx[NANO_MAX_DIMS], off[3];
        bw_task(&p, t, &r0, &r1, &c0, &c1);
        bw_seek(&w, r0, idx, off);
        for (int64_t r = r0; r < r1; r++) {
            float *yr = y + r * p.cols + c0;
            bin_inner(op, a + off[0] + (sa ? c0 : 0), sa, b + off[1] + (sb ? c0 : 0), sb, yr, c1 - c0);
            if (act != NANO_ACT_NONE) act_run(act, lo, hi, yr, yr, (size_t)(c1 - c0));
            bw_next(&w, idx, off);
        }
    }
}

/* Shapes: c (u8, nonzero is true), x, z broadcast to ys. */
void nano_where(const uint8_t *c, const nano_shape *cs, const float *x, const nano_shape *xs,
                const float *z, const nano_shape *zs, float *y, const nano_shape *ys, int nthreads)
{
    const nano_shape *in[3] = {cs, xs, zs};
    bwalk w;
    bw_init(&w, ys, in, 3);
    bsplit p = bw_split(&w, nthreads);
    int64_t sc = w.s[0][w.nd - 1] != 0, sx = w.s[1][w.nd - 1] != 0, sz = w.s[2][w.nd - 1] != 0;
    NANO_PAR_FOR(nthreads, p.ntask > 1)
    for (int64_t t = 0; t < p.ntask; t++) {
        int64_t r0, r1, c0, c1, idx[NANO_MAX_DIMS], off[3];
        bw_task(&p, t, &r0, &r1, &c0, &c1);
        bw_seek(&w, r0, idx, off);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *cr = c + off[0] + sc * c0;
            const float *xr = x + off[1] + sx * c0, *zr = z + off[2] + sz * c0;
            float *yr = y + r * p.cols + c0;
            NANO_SIMD for (int64_t i = 0; i < c1 - c0; i++) yr[i] = fsel(cr[i * sc] != 0, xr[i * sx], zr[i * sz]);
            bw_next(&w, idx, off);
        }
    }
}

/* ---- softmax ----------------------------------------------------------------------------- */

/* One row of k contiguous values. The sum is in double (16 lanes). */
NANO_CLONES static void softmax_row(const float *x, float *y, int64_t k)
{
    float mv[16];
    for (int j = 0; j < 16; j++) mv[j] = x[0];
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        for (int j = 0; j < 16; j++) mv[j] = fsel(x[i + j] > mv[j], x[i + j], mv[j]);
    float m = mv[0];
    for (int j = 1; j < 16; j++) m = mv[j] > m ? mv[j] : m;
    for (; i < k; i++) m = x[i] > m ? x[i] : m;
    NANO_SIMD for (int64_t q = 0; q < k; q++) y[q] = nexp(x[q] - m);
    double sv[16] = {0}, s = 0;
    for (i = 0; i + 16 <= k; i += 16)
        for (int j = 0; j < 16; j++) sv[j] += y[i + j];
    for (int j = 0; j < 16; j++) s += sv[j];
    for (; i < k; i++) s += y[i];
    float inv = (float)(1.0 / s);
    NANO_SIMD for (int64_t q = 0; q < k; q++) y[q] *= inv;
}

/* Columns [j0, j0 + n) of one (k, inner) slab: each column is a softmax over k values
 * inner apart, vectorised across the columns. */
enum { SCOLS = 256 };
NANO_CLONES static void softmax_cols(const float *x, float *y, int64_t k, int64_t inner, int64_t n)
{
    float mx[SCOLS];
    double sm[SCOLS];
    for (int64_t j = 0; j < n; j++) { mx[j] = x[j]; sm[j] = 0; }
    for (int64_t r = 1; r < k; r++) {
        const float *xr = x + r * inner;
        NANO_SIMD for (int64_t j = 0; j < n; j++) mx[j] = fsel(xr[j] > mx[j], xr[j], mx[j]);
    }
    for (int64_t r = 0; r < k; r++) {
        const float *xr = x + r * inner;
        float *yr = y + r * inner;
        NANO_SIMD for (int64_t j = 0; j < n; j++) yr[j] = nexp(xr[j] - mx[j]);
        for (int64_t j = 0; j < n; j++) sm[j] += yr[j];
    }
    for (int64_t j = 0; j < n; j++) mx[j] = (float)(1.0 / sm[j]);
    for (int64_t r = 0; r < k; r++) {
        float *yr = y + r * inner;
        NANO_SIMD for (int64_t j = 0; j < n; j++) yr[j] *= mx[j];
    }
}

/* Shape: x (outer, k = d[axis], inner) -> y the same. */
void nano_softmax(const float *x, const nano_shape *xs, int axis, float *y, int nthreads)
{
    int64_t outer = 1, k = xs->d[axis], inner = 1;
    for (int i = 0; i < axis; i++) outer *= xs->d[i];
    for (int i = axis + 1; i < xs->ndim; i++) inner *= xs->d[i];
    int64_t total = outer * k * inner;
    if (inner == 1) {
        NANO_PAR_FOR(nthreads, nthreads > 1 && total >= PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++) softmax_row(x + o * k, y + o * k, k);
        return;
    }
    int64_t nb = (inner + SCOLS - 1) / SCOLS;
    NANO_PAR_FOR(nthreads, nthreads > 1 && total >= PAR_MIN && outer * nb > 1)
    for (int64_t t = 0; t < outer * nb; t++) {
        int64_t o = t / nb, j0 = (t % nb) * SCOLS;
        int64_t n = inner - j0 < SCOLS ? inner - j0 : SCOLS;
        softmax_cols(x + o * k * inner + j0, y + o * k * inner + j0, k, inner, n);
    }
}
