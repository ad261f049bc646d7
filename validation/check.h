/* check — the one header of the C test programs (under validation/): one line per check
 * ("ok - what" / "FAIL - what"), the count of failed checks that makes the exit status,
 * the derived tolerance |got - ref| <= atol + rtol*|ref| (docs/testing.md#kernel-triad), and
 * the skip convention: a program that cannot run here prints one "SKIP ..." line and
 * exits CHECK_SKIP (77, as under automake), which tools/run-tests.sh counts as skipped,
 * never as passed.
 *
 * Design decision: one header in sections, each guarded by what it needs, so a test
 * says what kind it is before the include and pulls in nothing else:
 *   (always)         check_line, check_limit, check_skip; the kernel helpers kc_*
 *                    (random inputs, tolerances, host canaries, central differences)
 *   (default)        single-process CPU tests (neither of the two below): test_ctx,
 *                    check(t, ok, fmt, ...), stderr capture, scratch files
 *   CHECK_MPI        defined before the include: check(rt, ok, what, why) agreed by every
 *                    rank (collective), the test runtime and a shared scratch directory
 *   NEBULA_DATA_H    data/data.h included before: expect_open_error (single process)
 *   CHECK_GPU        defined before the include: the CUDA kernel checks (device buffers
 *                    between canaries, compared with the CPU reference); needs cuda/device.h
 *
 * Header-only (static functions): each test_*.c is its own program; a helper a program
 * does not use is not an error. */
#ifndef NEBULA_VALIDATION_CHECK_H
#define NEBULA_VALIDATION_CHECK_H

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/isa.h"

/* ---- every test ------------------------------------------------------------------ */

/* The exit status of a program that could not run here (tools/run-tests.sh: SKIP). */
#define CHECK_SKIP 77

/* Prints "ok - TEXT" or "FAIL - TEXT", flushed (a crash later keeps the line), and
 * counts a failure in *failures. Returns ok. */
__attribute__((format(printf, 3, 0), unused))
static bool check_vline(int *failures, bool ok, const char *fmt, va_list ap)
{
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    if (!ok) (*failures)++;
    return ok;
}

__attribute__((format(printf, 3, 4), unused))
static bool check_line(int *failures, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    check_vline(failures, ok, fmt, ap);
    va_end(ap);
    return ok;
}

/* The largest |got - ref| allowed: atol + rtol*|ref|. */
static inline double check_limit(double ref, double atol, double rtol)
{
    return atol + rtol * fabs(ref);
}

/* Skips the whole program: one "SKIP  name: why" line, exit 77. */
__attribute__((noreturn, unused)) static void check_skip(const char *name, const char *why)
{
    printf("SKIP  %s: %s\n", name, why);
    fflush(stdout);
    exit(CHECK_SKIP);
}

/* ---- kernels: a fast float path against its double reference -------------------- */

typedef struct kc {
    int failures;  /* checks that failed so far */
    rng r;         /* the test's random stream (fixed seed) */
} kc;

static inline void kc_init(kc *k, uint64_t seed)
{
    k->failures = 0;
    rng_init(&k->r, seed, 0, RNG_PURPOSE_TEST, 0);
}

/* One line per check, with a detail figure (the worst error ratio); returns ok. */
static inline bool kc_report(kc *k, bool ok, const char *what, double detail)
{
    return check_line(&k->failures, ok, "%s (%.3g)", what, detail);
}

static inline void kc_uniform(kc *k, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&k->r);
}

static inline void kc_uniform_d(kc *k, double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform_double(&k->r);
}

static inline void kc_to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static inline void kc_to_double(double *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* |got - ref| <= atol + rtol*|ref| everywhere; reports the worst ratio (<= 1 passes;
 * a non-finite got fails). */
static inline bool kc_close(kc *k, const float *got, const double *ref, size_t n, double atol, double rtol,
                            const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = check_limit(ref[i], atol, rtol), err = fabs((double)got[i] - ref[i]);
        double ratio = isfinite(got[i]) ? err / lim : INFINITY;
        if (ratio > worst) { worst = ratio; at = i; }
    }
    if (worst > 1) printf("    worst at %zu: got %.9g ref %.9g\n", at, n ? (double)got[at] : 0.0, n ? ref[at] : 0.0);
    return kc_report(k, worst <= 1, what, worst);
}

/* Same for two double arrays (gradient checks). */
static inline bool kc_close_d(kc *k, const double *got, const double *ref, size_t n, double atol, double rtol,
                              const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = check_limit(ref[i], atol, rtol), err = fabs(got[i] - ref[i]);
        double ratio = isfinite(got[i]) ? err / lim : INFINITY;
        if (ratio > worst) { worst = ratio; at = i; }
    }
    if (worst > 1) printf("    worst at %zu: got %.12g ref %.12g\n", at, n ? got[at] : 0.0, n ? ref[at] : 0.0);
    return kc_report(k, worst <= 1, what, worst);
}

/* Canaries: allocate n floats plus KC_GUARD on each side filled with a NaN pattern. */
#define KC_GUARD 16
static inline float *kc_guarded(size_t n)
{
    float *p = malloc((n + 2 * KC_GUARD) * sizeof(float));
    for (size_t i = 0; i < n + 2 * KC_GUARD; i++) p[i] = -12345.678f;
    return p + KC_GUARD;
}

static inline bool kc_guards_intact(const float *p, size_t n)
{
    for (size_t i = 1; i <= KC_GUARD; i++)
        if (p[-(long)i] != -12345.678f || p[n + i - 1] != -12345.678f) return false;
    return true;
}

static inline void kc_guarded_free(float *p)
{
    free(p - KC_GUARD);
}

/* Central difference of a scalar function of x (double): g[i] = (f(x+h) - f(x-h)) / 2h.
 * `f` reads x through ctx; x is restored. Truncation error O(h^2 f'''), rounding
 * O(eps |f| / h): h = 1e-5 balances them for O(1) inputs in double. */
typedef double (*kc_scalar_fn)(void *ctx);
static inline void kc_numeric_grad(double *x, size_t n, kc_scalar_fn f, void *ctx, double *g)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double fp = f(ctx);
        x[i] = keep - h;
        double fm = f(ctx);
        x[i] = keep;
        g[i] = (fp - fm) / (2 * h);
    }
}

/* Float tolerance for a result accumulated over k terms of O(1) magnitude:
 * rtol ~ k * eps_f32 is the worst case; tests pass a small multiple of sqrt-free k. */
static inline double kc_rtol_f32(size_t k)
{
    return 4.0 * (double)FLT_EPSILON * (double)(k < 1 ? 1 : k);
}

/* ---- kernels: buffers and shared checks of the layer tests ------------------------------------------------------------------ */

static inline float *kc_frand(kc *k, size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    kc_uniform(k, p, n, lo, hi);
    return p;
}

static inline float *kc_gzero(size_t n) /* guarded, zeroed */
{
    float *p = kc_guarded(n);
    memset(p, 0, n * sizeof *p);
    return p;
}

static inline float *kc_gcopy(const float *src, size_t n) /* guarded copy */
{
    float *p = kc_guarded(n);
    memcpy(p, src, n * sizeof *p);
    return p;
}

static inline double *kc_dzero(size_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

static inline double *kc_dfrom(const float *src, size_t n)
{
    double *p = kc_dzero(n);
    kc_to_double(p, src, n);
    return p;
}

static inline double *kc_dabs_of(const double *x, size_t n)
{
    double *p = kc_dzero(n);
    for (size_t i = 0; i < n; i++) p[i] = fabs(x[i]);
    return p;
}

/* ||got - ref|| / ||ref|| over n values (a NaN anywhere gives NaN; ||got|| when ref is 0). */
static inline double kc_rel_l2(const float *got, const float *ref, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - ref[i];
        d += e * e;
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static inline double kc_dmaxabs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static inline double kc_fmaxabs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static inline double kc_ddot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* int32 buffers with canaries, for argmax */
#define KC_IGUARD 0x5eadbeef
static inline int32_t *kc_iguarded(size_t n)
{
    int32_t *p = malloc((n + 2 * KC_GUARD) * sizeof *p);
    for (size_t i = 0; i < n + 2 * KC_GUARD; i++) p[i] = KC_IGUARD;
    return p + KC_GUARD;
}

static inline bool kc_iguards_intact(const int32_t *p, size_t n)
{
    for (size_t i = 1; i <= KC_GUARD; i++)
        if (p[-(long)i] != KC_IGUARD || p[n + i - 1] != KC_IGUARD) return false;
    return true;
}


/* Central differences of L = sum(out*R) with h = 1e-5. Each evaluation of L is off
 * by at most n*eps*S (S = sum|out*R|, n terms), so the quotient by n*eps*S/h; the
 * truncation error h^2/6 |L'''| is zero for the piecewise linear layers and below
 * 1e-9 for batchnorm at these sizes. */
static inline double kc_fd_atol(size_t n, double S)
{
    return (double)n * DBL_EPSILON * S / 1e-5 + 1e-9;
}

static inline double kc_abs_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs(a[i] * b[i]);
    return s;
}

/* Checks a reference gradient against central differences of f over x. */
static inline void kc_check_fd(kc *k, double *x, size_t n, kc_scalar_fn f, void *ctx, const double *grad, double atol,
                     const char *what)
{
    double *g = kc_dzero(n);
    kc_numeric_grad(x, n, f, ctx, g);
    kc_close_d(k, grad, g, n, atol, 1e-6, what);
    free(g);
}

/* (d): `got` started as g0 and had a gradient `ref` added: compare with g0 + ref;
 * the extra addition costs one rounding of |g0| + |ref|. */
static inline void kc_check_adds(kc *k, const float *got, const float *g0, const double *ref, size_t n, double atol,
                       double rtol, const char *what)
{
    double *want = kc_dzero(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)g0[i] + ref[i];
    kc_close(k, got, want, n, atol + kc_rtol_f32(1) * (kc_fmaxabs(g0, n) + kc_dmaxabs(ref, n)), rtol, what);
    free(want);
}

/* The same for the reference backward, in double. */
static inline void kc_check_adds_d(kc *k, const double *got, const float *g0, const double *ref, size_t n, const char *what)
{
    double *want = kc_dzero(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)g0[i] + ref[i];
    kc_close_d(k, got, want, n, 1e-12, 1e-12, what);
    free(want);
}

#if !defined(CHECK_MPI) && !defined(CHECK_GPU)
/* ---- single process: checks, captured error messages, scratch files ------------- */

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct test_ctx {
    int failures;          /* FAIL lines so far */
    char dir[64];          /* scratch directory */
    char captured[8192];   /* stderr of the last capture_end */
    int saved_fd;          /* the real stderr while capturing */
    FILE *cap;             /* capture file */
} test_ctx;

__attribute__((format(printf, 3, 4), unused))
static bool check(test_ctx *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    check_vline(&t->failures, ok, fmt, ap);
    va_end(ap);
    return ok;
}

/* stderr goes to a temporary file until capture_end, which returns its text and
 * (echo) copies it to the real stderr for the test log; loops over thousands of
 * files do not. */
__attribute__((unused)) static void capture_begin(test_ctx *t)
{
    fflush(stderr);
    /* tmpfile() would ignore TMPDIR and insist on /tmp */
    const char *tmpd = getenv("TMPDIR");
    char path[256];
    snprintf(path, sizeof path, "%s/nebula-capture-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0 || unlink(path) != 0 || !(t->cap = fdopen(fd, "w+"))) { perror("capture_begin"); exit(1); }
    t->saved_fd = dup(2);
    dup2(fileno(t->cap), 2);
}

__attribute__((unused)) static const char *capture_end(test_ctx *t, bool echo)
{
    fflush(stderr);
    dup2(t->saved_fd, 2);
    close(t->saved_fd);
    rewind(t->cap);
    size_t n = fread(t->captured, 1, sizeof t->captured - 1, t->cap);
    t->captured[n] = '\0';
    fclose(t->cap);
    if (echo) fputs(t->captured, stderr);  /* the test log keeps the messages */
    return t->captured;
}

/* $TMPDIR (else /tmp)/nebula-NAME-XXXXXX, removed with everything in it by scratch_free. */
__attribute__((unused)) static void scratch_dir(test_ctx *t, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/nebula-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    if (!mkdtemp(t->dir)) { perror("mkdtemp"); exit(1); }
}

__attribute__((unused)) static int scratch_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

__attribute__((unused)) static void scratch_free(test_ctx *t)
{
    if (nftw(t->dir, scratch_rm, 8, FTW_DEPTH | FTW_PHYS) != 0) fprintf(stderr, "could not remove %s\n", t->dir);
}

__attribute__((unused)) static const char *scratch_path(const test_ctx *t, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", t->dir, name);
    return buf;
}

/* A new file each time: truncating and rewriting one makes ext4 flush it to disk
 * on close (auto_da_alloc), which costs milliseconds per hostile file. */
__attribute__((unused)) static void write_bytes(const char *path, const void *p, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

/* The whole file, malloc'ed (one byte more, for callers that append); exits on error. */
__attribute__((unused)) static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *p = malloc(*n + 1);
    if (!p || fread(p, 1, *n, f) != *n) { perror(path); exit(1); }
    fclose(f);
    return p;
}

#ifdef NEBULA_DATA_H
/* ---- data: an expected data_open failure (data/data.h) --------------------------- */

/* data_open must fail with `want` and a message containing the path and every
 * text in the NULL-terminated list. */
__attribute__((unused)) static void expect_open_error(test_ctx *t, const data_config *cfg, status want,
                                                      const char *name, ...)
{
    data_loader *d = NULL;
    capture_begin(t);
    status st = data_open(&d, cfg);
    const char *msg = capture_end(t, true);
    bool ok = st == want && d == NULL && strstr(msg, cfg->path) != NULL;
    va_list ap;
    va_start(ap, name);
    const char *missing = NULL;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!missing && !strstr(msg, s)) missing = s;
    va_end(ap);
    check(t, ok && !missing, "%s: %s%s%s", name, status_str(st), missing ? "; message lacks: " : "",
          missing ? missing : "");
    data_free(d);
}
#endif /* NEBULA_DATA_H */

#endif /* single process */

#ifdef CHECK_MPI
/* ---- MPI: every rank agrees on each verdict -------------------------------------- */

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/runtime.h"

static int failures; /* failed checks so far (the same on every rank) */

/* Ranks that failed say why on stderr; rank 0 prints the agreed "ok - ..." or "FAIL - ...". */
static void check(const runtime *rt, bool ok, const char *what, const char *why)
{
    int all_ok = ok;
    if (!ok && why && why[0]) fprintf(stderr, "# rank %d: %s: %s\n", rt->rank, what, why);
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, rt->world);
    if (rt->rank == 0) {
        check_line(&failures, all_ok, "%s", what);
    } else if (!all_ok) {
        failures++;
    }
    fflush(stdout);
}

/* The runtime of a test program that takes only --ranks-per-node N (virtual nodes),
 * unbound, with `gpus` GPUs on the host handed out by local rank (mpi_test_start: none);
 * exits through runtime_exit when it cannot start. */
static inline void mpi_test_start_gpus(runtime *rt, int *argc, char ***argv, int gpus)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE, .gpus = gpus };
    for (int i = 1; i < *argc; i++)
        if (!strcmp((*argv)[i], "--ranks-per-node") && i + 1 < *argc) ro.ranks_per_node = atoi((*argv)[++i]);
    status st = runtime_init(rt, argc, argv, &ro);
    if (st != STATUS_OK) runtime_exit(rt, st);
}

static inline void mpi_test_start(runtime *rt, int *argc, char ***argv)
{
    mpi_test_start_gpus(rt, argc, argv, 0);
}

/* A fresh directory $TMPDIR/nebula-test-TAG-XXXXXX made by rank 0, its name given to
 * every rank in dir (size bytes). */
static inline void mpi_test_tmpdir(const runtime *rt, const char *tag, char *dir, size_t size)
{
    if (rt->rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, size, "%s/nebula-test-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", tag);
        CHECK(mkdtemp(dir), "mkdtemp");
    }
    MPI_Bcast(dir, (int)size, MPI_CHAR, 0, rt->world);
}

static inline int mpi_test_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Rank 0 removes dir and everything under it. */
static inline void mpi_test_rmtree(const runtime *rt, const char *dir)
{
    if (rt->rank == 0) nftw(dir, mpi_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
#endif /* CHECK_MPI */

#ifdef CHECK_GPU
/* ---- GPU: CUDA kernels against their CPU reference ------------------------------- *
 * The CPU kernel is the reference, the CUDA variant runs on the same random inputs, and
 * each output is compared elementwise with check_limit, tolerances derived in the test
 * from the dtype's epsilon and the reduction length. Outputs on the device sit between
 * guard canaries that must come back untouched. Lines are "ok    what" / "FAIL  what"
 * (the column layout of the GPU tests' own lines). Without a CUDA device a test prints
 * one SKIP line saying nothing was checked and exits 77; with one, it prints one line
 * per check and exits 1 when any failed. */

#include "cuda/device.h"

static int gpu_failed; /* checks failed so far */
static int gpu_passed; /* checks passed so far */
/* 1 on the CPU emulator (validation/gpu/emu), which runs the repository's kernels but
 * not cuBLAS or cuDNN: tests skip those there. */
static int gpu_emulated;

/* Canary floats on each side of a guarded device buffer; the bit pattern is a NaN
 * no kernel produces by arithmetic. */
#define GPU_GUARD 64
#define GPU_CANARY_BITS 0x7fc0dead

static inline void gpu_die(const char *what, int code)
{
    char msg[256];
    int e = cuda_error_take(msg, sizeof msg);
    fprintf(stderr, "FAIL  %s: CUDA error %d (%s)%s%s\n", what, code, cuda_error_name(code), e ? "; " : "",
            e ? msg : "");
    exit(1);
}

/* Skips the whole program (exit 77) when there is no device; selects device 0. */
static inline void gpu_test_start(const char *name)
{
    int n = cuda_device_count();
    if (n == 0) check_skip(name, "no CUDA device visible; nothing was checked");
    cuda_device_info info;
    int e = cuda_device_select(0, &info);
    if (e) gpu_die("cuda_device_select", e);
    gpu_emulated = strncmp(info.name, "CPU emulator", 12) == 0;
    printf("# %s on %s (sm_%d%d, %d SMs, %.1f GiB)\n", name, info.name, info.sm_major, info.sm_minor,
           info.multiprocessors, info.memory_bytes / 1073741824.0);
}

static inline int gpu_test_end(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, gpu_passed, gpu_failed);
    return gpu_failed ? 1 : 0;
}

/* Device buffer of n floats inside canaries, filled from host (or zeroed when host is NULL). */
static inline float *gpu_guarded(const float *host, size_t n)
{
    size_t total = n + 2 * GPU_GUARD;
    float *h = (float *)malloc(total * sizeof(float));
    uint32_t c = GPU_CANARY_BITS;
    for (size_t i = 0; i < total; i++) memcpy(&h[i], &c, 4);
    if (host) memcpy(h + GPU_GUARD, host, n * sizeof(float));
    else memset(h + GPU_GUARD, 0, n * sizeof(float));
    void *d;
    int e = cuda_malloc(&d, total * sizeof(float));
    if (e) gpu_die("cuda_malloc", e);
    if ((e = cuda_memcpy_h2d(d, h, total * sizeof(float)))) gpu_die("cuda_memcpy_h2d", e);
    free(h);
    return (float *)d + GPU_GUARD;
}

static inline void gpu_release(void *guarded_or_plain, int guarded)
{
    if (guarded_or_plain) cuda_free(guarded ? (void *)((float *)guarded_or_plain - GPU_GUARD) : guarded_or_plain);
}

/* Plain device copy of n bytes of host data. */
static inline void *gpu_upload(const void *host, size_t bytes)
{
    void *d;
    int e = cuda_malloc(&d, bytes);
    if (e) gpu_die("cuda_malloc", e);
    if ((e = cuda_memcpy_h2d(d, host, bytes))) gpu_die("cuda_memcpy_h2d", e);
    return d;
}

/* Waits for the kernels, fails on any recorded or asynchronous error. */
static inline void gpu_sync(const char *what)
{
    int e = cuda_synchronize();
    char msg[256];
    int k = cuda_error_take(msg, sizeof msg);
    if (e || k) {
        fprintf(stderr, "FAIL  %s: %s\n", what, k ? msg : cuda_error_name(e));
        exit(1);
    }
}

/* Copies a guarded buffer back, checks its canaries, and compares it with ref. */
static inline void gpu_check_close(const char *what, const float *dev_guarded, const float *ref, size_t n, double atol,
                            double rtol)
{
    gpu_sync(what);
    size_t total = n + 2 * GPU_GUARD;
    float *h = (float *)malloc(total * sizeof(float));
    int e = cuda_memcpy_d2h(h, dev_guarded - GPU_GUARD, total * sizeof(float));
    if (e) gpu_die("cuda_memcpy_d2h", e);
    size_t torn = 0;
    for (size_t i = 0; i < GPU_GUARD; i++) {
        uint32_t a, b;
        memcpy(&a, &h[i], 4);
        memcpy(&b, &h[GPU_GUARD + n + i], 4);
        torn += (a != GPU_CANARY_BITS) + (b != GPU_CANARY_BITS);
    }
    size_t bad = 0, worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = h[GPU_GUARD + i], r = ref[i];
        double err = fabs(g - r), lim = check_limit(r, atol, rtol);
        if (!(g == r || err <= lim)) {  // equal infinities pass (inf - inf is NaN); NaN fails
            bad++;
            if (!(err <= worst)) { worst = err; worst_i = i; }
        }
    }
    if (bad || torn) {
        gpu_failed++;
        printf("FAIL  %s: %zu of %zu outside %.1e + %.1e*|ref|", what, bad, n, atol, rtol);
        if (bad) printf(" (worst [%zu] got %.9g ref %.9g)", worst_i, (double)h[GPU_GUARD + worst_i], ref[worst_i]);
        if (torn) printf("; %zu canary floats overwritten", torn);
        printf("\n");
    } else {
        gpu_passed++;
        printf("ok    %s (%zu values)\n", what, n);
    }
    free(h);
}

/* Exact comparison of n bytes (integer outputs, bit-exact kernels). */
static inline void gpu_check_bytes(const char *what, const void *dev, const void *ref, size_t bytes)
{
    gpu_sync(what);
    unsigned char *h = (unsigned char *)malloc(bytes ? bytes : 1);
    int e = cuda_memcpy_d2h(h, dev, bytes);
    if (e) gpu_die("cuda_memcpy_d2h", e);
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (h[i] != ((const unsigned char *)ref)[i]) first = i;
    if (first < bytes) {
        gpu_failed++;
        printf("FAIL  %s: first differing byte at %zu of %zu\n", what, first, bytes);
    } else {
        gpu_passed++;
        printf("ok    %s (%zu bytes, exact)\n", what, bytes);
    }
    free(h);
}

/* Uniform floats in [lo, hi) from a fixed-seed xorshift (tests are reproducible). */
static inline void gpu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t s = *state;
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        *state = s;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

#endif /* CHECK_GPU */

/* Kernel tests run at a forced level (NEBULA_CPU_ISA, validation/tests.list): true after
 * one "SKIP: why" line when the variable names a level this CPU lacks (the caller returns
 * 77); otherwise prints "# ISA level <isa_describe's line><note>" and returns false. A
 * value that is no level at all is left to isa_active (exit 2, a test failure). */
static inline bool kc_isa_skip(const char *note)
{
    char isa[256];
    isa_level forced;
    const char *env = getenv("NEBULA_CPU_ISA");
    if (!isa_env_check(isa, sizeof isa) && env && isa_parse(env, &forced)) {
        printf("SKIP: %s\n", isa);
        return true;
    }
    isa_describe(isa, sizeof isa);
    printf("# ISA level %s%s\n", isa, note);
    return false;
}

#endif
