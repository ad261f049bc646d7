/* isa_variant — one kernel source, compiled once per x86 vector level.
 *
 * The project builds for baseline x86-64 (SSE2: 4 floats per vector), so the loops
 * GCC vectorises (activations, softmax, normalisation, reductions over rows) would
 * run a quarter as wide as the CPUs have. The files in the Makefile's KCPU_MULTI are
 * compiled three times: as they are (base), with -DISA_VARIANT=avx2 (AVX2 + FMA) and
 * with -DISA_VARIANT=avx512 (AVX-512 F/BW/VL/DQ, 16-float vectors), as numpy's
 * dispatch sources and OpenBLAS's DYNAMIC_ARCH are. Each hot function is defined as
 * ISA_FN(name) — name_base, name_avx2, name_avx512 — and the public name, defined
 * once (ISA_ONCE), calls the one for isa_active()'s level (ISA_DISPATCH), so
 * NEBULA_CPU_ISA forces it like every other per-level choice.
 *
 * The variants are the same C, and -ffp-contract=off keeps the compiler from fusing
 * a * b + c into an FMA, so an element-wise loop gives the same bits at every level; a
 * reduction may sum in another order (wider vectors, other partial sums). Non-x86
 * builds have base only (the Makefile defines NEBULA_ISA_VARIANTS where it builds the
 * others). */
#ifndef NEBULA_KERNELS_ISA_VARIANT_H
#define NEBULA_KERNELS_ISA_VARIANT_H

#include "isa.h"

#define ISA_JOIN2(a, b) a##_##b
#define ISA_JOIN(a, b) ISA_JOIN2(a, b)

#ifdef ISA_VARIANT
#define ISA_FN(name) ISA_JOIN(name, ISA_VARIANT)
#define ISA_ONCE 0
#else
#define ISA_FN(name) name##_base
#define ISA_ONCE 1
#endif

/* The prototypes of a function's builds. */
#define ISA_VARIANTS(ret, name, params) \
    ret name##_base params;             \
    ret name##_avx2 params;             \
    ret name##_avx512 params

#if defined(NEBULA_ISA_VARIANTS) /* the Makefile builds them (x86-64 targets) */
#define ISA_HAS_VARIANTS 1
#define ISA_DISPATCH(name, args)                                  \
    do {                                                          \
        isa_level l_ = isa_active();                              \
        if (l_ >= ISA_AVX512) name##_avx512 args;                 \
        else if (l_ >= ISA_AVX2) name##_avx2 args;                \
        else name##_base args;                                    \
    } while (0)
#else
#define ISA_HAS_VARIANTS 0
#define ISA_DISPATCH(name, args) name##_base args
#endif

#endif
