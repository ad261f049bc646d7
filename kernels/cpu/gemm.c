/* gemm — see gemm.h. The oneDNN path is dnn_matmul (dnn.h: transposes and leading
 * dimensions as strides, "C +=" as a sum post-op). Primitives are kept per shape (a model runs a dozen); calls come from the
 * layers, outside OpenMP regions, so the cache needs no lock. */
#include "gemm.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "blas.h"
#include "dnn.h"

typedef struct gemm_key {
    int M, N, K, lda, ldb, ldc;
    int ta, tb, accumulate;
    int threads; /* oneDNN splits the work when the primitive is made */
} gemm_key;

typedef struct gemm_prim {
    gemm_key key;
    dnn_matmul mm;
} gemm_prim;

/* GPT-2 and BERT: 3 calls per layer kind and direction, ~14 shapes per batch size */
#define GEMM_CACHE 64
static gemm_prim cache[GEMM_CACHE];
static int ncache;

#define GEMM_SEEN 64
static gemm_shape seen[GEMM_SEEN];
static int nseen;

#define GEMM_TABLE 64
static gemm_choice table[GEMM_TABLE];
static int ntable;

void gemm_release(void)
{
    for (int i = 0; i < ncache; i++) dnn_matmul_free(&cache[i].mm);
    ncache = 0;
}

static gemm_prim *gemm_prim_get(const gemm_key *k)
{
    for (int i = 0; i < ncache; i++)
        if (!memcmp(&cache[i].key, k, sizeof *k)) return &cache[i];
    if (ncache == GEMM_CACHE) gemm_release(); /* more shapes than a model has: start over */
    gemm_prim *e = &cache[ncache];
    memset(e, 0, sizeof *e);
    e->key = *k;
    dnn_matmul_init(&e->mm, dnnl_f32, k->M, k->N, k->K, k->ta, k->lda, k->tb, k->ldb, k->ldc, k->accumulate);
    ncache++;
    return e;
}

void gemm_f32_on(gemm_path path, bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, bool accumulate, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof *C);
        return;
    }
    if (path == GEMM_PATH_BLAS) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                    lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
        return;
    }
    gemm_key k = { M, N, K, lda, ldb, ldc, ta, tb, accumulate, omp_get_max_threads() };
    dnn_matmul_run(&gemm_prim_get(&k)->mm, A, B, C);
}

static void gemm_note_shape(const gemm_shape *s)
{
    for (int i = 0; i < nseen; i++)
        if (!memcmp(&seen[i], s, sizeof *s)) return;
    if (nseen < GEMM_SEEN) seen[nseen++] = *s;
}

int gemm_seen_shapes(gemm_shape *out, int cap)
{
    int n = nseen < cap ? nseen : cap;
    memcpy(out, seen, (size_t)n * sizeof *out);
    return n;
}

void gemm_set_table(const gemm_choice *c, int n)
{
    ntable = n < GEMM_TABLE ? n : GEMM_TABLE;
    if (ntable > 0) memcpy(table, c, (size_t)ntable * sizeof *c);
}

void gemm_f32(bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
              bool accumulate, float *C, int ldc)
{
    gemm_shape s;
    memset(&s, 0, sizeof s);  /* padding too: shapes are compared with memcmp */
    s.M = M, s.N = N, s.K = K, s.ta = ta, s.tb = tb;
    if (M > 0 && N > 0 && K > 0) gemm_note_shape(&s);  /* an empty product is no shape to tune */
    gemm_path path = gemm_default();
    for (int i = 0; i < ntable; i++)
        if (!memcmp(&table[i].shape, &s, sizeof s)) path = table[i].path;
    gemm_f32_on(path, ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

void gemm_probe(const gemm_shape *shapes, int n, gemm_choice *out, double *gflops)
{
    for (int i = 0; i < n; i++) {
        const gemm_shape *s = &shapes[i];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *a = malloc((na ? na : 1) * sizeof *a), *b = malloc((nb ? nb : 1) * sizeof *b);
        float *c = calloc(nc ? nc : 1, sizeof *c);
        out[i].shape = *s;
        out[i].path = GEMM_PATH_BLAS;
        if (!a || !b || !c) { /* no room to time it: the BLAS, as without a table */
            free(a), free(b), free(c);
            continue;
        }
        for (size_t j = 0; j < na; j++) a[j] = (float)(j % 7) * 0.1f;
        for (size_t j = 0; j < nb; j++) b[j] = (float)(j % 5) * 0.1f;
        double best[GEMM_PATHS] = { 1e30, 1e30 };
        int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
        for (int r = 0; r < 4; r++)
            for (int p = 0; p < GEMM_PATHS; p++) {
                double t0 = omp_get_wtime();
                gemm_f32_on((gemm_path)p, s->ta, s->tb, s->M, s->N, s->K, a, lda, b, ldb, true, c, s->N);
                double t = omp_get_wtime() - t0;
                if (r > 0 && t < best[p]) best[p] = t;  /* round 0 warms up (threads, primitives) */
            }
        if (best[GEMM_PATH_ONEDNN] < 0.97 * best[GEMM_PATH_BLAS]) out[i].path = GEMM_PATH_ONEDNN;
        for (int p = 0; gflops && p < GEMM_PATHS; p++)
            gflops[2 * i + p] = 2.0 * s->M * s->N * (double)s->K / best[p] / 1e9;
        free(a), free(b), free(c);
    }
}

/* ---- which path ------------------------------------------------------------------ */

/* OpenBLAS's core names (0.3.x, driver/others/dynamic.c) and BLIS's architectures, by
 * the widest fp32 FMA kernels they run. AVX without FMA (Sandybridge) and the AMD
 * cores before Excavator count as base: their kernels are not AVX2's. */
static const struct {
    const char *name;
    isa_level level;
} cores[] = {
    { "SkylakeX", ISA_AVX512 },  { "Cooperlake", ISA_AVX512 }, { "SapphireRapids", ISA_AVX512 },
    { "Haswell", ISA_AVX2 },     { "Zen", ISA_AVX2 },          { "Excavator", ISA_AVX2 },
    { "Prescott", ISA_BASE },    { "Core2", ISA_BASE },        { "Penryn", ISA_BASE },
    { "Dunnington", ISA_BASE },  { "Nehalem", ISA_BASE },      { "Atom", ISA_BASE },
    { "Opteron", ISA_BASE },     { "Opteron(SSE3)", ISA_BASE }, { "Barcelona", ISA_BASE },
    { "Bobcat", ISA_BASE },      { "Bulldozer", ISA_BASE },    { "Piledriver", ISA_BASE },
    { "Steamroller", ISA_BASE }, { "Sandybridge", ISA_BASE },
    /* BLIS */
    { "skx", ISA_AVX512 },       { "knl", ISA_AVX512 },        { "zen4", ISA_AVX512 },
    { "haswell", ISA_AVX2 },     { "zen", ISA_AVX2 },          { "zen2", ISA_AVX2 },
    { "zen3", ISA_AVX2 },        { "excavator", ISA_AVX2 },    { "generic", ISA_BASE },
    { "penryn", ISA_BASE },      { "sandybridge", ISA_BASE },  { "bulldozer", ISA_BASE },
    { "piledriver", ISA_BASE },  { "steamroller", ISA_BASE },
};

/* The level of a core name; false for a name not in the table (then the BLAS is trusted). */
static bool gemm_core_level(const char *core, isa_level *level)
{
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].name)) { /* builds without DYNAMIC_ARCH say "HASWELL" */
            *level = cores[i].level;
            return true;
        }
    return false;
}

/* The fp32 vector width a level's kernels use: bf16 and AMX add no wider fp32 vectors. */
static isa_level gemm_width(isa_level l) { return l >= ISA_AVX512 ? ISA_AVX512 : l; }

isa_level gemm_blas_level(void)
{
    isa_level l;
    return gemm_core_level(blas_core(), &l) ? l : isa_machine();
}

bool gemm_env_check(char *why, size_t len)
{
    const char *e = getenv("NEBULA_GEMM");
    if (!e || !e[0] || !strcmp(e, "auto") || !strcmp(e, "blas") || !strcmp(e, "onednn")) return true;
    snprintf(why, len, "NEBULA_GEMM=%s is not a GEMM path; use auto, blas or onednn", e);
    return false;
}

const char *gemm_path_name(gemm_path p) { return p == GEMM_PATH_BLAS ? "blas" : p == GEMM_PATH_ONEDNN ? "onednn" : "?"; }

gemm_path gemm_default(void)
{
    static int chosen = -1;
    if (chosen < 0) {
        char why[160];
        if (!gemm_env_check(why, sizeof why)) {
            fprintf(stderr, "nebula: %s\n", why);
            exit(2);
        }
        const char *e = getenv("NEBULA_GEMM");
        if (e && !strcmp(e, "blas")) chosen = GEMM_PATH_BLAS;
        else if (e && !strcmp(e, "onednn")) chosen = GEMM_PATH_ONEDNN;
        else chosen = gemm_width(gemm_blas_level()) < gemm_width(isa_active()) ? GEMM_PATH_ONEDNN : GEMM_PATH_BLAS;
    }
    return (gemm_path)chosen;
}

void gemm_describe(char *buf, size_t len)
{
    const char *core = blas_core(), *e = getenv("NEBULA_GEMM");
    isa_level l;
    bool known = gemm_core_level(core, &l);
    char kern[128];
    if (known) snprintf(kern, sizeof kern, "core %s = %s kernels", core, isa_name(gemm_width(l)));
    else if (core) snprintf(kern, sizeof kern, "core %s, not in gemm.c's table: trusted", core);
    else snprintf(kern, sizeof kern, "dispatching on CPU flags");
    bool forced = e && (!strcmp(e, "blas") || !strcmp(e, "onednn"));
    const char *width = isa_name(gemm_width(isa_active()));
    if (forced)
        snprintf(buf, len, "%s (NEBULA_GEMM=%s; the BLAS: %s)", gemm_default() == GEMM_PATH_ONEDNN ? "oneDNN matmul" : "BLAS",
                 e, kern);
    else if (gemm_default() == GEMM_PATH_ONEDNN)
        snprintf(buf, len, "oneDNN matmul (the BLAS runs %s, below this CPU's %s)", kern, width);
    else
        snprintf(buf, len, "BLAS (%s, %s%s)", kern, known ? "this CPU's " : "", known ? width : "kept");
    if (ntable > 0) {
        size_t n = strlen(buf);
        snprintf(buf + n, len > n ? len - n : 0, "; %d shape(s) from a tuning table", ntable);
    }
}
