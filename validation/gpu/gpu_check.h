/* gpu_check — what the CUDA kernel tests share (STYLE.md's kernel triad): the CPU
 * kernel is the reference, the CUDA variant runs on the same random inputs, and
 * each output is compared elementwise with |got - ref| <= atol + rtol * |ref|,
 * tolerances derived in the test from the dtype's epsilon and the reduction length.
 * Outputs on the device sit between guard canaries that must come back untouched.
 *
 * Without a CUDA device a test prints one SKIP line saying nothing was checked and
 * exits 0 (make check-gpu relies on this); with one, it prints one line per check
 * and exits 1 when any failed. */
#ifndef NEBULA_VALIDATION_GPU_CHECK_H
#define NEBULA_VALIDATION_GPU_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Skips the whole program (exit 0) when there is no device; selects device 0. */
static inline void gpu_test_start(const char *name)
{
    int n = cuda_device_count();
    if (n == 0) {
        printf("SKIP  %s: no CUDA device visible; nothing was checked\n", name);
        exit(0);
    }
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
        double err = fabs(g - r), lim = atol + rtol * fabs(r);
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

#endif
