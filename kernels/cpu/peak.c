/* peak — see peak.h. Each timed loop keeps its chains in registers (an empty asm that
 * claims to change the value stops the compiler from folding or hoisting them) and
 * runs about 40 ms per thread, all threads at once. */
#include "peak.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define PEAK_CHAINS 12 /* independent chains: > latency (4-5 cycles) × FMA ports (2) */
/* One step of every chain, each a named variable (an array would live in memory);
 * OP(v) updates chain v, then the empty asm pins it to a vector register. */
#define PEAK_STEP(OP, R)                                                                       \
    OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5); OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); \
    OP(a11);                                                                                   \
    __asm__ volatile("" : "+" R(a0), "+" R(a1), "+" R(a2), "+" R(a3), "+" R(a4), "+" R(a5),    \
                     "+" R(a6), "+" R(a7), "+" R(a8), "+" R(a9), "+" R(a10), "+" R(a11))
#define PEAK_INIT(T, SET) T a0 = SET(0.0f), a1 = SET(1.0f), a2 = SET(2.0f), a3 = SET(3.0f), a4 = SET(4.0f),   \
                           a5 = SET(5.0f), a6 = SET(6.0f), a7 = SET(7.0f), a8 = SET(8.0f), a9 = SET(9.0f), \
                           a10 = SET(10.0f), a11 = SET(11.0f)
#define PEAK_SUM(ADD) ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(ADD(a4, a5), ADD(a6, a7)), ADD(ADD(a8, a9), ADD(a10, a11))))

/* Cycles per second of one thread: 8 dependent 1-cycle adds per iteration; the loop's
 * own counter runs on other ports beside them. */
static double peak_clock_hz(void)
{
    uint64_t x = 1, y = 3;
    const long iters = 20 * 1000 * 1000;  /* 160 M adds: ~40 ms at 4 GHz */
    double t0 = omp_get_wtime();
    for (long i = 0; i < iters; i++) {
#define PEAK_ADD __asm__ volatile("add %1, %0" : "+r"(x) : "r"(y))
        PEAK_ADD; PEAK_ADD; PEAK_ADD; PEAK_ADD; PEAK_ADD; PEAK_ADD; PEAK_ADD; PEAK_ADD;
#undef PEAK_ADD
    }
    double t = omp_get_wtime() - t0;
    volatile uint64_t sink = x;
    (void)sink;
    return 8.0 * (double)iters / t;
}

/* The body of a timed kernel: PEAK_CHAINS chains of vector type T started with SET(k),
 * iters steps of OP on each, summed with ADD into a volatile sink (so nothing is dead);
 * returns FLOP per second for FLOP per OP per chain. */
#define PEAK_RUN(T, SET, OP, R, ADD, FLOP)                          \
    PEAK_INIT(T, SET);                                              \
    double t0 = omp_get_wtime();                                    \
    for (long i = 0; i < iters; i++) { PEAK_STEP(OP, R); }          \
    double t = omp_get_wtime() - t0;                                \
    volatile T sink = PEAK_SUM(ADD);                                \
    (void)sink;                                                     \
    return (FLOP) * PEAK_CHAINS * (double)iters / t

/* fp32 FLOP per second of one thread: PEAK_CHAINS independent FMA chains of 16 floats
 * (8 for avx2; SSE2 has no FMA: a multiply and an add, 4 floats each). */
__attribute__((target("avx512f"))) static double peak_fp32_avx512(long iters)
{
    __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
#define OP(v) v = _mm512_fmadd_ps(v, b, c)
    PEAK_RUN(__m512, _mm512_set1_ps, OP, "v", _mm512_add_ps, 2.0 * 16);
#undef OP
}

__attribute__((target("avx2,fma"))) static double peak_fp32_avx2(long iters)
{
    __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
#define OP(v) v = _mm256_fmadd_ps(v, b, c)
    PEAK_RUN(__m256, _mm256_set1_ps, OP, "x", _mm256_add_ps, 2.0 * 8);
#undef OP
}

static double peak_fp32_sse(long iters)
{
    __m128 b = _mm_set1_ps(0.999f), c = _mm_set1_ps(1e-3f);
#define OP(v) v = _mm_add_ps(_mm_mul_ps(v, b), c)
    PEAK_RUN(__m128, _mm_set1_ps, OP, "x", _mm_add_ps, 2.0 * 4);
#undef OP
}

/* bf16: VDPBF16PS adds 32 bf16 products into 16 floats: 64 FLOP per instruction. */
__attribute__((target("avx512f,avx512bf16"))) static double peak_bf16_avx512(long iters)
{
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83); /* 1.0, ~1e-3 */
#define OP(v) v = _mm512_dpbf16_ps(v, a, b)
    PEAK_RUN(__m512, _mm512_set1_ps, OP, "v", _mm512_add_ps, 64.0);
#undef OP
}

/* The power of two nearest to x, within 1 .. 4096; 0 for no measurement. */
static int peak_pow2(double x)
{
    if (!(x > 0)) return 0;
    long e = lround(log2(x));
    return 1 << (e < 0 ? 0 : e > 12 ? 12 : e);
}

void peak_measure(peak_figures *p)
{
    memset(p, 0, sizeof *p);
    isa_level l = isa_active();
    int n = omp_get_max_threads();
    double hz = 0, fp32 = 0, bf16 = 0;
    int got = 0;                         /* the threads the region really has */
    const long iters = 1000 * 1000;      /* 12 M vector ops: ~15 ms at 2 per cycle, 4 GHz */
    #pragma omp parallel num_threads(n) reduction(+ : hz, fp32, bf16)
    {
        #pragma omp single
        got = omp_get_num_threads();
        /* each the fastest of 3 (the first ramps the clock up; a neighbour only slows) */
        double c = 0, f = 0, h = 0;
        for (int r = 0; r < 3; r++) {
            double x = peak_clock_hz();
            if (x > c) c = x;
        }
        hz += c;
        #pragma omp barrier
        for (int r = 0; r < 3; r++) {
            double x = l >= ISA_AVX512 ? peak_fp32_avx512(iters) : l >= ISA_AVX2 ? peak_fp32_avx2(iters) : peak_fp32_sse(iters);
            if (x > f) f = x;
        }
        fp32 += f;
        #pragma omp barrier
        for (int r = 0; r < 3 && l >= ISA_AVX512_BF16; r++) {
            double x = peak_bf16_avx512(iters);
            if (x > h) h = x;
        }
        bf16 += h;
    }
    n = got;
    p->threads = n;
    p->ghz = hz / n / 1e9;
    p->fp32_per_cycle = peak_pow2(fp32 / n / (hz / n));
    p->bf16_per_cycle = l >= ISA_AMX ? 2048 : l >= ISA_AVX512_BF16 ? peak_pow2(bf16 / n / (hz / n)) : 0;
    p->fp32_gflops = n * p->ghz * p->fp32_per_cycle;
    p->bf16_gflops = n * p->ghz * p->bf16_per_cycle;
}

#else /* not x86-64: no measured peak */
void peak_measure(peak_figures *p)
{
    memset(p, 0, sizeof *p);
    p->threads = omp_get_max_threads();
}
#endif
