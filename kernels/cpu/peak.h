/* peak — the machine's arithmetic peak, the denominator of every efficiency figure the
 * benchmarks print: cores × clock × FLOP per cycle per core.
 *
 * The one design decision: both factors are measured, on the threads the kernels use,
 * rather than read from a table, and the FLOP per cycle is then rounded to the power of
 * two it is in hardware. The nominal clock is not what the cores run (turbo, the
 * hypervisor's cap), and the FLOP per cycle of one ISA differs between CPUs (AVX-512 on
 * two 512-bit FMA ports: 64 fp32 FLOP per cycle; on Zen 4's 256-bit ports: 32). So:
 *   clock:          a chain of dependent integer adds, one cycle each, timed per thread
 *                   with all threads busy (the all-core clock, not one core's turbo);
 *   FLOP per cycle: independent FMA chains at the active level's vector width (fp32),
 *                   independent VDPBF16PS chains (bf16, avx512_bf16); AMX is not timed
 *                   here: its figure is Intel's 1024 bf16 FMA per cycle per core (2048 FLOP).
 * A GEMM can only come near such a peak, never above it: a figure above 100% means a
 * bad measurement, and the benchmark says so. x86-64 only; elsewhere the peak is
 * unknown (0) and the benchmarks print n/a. */
#ifndef NEBULA_KERNELS_PEAK_H
#define NEBULA_KERNELS_PEAK_H

typedef struct peak_figures {
    int threads;           /* cores measured together (OpenMP threads) */
    double ghz;            /* measured all-core clock, GHz */
    int fp32_per_cycle;    /* fp32 FLOP per cycle per core at isa_active()'s width */
    int bf16_per_cycle;    /* bf16 FLOP per cycle per core (AMX or AVX512-BF16), 0 below */
    double fp32_gflops;    /* threads × ghz × fp32_per_cycle */
    double bf16_gflops;    /* threads × ghz × bf16_per_cycle, 0 below avx512_bf16 */
} peak_figures;

/* Measures (about 0.2 s) on omp_get_max_threads() threads. All zero off x86-64. */
void peak_measure(peak_figures *p);

#endif
