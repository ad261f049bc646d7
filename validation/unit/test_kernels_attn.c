/* test_kernels_attn — the attention and cross-entropy kernels against their double
 * specifications (docs/testing.md#kernel-triad). For every case:
 *   (a) fast forward vs double reference, derived tolerances, canaries around outputs;
 *   (b) reference backward vs central differences of L = sum(out * R) in double;
 *   (c) fast backward vs reference backward;
 *   (d) backward adds into the gradients (fast: bit for bit init + gradient);
 *   (e) bit-identical results with 1 and 2 OpenMP threads.
 * Attention cases cover odd shapes, T = 1, partial tiles, causal and not, key
 * masks with fully masked rows, and both q/k/v layouts (interleaved ld = 3C as in
 * GPT-2, separate ld = C as in BERT). Cross-entropy adds a padded vocabulary with
 * NaN in the padded columns, ignored rows, logits of 1e4 scale, and a bad target
 * that must die. One line per check; exit 1 on any failure. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/attention.h"
#include "cpu/isa.h"
#include "cpu/xent.h"
#include "../check.h"

#define SEED UINT64_C(20240607)

/* ---------------------------------------------------------------- helpers */

static double max_abs_d(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* kc_close for arrays where the reference may be -inf (lse of fully masked rows):
 * those entries must be -inf exactly, the others are compared with kc_close. */
static bool close_or_neginf(kc *k, const float *got, const double *ref, size_t n, double atol, double rtol,
                            const char *what)
{
    float *g = malloc((n + 1) * sizeof(float));
    double *r = malloc((n + 1) * sizeof(double));
    bool inf_ok = true;
    for (size_t i = 0; i < n; i++) {
        bool ref_inf = ref[i] == -INFINITY, got_inf = got[i] == -INFINITY;
        if (ref_inf != got_inf) inf_ok = false;
        g[i] = ref_inf ? 0.0f : got[i];
        r[i] = ref_inf ? 0.0 : ref[i];
    }
    bool ok = kc_close(k, g, r, n, atol, rtol, what);
    if (!inf_ok) kc_report(k, false, "    ... -inf exactly where the reference is -inf", 0);
    free(g);
    free(r);
    return ok && inf_ok;
}

static bool bits_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* ---------------------------------------------------------------- attention */

typedef struct attn_case {
    const char *name;
    int B, T, C, NH, causal;
    int interleaved; /* 1: q, k, v in one (B, T, 3C) buffer, ld = 3C; 0: three (B, T, C), ld = C */
    int mask;        /* 0: none; 1: random padding, last sequence fully masked if B > 1; 2: first two keys of b = 0 (left padding) */
    int numgrad;     /* run (b): the central-difference check of the reference (cost ~ B T^3 C) */
} attn_case;

/* The buffers of one case. q, k, v (and their gradients) live in nbuf buffers of
 * B*T*ld values; view v in {q, k, v} is buffer vb[v] at column offset vo[v]. */
typedef struct attn_data {
    const attn_case *c;
    int ld, nbuf, vb[3], vo[3];
    size_t nx, no, nl;    /* values per input buffer, in out, in lse */
    double *xd[3], *kmd;  /* inputs in double (exactly the float inputs), key mask */
    float *xf[3], *kmf;   /* inputs in float */
    double *R, *outd, *lsed;  /* (b): weights of L, reference scratch */
} attn_data;

static void attn_data_init(attn_data *a, const attn_case *c, kc *k)
{
    memset(a, 0, sizeof *a);
    a->c = c;
    a->ld = c->interleaved ? 3 * c->C : c->C;
    a->nbuf = c->interleaved ? 1 : 3;
    for (int v = 0; v < 3; v++) {
        a->vb[v] = c->interleaved ? 0 : v;
        a->vo[v] = c->interleaved ? v * c->C : 0;
    }
    a->nx = (size_t)c->B * c->T * a->ld;
    a->no = (size_t)c->B * c->T * c->C;
    a->nl = (size_t)c->B * c->NH * c->T;
    for (int i = 0; i < a->nbuf; i++) {
        a->xf[i] = malloc(a->nx * sizeof(float));
        a->xd[i] = malloc(a->nx * sizeof(double));
        kc_uniform(k, a->xf[i], a->nx, -2.0f, 2.0f); /* scores up to ~HS/sqrt(HS): peaked softmax rows */
        kc_to_double(a->xd[i], a->xf[i], a->nx);
    }
    a->kmd = NULL;
    a->kmf = NULL;
    if (c->mask) {
        size_t n = (size_t)c->B * c->T;
        a->kmf = malloc(n * sizeof(float));
        a->kmd = malloc(n * sizeof(double));
        for (int b = 0; b < c->B; b++)
            for (int j = 0; j < c->T; j++) {
                float keep = rng_uniform(&k->r) < 0.7f ? 1.0f : 0.0f;
                if (c->mask == 1 && c->B > 1 && b == c->B - 1) keep = 0.0f; /* a fully padded sequence */
                if (c->mask == 2) keep = (b == 0 && j < 2) ? 0.0f : 1.0f; /* left padding */
                a->kmf[(size_t)b * c->T + j] = keep;
            }
        kc_to_double(a->kmd, a->kmf, n);
    }
    a->R = malloc(a->no * sizeof(double));
    a->outd = malloc(a->no * sizeof(double));
    a->lsed = malloc(a->nl * sizeof(double));
    kc_uniform_d(k, a->R, a->no, -1.0, 1.0);
}

static void attn_data_free(attn_data *a)
{
    for (int i = 0; i < a->nbuf; i++) free(a->xf[i]), free(a->xd[i]);
    free(a->kmf), free(a->kmd), free(a->R), free(a->outd), free(a->lsed);
}

#define VIEW(a, bufs, v) ((bufs)[(a)->vb[v]] + (a)->vo[v])

static void attn_fwd_fast(const attn_data *a, float *out, float *lse)
{
    const attn_case *c = a->c;
    attention_forward(out, lse, VIEW(a, a->xf, 0), VIEW(a, a->xf, 1), VIEW(a, a->xf, 2), a->ld, a->kmf, c->B, c->T,
                      c->C, c->NH, c->causal);
}

static void attn_bwd_fast(const attn_data *a, float **dx, const float *dout, const float *out, const float *lse)
{
    const attn_case *c = a->c;
    attention_backward(VIEW(a, dx, 0), VIEW(a, dx, 1), VIEW(a, dx, 2), dout, VIEW(a, a->xf, 0), VIEW(a, a->xf, 1),
                       VIEW(a, a->xf, 2), a->ld, out, lse, a->kmf, c->B, c->T, c->C, c->NH, c->causal);
}

static void attn_fwd_ref(attn_data *a, double *out, double *lse)
{
    const attn_case *c = a->c;
    attention_forward_ref(out, lse, VIEW(a, a->xd, 0), VIEW(a, a->xd, 1), VIEW(a, a->xd, 2), a->ld, a->kmd, c->B,
                          c->T, c->C, c->NH, c->causal);
}

static void attn_bwd_ref(const attn_data *a, double **dx, const double *dout)
{
    const attn_case *c = a->c;
    attention_backward_ref(VIEW(a, dx, 0), VIEW(a, dx, 1), VIEW(a, dx, 2), dout, VIEW(a, a->xd, 0),
                           VIEW(a, a->xd, 1), VIEW(a, a->xd, 2), a->ld, NULL, NULL, a->kmd, c->B, c->T, c->C, c->NH,
                           c->causal);
}

/* L = sum(out * R) through the reference forward; kc_numeric_grad perturbs xd. */
static double attn_loss(void *ctx)
{
    attn_data *a = ctx;
    attn_fwd_ref(a, a->outd, a->lsed);
    double L = 0;
    for (size_t i = 0; i < a->no; i++) L += a->outd[i] * a->R[i];
    return L;
}

/* Gathers view v (B*T rows of C values at stride ld) into a compact (B, T, C) array. */
static void gather_f(float *dst, float *const *bufs, const attn_data *a, int v)
{
    const float *src = VIEW(a, bufs, v);
    for (size_t r = 0; r < (size_t)a->c->B * a->c->T; r++) memcpy(dst + r * a->c->C, src + r * a->ld, a->c->C * sizeof(float));
}

static void gather_d(double *dst, double *const *bufs, const attn_data *a, int v)
{
    const double *src = VIEW(a, bufs, v);
    for (size_t r = 0; r < (size_t)a->c->B * a->c->T; r++) memcpy(dst + r * a->c->C, src + r * a->ld, a->c->C * sizeof(double));
}

static void attn_run_case(kc *k, const attn_case *c)
{
    static const char *vn[3] = { "dq", "dk", "dv" };
    char what[256];
    attn_data a;
    attn_data_init(&a, c, k);
    const int HS = c->C / c->NH;
    const size_t no = a.no, nl = a.nl, nx = a.nx;

    /* (a) forward. out is a convex combination of rows of v: its error is that of the
     * weights times max|v|. A weight exp(s - lse) carries the error of a score (HS
     * products) and of the row sum (T terms): rtol = kc_rtol_f32(HS + T). */
    float *out = kc_guarded(no), *lse = kc_guarded(nl);
    double *outr = malloc(no * sizeof(double)), *lser = malloc(nl * sizeof(double));
    attn_fwd_fast(&a, out, lse);
    attn_fwd_ref(&a, outr, lser);
    const double rt = kc_rtol_f32((size_t)(HS + c->T));
    snprintf(what, sizeof what, "attn %s: (a) forward out matches double reference", c->name);
    kc_close(k, out, outr, no, rt * 2.0, rt, what); /* max|v| = 2 */
    snprintf(what, sizeof what, "attn %s: (a) forward lse matches double reference (-inf rows exact)", c->name);
    close_or_neginf(k, lse, lser, nl, rt, rt, what);
    snprintf(what, sizeof what, "attn %s: (a) canaries around out and lse intact", c->name);
    kc_report(k, kc_guards_intact(out, no) && kc_guards_intact(lse, nl), what, 0);

    /* (b) the reference backward is the gradient of the reference forward:
     * central differences in double, h = 1e-5 (error ~1e-10 for |L| ~ 10). */
    double *dxd[3] = { 0 };
    for (int i = 0; i < a.nbuf; i++) dxd[i] = calloc(nx, sizeof(double));
    if (c->numgrad) {
        double *num = malloc(nx * sizeof(double));
        attn_bwd_ref(&a, dxd, a.R);
        for (int i = 0; i < a.nbuf; i++) {
            kc_numeric_grad(a.xd[i], nx, attn_loss, &a, num);
            snprintf(what, sizeof what, "attn %s: (b) reference backward equals central differences (buffer %d)",
                     c->name, i);
            kc_close_d(k, dxd[i], num, nx, 1e-8, 1e-6, what);
        }
        free(num);
    }

    /* (c) fast backward vs reference backward, rtol = kc_rtol_f32(HS + T) as in (a).
     * dS = P (dP - D) cancels (it is exactly 0 for T = 1), so the absolute error is
     * judged against the size of the terms, not of the result: one query row adds
     * scale * P_ij (dP_ij - D_i) * x_j with |dP|, |D| <= HS max|dout| max|v|, i.e. at
     * most M = 2 * scale * HS * max|dout| * max|v| * max|q, k| summed over P_ij <= 1;
     * atol = rtol * max(M, max|ref|). */
    float *dout = malloc(no * sizeof(float)), *dx[3] = { 0 };
    double *doutd = malloc(no * sizeof(double));
    kc_uniform(k, dout, no, -1.0f, 1.0f);
    kc_to_double(doutd, dout, no);
    for (int i = 0; i < a.nbuf; i++) {
        dx[i] = kc_guarded(nx);
        memset(dx[i], 0, nx * sizeof(float));
        memset(dxd[i], 0, nx * sizeof(double));
    }
    attn_bwd_fast(&a, dx, dout, out, lse);
    attn_bwd_ref(&a, dxd, doutd);
    float *gf = malloc(no * sizeof(float));
    double *gd = malloc(no * sizeof(double));
    for (int v = 0; v < 3; v++) {
        gather_f(gf, dx, &a, v);
        gather_d(gd, dxd, &a, v);
        snprintf(what, sizeof what, "attn %s: (c) fast %s matches double reference", c->name, vn[v]);
        const double M = 2.0 / sqrt((double)HS) * HS * 1.0 * 2.0 * 2.0, mr = max_abs_d(gd, no);
        kc_close(k, gf, gd, no, rt * (v == 2 ? mr : fmax(M, mr)), rt, what); /* dv = P^T dout: no cancellation */
    }
    bool guards = true;
    for (int i = 0; i < a.nbuf; i++) guards = guards && kc_guards_intact(dx[i], nx);
    snprintf(what, sizeof what, "attn %s: (c) canaries around dq, dk, dv intact", c->name);
    kc_report(k, guards, what, 0);

    /* Fully masked rows: out exactly 0, no gradient; masked keys get no dk, dv. */
    if (c->mask) {
        bool ok = true;
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->NH; h++)
                for (int i = 0; i < c->T; i++) {
                    size_t row = (size_t)b * c->T + i;
                    bool dead = lser[((size_t)b * c->NH + h) * c->T + i] == -INFINITY;
                    bool masked_key = a.kmf[row] == 0.0f;
                    for (int d = h * HS; d < (h + 1) * HS; d++) {
                        if (dead && (out[row * c->C + d] != 0.0f || VIEW(&a, dx, 0)[row * a.ld + d] != 0.0f)) ok = false;
                        if (masked_key && (VIEW(&a, dx, 1)[row * a.ld + d] != 0.0f || VIEW(&a, dx, 2)[row * a.ld + d] != 0.0f))
                            ok = false;
                    }
                }
        snprintf(what, sizeof what, "attn %s: fully masked rows give out = 0 and dq = 0, masked keys dk = dv = 0",
                 c->name);
        kc_report(k, ok, what, 0);
    }

    /* (d) backward adds: from an initial G0 the fast path gives fl(G0 + g) exactly. */
    float *g0[3] = { 0 }, *g1[3] = { 0 };
    bool adds = true;
    for (int i = 0; i < a.nbuf; i++) {
        g0[i] = malloc(nx * sizeof(float));
        g1[i] = malloc(nx * sizeof(float));
        kc_uniform(k, g0[i], nx, -1.0f, 1.0f);
        memcpy(g1[i], g0[i], nx * sizeof(float));
    }
    attn_bwd_fast(&a, g1, dout, out, lse);
    for (int i = 0; i < a.nbuf; i++)
        for (size_t j = 0; j < nx; j++) {
            float want = g0[i][j] + dx[i][j];
            if (!bits_equal(&want, &g1[i][j], sizeof want)) adds = false;
        }
    snprintf(what, sizeof what, "attn %s: (d) fast backward adds into dq, dk, dv (bit for bit G0 + g)", c->name);
    kc_report(k, adds, what, 0);
    double *r0[3] = { 0 }, *r1[3] = { 0 }, worst = 0;
    for (int i = 0; i < a.nbuf; i++) {
        r0[i] = malloc(nx * sizeof(double));
        r1[i] = malloc(nx * sizeof(double));
        kc_uniform_d(k, r0[i], nx, -1.0, 1.0);
        memcpy(r1[i], r0[i], nx * sizeof(double));
    }
    attn_bwd_ref(&a, r1, doutd);
    for (int i = 0; i < a.nbuf; i++)
        for (size_t j = 0; j < nx; j++) {
            double e = fabs(r1[i][j] - (r0[i][j] + dxd[i][j]));
            worst = e > worst ? e : worst;
        }
    snprintf(what, sizeof what, "attn %s: (d) reference backward adds into dq, dk, dv", c->name);
    kc_report(k, worst <= 1e-12, what, worst);

    /* (e) 1 vs 2 threads, bit for bit. */
    float *o2 = malloc(no * sizeof(float)), *l2 = malloc(nl * sizeof(float)), *o1 = malloc(no * sizeof(float)),
          *l1 = malloc(nl * sizeof(float));
    bool same = true;
    for (int i = 0; i < a.nbuf; i++) memset(g0[i], 0, nx * sizeof(float)), memset(g1[i], 0, nx * sizeof(float));
    omp_set_num_threads(1);
    attn_fwd_fast(&a, o1, l1);
    attn_bwd_fast(&a, g0, dout, o1, l1);
    omp_set_num_threads(2);
    attn_fwd_fast(&a, o2, l2);
    attn_bwd_fast(&a, g1, dout, o2, l2);
    same = bits_equal(o1, o2, no * sizeof(float)) && bits_equal(l1, l2, nl * sizeof(float));
    for (int i = 0; i < a.nbuf; i++) same = same && bits_equal(g0[i], g1[i], nx * sizeof(float));
    snprintf(what, sizeof what, "attn %s: (e) out, lse, dq, dk, dv bit-identical with 1 and 2 threads", c->name);
    kc_report(k, same, what, 0);

    free(o1), free(l1), free(o2), free(l2);
    for (int i = 0; i < a.nbuf; i++) {
        free(g0[i]), free(g1[i]), free(r0[i]), free(r1[i]), free(dxd[i]);
        kc_guarded_free(dx[i]);
    }
    free(gf), free(gd), free(dout), free(doutd), free(outr), free(lser);
    kc_guarded_free(out);
    kc_guarded_free(lse);
    attn_data_free(&a);
}

/* ---------------------------------------------------------------- cross-entropy */

typedef struct xent_case {
    const char *name;
    int BT, V, Vp;
    float scale;  /* logits uniform in [-scale, scale] */
    int numgrad;  /* run (b) */
} xent_case;

typedef struct xent_data {
    const xent_case *c;
    size_t n;          /* BT * Vp */
    float *x;          /* (BT, Vp) logits, NaN in padded columns */
    double *xd;        /* the same in double */
    int32_t *t;        /* (BT) targets, some XENT_IGNORE */
    double *R;         /* (BT) weights of L = sum(losses * R) */
    double *ld, *lsed; /* reference scratch */
} xent_data;

static void xent_data_init(xent_data *a, const xent_case *c, kc *k)
{
    a->c = c;
    a->n = (size_t)c->BT * c->Vp;
    a->x = malloc(a->n * sizeof(float));
    a->xd = malloc(a->n * sizeof(double));
    kc_uniform(k, a->x, a->n, -c->scale, c->scale);
    for (int i = 0; i < c->BT; i++)
        for (int j = c->V; j < c->Vp; j++) a->x[(size_t)i * c->Vp + j] = NAN; /* never read */
    kc_to_double(a->xd, a->x, a->n);
    a->t = malloc(c->BT * sizeof(int32_t));
    for (int i = 0; i < c->BT; i++) a->t[i] = (int32_t)rng_below(&k->r, (uint32_t)c->V);
    for (int i = 1; i < c->BT; i += 3) a->t[i] = XENT_IGNORE;
    a->t[0] = c->V - 1; /* both ends of the real vocabulary */
    if (c->BT > 2) a->t[2] = 0;
    a->R = malloc(c->BT * sizeof(double));
    kc_uniform_d(k, a->R, c->BT, 0.5, 1.5);
    a->ld = malloc(c->BT * sizeof(double));
    a->lsed = malloc(c->BT * sizeof(double));
}

static void xent_data_free(xent_data *a)
{
    free(a->x), free(a->xd), free(a->t), free(a->R), free(a->ld), free(a->lsed);
}

static double xent_loss(void *ctx)
{
    xent_data *a = ctx;
    xent_forward_ref(a->ld, a->lsed, a->xd, a->t, a->c->BT, a->c->V, a->c->Vp);
    double L = 0;
    for (int i = 0; i < a->c->BT; i++) L += a->ld[i] * a->R[i];
    return L;
}

static void xent_run_case(kc *k, const xent_case *c)
{
    char what[256];
    xent_data a;
    xent_data_init(&a, c, k);
    const int BT = c->BT, V = c->V, Vp = c->Vp;
    const size_t n = a.n;

    /* (a) The sum of exp runs in double, so the error does not grow with V: ~1 ulp per
     * expf, one rounding of x - max, one of lse. In absolute terms that is a few
     * eps times the logits' magnitude: atol = kc_rtol_f32(8) * (1 + scale). */
    float *loss = kc_guarded(BT), *lse = kc_guarded(BT);
    double *lossr = malloc(BT * sizeof(double)), *lser = malloc(BT * sizeof(double));
    const double rt = kc_rtol_f32(8), at = rt * (1.0 + c->scale);
    xent_forward(loss, lse, a.x, a.t, BT, V, Vp);
    xent_forward_ref(lossr, lser, a.xd, a.t, BT, V, Vp);
    snprintf(what, sizeof what, "xent %s: (a) forward losses match double reference", c->name);
    kc_close(k, loss, lossr, BT, at, rt, what);
    snprintf(what, sizeof what, "xent %s: (a) forward lse matches double reference", c->name);
    kc_close(k, lse, lser, BT, at, rt, what);
    bool ign = true;
    for (int i = 0; i < BT; i++)
        if (a.t[i] == XENT_IGNORE && loss[i] != 0.0f) ign = false;
    snprintf(what, sizeof what, "xent %s: (a) ignored rows have loss exactly 0, canaries intact", c->name);
    kc_report(k, ign && kc_guards_intact(loss, BT) && kc_guards_intact(lse, BT), what, 0);

    /* The direct definition: -log_softmax(x)[t] = -(x_t - max - log sum exp(x - max)). */
    double worst = 0;
    for (int i = 0; i < BT; i++) {
        if (a.t[i] == XENT_IGNORE) continue;
        const double *x = a.xd + (size_t)i * Vp;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < V; j++) s += exp(x[j] - mx);
        double want = -(x[a.t[i]] - mx - log(s));
        double e = isfinite(loss[i]) ? fabs(loss[i] - want) / (at + rt * fabs(want)) : INFINITY;
        worst = e > worst ? e : worst;
    }
    snprintf(what, sizeof what, "xent %s: (a) losses equal a direct stable log-softmax, finite", c->name);
    kc_report(k, worst <= 1, what, worst);

    /* (b) reference backward vs central differences of L = sum(losses * R); the padded
     * columns hold NaN, are not read, and must get 0 from both. */
    double *dxd = calloc(n, sizeof(double));
    if (c->numgrad) {
        double *num = malloc(n * sizeof(double));
        xent_backward_ref(dxd, a.xd, NULL, a.t, a.R, BT, V, Vp);
        kc_numeric_grad(a.xd, n, xent_loss, &a, num);
        snprintf(what, sizeof what, "xent %s: (b) reference backward equals central differences", c->name);
        kc_close_d(k, dxd, num, n, 1e-8, 1e-6, what);
        free(num);
    }

    /* (c) fast backward vs reference: softmax = expf(x - lse) carries the error of lse
     * and of one rounding of x - lse, so the same tolerance times max|dloss|. */
    float *dl = malloc(BT * sizeof(float)), *dx = kc_guarded(n);
    double *dld = malloc(BT * sizeof(double));
    kc_uniform(k, dl, BT, 0.5f, 1.5f);
    kc_to_double(dld, dl, BT);
    memset(dx, 0, n * sizeof(float));
    memset(dxd, 0, n * sizeof(double));
    xent_backward(dx, a.x, lse, a.t, dl, BT, V, Vp);
    xent_backward_ref(dxd, a.xd, NULL, a.t, dld, BT, V, Vp);
    snprintf(what, sizeof what, "xent %s: (c) fast dlogits match double reference", c->name);
    kc_close(k, dx, dxd, n, at * 1.5, rt, what);
    bool pad = true;
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < Vp; j++)
            if ((j >= V || a.t[i] == XENT_IGNORE) && dx[(size_t)i * Vp + j] != 0.0f) pad = false;
    snprintf(what, sizeof what, "xent %s: (c) padded columns and ignored rows get no gradient, canaries intact", c->name);
    kc_report(k, pad && kc_guards_intact(dx, n), what, 0);

    /* (d) adds. */
    float *g0 = malloc(n * sizeof(float)), *g1 = malloc(n * sizeof(float));
    kc_uniform(k, g0, n, -1.0f, 1.0f);
    memcpy(g1, g0, n * sizeof(float));
    xent_backward(g1, a.x, lse, a.t, dl, BT, V, Vp);
    bool adds = true;
    for (size_t j = 0; j < n; j++) {
        float want = g0[j] + dx[j];
        if (!bits_equal(&want, &g1[j], sizeof want)) adds = false;
    }
    snprintf(what, sizeof what, "xent %s: (d) fast backward adds into dlogits (bit for bit G0 + g)", c->name);
    kc_report(k, adds, what, 0);
    double *r0 = malloc(n * sizeof(double)), *r1 = malloc(n * sizeof(double));
    kc_uniform_d(k, r0, n, -1.0, 1.0);
    memcpy(r1, r0, n * sizeof(double));
    xent_backward_ref(r1, a.xd, NULL, a.t, dld, BT, V, Vp);
    worst = 0;
    for (size_t j = 0; j < n; j++) {
        double e = fabs(r1[j] - (r0[j] + dxd[j]));
        worst = e > worst ? e : worst;
    }
    snprintf(what, sizeof what, "xent %s: (d) reference backward adds into dlogits", c->name);
    kc_report(k, worst <= 1e-12, what, worst);

    /* (e) threads. */
    float *l1 = malloc(BT * sizeof(float)), *s1 = malloc(BT * sizeof(float)), *l2 = malloc(BT * sizeof(float)),
          *s2 = malloc(BT * sizeof(float));
    memset(g0, 0, n * sizeof(float));
    memset(g1, 0, n * sizeof(float));
    omp_set_num_threads(1);
    xent_forward(l1, s1, a.x, a.t, BT, V, Vp);
    xent_backward(g0, a.x, s1, a.t, dl, BT, V, Vp);
    omp_set_num_threads(2);
    xent_forward(l2, s2, a.x, a.t, BT, V, Vp);
    xent_backward(g1, a.x, s2, a.t, dl, BT, V, Vp);
    bool same = bits_equal(l1, l2, BT * sizeof(float)) && bits_equal(s1, s2, BT * sizeof(float)) &&
                bits_equal(g0, g1, n * sizeof(float));
    snprintf(what, sizeof what, "xent %s: (e) losses, lse, dlogits bit-identical with 1 and 2 threads", c->name);
    kc_report(k, same, what, 0);

    free(l1), free(s1), free(l2), free(s2), free(g0), free(g1), free(r0), free(r1);
    free(dl), free(dld), free(dxd), free(lossr), free(lser);
    kc_guarded_free(dx);
    kc_guarded_free(loss);
    kc_guarded_free(lse);
    xent_data_free(&a);
}

/* A target in the padded columns is a bug: xent_forward must die (abort), not
 * read garbage. Runs in a child before any OpenMP region exists in this process. */
static void xent_bad_target_dies(kc *k)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = { 0, 0 };
        setrlimit(RLIMIT_CORE, &no_core);
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        float logits[2 * 40] = { 0 }, loss[2], lse[2];
        int32_t t[2] = { 3, 37 }; /* 37 = V: the first padded column */
        xent_forward(loss, lse, logits, t, 2, 37, 40);
        _exit(0); /* survived: the check failed */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    kc_report(k, pid > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0), "xent: a target in [V, Vp) dies", 0);
}

int main(void)
{
    kc k;
    kc_init(&k, SEED);
    if (kc_isa_skip(" (the softmax loops' build, kernels/cpu/isa_variant.h)")) return 77;
    const int threads = omp_get_max_threads();
    xent_bad_target_dies(&k);

    static const attn_case acases[] = {
        /* name                                  B   T   C  NH caus inter mask grad */
        { "B2 T7 C24 NH3 causal ld=3C",          2,  7, 24, 3, 1, 1, 0, 1 },
        { "B2 T7 C24 NH3 masked ld=C",           2,  7, 24, 3, 0, 0, 1, 1 },
        { "B2 T7 C24 NH3 causal+leftpad ld=C",   2,  7, 24, 3, 1, 0, 2, 1 },
        { "B1 T33 C64 NH4 causal ld=3C",         1, 33, 64, 4, 1, 1, 0, 1 },
        { "B1 T33 C64 NH4 masked ld=C",          1, 33, 64, 4, 0, 0, 1, 1 },
        { "B2 T33 C64 NH4 noncausal ld=3C",      2, 33, 64, 4, 0, 1, 0, 0 },
        { "B2 T1 C8 NH2 causal ld=3C",           2,  1,  8, 2, 1, 1, 0, 1 },
        { "B2 T1 C8 NH2 masked ld=C",            2,  1,  8, 2, 0, 0, 1, 1 },
        { "B2 T150 C128 NH2 causal tiles ld=3C", 2, 150, 128, 2, 1, 1, 0, 0 },
        { "B2 T150 C128 NH2 masked tiles ld=C",  2, 150, 128, 2, 0, 0, 1, 0 },
    };
    for (size_t i = 0; i < sizeof acases / sizeof acases[0]; i++) {
        attn_run_case(&k, &acases[i]);
        omp_set_num_threads(threads);
    }

    static const xent_case xcases[] = {
        /* name                         BT    V    Vp  scale  grad */
        { "BT9 V37 Vp40",                9,   37,  40,   4.0f, 1 },
        { "BT7 V1000 Vp1024",            7, 1000, 1024,  4.0f, 0 },
        { "BT9 V37 Vp40 logits 1e4",     9,   37,  40, 1e4f, 0 },
    };
    for (size_t i = 0; i < sizeof xcases / sizeof xcases[0]; i++) {
        xent_run_case(&k, &xcases[i]);
        omp_set_num_threads(threads);
    }

    printf("%s - test_kernels_attn: %d failure(s)\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
