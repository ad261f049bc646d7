/* attention — see attention.h for the contract. This file: the tiled fast path
 * (online-softmax forward, recomputing backward) and the double reference.
 *
 * Tile products (S = Q K^T, O += P V and the five products of the backward) are
 * small cblas_sgemm calls on strided views of q, k, v; softmax, masks and the
 * online rescaling are plain loops between them. Measured on the build host (AMD
 * EPYC, 1 thread, GPT-2 shape B=2 T=1024 C=768 NH=12, causal): hand-vectorised
 * axpy loops over a packed K^T reached 8 GFLOP/s forward and 7 backward, sgemm
 * tiles 17 and 24 (OpenBLAS picks AVX2/FMA kernels at run time; -O2 alone gives
 * SSE2). 64 query rows per tile measured ~10% faster than 32.
 *
 * Every tile product is kept within 2^18 multiply-adds (64 x 64 x HS for HS <= 64;
 * fewer query rows for wider heads): OpenBLAS runs products that small on the
 * calling thread, above that it wakes its own pool (measured: 32x64x128 11 us per
 * call, 32x64x129 20 us), which inside our OpenMP region only oversubscribes. */
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

#include "base/log.h"
#include "isa_variant.h"
#include "vmath.h"

#define ATTN_BR_MAX 64              /* query rows per tile, at most */
#define ATTN_BC 64                  /* keys per tile */
#define ATTN_TILE_MACS (1L << 18)   /* multiply-adds per tile product, at most (see above) */

static inline int attn_min(int a, int b) { return a < b ? a : b; }

static void attn_check_shape(int ld, int B, int T, int C, int NH)
{
    CHECK(B >= 0 && T >= 0 && NH > 0 && C > 0 && C % NH == 0,
          "attention: need B, T >= 0 and C a positive multiple of NH");
    CHECK(ld >= C, "attention: ld is the row stride of q, k, v in floats and must be >= C");
}

/* Query rows per tile: the largest power of two <= ATTN_BR_MAX whose tile products
 * (BR x BC x HS) stay within ATTN_TILE_MACS. */
static int attn_tile_rows(int HS)
{
    int br = ATTN_BR_MAX;
    while (br > 1 && (long)br * ATTN_BC * HS > ATTN_TILE_MACS) br /= 2;
    return br;
}

/* Per-thread scratch: tiles plus O(T) (forward) or O(T * HS) (backward). */
typedef struct attn_scratch {
    float *S;   /* (BR, BC) scores, then probabilities P */
    float *dS;  /* (BR, BC) dP, then scale * dS (backward) */
    float *O;   /* (BR, HS) unnormalised output rows (forward) */
    float *m;   /* (BR) running max (forward) */
    float *l;   /* (BR) running sum of exp (forward) */
    float *dQ;  /* (T, HS) dq of the current head (backward) */
    float *dKj; /* (BC, HS) dk of the current key tile (backward) */
    float *dVj; /* (BC, HS) dv of the current key tile (backward) */
    float *D;   /* (T) rowsum(dout * out) of the current head (backward) */
    float *mem; /* the one allocation behind the fields */
} attn_scratch;

static void attn_scratch_init(attn_scratch *w, int T, int HS, int BR, int backward)
{
    const size_t tile = (size_t)BR * ATTN_BC, fwd = tile + (size_t)BR * HS + 2 * (size_t)BR,
                 bwd = 2 * tile + (size_t)T * HS + 2 * (size_t)ATTN_BC * HS + (size_t)T;
    w->mem = malloc((backward ? bwd : fwd) * sizeof(float));
    CHECK(w->mem != NULL, "attention: out of memory for the per-thread scratch");
    float *p = w->mem;
    w->S = p; p += tile;
    w->dS = w->O = w->m = w->l = w->dQ = w->dKj = w->dVj = w->D = NULL;
    if (!backward) {
        w->O = p; p += (size_t)BR * HS;
        w->m = p; p += BR;
        w->l = p;
    } else {
        w->dS = p; p += tile;
        w->dQ = p; p += (size_t)T * HS;
        w->dKj = p; p += (size_t)ATTN_BC * HS;
        w->dVj = p; p += (size_t)ATTN_BC * HS;
        w->D = p;
    }
}

/* S (nr, nc) of rows [i0, i0+nr) against keys [j0, j0+nc): scale * Q K^T, then -inf
 * where masked. Shared by forward and backward (same tiles, same BLAS call), so the
 * backward recomputes the forward's scores bit for bit. */
static void attn_scores(float *S, const float *q, const float *k, int ld, const float *km, int HS, int i0, int nr,
                        int j0, int nc, int causal)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, HS, 1.0f / sqrtf((float)HS), q + (size_t)i0 * ld,
                ld, k + (size_t)j0 * ld, ld, 0.0f, S, ATTN_BC);
    for (int r = 0; r < nr; r++) {
        const int i = i0 + r;
        if (!km && !(causal && j0 + nc - 1 > i)) continue;
        float *s = S + (size_t)r * ATTN_BC;
        for (int c = 0; c < nc; c++)
            if ((causal && j0 + c > i) || (km && km[j0 + c] == 0.0f)) s[c] = -INFINITY; /* 0.0 masks */
    }
}

/* One (b, h): out rows of stride C, lse (T); q, k, v rows of stride ld. */
static void attn_forward_head(float *out, float *lse, const float *q, const float *k, const float *v, int ld,
                              const float *km, int T, int C, int HS, int BR, int causal, attn_scratch *w)
{
    for (int i0 = 0; i0 < T; i0 += BR) {
        const int nr = attn_min(BR, T - i0), jend = causal ? i0 + nr : T;
        for (int r = 0; r < nr; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
        memset(w->O, 0, (size_t)nr * HS * sizeof(float));
        for (int j0 = 0; j0 < jend; j0 += ATTN_BC) {
            const int nc = attn_min(ATTN_BC, jend - j0);
            attn_scores(w->S, q, k, ld, km, HS, i0, nr, j0, nc, causal);
            for (int r = 0; r < nr; r++) { /* online softmax: P in place of S */
                float *restrict s = w->S + (size_t)r * ATTN_BC, *restrict o = w->O + (size_t)r * HS;
                float mx = w->m[r];
#pragma omp simd reduction(max : mx)
                for (int c = 0; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
                if (mx == -INFINITY) { /* every key so far masked: this row adds nothing */
                    for (int c = 0; c < nc; c++) s[c] = 0.0f;
                    continue;
                }
                const float alpha = vm_expf(w->m[r] - mx); /* rescales what was summed under the old max */
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int c = 0; c < nc; c++) {
                    s[c] = vm_expf(s[c] - mx); /* masked: exp(-inf) = 0 */
                    sum += s[c];
                }
                w->l[r] = w->l[r] * alpha + sum;
                w->m[r] = mx;
                if (alpha != 1.0f)
#pragma omp simd
                    for (int d = 0; d < HS; d++) o[d] *= alpha;
            }
            /* O += P V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, nc, 1.0f, w->S, ATTN_BC,
                        v + (size_t)j0 * ld, ld, 1.0f, w->O, HS);
        }
        for (int r = 0; r < nr; r++) {
            float *restrict o = out + (size_t)(i0 + r) * C;
            const float *restrict a = w->O + (size_t)r * HS;
            if (w->l[r] == 0.0f) { /* all keys masked: defined as out = 0, lse = -inf */
                for (int d = 0; d < HS; d++) o[d] = 0.0f;
                lse[i0 + r] = -INFINITY;
                continue;
            }
            const float inv = 1.0f / w->l[r];
#pragma omp simd
            for (int d = 0; d < HS; d++) o[d] = a[d] * inv;
            lse[i0 + r] = w->m[r] + logf(w->l[r]);
        }
    }
}

void ISA_FN(attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int ld,
                       const float *key_mask, int B, int T, int C, int NH, int causal)
{
    attn_check_shape(ld, B, T, C, NH);
    if (B == 0 || T == 0) return;
    const int HS = C / NH, BR = attn_tile_rows(HS);
#pragma omp parallel
    {
        attn_scratch w;
        attn_scratch_init(&w, T, HS, BR, 0);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t in = (size_t)b * T * ld + (size_t)h * HS;
            attn_forward_head(out + (size_t)b * T * C + (size_t)h * HS, lse + (size_t)bh * T, q + in, k + in,
                              v + in, ld, key_mask ? key_mask + (size_t)b * T : NULL, T, C, HS, BR, causal, &w);
        }
        free(w.mem);
    }
}

/* One (b, h) of the backward, key tiles outer (FlashAttention-2): dk, dv of a key
 * tile are complete when its query loop ends; dq is summed for the whole head. All
 * three are summed in the scratch and added to dq, dk, dv once, so the result is
 * exactly init + gradient. */
static void attn_backward_head(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, int ld, const float *out, const float *lse, const float *km, int T,
                               int C, int HS, int BR, int causal, attn_scratch *w)
{
    const float scale = 1.0f / sqrtf((float)HS);
    for (int i = 0; i < T; i++) { /* D_i = dout_i . out_i = sum_j P_ij dP_ij */
        const float *restrict g = dout + (size_t)i * C, *restrict o = out + (size_t)i * C;
        float D = 0.0f;
#pragma omp simd reduction(+ : D)
        for (int d = 0; d < HS; d++) D += g[d] * o[d];
        w->D[i] = D;
    }
    memset(w->dQ, 0, (size_t)T * HS * sizeof(float));
    for (int j0 = 0; j0 < T; j0 += ATTN_BC) {
        const int nc = attn_min(ATTN_BC, T - j0);
        memset(w->dKj, 0, (size_t)nc * HS * sizeof(float));
        memset(w->dVj, 0, (size_t)nc * HS * sizeof(float));
        /* Causal: query tiles that end before key j0 see none of these keys. */
        for (int i0 = causal ? j0 / BR * BR : 0; i0 < T; i0 += BR) {
            const int nr = attn_min(BR, T - i0);
            const float *gi = dout + (size_t)i0 * C;
            attn_scores(w->S, q, k, ld, km, HS, i0, nr, j0, nc, causal);
            /* dP = dout_i V_j^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, HS, 1.0f, gi, C, v + (size_t)j0 * ld, ld,
                        0.0f, w->dS, ATTN_BC);
            for (int r = 0; r < nr; r++) {
                float *restrict s = w->S + (size_t)r * ATTN_BC, *restrict ds = w->dS + (size_t)r * ATTN_BC;
                const float L = lse[i0 + r], D = w->D[i0 + r];
                if (L == -INFINITY) { /* fully masked row: no gradient */
                    for (int c = 0; c < nc; c++) s[c] = ds[c] = 0.0f;
                    continue;
                }
#pragma omp simd
                for (int c = 0; c < nc; c++) {
                    s[c] = vm_expf(s[c] - L);             /* P, 0 where masked */
                    ds[c] = scale * s[c] * (ds[c] - D);   /* scale * dS */
                }
            }
            /* dV_j += P^T dout_i;  dQ_i += (scale dS) K_j;  dK_j += (scale dS)^T Q_i */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, HS, nr, 1.0f, w->S, ATTN_BC, gi, C, 1.0f,
                        w->dVj, HS);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, nc, 1.0f, w->dS, ATTN_BC,
                        k + (size_t)j0 * ld, ld, 1.0f, w->dQ + (size_t)i0 * HS, HS);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, HS, nr, 1.0f, w->dS, ATTN_BC,
                        q + (size_t)i0 * ld, ld, 1.0f, w->dKj, HS);
        }
        for (int c = 0; c < nc; c++) {
            float *restrict dkr = dk + (size_t)(j0 + c) * ld, *restrict dvr = dv + (size_t)(j0 + c) * ld;
            const float *restrict a = w->dKj + (size_t)c * HS, *restrict b = w->dVj + (size_t)c * HS;
#pragma omp simd
            for (int d = 0; d < HS; d++) dkr[d] += a[d], dvr[d] += b[d];
        }
    }
    for (int i = 0; i < T; i++) {
        float *restrict dqr = dq + (size_t)i * ld;
        const float *restrict a = w->dQ + (size_t)i * HS;
#pragma omp simd
        for (int d = 0; d < HS; d++) dqr[d] += a[d];
    }
}

void ISA_FN(attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, int ld, const float *out, const float *lse, const float *key_mask, int B,
                        int T, int C, int NH, int causal)
{
    attn_check_shape(ld, B, T, C, NH);
    if (B == 0 || T == 0) return;
    const int HS = C / NH, BR = attn_tile_rows(HS);
#pragma omp parallel
    {
        attn_scratch w;
        attn_scratch_init(&w, T, HS, BR, 1);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t in = (size_t)b * T * ld + (size_t)h * HS, oc = (size_t)b * T * C + (size_t)h * HS;
            attn_backward_head(dq + in, dk + in, dv + in, dout + oc, q + in, k + in, v + in, ld, out + oc,
                               lse + (size_t)bh * T, key_mask ? key_mask + (size_t)b * T : NULL, T, C, HS, BR,
                               causal, &w);
        }
        free(w.mem);
    }
}

#if ISA_ONCE
ISA_VARIANTS(void, attention_forward, (float *out, float *lse, const float *q, const float *k, const float *v,
                                        int ld, const float *key_mask, int B, int T, int C, int NH, int causal));
ISA_VARIANTS(void, attention_backward, (float *dq, float *dk, float *dv, const float *dout, const float *q,
                                         const float *k, const float *v, int ld, const float *out, const float *lse,
                                         const float *key_mask, int B, int T, int C, int NH, int causal));

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int ld,
                       const float *key_mask, int B, int T, int C, int NH, int causal)
{
    ISA_DISPATCH(attention_forward, (out, lse, q, k, v, ld, key_mask, B, T, C, NH, causal));
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, int ld, const float *out, const float *lse, const float *key_mask, int B,
                        int T, int C, int NH, int causal)
{
    ISA_DISPATCH(attention_backward, (dq, dk, dv, dout, q, k, v, ld, out, lse, key_mask, B, T, C, NH, causal));
}

/* ---- The specification: double, plain loops, full (T, T) softmax per head. ---- */

/* P (T, T) = softmax of the masked, scaled scores of one (b, h); lse (T) or NULL.
 * q, k point at the head's first column of sequence b. */
static void attn_ref_probs(double *P, double *lse, const double *q, const double *k, int ld, const double *km,
                           int T, int HS, int causal)
{
    const double scale = 1.0 / sqrt((double)HS);
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0.0, *Pi = P + (size_t)i * T;
        for (int j = 0; j < T; j++) {
            double s = -INFINITY;
            if (!((causal && j > i) || (km && km[j] == 0.0))) {
                s = 0.0;
                for (int d = 0; d < HS; d++) s += q[(size_t)i * ld + d] * k[(size_t)j * ld + d];
                s *= scale;
            }
            Pi[j] = s;
            if (s > mx) mx = s;
        }
        if (mx == -INFINITY) { /* every key masked: P row 0, lse -inf */
            for (int j = 0; j < T; j++) Pi[j] = 0.0;
            if (lse) lse[i] = -INFINITY;
            continue;
        }
        for (int j = 0; j < T; j++) sum += exp(Pi[j] - mx);
        for (int j = 0; j < T; j++) Pi[j] = exp(Pi[j] - mx) / sum;
        if (lse) lse[i] = mx + log(sum);
    }
}

void attention_forward_ref(double *out, double *lse, const double *q, const double *k, const double *v, int ld,
                           const double *key_mask, int B, int T, int C, int NH, int causal)
{
    attn_check_shape(ld, B, T, C, NH);
    const int HS = C / NH;
    double *P = malloc(((size_t)T * T + 1) * sizeof(double));
    CHECK(P != NULL, "attention_forward_ref: out of memory for the (T, T) softmax");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t in = (size_t)b * T * ld + (size_t)h * HS;
            attn_ref_probs(P, lse + ((size_t)b * NH + h) * T, q + in, k + in, ld,
                           key_mask ? key_mask + (size_t)b * T : NULL, T, HS, causal);
            for (int i = 0; i < T; i++)
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++) o += P[(size_t)i * T + j] * v[in + (size_t)j * ld + d];
                    out[((size_t)b * T + i) * C + (size_t)h * HS + d] = o;
                }
        }
    free(P);
}

void attention_backward_ref(double *dq, double *dk, double *dv, const double *dout, const double *q,
                            const double *k, const double *v, int ld, const double *out, const double *lse,
                            const double *key_mask, int B, int T, int C, int NH, int causal)
{
    (void)out; /* the specification recomputes everything from q, k, v */
    (void)lse;
    attn_check_shape(ld, B, T, C, NH);
    const int HS = C / NH;
    const double scale = 1.0 / sqrt((double)HS);
    double *P = malloc(((size_t)T * T + 1) * sizeof(double)), *dS = malloc(((size_t)T * T + 1) * sizeof(double));
    CHECK(P != NULL && dS != NULL, "attention_backward_ref: out of memory for the (T, T) softmax");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t in = (size_t)b * T * ld + (size_t)h * HS;
            const double *g = dout + (size_t)b * T * C + (size_t)h * HS; /* rows of stride C */
            attn_ref_probs(P, NULL, q + in, k + in, ld, key_mask ? key_mask + (size_t)b * T : NULL, T, HS, causal);
            for (int i = 0; i < T; i++) { /* dP_ij = dout_i . v_j; dS = P o (dP - rowsum(P o dP)) */
                double rs = 0.0;
                for (int j = 0; j < T; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += g[(size_t)i * C + d] * v[in + (size_t)j * ld + d];
                    dS[(size_t)i * T + j] = dp;
                    rs += P[(size_t)i * T + j] * dp;
                }
                for (int j = 0; j < T; j++) dS[(size_t)i * T + j] = P[(size_t)i * T + j] * (dS[(size_t)i * T + j] - rs);
            }
            for (int i = 0; i < T; i++)
                for (int d = 0; d < HS; d++) {
                    double a = 0.0;
                    for (int j = 0; j < T; j++) a += dS[(size_t)i * T + j] * k[in + (size_t)j * ld + d];
                    dq[in + (size_t)i * ld + d] += scale * a;
                }
            for (int j = 0; j < T; j++)
                for (int d = 0; d < HS; d++) {
                    double a = 0.0, c = 0.0;
                    for (int i = 0; i < T; i++) {
                        a += dS[(size_t)i * T + j] * q[in + (size_t)i * ld + d];
                        c += P[(size_t)i * T + j] * g[(size_t)i * C + d];
                    }
                    dk[in + (size_t)j * ld + d] += scale * a;
                    dv[in + (size_t)j * ld + d] += c;
                }
        }
    free(dS);
    free(P);
}
#endif
