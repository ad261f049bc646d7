/* nano_exec — the runtime: a loaded graph, its prepared kernels, one arena, and the run.
 *
 * nano_model_load maps and checks a .neb file (neb_read), widens half-precision
 * constants, prepares every convolution and GEMM (weights packed for this CPU's
 * kernels) and allocates one block: the arena of the memory plan followed by the largest
 * scratch any kernel asks for. nano_model_run then walks the nodes in order and
 * allocates nothing. The one design decision: tensors are addressed through one table
 * of pointers (constants into the mapping or their widened copy, the rest into the
 * arena), filled at load, so the run loop is a switch over ops with no lookups. */
#include "nano.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nano_kern.h"
#include "nano_ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

struct nano_model {
    const nano_graph *g;   /* the graph run (own, or the caller's) */
    nano_graph own;        /* a graph read from a file */
    int owns;              /* own is the graph */
    void *map;             /* the file's mapping (constants point into it) */
    size_t map_len;
    void **ptr;            /* [ntensors] where each tensor's bytes are */
    float **wide;          /* [ntensors] f32 copies of f16 constants, or NULL */
    void **prep;           /* [nnodes] nano_conv / nano_gemm / nano_qconv / nano_qgemm, or NULL */
    uint8_t *block;        /* arena + scratch */
    size_t arena_bytes, scratch_bytes, held_bytes;
    int threads;
    nano_observer obs;
    void *obs_ctx;
    char error[256];
};

static nano_shape shape_of(const nano_tensor *t) {
    nano_shape s = {.ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) s.d[i] = t->shape[i];
    return s;
}

static float *fptr(const nano_model *m, int t) {
    return t >= 0 ? (float *)m->ptr[t] : NULL;
}

static nano_epilogue epilogue(const nano_attrs *a) {
    return (nano_epilogue){a->act, a->act_min, a->act_max};
}

static nano_conv_desc conv_desc(const nano_graph *g, const nano_node *nd) {
    const nano_tensor *x = &g->tensors[nd->in[0]], *w = &g->tensors[nd->in[1]], *y = &g->tensors[nd->out[0]];
    const nano_attrs *a = &nd->a;
    return (nano_conv_desc){(int)x->shape[0], (int)x->shape[1], (int)x->shape[2], (int)x->shape[3],
                            (int)w->shape[0], (int)y->shape[2], (int)y->shape[3],
                            a->kernel[0], a->kernel[1], a->stride[0], a->stride[1],
                            a->dilation[0], a->dilation[1], a->pad[0], a->pad[1], a->pad[2], a->pad[3], a->group};
}

/* M of a GEMM: the rows of A, all its leading dimensions together. */
static int gemm_rows(const nano_tensor *a, const nano_attrs *at) {
    if (at->trans_a) return (int)a->shape[1];
    int64_t m = 1;
    for (int d = 0; d < a->ndim - 1; d++) m *= a->shape[d];
    return (int)m;
}

#define FAIL(code, ...) do { snprintf(err, errlen, __VA_ARGS__); return code; } while (0)

/* Gives back the pages of a constant the kernels have copied (packed or widened): the
 * file's mapping is private and never written, so the kernel drops them and would read
 * them from the file again if anything touched them. Without this, a model's peak RSS
 * is its weights twice (the mapping and the packed copy). */
static void release_pages(const nano_model *m, int t) {
    if (!m->map || t < 0 || m->g->tensors[t].kind != NANO_T_CONST) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)m->g->tensors[t].data, hi = lo + nano_tensor_bytes(&m->g->tensors[t]);
    uintptr_t mlo = (uintptr_t)m->map, mhi = mlo + m->map_len;
    if (lo < mlo || hi > mhi) return; /* decoded into the heap: the only copy */
    lo = (lo + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    hi = hi / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static nano_status prepare_packed(nano_model *m, int n, const float *Wf, const float *bias, nano_epilogue ep, char *err,
                                  size_t errlen);

static nano_status prepare_node(nano_model *m, int n, char *err, size_t errlen) {
    const nano_graph *g = m->g;
    const nano_node *nd = &g->nodes[n];
    const char *nm = nano_node_name(g, n);
    if (nd->op != NANO_OP_CONV && nd->op != NANO_OP_GEMM) return NANO_OK;
    const nano_tensor *w = &g->tensors[nd->in[1]];
    if (w->kind != NANO_T_CONST) {
        if (nd->op == NANO_OP_GEMM && w->dtype == NANO_DT_F32 && !nd->a.trans_a && nd->a.alpha == 1.0f &&
            (nd->nin < 3 || nd->in[2] < 0))
            return NANO_OK; /* two activations: nano_sgemm at run time */
        FAIL(NANO_E_UNSUPPORTED, "node %s (%s): the weight must be a constant", nm, nano_op_name(nd->op));
    }
    /* the bias and int8 scales are read here, before the arena exists: constants only */
    for (int i = 2; i < 4 && i < nd->nin; i++)
        if (nd->in[i] >= 0 && g->tensors[nd->in[i]].kind != NANO_T_CONST)
            FAIL(NANO_E_UNSUPPORTED, "node %s (%s): input %d (bias or scales) must be a constant", nm,
                 nano_op_name(nd->op), i);
    const float *bias = nd->nin >= 3 && nd->in[2] >= 0 ? fptr(m, nd->in[2]) : NULL;
    nano_epilogue ep = epilogue(&nd->a);
    float *wide = NULL; /* a half-precision weight, widened for its packing only */
    if (w->dtype == NANO_DT_F16 && !m->ptr[nd->in[1]]) {
        size_t count = (size_t)nano_tensor_numel(w);
        if (!(wide = malloc(count * sizeof *wide + 1)))
            FAIL(NANO_E_NOMEM, "out of memory widening %s", nano_tensor_name(g, nd->in[1]));
        nano_f16_to_f32_n(w->data, wide, count);
    }
    nano_status st = prepare_packed(m, n, wide ? wide : fptr(m, nd->in[1]), bias, ep, err, errlen);
    free(wide);
    release_pages(m, nd->in[1]);
    return st;
}

/* Packs node n's weight W (f32, or int8 with its scales) for its kernel. */
static nano_status prepare_packed(nano_model *m, int n, const float *Wf, const float *bias, nano_epilogue ep, char *err,
                                  size_t errlen) {
    const nano_graph *g = m->g;
    const nano_node *nd = &g->nodes[n];
    const char *nm = nano_node_name(g, n);
    const nano_tensor *w = &g->tensors[nd->in[1]];
    size_t scratch = 0, held = 0;
    if (nd->op == NANO_OP_CONV) {
        nano_conv_desc d = conv_desc(g, nd);
        if (w->dtype == NANO_DT_I8) {
            nano_qconv *p = nano_qconv_prepare(&d, (const int8_t *)m->ptr[nd->in[1]], fptr(m, nd->in[3]), bias,
                                               nd->a.q_scale, nd->a.q_zero, ep);
            if (!p) FAIL(NANO_E_NOMEM, "node %s: cannot prepare the int8 convolution", nm);
            m->prep[n] = p;
            scratch = nano_qconv_scratch(p);
            held = nano_qconv_bytes(p);
        } else {
            nano_conv *p = nano_conv_prepare(&d, Wf, bias, ep);
            if (!p) FAIL(NANO_E_NOMEM, "node %s: cannot prepare the convolution", nm);
            m->prep[n] = p;
            scratch = nano_conv_scratch(p);
            held = nano_conv_bytes(p);
        }
    } else {
        const nano_attrs *a = &nd->a;
        if (a->trans_a) FAIL(NANO_E_UNSUPPORTED, "node %s (Gemm): transA=1 is not supported", nm);
        int K = (int)(a->trans_b ? w->shape[1] : w->shape[0]), N = (int)(a->trans_b ? w->shape[0] : w->shape[1]);
        int M = gemm_rows(&g->tensors[nd->in[0]], a);
        const nano_tensor *c = bias ? &g->tensors[nd->in[2]] : NULL;
        if (c && (c->kind != NANO_T_CONST || nano_tensor_numel(c) != N))
            FAIL(NANO_E_UNSUPPORTED, "node %s (Gemm): C must be a constant vector of %d (the bias)", nm, N);
        float *bs = NULL;
        if (bias && a->beta != 1.0f) {
            bs = malloc((size_t)N * sizeof *bs);
            if (!bs) FAIL(NANO_E_NOMEM, "out of memory");
            for (int i = 0; i < N; i++) bs[i] = bias[i] * a->beta;
            bias = bs;
        }
        if (w->dtype == NANO_DT_I8) {
            if (a->alpha != 1.0f) { free(bs); FAIL(NANO_E_UNSUPPORTED, "node %s: int8 Gemm with alpha != 1", nm); }
            nano_qgemm *p = nano_qgemm_prepare((const int8_t *)m->ptr[nd->in[1]], fptr(m, nd->in[3]), bias, N, K,
                                               a->q_scale, a->q_zero, ep);
            free(bs);
            if (!p) FAIL(NANO_E_NOMEM, "node %s: cannot prepare the int8 GEMM", nm);
            m->prep[n] = p;
            scratch = nano_qgemm_scratch(p, M);
            held = nano_qgemm_bytes(p);
        } else {
            const float *W = Wf;
            float *tw = NULL;
            if (!a->trans_b || a->alpha != 1.0f) { /* to (N, K), alpha folded in */
                tw = malloc((size_t)N * (size_t)K * sizeof *tw);
                if (!tw) { free(bs); FAIL(NANO_E_NOMEM, "out of memory"); }
                for (int i = 0; i < N; i++)
                    for (int k = 0; k < K; k++)
                        tw[(size_t)i * K + k] = a->alpha * (a->trans_b ? W[(size_t)i * K + k] : W[(size_t)k * N + i]);
                W = tw;
            }
            nano_gemm *p = nano_gemm_prepare(W, bias, N, K, ep);
            free(tw);
            free(bs);
            if (!p) FAIL(NANO_E_NOMEM, "node %s: cannot prepare the GEMM", nm);
            m->prep[n] = p;
            scratch = nano_gemm_scratch(p, M);
            held = nano_gemm_bytes(p);
        }
    }
    if (scratch > m->scratch_bytes) m->scratch_bytes = scratch;
    m->held_bytes += held;
    return NANO_OK;
}

static void free_prep(nano_model *m) {
    if (!m->prep) return;
    for (int n = 0; n < m->g->nnodes; n++) {
        const nano_node *nd = &m->g->nodes[n];
        if (!m->prep[n]) continue;
        int q = m->g->tensors[nd->in[1]].dtype == NANO_DT_I8;
        if (nd->op == NANO_OP_CONV) q ? nano_qconv_free(m->prep[n]) : nano_conv_free(m->prep[n]);
        else q ? nano_qgemm_free(m->prep[n]) : nano_gemm_free(m->prep[n]);
    }
    free(m->prep);
}

static nano_status setup(nano_model *m, char *err, size_t errlen) {
    const nano_graph *g = m->g;
    m->ptr = calloc((size_t)g->ntensors + 1, sizeof *m->ptr);
    m->wide = calloc((size_t)g->ntensors + 1, sizeof *m->wide);
    m->prep = calloc((size_t)g->nnodes + 1, sizeof *m->prep);
    if (!m->ptr || !m->wide || !m->prep) FAIL(NANO_E_NOMEM, "out of memory");
#ifdef _OPENMP
    m->threads = omp_get_max_threads();
#else
    m->threads = 1;
#endif
    /* A half-precision weight that only convolutions and GEMMs read is widened one at a
     * time while they pack it (prepare_node); any other f16 constant (an embedding
     * table a Gather reads) is widened once here and read as f32 by every op. */
    char *packed_only = calloc((size_t)g->ntensors + 1, 1);
    if (!packed_only) FAIL(NANO_E_NOMEM, "out of memory");
    for (int t = 0; t < g->ntensors; t++) packed_only[t] = g->tensors[t].dtype == NANO_DT_F16;
    for (int n = 0; n < g->nnodes; n++) {
        const nano_node *nd = &g->nodes[n];
        int packs = nd->op == NANO_OP_CONV || nd->op == NANO_OP_GEMM;
        for (int i = 0; i < nd->nin; i++)
            if (nd->in[i] >= 0 && !(packs && i == 1)) packed_only[nd->in[i]] = 0;
    }
    for (int t = 0; t < g->ntensors; t++) {
        const nano_tensor *x = &g->tensors[t];
        if (x->kind != NANO_T_CONST || packed_only[t]) continue;
        if (x->dtype == NANO_DT_F16) {
            size_t n = (size_t)nano_tensor_numel(x);
            m->wide[t] = malloc(n * sizeof(float) + 1);
            if (!m->wide[t]) FAIL(NANO_E_NOMEM, "out of memory widening %s", nano_tensor_name(g, t));
            nano_f16_to_f32_n(x->data, m->wide[t], n);
            m->held_bytes += n * sizeof(float);
            release_pages(m, t);
            m->ptr[t] = m->wide[t];
        } else {
            m->ptr[t] = x->data;
        }
    }
    free(packed_only);
    for (int n = 0; n < g->nnodes; n++) {
        nano_status st = prepare_node(m, n, err, errlen);
        if (st != NANO_OK) return st;
    }
    m->arena_bytes = (size_t)g->arena_bytes;
    size_t total = m->arena_bytes + m->scratch_bytes + 64;
    m->block = aligned_alloc(64, (total + 63) / 64 * 64);
    if (!m->block) FAIL(NANO_E_NOMEM, "cannot allocate the arena (%zu bytes)", total);
    memset(m->block, 0, total);
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].kind != NANO_T_CONST) m->ptr[t] = m->block + g->tensors[t].arena_off;
    return NANO_OK;
}

static nano_status check_dtypes(const nano_graph *g, char *err, size_t errlen) {
    for (int n = 0; n < g->nnodes; n++) {
        const nano_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->nin; i++) {
            int t = nd->in[i];
            if (t < 0 || g->tensors[t].dtype != NANO_DT_F16) continue;
            if (g->tensors[t].kind != NANO_T_CONST)
                FAIL(NANO_E_UNSUPPORTED, "node %s: f16 activations are not supported", nano_node_name(g, n));
        }
    }
    return NANO_OK;
}

nano_status nano_model_from_graph(nano_model **out, const nano_graph *g, char *err, size_t errlen) {
    *out = NULL;
    nano_status st = check_dtypes(g, err, errlen);
    if (st != NANO_OK) return st;
    if ((st = nano_graph_check_plan(g, err, errlen)) != NANO_OK) return st;
    nano_model *m = calloc(1, sizeof *m);
    if (!m) FAIL(NANO_E_NOMEM, "out of memory");
    m->g = g;
    if ((st = setup(m, err, errlen)) != NANO_OK) {
        nano_model_free(m);
        return st;
    }
    *out = m;
    return NANO_OK;
}

nano_status nano_model_load(nano_model **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    nano_model *m = calloc(1, sizeof *m);
    if (!m) FAIL(NANO_E_NOMEM, "out of memory");
    nano_status st = neb_read(&m->own, path, &m->map, &m->map_len, err, errlen);
    if (st != NANO_OK) {
        free(m);
        return st;
    }
    m->owns = 1;
    m->g = &m->own;
    char why[200];
    if ((st = check_dtypes(m->g, why, sizeof why)) != NANO_OK || (st = setup(m, why, sizeof why)) != NANO_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        nano_model_free(m);
        return st;
    }
    *out = m;
    return NANO_OK;
}

void nano_model_free(nano_model *m) {
    if (!m) return;
    if (m->g) {
        free_prep(m);
        if (m->wide)
            for (int t = 0; t < m->g->ntensors; t++) free(m->wide[t]);
    }
    free(m->wide);
    free(m->ptr);
    free(m->block);
    if (m->owns) nano_graph_free(&m->own);
    neb_unmap(m->map, m->map_len);
    free(m);
}

int nano_model_ninputs(const nano_model *m) { return m->g->ninputs; }
int nano_model_noutputs(const nano_model *m) { return m->g->noutputs; }
const nano_graph *nano_model_graph(const nano_model *m) { return m->g; }
const char *nano_model_error(const nano_model *m) { return m->error; }

static nano_io io_of(const nano_model *m, int t) {
    const nano_tensor *x = &m->g->tensors[t];
    return (nano_io){nano_tensor_name(m->g, t), x->dtype, x->ndim, x->shape, m->ptr[t], nano_tensor_bytes(x)};
}

nano_io nano_model_input(const nano_model *m, int i) { return io_of(m, m->g->inputs[i]); }
nano_io nano_model_output(const nano_model *m, int i) { return io_of(m, m->g->outputs[i]); }

void nano_model_set_threads(nano_model *m, int n) {
#ifdef _OPENMP
    int max = omp_get_num_procs();
    m->threads = n < 1 ? 1 : n > max * 4 ? max * 4 : n;
#else
    (void)n;
    m->threads = 1;
#endif
}

void nano_model_set_observer(nano_model *m, nano_observer fn, void *ctx) {
    m->obs = fn;
    m->obs_ctx = ctx;
}

size_t nano_model_memory(const nano_model *m) {
    return m->arena_bytes + m->scratch_bytes + m->held_bytes;
}

/* MatMul with broadcast batch dimensions: one GEMM per output batch. */
static void run_matmul(const nano_model *m, const nano_node *nd) {
    const nano_graph *g = m->g;
    const nano_tensor *A = &g->tensors[nd->in[0]], *B = &g->tensors[nd->in[1]], *Y = &g->tensors[nd->out[0]];
    int M = (int)A->shape[A->ndim - 2], K = (int)A->shape[A->ndim - 1], N = (int)B->shape[B->ndim - 1];
    int nb = Y->ndim - 2;
    int64_t batches = 1;
    for (int d = 0; d < nb; d++) batches *= Y->shape[d];
    const float *a = fptr(m, nd->in[0]), *b = fptr(m, nd->in[1]);
    float *y = fptr(m, nd->out[0]);
    int inner = batches >= m->threads ? 1 : m->threads;
#pragma omp parallel for num_threads(m->threads) if (m->threads > 1 && inner == 1) schedule(static)
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t rem = bi, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int d = nb - 1; d >= 0; d--) {
            int64_t idx = rem % Y->shape[d];
            rem /= Y->shape[d];
            int da = d - (nb - (A->ndim - 2)), db = d - (nb - (B->ndim - 2));
            if (da >= 0) {
                if (A->shape[da] > 1) oa += idx * sa;
                sa *= A->shape[da];
            }
            if (db >= 0) {
                if (B->shape[db] > 1) ob += idx * sb;
                sb *= B->shape[db];
            }
        }
        nano_sgemm(M, N, K, a + oa * M * K, K, b + ob * K * N, N, 0, y + bi * M * N, N, inner);
    }
    if (nd->a.act) nano_act_apply(nd->a.act, nd->a.act_min, nd->a.act_max, y, y, (size_t)(batches * M * N), m->threads);
}

/* The bytes of one element of tensor t as the ops see it (widened halves are f32). */
static size_t esize(const nano_model *m, int t) {
    return m->wide[t] ? sizeof(float) : nano_dtype_size(m->g->tensors[t].dtype);
}

static nano_status run_node(nano_model *m, int n) {
    const nano_graph *g = m->g;
    const nano_node *nd = &g->nodes[n];
    const nano_attrs *a = &nd->a;
    int T = m->threads;
    void *scratch = m->block + m->arena_bytes;
    const nano_tensor *X = &g->tensors[nd->in[0]], *Y = &g->tensors[nd->out[0]];
    nano_shape xs = shape_of(X), ys = shape_of(Y);
    float *x = fptr(m, nd->in[0]), *y = fptr(m, nd->out[0]);
    size_t ny = (size_t)nano_tensor_numel(Y);
    switch (nd->op) {
    case NANO_OP_CONV:
        if (g->tensors[nd->in[1]].dtype == NANO_DT_I8) nano_qconv_run(m->prep[n], x, y, scratch, T);
        else nano_conv_run(m->prep[n], x, y, scratch, T);
        break;
    case NANO_OP_GEMM: {
        int M = gemm_rows(X, a), K = (int)X->shape[X->ndim - 1];
        const nano_tensor *W = &g->tensors[nd->in[1]];
        int N = (int)(a->trans_b ? W->shape[0] : W->shape[1]);
        if (!m->prep[n]) {
            nano_sgemm(M, N, K, x, K, fptr(m, nd->in[1]), a->trans_b ? K : N, a->trans_b, y, N, T);
            if (a->act) nano_act_apply(a->act, a->act_min, a->act_max, y, y, ny, T);
        } else if (W->dtype == NANO_DT_I8) {
            nano_qgemm_run(m->prep[n], M, x, K, y, N, scratch, T);
        } else {
            nano_gemm_run(m->prep[n], M, x, K, y, N, scratch, T);
        }
        break;
    }
    case NANO_OP_MATMUL: run_matmul(m, nd); break;
    case NANO_OP_BATCHNORM:
        nano_batchnorm(x, &xs, fptr(m, nd->in[1]), fptr(m, nd->in[2]), fptr(m, nd->in[3]), fptr(m, nd->in[4]), a->eps, y, T);
        break;
    case NANO_OP_RELU: nano_act_apply(NANO_ACT_RELU, 0, 0, x, y, ny, T); break;
    case NANO_OP_CLIP: nano_act_apply(NANO_ACT_CLIP, a->act_min, a->act_max, x, y, ny, T); break;
    case NANO_OP_GELU: nano_act_apply(a->act == NANO_ACT_GELU_TANH ? NANO_ACT_GELU_TANH : NANO_ACT_GELU, 0, 0, x, y, ny, T); break;
    case NANO_OP_TANH: nano_act_apply(NANO_ACT_TANH, 0, 0, x, y, ny, T); break;
    case NANO_OP_SIGMOID: nano_act_apply(NANO_ACT_SIGMOID, 0, 0, x, y, ny, T); break;
    case NANO_OP_ERF: nano_erf(x, y, ny, T); break;
    case NANO_OP_SQRT: nano_sqrt(x, y, ny, T); break;
    case NANO_OP_ADD: case NANO_OP_SUB: case NANO_OP_MUL: case NANO_OP_DIV: case NANO_OP_POW: {
        nano_shape bs = shape_of(&g->tensors[nd->in[1]]);
        nano_binary(nd->op, x, &xs, fptr(m, nd->in[1]), &bs, y, &ys, a->act, a->act_min, a->act_max, T);
        break;
    }
    case NANO_OP_WHERE: {
        nano_shape s1 = shape_of(&g->tensors[nd->in[1]]), s2 = shape_of(&g->tensors[nd->in[2]]);
        nano_where(m->ptr[nd->in[0]], &xs, fptr(m, nd->in[1]), &s1, fptr(m, nd->in[2]), &s2, y, &ys, T);
        break;
    }
    case NANO_OP_MAXPOOL: nano_maxpool(x, &xs, a, y, &ys, T); break;
    case NANO_OP_AVGPOOL: nano_avgpool(x, &xs, a, y, &ys, T); break;
    case NANO_OP_GLOBALAVGPOOL: nano_globalavgpool(x, &xs, y, T); break;
    case NANO_OP_RESHAPE: case NANO_OP_IDENTITY:
        if (m->ptr[nd->in[0]] != m->ptr[nd->out[0]]) memcpy(m->ptr[nd->out[0]], m->ptr[nd->in[0]], nano_tensor_bytes(Y));
        break;
    case NANO_OP_TRANSPOSE: nano_transpose(m->ptr[nd->in[0]], &xs, a->perm, m->ptr[nd->out[0]], esize(m, nd->in[0]), T); break;
    case NANO_OP_CONCAT: {
        const void *srcs[NANO_MAX_IN];
        nano_shape shapes[NANO_MAX_IN];
        for (int i = 0; i < nd->nin; i++) {
            srcs[i] = m->ptr[nd->in[i]];
            shapes[i] = shape_of(&g->tensors[nd->in[i]]);
        }
        nano_concat(srcs, shapes, nd->nin, a->axis, m->ptr[nd->out[0]], esize(m, nd->in[0]));
        break;
    }
    case NANO_OP_SLICE: nano_slice(m->ptr[nd->in[0]], &xs, a->begin, a->step, m->ptr[nd->out[0]], &ys, esize(m, nd->in[0])); break;
    case NANO_OP_SPLIT: {
        void *dst[NANO_MAX_OUT];
        nano_shape shapes[NANO_MAX_OUT];
        for (int o = 0; o < nd->nout; o++) {
            dst[o] = m->ptr[nd->out[o]];
            shapes[o] = shape_of(&g->tensors[nd->out[o]]);
        }
        nano_split(m->ptr[nd->in[0]], &xs, a->axis, dst, shapes, nd->nout, esize(m, nd->in[0]));
        break;
    }
    case NANO_OP_GATHER: {
        const nano_tensor *I = &g->tensors[nd->in[1]];
        nano_shape is = shape_of(I);
        if (nano_gather(m->ptr[nd->in[0]], &xs, a->axis, m->ptr[nd->in[1]], I->dtype == NANO_DT_I64, &is,
                        m->ptr[nd->out[0]], esize(m, nd->in[0]))) {
            snprintf(m->error, sizeof m->error, "node %s (Gather): an index of %s is outside 0..%lld",
                     nano_node_name(g, n), nano_tensor_name(g, nd->in[1]), (long long)X->shape[a->axis] - 1);
            return NANO_E_ARG;
        }
        break;
    }
    case NANO_OP_SOFTMAX: nano_softmax(x, &xs, a->axis, y, T); break;
    case NANO_OP_LAYERNORM:
        nano_layernorm(x, &xs, a->axis, fptr(m, nd->in[1]), nd->nin >= 3 && nd->in[2] >= 0 ? fptr(m, nd->in[2]) : NULL, a->eps, y, T);
        break;
    case NANO_OP_REDUCEMEAN: nano_reducemean(x, &xs, a->axes_mask, y, T); break;
    case NANO_OP_CAST:
        nano_cast(m->ptr[nd->in[0]], m->wide[nd->in[0]] ? NANO_DT_F32 : X->dtype, m->ptr[nd->out[0]], a->to, ny);
        break;
    default:
        snprintf(m->error, sizeof m->error, "node %s: op %s cannot run", nano_node_name(g, n), nano_op_name(nd->op));
        return NANO_E_UNSUPPORTED;
    }
    return NANO_OK;
}

nano_status nano_model_run(nano_model *m) {
    m->error[0] = 0;
    for (int n = 0; n < m->g->nnodes; n++) {
        nano_status st = run_node(m, n);
        if (st != NANO_OK) return st;
        if (m->obs) {
            const float *outs[NANO_MAX_OUT];
            for (int o = 0; o < m->g->nodes[n].nout; o++) outs[o] = fptr(m, m->g->nodes[n].out[o]);
            m->obs(m->obs_ctx, m->g, n, outs);
        }
    }
    return NANO_OK;
}
