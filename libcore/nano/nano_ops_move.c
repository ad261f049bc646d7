/* nano_ops_move — the edge runtime's data movers: Transpose, Slice, Concat, Split,
 * Gather and Cast (nano_ops.h), on elements of any size.
 *
 * The one design decision: Transpose first simplifies the permutation — output dims of
 * size 1 dropped, output dims that are also neighbours in the input merged — so that
 * every permutation becomes one of two shapes of work: the output's last dim contiguous
 * in the input (rows copied with memcpy: attention's (0,2,1,3), any batch of rows), or a
 * 2-D transpose of the input's contiguous dim against the output's, done in 32 x 32
 * tiles (the last-two swap, NCHW <-> NHWC, and every other case, batched over the rest). */
#include <string.h>

#include "nano/nano_ops.h"

#include "nano/nano_ops_impl.h"

enum { PAR_MIN_BYTES = 1 << 18, TILE = 32, ROWS_PER_TASK = 64 };

/* n elements from src (stepping sstride elements) to dst (stepping dstride). */
static void copy_strided(char *dst, int64_t dstride, const char *src, int64_t sstride, int64_t n, size_t esize)
{
#define COPY_AS(T)                                                                                 \
    do {                                                                                           \
        T *d = (T *)(void *)dst;                                                                   \
        const T *s = (const T *)(const void *)src;                                                 \
        for (int64_t i = 0; i < n; i++) d[i * dstride] = s[i * sstride];                           \
    } while (0)
    if (dstride == 1 && sstride == 1) {
        memcpy(dst, src, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1: COPY_AS(uint8_t); break;
    case 2: COPY_AS(uint16_t); break;
    case 4: COPY_AS(uint32_t); break;
    case 8: COPY_AS(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)(i * dstride) * esize, src + (size_t)(i * sstride) * esize, esize);
        break;
    }
#undef COPY_AS
}

/* Offset (elements) of item k in the row-major walk over n dims d with strides s. */
static int64_t walk_off(int n, const int64_t *d, const int64_t *s, int64_t k)
{
    int64_t off = 0;
    for (int j = n - 1; j >= 0; j--) {
        off += (k % d[j]) * s[j];
        k /= d[j];
    }
    return off;
}

/* Shape: x (d[0..n)) -> y (d[perm[0]], ..., d[perm[n-1]]). */
void nano_transpose(const void *x, const nano_shape *xs, const int32_t *perm, void *y, size_t esize,
                    int nthreads)
{
    int64_t is[NANO_MAX_DIMS], od[NANO_MAX_DIMS], ist[NANO_MAX_DIMS], total = 1, st = 1;
    for (int i = xs->ndim - 1; i >= 0; i--) { is[i] = st; st *= xs->d[i]; }
    int m = 0;
    for (int i = 0; i < xs->ndim; i++) { /* output dim i reads input dim perm[i] */
        int64_t n = xs->d[perm[i]];
        total *= n;
        if (n == 1) continue;
        if (m > 0 && ist[m - 1] == is[perm[i]] * n) {
            od[m - 1] *= n;
            ist[m - 1] = is[perm[i]];
        } else {
            od[m] = n;
            ist[m++] = is[perm[i]];
        }
    }
    const char *xc = x;
    char *yc = y;
    if (m <= 1) { /* nothing moves */
        memcpy(y, x, (size_t)total * esize);
        return;
    }
    int par = nthreads > 1 && (size_t)total * esize >= PAR_MIN_BYTES;
    if (ist[m - 1] == 1) { /* rows of L contiguous elements, rows walked over dims 0..m-2 */
        int64_t L = od[m - 1], rows = total / L, ntask = (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
        NANO_PAR_FOR(nthreads, par && ntask > 1)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t r1 = (t + 1) * ROWS_PER_TASK < rows ? (t + 1) * ROWS_PER_TASK : rows;
            for (int64_t r = t * ROWS_PER_TASK; r < r1; r++)
                memcpy(yc + (size_t)(r * L) * esize, xc + (size_t)walk_off(m - 1, od, ist, r) * esize,
                       (size_t)L * esize);
        }
        return;
    }
    /* 2-D tiles over output dim q (input stride 1, output stride os_q) and the last output
     * dim (output stride 1, input stride ist[m-1]); the other dims are walked. */
    int q = 0;
    while (ist[q] != 1) q++;
    int64_t os_q = 1, od_o[NANO_MAX_DIMS], ist_o[NANO_MAX_DIMS], ost_o[NANO_MAX_DIMS], st_o = 1;
    for (int i = m - 1; i > q; i--) os_q *= od[i];
    int no = 0;
    for (int i = m - 1; i >= 0; i--) { /* output strides of the walked dims */
        if (i != q && i != m - 1) {
            od_o[no] = od[i];
            ist_o[no] = ist[i];
            ost_o[no++] = st_o;
        }
        st_o *= od[i];
    }
    for (int i = 0; i < no / 2; i++) { /* back to row-major order */
        int64_t t;
        t = od_o[i]; od_o[i] = od_o[no - 1 - i]; od_o[no - 1 - i] = t;
        t = ist_o[i]; ist_o[i] = ist_o[no - 1 - i]; ist_o[no - 1 - i] = t;
        t = ost_o[i]; ost_o[i] = ost_o[no - 1 - i]; ost_o[no - 1 - i] = t;
    }
    int64_t A = od[q], B = od[m - 1], sB = ist[m - 1];
    int64_t ta = (A + TILE - 1) / TILE, tb = (B + TILE - 1) / TILE, nouter = total / (A * B);
    NANO_PAR_FOR(nthreads, par)
    for (int64_t t = 0; t < nouter * ta * tb; t++) {
        int64_t o = t / (ta * tb), a0 = (t / tb) % ta * TILE, b0 = t % tb * TILE;
        int64_t a1 = a0 + TILE < A ? a0 + TILE : A, b1 = b0 + TILE < B ? b0 + TILE : B;
        int64_t xo = walk_off(no, od_o, ist_o, o), yo = walk_off(no, od_o, ost_o, o);
        for (int64_t a = a0; a < a1; a++)
            copy_strided(yc + (size_t)(yo + a * os_q + b0) * esize, 1, xc + (size_t)(xo + a + b0 * sB) * esize, sB,
                         b1 - b0, esize);
    }
}

/* Shape: x (xs) -> y (ys): y[i] = x[begin + i·step] per dim (begin in range, step != 0). */
void nano_slice(const void *x, const nano_shape *xs, const int64_t *begin, const int64_t *step, void *y,
                const nano_shape *ys, size_t esize)
{
    int n = xs->ndim;
    int64_t is[NANO_MAX_DIMS], ss[NANO_MAX_DIMS], st = 1, base = 0, rows = 1;
    for (int i = n - 1; i >= 0; i--) {
        is[i] = st;
        st *= xs->d[i];
    }
    for (int i = 0; i < n; i++) {
        base += begin[i] * is[i];
        ss[i] = step[i] * is[i];
    }
    if (n == 0) {
        memcpy(y, x, esize);
        return;
    }
    for (int i = 0; i < n - 1; i++) rows *= ys->d[i];
    int64_t L = ys->d[n - 1];
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = base + walk_off(n - 1, ys->d, ss, r);
        copy_strided((char *)y + (size_t)(r * L) * esize, 1, (const char *)x + off * (int64_t)esize, ss[n - 1], L,
                     esize);
    }
}

/* (outer, inner) of a shape split at axis: inner counts the axis and everything after. */
static void split_at(const nano_shape *s, int axis, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s->d[i];
    for (int i = axis; i < s->ndim; i++) *inner *= s->d[i];
}

/* Shapes: xs[k] (outer, n_k, rest) -> y (outer, Σ n_k, rest). */
void nano_concat(const void *const *xs, const nano_shape *shapes, int n, int axis, void *y, size_t esize)
{
    int64_t outer, inner, yrow = 0;
    for (int k = 0; k < n; k++) {
        split_at(&shapes[k], axis, &outer, &inner);
        yrow += inner;
    }
    int64_t col = 0;
    for (int k = 0; k < n; k++) {
        split_at(&shapes[k], axis, &outer, &inner);
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)y + (size_t)(o * yrow + col) * esize, (const char *)xs[k] + (size_t)(o * inner) * esize,
                   (size_t)inner * esize);
        col += inner;
    }
}

/* Shapes: x (outer, Σ n_k, rest) -> ys[k] (outer, n_k, rest). */
void nano_split(const void *x, const nano_shape *xs, int axis, void *const *ys, const nano_shape *shapes,
                int n, size_t esize)
{
    int64_t outer, inner, xrow;
    split_at(xs, axis, &outer, &xrow);
    int64_t col = 0;
    for (int k = 0; k < n; k++) {
        split_at(&shapes[k], axis, &outer, &inner);
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)ys[k] + (size_t)(o * inner) * esize, (const char *)x + (size_t)(o * xrow + col) * esize,
                   (size_t)inner * esize);
        col += inner;
    }
}

static int64_t index_at(const void *idx, int idx64, int64_t i)
{
    return idx64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
}

/* Shapes: data (outer, K, inner), indices is -> y (outer, is..., inner). */
int nano_gather(const void *data, const nano_shape *ds, int axis, const void *idx, int idx64,
                const nano_shape *is, void *y, size_t esize)
{
    int64_t outer = 1, K = ds->d[axis], inner = 1, ni = 1;
    for (int i = 0; i < axis; i++) outer *= ds->d[i];
    for (int i = axis + 1; i < ds->ndim; i++) inner *= ds->d[i];
    for (int i = 0; i < is->ndim; i++) ni *= is->d[i];
    for (int64_t t = 0; t < ni; t++) { /* every index checked before anything is written */
        int64_t v = index_at(idx, idx64, t);
        if (v < -K || v >= K) return -1;
    }
    size_t row = (size_t)inner * esize;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t t = 0; t < ni; t++) {
            int64_t v = index_at(idx, idx64, t);
            v += v < 0 ? K : 0;
            memcpy((char *)y + (size_t)(o * ni + t) * row, (const char *)data + (size_t)(o * K + v) * row, row);
        }
    return 0;
}

/* Float to integer: truncation toward zero, saturated at the type's range, NaN -> 0
 * (ONNX leaves out-of-range undefined; C would too). */
static int32_t f2i32(float v)
{
    return v != v ? 0 : v >= 2147483648.0f ? INT32_MAX : v < -2147483648.0f ? INT32_MIN : (int32_t)v;
}
static int64_t f2i64(float v)
{
    return v != v ? 0 : v >= 9223372036854775808.0f ? INT64_MAX : v < -9223372036854775808.0f ? INT64_MIN : (int64_t)v;
}
static uint8_t f2u8(float v)
{
    return v != v ? 0 : v >= 255.0f ? 255 : v <= -1.0f ? 0 : (uint8_t)(int32_t)v;
}

/* n elements between NANO_DT_F32, I32, I64 and U8 (U8 as uint8: integers wrap mod 256
 * as C converts them; floats saturate). Other dtypes are not cast (nothing written). */
void nano_cast(const void *x, int from, void *y, int to, size_t n)
{
#define CAST(TI, TO, EXPR)                                                       \
    do {                                                                         \
        const TI *s = x;                                                         \
        TO *d = y;                                                               \
        for (size_t i = 0; i < n; i++) { TI v = s[i]; d[i] = (EXPR); }            \
    } while (0)
#define PAIR(a, b) ((a) * 16 + (b))
    switch (PAIR(from, to)) {
    case PAIR(NANO_DT_F32, NANO_DT_I32): CAST(float, int32_t, f2i32(v)); break;
    case PAIR(NANO_DT_F32, NANO_DT_I64): CAST(float, int64_t, f2i64(v)); break;
    case PAIR(NANO_DT_F32, NANO_DT_U8): CAST(float, uint8_t, f2u8(v)); break;
    case PAIR(NANO_DT_I32, NANO_DT_F32): CAST(int32_t, float, (float)v); break;
    case PAIR(NANO_DT_I32, NANO_DT_I64): CAST(int32_t, int64_t, (int64_t)v); break;
    case PAIR(NANO_DT_I32, NANO_DT_U8): CAST(int32_t, uint8_t, (uint8_t)v); break;
    case PAIR(NANO_DT_I64, NANO_DT_F32): CAST(int64_t, float, (float)v); break;
    case PAIR(NANO_DT_I64, NANO_DT_I32): CAST(int64_t, int32_t, (int32_t)(uint32_t)v); break;
    case PAIR(NANO_DT_I64, NANO_DT_U8): CAST(int64_t, uint8_t, (uint8_t)v); break;
    case PAIR(NANO_DT_U8, NANO_DT_F32): CAST(uint8_t, float, (float)v); break;
    case PAIR(NANO_DT_U8, NANO_DT_I32): CAST(uint8_t, int32_t, (int32_t)v); break;
    case PAIR(NANO_DT_U8, NANO_DT_I64): CAST(uint8_t, int64_t, (int64_t)v); break;
    default:
        if (from == to && (from == NANO_DT_F32 || from == NANO_DT_I32 || from == NANO_DT_I64 || from == NANO_DT_U8))
            memcpy(y, x, n * (from == NANO_DT_U8 ? 1 : from == NANO_DT_I64 ? 8 : 4));
        break;
    }
#undef PAIR
#undef CAST
}
