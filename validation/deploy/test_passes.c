/* test_passes — the deploy passes (libcore/deploy/deploy_opt.c, deploy_quant.c,
 * deploy_prune.c, deploy_data.c) on small graphs built by hand: each graph runs through
 * the runtime before and after a pass, the outputs agree within a tolerance derived from
 * what the pass changes, and the node list is what the rewrite should give. Batch norm
 * folding against a double reference; int8 against the bound its scales imply; the
 * accuracy budget on a synthetic classifier fed from .npy files written here; the .npy
 * reader's refusals. One line per check, exit 1 on failure. */
#include "deploy/deploy.h"
#include "nano/nano.h"
#include "nano/nano_kern.h"
#include "../check.h"

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define IN(...) ((const int32_t[]){__VA_ARGS__})

static test_ctx T;
static rng R;

static float *urand(size_t n, float lo, float hi)
{
    float *p = malloc(n * sizeof *p + 1);
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform(&R);
    return p;
}

static int ten(nano_graph *g, const char *name, int kind, int ndim, const int64_t *shape)
{
    return nano_graph_add_tensor(g, name, NANO_DT_F32, kind, ndim, shape, NULL, 0);
}

static int cst(nano_graph *g, const char *name, int ndim, const int64_t *shape, const float *v)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *p = malloc((size_t)n * sizeof *p);
    memcpy(p, v, (size_t)n * sizeof *p);
    return nano_graph_add_tensor(g, name, NANO_DT_F32, NANO_T_CONST, ndim, shape, p, 1);
}

static int scalar(nano_graph *g, const char *name, float v)
{
    return cst(g, name, 0, NULL, &v);
}

static void node(nano_graph *g, int op, const char *name, int nin, const int32_t *in, int out, const nano_attrs *a)
{
    nano_attrs z = {0};
    if (nano_graph_add_node(g, op, name, nin, in, 1, (const int32_t[]){out}, a ? a : &z) < 0) exit(1);
}

/* Output 0 of g on input x (malloc'd, *n floats), or NULL after a FAIL line. */
static float *run(nano_graph *g, const float *x, size_t *n, const char *what)
{
    char err[256] = "";
    nano_model *m = NULL;
    float *y = NULL;
    if (nano_graph_infer_shapes(g, err, sizeof err) == NANO_OK && nano_graph_plan(g, err, sizeof err) == NANO_OK &&
        nano_model_from_graph(&m, g, err, sizeof err) == NANO_OK) {
        nano_io in = nano_model_input(m, 0);
        memcpy(in.data, x, in.bytes);
        if (nano_model_run(m) == NANO_OK) {
            nano_io out = nano_model_output(m, 0);
            *n = out.bytes / sizeof(float);
            y = malloc(out.bytes);
            memcpy(y, out.data, out.bytes);
        } else {
            snprintf(err, sizeof err, "run failed");
        }
    }
    if (!y) check(&T, false, "%s: runs (%s)", what, err);
    nano_model_free(m);
    return y;
}

/* got vs ref within atol everywhere. */
static void close_to(const float *got, const float *ref, size_t n, double atol, const char *what)
{
    double worst = 0;
    for (size_t i = 0; got && ref && i < n; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]));
    check(&T, got && ref && worst <= atol, "%s: max |diff| %.3g <= %.3g", what, worst, atol);
}

/* The ops of g's nodes, "Conv,Gemm,...". */
static const char *ops(const nano_graph *g)
{
    static char buf[256];
    buf[0] = 0;
    for (int n = 0; n < g->nnodes; n++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", n ? "," : "", nano_op_name(g->nodes[n].op));
    return buf;
}

static void pass_ok(nano_status st, const char *err, const char *what)
{
    check(&T, st == NANO_OK, "%s: status %d %s", what, (int)st, st == NANO_OK ? "" : err);
}

/* ---- conv -> BN -> relu ------------------------------------------------------------ */

static void test_conv_bn_relu(void)
{
    enum { C = 3, M = 4, H = 6, K = C * 9 };
    nano_graph g;
    nano_graph_init(&g);
    float *w = urand(M * K, -1, 1), *b = urand(M, -1, 1), *gam = urand(M, 0.5f, 2), *bet = urand(M, -1, 1);
    float *mean = urand(M, -0.5f, 0.5f), *var = urand(M, 0.1f, 2), *x = urand(C * H * H, -1, 1);
    int tx = ten(&g, "x", NANO_T_INPUT, 4, SH(1, C, H, H)), ty = ten(&g, "y", NANO_T_OUTPUT, 0, NULL);
    int c1 = ten(&g, "c", NANO_T_ACT, 0, NULL), c2 = ten(&g, "bn", NANO_T_ACT, 0, NULL);
    nano_attrs ca = {.kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}, .group = 1};
    node(&g, NANO_OP_CONV, "conv", 3, IN(tx, cst(&g, "w", 4, SH(M, C, 3, 3), w), cst(&g, "b", 1, SH(M), b)), c1, &ca);
    nano_attrs ba = {.eps = 1e-5f};
    node(&g, NANO_OP_BATCHNORM, "bn", 5, IN(c1, cst(&g, "g", 1, SH(M), gam), cst(&g, "be", 1, SH(M), bet),
                                          cst(&g, "m", 1, SH(M), mean), cst(&g, "v", 1, SH(M), var)), c2, &ba);
    node(&g, NANO_OP_RELU, "relu", 1, IN(c2), ty, NULL);
    size_t n0 = 0, n1 = 0;
    float *before = run(&g, x, &n0, "conv-bn-relu before");
    char err[256];
    pass_ok(deploy_fold(&g, err, sizeof err), err, "conv-bn-relu: fold");
    pass_ok(deploy_fuse(&g, err, sizeof err), err, "conv-bn-relu: fuse");
    check(&T, g.nnodes == 1 && g.nodes[0].op == NANO_OP_CONV && g.nodes[0].a.act == NANO_ACT_RELU,
          "conv-bn-relu: one Conv with ReLU fused (%s)", ops(&g));
    /* the folded weight is (float)(w·γ/√(var+ε)) computed in double: one rounding */
    const float *w2 = g.tensors[g.nodes[0].in[1]].data, *b2 = g.tensors[g.nodes[0].in[2]].data;
    double werr = 0, berr = 0;
    for (int m = 0; m < M; m++) {
        double s = gam[m] / sqrt((double)var[m] + 1e-5f);
        for (int k = 0; k < K; k++) werr = fmax(werr, fabs(w2[m * K + k] - w[m * K + k] * s) / (fabs(w[m * K + k] * s) + 1e-30));
        double bref = (b[m] - mean[m]) * s + bet[m];
        berr = fmax(berr, fabs(b2[m] - bref) / (fabs(bref) + fabs(mean[m] * s) + fabs(bet[m])));
    }
    check(&T, werr <= FLT_EPSILON && berr <= FLT_EPSILON, "BN fold: weights within 1 rounding of the double formula (%.2g, %.2g)",
          werr / FLT_EPSILON, berr / FLT_EPSILON);
    /* double reference of conv -> BN -> relu from the original parameters; the float
     * conv sums K+1 terms: (K+2)·eps·Σ|w'x| + |b'| covers it, ×4 for the kernel's order */
    double *ref = calloc(M * H * H, sizeof *ref), S = 0;
    for (int m = 0; m < M; m++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++) {
                double acc = b[m], mag = fabs(b2[m]);
                for (int c = 0; c < C; c++)
                    for (int u = 0; u < 3; u++)
                        for (int v = 0; v < 3; v++) {
                            int yi = i + u - 1, xj = j + v - 1;
                            if (yi < 0 || yi >= H || xj < 0 || xj >= H) continue;
                            double p = (double)w[(m * C + c) * 9 + u * 3 + v] * x[(c * H + yi) * H + xj];
                            acc += p;
                            mag += fabs(p * gam[m] / sqrt((double)var[m] + 1e-5f));
                        }
                double s = gam[m] / sqrt((double)var[m] + 1e-5f), y = (acc - mean[m]) * s + bet[m];
                ref[(m * H + i) * H + j] = y > 0 ? y : 0;
                S = fmax(S, mag);
            }
    float *after = run(&g, x, &n1, "conv-bn-relu after");
    float *reff = malloc(M * H * H * sizeof *reff);
    for (int i = 0; i < M * H * H; i++) reff[i] = (float)ref[i];
    double tol = 4.0 * (K + 2) * FLT_EPSILON * S;
    check(&T, n0 == n1 && n1 == M * H * H, "conv-bn-relu: output sizes %zu, %zu", n0, n1);
    close_to(after, reff, n1, tol + FLT_EPSILON * S, "BN fold vs double reference");
    close_to(after, before, n1, 2 * tol, "conv-bn-relu: after vs before");
    free(before), free(after), free(ref), free(reff);
    free(w), free(b), free(gam), free(bet), free(mean), free(var), free(x);
    nano_graph_free(&g);
}

/* ---- GEMM / MatMul + bias + erf GELU --------------------------------------------- */

/* x (M,K) → [Gemm trans_b=0 | MatMul] (K,N) → Add bias → the erf GELU as torch exports
 * it (variant 0: (x·a)·0.5 with Div √2; 1: (x·0.5)·a with Mul 1/√2). */
static void test_gemm_gelu(int variant)
{
    enum { M = 3, K = 8, N = 5 };
    nano_graph g;
    nano_graph_init(&g);
    float *w = urand(K * N, -1, 1), *b = urand(N, -1, 1), *x = urand(M * K, -1, 1);
    int tx = variant ? ten(&g, "x", NANO_T_INPUT, 3, SH(1, M, K)) : ten(&g, "x", NANO_T_INPUT, 2, SH(M, K));
    int h = ten(&g, "h", NANO_T_ACT, 0, NULL), hb = ten(&g, "hb", NANO_T_ACT, 0, NULL), d = ten(&g, "d", NANO_T_ACT, 0, NULL);
    int e = ten(&g, "e", NANO_T_ACT, 0, NULL), a = ten(&g, "a", NANO_T_ACT, 0, NULL), m = ten(&g, "m", NANO_T_ACT, 0, NULL);
    int y = ten(&g, "y", NANO_T_OUTPUT, 0, NULL), tw = cst(&g, "w", 2, SH(K, N), w);
    nano_attrs ga = {.alpha = 1, .beta = 1};
    if (variant) node(&g, NANO_OP_MATMUL, "mm", 2, IN(tx, tw), h, NULL);
    else node(&g, NANO_OP_GEMM, "gemm", 2, IN(tx, tw), h, &ga);
    node(&g, NANO_OP_ADD, "bias", 2, IN(cst(&g, "b", 1, SH(N), b), h), hb, NULL);
    if (variant) node(&g, NANO_OP_MUL, "scale", 2, IN(hb, scalar(&g, "rs2", 0.70710678f)), d, NULL);
    else node(&g, NANO_OP_DIV, "scale", 2, IN(hb, scalar(&g, "s2", 1.4142135f)), d, NULL);
    node(&g, NANO_OP_ERF, "erf", 1, IN(d), e, NULL);
    node(&g, NANO_OP_ADD, "one", 2, IN(scalar(&g, "1", 1.0f), e), a, NULL);
    if (variant) {
        node(&g, NANO_OP_MUL, "half", 2, IN(hb, scalar(&g, "0.5", 0.5f)), m, NULL);
        node(&g, NANO_OP_MUL, "gelu", 2, IN(a, m), y, NULL);
    } else {
        node(&g, NANO_OP_MUL, "mx", 2, IN(hb, a), m, NULL);
        node(&g, NANO_OP_MUL, "gelu", 2, IN(m, scalar(&g, "0.5", 0.5f)), y, NULL);
    }
    size_t n0 = 0, n1 = 0;
    float *before = run(&g, x, &n0, "gemm-gelu before");
    char err[256], what[64];
    pass_ok(deploy_fold(&g, err, sizeof err), err, "gemm-gelu: fold");
    pass_ok(deploy_fuse(&g, err, sizeof err), err, "gemm-gelu: fuse");
    const nano_node *nd = &g.nodes[0];
    snprintf(what, sizeof what, "%s+bias+gelu", variant ? "matmul" : "gemm");
    check(&T, g.nnodes == 1 && nd->op == NANO_OP_GEMM && nd->a.act == NANO_ACT_GELU && nd->a.trans_b && nd->nin >= 3 &&
          nd->in[2] >= 0, "%s: one GEMM (trans_b, bias, GELU) (%s)", what, ops(&g));
    /* the GEMM sums K+1 terms: (K+1)·eps·S, ×4 for order; the fused and decomposed GELU
     * each round a few times (16 eps of the output) and GELU' ≤ 1.13 */
    double S = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = fabs(b[j]);
            for (int k = 0; k < K; k++) s += fabs(x[i * K + k] * w[k * N + j]);
            S = fmax(S, s);
        }
    float *after = run(&g, x, &n1, what);
    close_to(after, before, n1, 1.13 * 4 * (K + 1) * FLT_EPSILON * S + 16 * FLT_EPSILON * (S + 1), what);
    free(before), free(after), free(w), free(b), free(x);
    nano_graph_free(&g);
}

/* ---- decomposed layer norm ------------------------------------------------------- */

static void test_layernorm(void)
{
    enum { B = 2, L = 4, D = 16 };
    nano_graph g;
    nano_graph_init(&g);
    float *x = urand(B * L * D, -2, 3), *gam = urand(D, 0.5f, 1.5f), *bet = urand(D, -1, 1);
    int tx = ten(&g, "x", NANO_T_INPUT, 3, SH(B, L, D)), y = ten(&g, "y", NANO_T_OUTPUT, 0, NULL);
    int t[8];
    for (int i = 0; i < 8; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "t%d", i);
        t[i] = ten(&g, nm, NANO_T_ACT, 0, NULL);
    }
    nano_attrs rm = {.axes_mask = 1 << 2, .keepdims = 1};
    node(&g, NANO_OP_REDUCEMEAN, "mean", 1, IN(tx), t[0], &rm);
    node(&g, NANO_OP_SUB, "sub", 2, IN(tx, t[0]), t[1], NULL);
    node(&g, NANO_OP_POW, "pow", 2, IN(t[1], scalar(&g, "2", 2.0f)), t[2], NULL);
    node(&g, NANO_OP_REDUCEMEAN, "var", 1, IN(t[2]), t[3], &rm);
    node(&g, NANO_OP_ADD, "eps", 2, IN(t[3], scalar(&g, "eps", 1e-5f)), t[4], NULL);
    node(&g, NANO_OP_SQRT, "sqrt", 1, IN(t[4]), t[5], NULL);
    node(&g, NANO_OP_DIV, "div", 2, IN(t[1], t[5]), t[6], NULL);
    node(&g, NANO_OP_MUL, "gamma", 2, IN(cst(&g, "gam", 1, SH(D), gam), t[6]), t[7], NULL);
    node(&g, NANO_OP_ADD, "beta", 2, IN(t[7], cst(&g, "bet", 1, SH(D), bet)), y, NULL);
    size_t n0 = 0, n1 = 0;
    float *before = run(&g, x, &n0, "layernorm before");
    char err[256];
    pass_ok(deploy_fuse(&g, err, sizeof err), err, "layernorm: fuse");
    check(&T, g.nnodes == 1 && g.nodes[0].op == NANO_OP_LAYERNORM && g.nodes[0].a.axis == 2 && g.nodes[0].a.eps == 1e-5f,
          "layernorm: one LAYERNORM over axis 2 (%s)", ops(&g));
    float *after = run(&g, x, &n1, "layernorm after");
    /* both compute mean and variance over D terms in float: relative error ≤ (D+8)·eps of
     * the normalised value (|n| ≤ √D), times |γ| ≤ 1.5, plus the affine rounding */
    close_to(after, before, n1, 4.0 * (D + 8) * FLT_EPSILON * (1.5 * sqrt(D) + 1), "layernorm: after vs before");
    free(before), free(after), free(x), free(gam), free(bet);
    nano_graph_free(&g);
}

/* ---- reshape chain, identities, a constant subgraph ------------------------------ */

static void test_reshape_const(void)
{
    nano_graph g;
    nano_graph_init(&g);
    float *x = urand(24, -1, 1), *k = urand(24, 0.1f, 2);
    int tx = ten(&g, "x", NANO_T_INPUT, 3, SH(2, 3, 4)), y = ten(&g, "out", NANO_T_OUTPUT, 2, SH(4, 6));
    int r1 = ten(&g, "r1", NANO_T_ACT, 2, SH(6, 4)), r2 = ten(&g, "r2", NANO_T_ACT, 1, SH(24));
    int r3 = ten(&g, "r3", NANO_T_ACT, 2, SH(4, 6)), id = ten(&g, "id", NANO_T_ACT, 0, NULL);
    int kt = ten(&g, "kt", NANO_T_ACT, 0, NULL), k2 = ten(&g, "k2", NANO_T_ACT, 0, NULL), ks = ten(&g, "ks", NANO_T_ACT, 0, NULL);
    int sum = ten(&g, "sum", NANO_T_ACT, 0, NULL);
    node(&g, NANO_OP_RESHAPE, "re1", 1, IN(tx), r1, NULL);
    node(&g, NANO_OP_RESHAPE, "re2", 1, IN(r1), r2, NULL);
    node(&g, NANO_OP_RESHAPE, "re3", 1, IN(r2), r3, NULL);
    node(&g, NANO_OP_IDENTITY, "id1", 1, IN(r3), id, NULL);
    nano_attrs tp = {.perm = {1, 0}};
    node(&g, NANO_OP_TRANSPOSE, "kT", 1, IN(cst(&g, "k", 2, SH(6, 4), k)), kt, &tp);
    node(&g, NANO_OP_MUL, "k2", 2, IN(kt, scalar(&g, "two", 2.0f)), k2, NULL);
    node(&g, NANO_OP_SQRT, "ks", 1, IN(k2), ks, NULL);
    node(&g, NANO_OP_ADD, "add", 2, IN(id, ks), sum, NULL);
    node(&g, NANO_OP_IDENTITY, "id_out", 1, IN(sum), y, NULL);  /* the graph output behind an identity */
    size_t n0 = 0, n1 = 0;
    float *before = run(&g, x, &n0, "reshape/const before");
    char err[256];
    pass_ok(deploy_fold(&g, err, sizeof err), err, "reshape/const: fold");
    check(&T, g.nnodes == 2 && g.nodes[0].op == NANO_OP_RESHAPE && g.nodes[1].op == NANO_OP_ADD,
          "reshape chain merged, identities removed, constants folded: Reshape,Add (%s)", ops(&g));
    check(&T, g.noutputs == 1 && !strcmp(nano_tensor_name(&g, g.outputs[0]), "out") && g.nnodes == 2 &&
          g.nodes[1].out[0] == g.outputs[0], "the graph output keeps its name \"out\" and is written by the Add");
    float *after = run(&g, x, &n1, "reshape/const after");
    close_to(after, before, n1, 0.0, "reshape/const: after == before exactly (same ops on the same data)");
    free(before), free(after), free(x), free(k);
    nano_graph_free(&g);
}

/* ---- int8 ------------------------------------------------------------------------ */

static void test_quantize_rows(void)
{
    enum { N = 6, K = 40 };
    float *w = urand(N * K, -3, 3), sc[N];
    int8_t q[N * K];
    memset(w + 2 * K, 0, K * sizeof *w);  /* a zero row: scale 1 */
    nano_quantize_rows(w, N, K, q, sc);
    double worst = 0;
    int ok = sc[2] == 1.0f, peak = 1;
    for (int n = 0; n < N; n++) {
        float mx = 0;
        int qm = 0;
        for (int k = 0; k < K; k++) {
            mx = fmaxf(mx, fabsf(w[n * K + k]));
            qm = abs(q[n * K + k]) > qm ? abs(q[n * K + k]) : qm;
            ok &= q[n * K + k] != -128;
            /* |w − q·s| ≤ s/2, plus the rounding of w/s in float (eps·|w|) */
            worst = fmax(worst, fabs(w[n * K + k] - q[n * K + k] * (double)sc[n]) / (sc[n] / 2 + FLT_EPSILON * fabs(w[n * K + k])));
        }
        if (mx > 0) peak &= qm == 127 && fabs(sc[n] - mx / 127.0) <= FLT_EPSILON * sc[n];
    }
    check(&T, ok && peak && worst <= 1, "quantize_rows: |q| ≤ 127, max row maps to ±127, round trip within s/2 (%.3g)", worst);
    free(w);
}

/* A GEMM (M,K)x(N,K)ᵀ+b quantised with calibration on its own input.
 *
 * Bound: the input is quantised as x̂ = s_x·(q − z) with |x − x̂| ≤ s_x/2 (x lies in the
 * calibrated range), the weight as ŵ = s_w[n]·q_w with |w − ŵ| ≤ s_w[n]/2 and |ŵ| ≤
 * max_k|w[n,k]| (q_w ≤ 127 = max/s_w). The int32 accumulation is exact, so
 *   y − ŷ = Σ_k (x·w − x̂·ŵ) = Σ_k [x·(w − ŵ) + (x − x̂)·ŵ]
 *   |y − ŷ| ≤ Σ_k (|x_k|·s_w[n]/2 + s_x/2·|w[n,k]|)        (+ |(x − x̂)(w − ŵ)| absorbed
 * by using |w| instead of |ŵ| only up to s_x·s_w/4 per term: added explicitly below),
 * plus the float rounding of the scaling and of the fp32 reference: (K+4)·eps·Σ|x·w|. */
static void test_int8_gemm(void)
{
    enum { M = 16, K = 64, N = 32 };
    nano_graph g;
    nano_graph_init(&g);
    float *w = urand(N * K, -0.5f, 0.5f), *b = urand(N, -1, 1), *x = urand(M * K, -1, 2);
    int tx = ten(&g, "x", NANO_T_INPUT, 2, SH(M, K)), y = ten(&g, "y", NANO_T_OUTPUT, 0, NULL);
    nano_attrs ga = {.alpha = 1, .beta = 1, .trans_b = 1};
    node(&g, NANO_OP_GEMM, "fc", 3, IN(tx, cst(&g, "w", 2, SH(N, K), w), cst(&g, "b", 1, SH(N), b)), y, &ga);
    deploy_data calib = {.dtype = NANO_DT_F32, .ndim = 2, .shape = {M, K}, .x = x};
    deploy_opts o = {.quant = DEPLOY_QUANT_INT8, .calib = &calib, .threads = 1, .max_drop = 1};
    deploy_report rep;
    char err[256];
    if (nano_graph_infer_shapes(&g, err, sizeof err) != NANO_OK) check(&T, false, "int8 gemm: shapes: %s", err);
    pass_ok(deploy_quantize(&g, &o, &rep, err, sizeof err), err, "int8 gemm: quantize");
    const nano_node *nd = &g.nodes[0];
    int q8 = g.nnodes == 1 && nd->nin == 4 && g.tensors[nd->in[1]].dtype == NANO_DT_I8;
    check(&T, q8 && rep.layers == 1 && rep.layers_int8 == 1 && nd->a.q_scale > 0,
          "int8 gemm: the GEMM has an i8 weight, scales and q_scale %.4g zero %d", q8 ? nd->a.q_scale : 0.0, q8 ? nd->a.q_zero : -1);
    if (!q8) {
        free(w), free(b), free(x);
        nano_graph_free(&g);
        return;
    }
    /* calibration saw [-1, 2) (uniform draws): the scale covers it and zero sits at -lo/s */
    double lo = 0, hi = 0;
    for (int i = 0; i < M * K; i++) lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    check(&T, fabs(nd->a.q_scale - (hi - lo) / 255) <= 1e-6 * (hi - lo) && nd->a.q_zero == (int)lround(-lo / ((hi - lo) / 255)),
          "int8 gemm: MinMax calibration: scale (hi−lo)/255, zero round(−lo/scale)");
    double sx = nd->a.q_scale;
    const float *sw = g.tensors[nd->in[3]].data;
    size_t n = 0;
    float *got = run(&g, x, &n, "int8 gemm");
    double worst = 0;
    for (int i = 0; got && i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = b[j], bound = 0, mag = fabs(b[j]);
            for (int k = 0; k < K; k++) {
                double xv = x[i * K + k], wv = w[j * K + k];
                ref += xv * wv;
                mag += fabs(xv * wv);
                bound += fabs(xv) * sw[j] / 2 + sx / 2 * fabs(wv) + sx * sw[j] / 4;
            }
            bound += (K + 4) * FLT_EPSILON * mag;
            worst = fmax(worst, fabs(got[i * N + j] - ref) / bound);
        }
    check(&T, got && worst <= 1, "int8 gemm: |ŷ − y| within the bound from s_x, s_w (worst ratio %.3g)", worst);
    free(got), free(w), free(b), free(x);
    nano_graph_free(&g);
}

/* ---- .npy files and the accuracy budget ------------------------------------------ */

static void write_npy(const char *path, const char *descr, int fortran, const char *shape, const void *data, size_t bytes)
{
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                       fortran ? "True" : "False", shape);
    int total = (10 + len + 1 + 63) / 64 * 64;
    memset(hdr + len, ' ', (size_t)(total - 10 - len - 1));
    hdr[total - 11] = '\n';
    unsigned char *buf = malloc((size_t)total + bytes);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((total - 10) & 0xff);
    buf[9] = (unsigned char)((total - 10) >> 8);
    memcpy(buf + 10, hdr, (size_t)(total - 10));
    memcpy(buf + total, data, bytes);
    write_bytes(path, buf, (size_t)total + bytes);
    free(buf);
}

static void expect_refusal(const char *path, const char *word, const char *what)
{
    deploy_data d;
    char err[256] = "";
    nano_status st = deploy_data_read(&d, path, NULL, err, sizeof err);
    check(&T, st != NANO_OK && strstr(err, word) && strstr(err, path), "npy refuses %s (%s)", what, err);
}

static void test_npy(void)
{
    char p[256];
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t lab[3] = {0, 1, 2};
    write_npy(scratch_path(&T, "ok.npy", p, sizeof p), "<f4", 0, "(3, 2)", v, sizeof v);
    char pl[256];
    write_npy(scratch_path(&T, "lab.npy", pl, sizeof pl), "<i8", 0, "(3,)", lab, sizeof lab);
    deploy_data d;
    char err[256] = "";
    nano_status st = deploy_data_read(&d, p, pl, err, sizeof err);
    check(&T, st == NANO_OK && d.dtype == NANO_DT_F32 && d.ndim == 2 && d.shape[0] == 3 && d.shape[1] == 2 &&
          ((float *)d.x)[5] == 6 && d.labels && d.labels[2] == 2, "npy: reads a (3,2) f32 array and i8 labels %s", err);
    deploy_data_free(&d);
    write_npy(scratch_path(&T, "trunc.npy", p, sizeof p), "<f4", 0, "(3, 2)", v, sizeof v - 4);
    expect_refusal(p, "truncated", "a truncated file");
    write_npy(scratch_path(&T, "fort.npy", p, sizeof p), "<f4", 1, "(3, 2)", v, sizeof v);
    expect_refusal(p, "Fortran", "Fortran order");
    write_npy(scratch_path(&T, "f2.npy", p, sizeof p), "<f2", 0, "(3,)", v, 6);
    expect_refusal(p, "bool", "a float16 dtype");
    write_npy(scratch_path(&T, "be.npy", p, sizeof p), ">f4", 0, "(3, 2)", v, sizeof v);
    expect_refusal(p, "big-endian", "big-endian data");
    write_npy(scratch_path(&T, "obj.npy", p, sizeof p), "|O", 0, "(3,)", v, 24);
    expect_refusal(p, "object", "an object array");
    write_npy(scratch_path(&T, "lab2.npy", pl, sizeof pl), "<i8", 0, "(2,)", lab, 16);
    write_npy(scratch_path(&T, "ok2.npy", p, sizeof p), "<f4", 0, "(3, 2)", v, sizeof v);
    st = deploy_data_read(&d, p, pl, err, sizeof err);
    check(&T, st != NANO_OK && strstr(err, "labels"), "npy refuses labels of another length (%s)", err);
}

/* A classifier x (8,16) → Gemm 16→32 + ReLU → Gemm 32→4, the same weights each call. */
static void classifier(nano_graph *g)
{
    nano_graph_init(g);
    rng_init(&R, 77, 0, RNG_PURPOSE_TEST, 0);
    float *w1 = urand(32 * 16, -0.5f, 0.5f), *w2 = urand(4 * 32, -0.5f, 0.5f), *b1 = urand(32, -0.1f, 0.1f);
    int tx = ten(g, "x", NANO_T_INPUT, 2, SH(8, 16)), h = ten(g, "h", NANO_T_ACT, 0, NULL), y = ten(g, "y", NANO_T_OUTPUT, 0, NULL);
    nano_attrs ga = {.alpha = 1, .beta = 1, .trans_b = 1, .act = NANO_ACT_RELU};
    node(g, NANO_OP_GEMM, "fc1", 3, IN(tx, cst(g, "w1", 2, SH(32, 16), w1), cst(g, "b1", 1, SH(32), b1)), h, &ga);
    ga.act = 0;
    node(g, NANO_OP_GEMM, "fc2", 2, IN(h, cst(g, "w2", 2, SH(4, 32), w2)), y, &ga);
    char err[256];
    if (nano_graph_infer_shapes(g, err, sizeof err) != NANO_OK) check(&T, false, "classifier shapes: %s", err);
    free(w1), free(w2), free(b1);
}

static void test_budget(void)
{
    enum { S = 61 };  /* not a multiple of the batch: the last batch is padded */
    nano_graph g;
    classifier(&g);
    float *x = urand(S * 16, -1, 1);
    int64_t lab[S];
    /* labels: the fp32 model's own argmax, so its accuracy is exactly 1 */
    for (int first = 0; first < S; first += 8) {
        float xb[8 * 16] = {0};
        int real = S - first < 8 ? S - first : 8;
        memcpy(xb, x + first * 16, (size_t)real * 16 * sizeof *xb);
        size_t n = 0;
        float *y = run(&g, xb, &n, "classifier");
        for (int i = 0; y && i < real; i++) {
            int best = 0;
            for (int c = 1; c < 4; c++) best = y[i * 4 + c] > y[i * 4 + best] ? c : best;
            lab[first + i] = best;
        }
        free(y);
    }
    char px[256], pl[256], shape[32], err[256] = "";
    snprintf(shape, sizeof shape, "(%d, 16)", S);
    write_npy(scratch_path(&T, "x.npy", px, sizeof px), "<f4", 0, shape, x, S * 16 * sizeof *x);
    snprintf(shape, sizeof shape, "(%d,)", S);
    write_npy(scratch_path(&T, "y.npy", pl, sizeof pl), "<i8", 0, shape, lab, sizeof lab);
    deploy_data eval, calib;
    pass_ok(deploy_data_read(&eval, px, pl, err, sizeof err), err, "budget: eval set read from .npy");
    double acc = deploy_accuracy(&g, &eval, 1, err, sizeof err);
    check(&T, acc == 1.0, "accuracy: fp32 against its own argmax is 1 over %d samples (padded batch) (%g)", S, acc);
    eval.labels[S - 1] = (eval.labels[S - 1] + 1) % 4;
    acc = deploy_accuracy(&g, &eval, 1, err, sizeof err);
    check(&T, fabs(acc - (S - 1.0) / S) < 1e-12, "accuracy: one wrong label in the padded batch gives %d/%d (%g)", S - 1, S, acc);
    eval.labels[S - 1] = (eval.labels[S - 1] + 3) % 4;
    /* a calibration set at 2% of the range: int8 clips, the budget must put layers back */
    calib = eval;
    calib.labels = NULL;
    calib.x = malloc(S * 16 * sizeof(float));
    for (int i = 0; i < S * 16; i++) ((float *)calib.x)[i] = 0.02f * x[i];
    deploy_opts o = {.quant = DEPLOY_QUANT_INT8, .calib = &calib, .eval = &eval, .threads = 1, .max_drop = 0.0};
    deploy_report rep;
    nano_status st = deploy_quantize(&g, &o, &rep, err, sizeof err);
    check(&T, st == NANO_OK && rep.acc_before == 1.0 && rep.acc_after >= rep.acc_before - o.max_drop && rep.layers == 2 &&
          rep.layers_int8 < 2, "budget: bad calibration, max_drop 0: %d of %d layers stay int8, top-1 %.3f -> %.3f %s",
          rep.layers_int8, rep.layers, rep.acc_before, rep.acc_after, st == NANO_OK ? "" : err);
    nano_graph_free(&g);
    classifier(&g);
    o.max_drop = 1.0;
    st = deploy_quantize(&g, &o, &rep, err, sizeof err);
    check(&T, st == NANO_OK && rep.layers_int8 == 2 && rep.weight_bytes_after < rep.weight_bytes_before,
          "budget: max_drop 1 keeps both layers int8 (%d), weights %lld -> %lld bytes", rep.layers_int8,
          (long long)rep.weight_bytes_before, (long long)rep.weight_bytes_after);
    nano_graph_free(&g);
    /* AUTO: timed here (either outcome is right, the budget still holds); for arm64 by
     * MACs, and these layers (8·32·16 and 8·4·32) are below 1e5: both stay fp32 */
    classifier(&g);
    o.quant = DEPLOY_QUANT_AUTO;
    st = deploy_quantize(&g, &o, &rep, err, sizeof err);
    check(&T, st == NANO_OK && rep.layers_int8 >= 0 && rep.layers_int8 <= 2, "auto: %d of 2 layers int8 where faster here %s",
          rep.layers_int8, st == NANO_OK ? "" : err);
    nano_graph_free(&g);
    classifier(&g);
    o.target_arm64 = 1;
    st = deploy_quantize(&g, &o, &rep, err, sizeof err);
    check(&T, st == NANO_OK && rep.layers_int8 == 0, "auto for arm64: small layers (< 1e5 MACs) stay fp32 (%d int8)", rep.layers_int8);
    nano_graph_free(&g);
    classifier(&g);
    deploy_opts f = {.quant = DEPLOY_QUANT_FP16, .eval = &eval, .threads = 1};
    st = deploy_quantize(&g, &f, &rep, err, sizeof err);
    check(&T, st == NANO_OK && rep.layers_fp16 == 2 && g.tensors[g.nodes[0].in[1]].dtype == NANO_DT_F16 &&
          g.tensors[g.nodes[0].in[2]].dtype == NANO_DT_F32 && rep.acc_after >= 0,
          "fp16: both weights stored as f16, the bias stays f32, top-1 %.3f -> %.3f", rep.acc_before, rep.acc_after);
    nano_graph_free(&g);
    classifier(&g);
    deploy_opts pr = {.prune = 0.5, .threads = 1};
    st = deploy_prune(&g, &pr, &rep, err, sizeof err);
    int64_t zeros = 0, cnt = nano_tensor_numel(&g.tensors[g.nodes[0].in[1]]);
    for (int64_t i = 0; i < cnt; i++) zeros += ((const float *)g.tensors[g.nodes[0].in[1]].data)[i] == 0;
    check(&T, st == NANO_OK && zeros == cnt / 2, "prune: the first GEMM loses half its weights (%lld of %lld; the last is kept)",
          (long long)zeros, (long long)cnt);
    nano_graph_free(&g);
    free(calib.x);
    deploy_data_free(&eval);
    free(x);
}

/* Structured pruning of conv A (4 channels, two of them all zero) → conv B: removing the
 * two zero channels (smallest L1) leaves the output as it was, up to the summation order. */
static void test_prune_channels(void)
{
    nano_graph g;
    nano_graph_init(&g);
    float *wa = urand(4 * 2 * 9, -1, 1), *wb = urand(3 * 4 * 9, -1, 1), *x = urand(2 * 25, -1, 1), ba[4] = {0.1f, 0, 0.2f, 0};
    memset(wa + 1 * 18, 0, 18 * sizeof *wa);
    memset(wa + 3 * 18, 0, 18 * sizeof *wa);
    int tx = ten(&g, "x", NANO_T_INPUT, 4, SH(1, 2, 5, 5)), h = ten(&g, "h", NANO_T_ACT, 0, NULL), y = ten(&g, "y", NANO_T_OUTPUT, 0, NULL);
    nano_attrs ca = {.kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}, .group = 1, .act = NANO_ACT_RELU};
    node(&g, NANO_OP_CONV, "ca", 3, IN(tx, cst(&g, "wa", 4, SH(4, 2, 3, 3), wa), cst(&g, "ba", 1, SH(4), ba)), h, &ca);
    ca.act = 0;
    node(&g, NANO_OP_CONV, "cb", 2, IN(h, cst(&g, "wb", 4, SH(3, 4, 3, 3), wb)), y, &ca);
    size_t n0 = 0, n1 = 0;
    float *before = run(&g, x, &n0, "prune channels before");
    deploy_opts o = {.prune = 0.5, .prune_channels = 1, .threads = 1};
    deploy_report rep = {0};
    char err[256];
    pass_ok(deploy_prune(&g, &o, &rep, err, sizeof err), err, "prune channels");
    check(&T, g.tensors[g.nodes[0].in[1]].shape[0] == 2 && g.tensors[g.nodes[1].in[1]].shape[1] == 2 && rep.sparsity > 0.49,
          "prune channels: A keeps 2 of 4 output channels, B 2 of 4 inputs (sparsity %.2f)", rep.sparsity);
    float *after = run(&g, x, &n1, "prune channels after");
    close_to(after, before, n1 == n0 ? n1 : 0, 4 * 36 * FLT_EPSILON * 36, "prune channels: zero channels removed, output unchanged");
    free(before), free(after), free(wa), free(wb), free(x);
    nano_graph_free(&g);
}

int main(void)
{
    rng_init(&R, 20240611, 0, RNG_PURPOSE_TEST, 0);
    scratch_dir(&T, "passes");
    test_conv_bn_relu();
    test_gemm_gelu(0);
    test_gemm_gelu(1);
    test_layernorm();
    test_reshape_const();
    test_quantize_rows();
    test_int8_gemm();
    test_npy();
    test_budget();
    test_prune_channels();
    scratch_free(&T);
    printf("test_passes: %d failed\n", T.failures);
    return T.failures ? 1 : 0;
}
