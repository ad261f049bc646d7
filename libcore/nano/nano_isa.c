/* nano_isa — which instruction set the edge kernels run: the CPU's best (cpuid via
 * __builtin_cpu_supports on x86-64, NEON on arm64, portable C elsewhere), or a lower one
 * that NEBULA_NANO_ISA names.
 *
 * The one design decision: the level is detected once and cached in the file's only
 * mutable static (an int read and written atomically); two threads racing on the first
 * call compute the same value, so no lock is needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nano.h"
#include "nano_kern.h"
#include "nano_kern_impl.h"

static int cached_level = -1; /* nano_isa_level, -1 before the first call */

static nano_isa_level cpu_level(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512vnni") ? NANO_ISA_AVX512_VNNI : NANO_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return NANO_ISA_AVX2;
    return NANO_ISA_PORTABLE;
#elif defined(__aarch64__)
    return NANO_ISA_NEON; /* Advanced SIMD is part of every armv8-a Linux target */
#else
    return NANO_ISA_PORTABLE;
#endif
}

nano_isa_level nano_isa_cpu(void)
{
    return cpu_level();
}

int nano_isa_runs(nano_isa_level l)
{
    nano_isa_level c = cpu_level();
    if (l == NANO_ISA_PORTABLE) return 1;
    if (l == NANO_ISA_NEON) return c == NANO_ISA_NEON;
    return c != NANO_ISA_NEON && l <= c;
}

/* The highest level the CPU runs that is not above l (NEON and the x86 levels are on
 * separate ladders: asking for one the CPU lacks gives portable). */
static nano_isa_level clamp_level(nano_isa_level l)
{
    if (nano_isa_runs(l)) return l;
    nano_isa_level c = cpu_level();
    if (l == NANO_ISA_NEON || c == NANO_ISA_NEON) return NANO_ISA_PORTABLE;
    return c < l ? c : NANO_ISA_PORTABLE;
}

static nano_isa_level detect(void)
{
    nano_isa_level best = cpu_level();
    const char *e = getenv("NEBULA_NANO_ISA");
    if (!e || !e[0]) return best;
    static const struct { const char *name; nano_isa_level l; } names[] = {
        {"portable", NANO_ISA_PORTABLE}, {"neon", NANO_ISA_NEON},     {"avx2", NANO_ISA_AVX2},
        {"avx512", NANO_ISA_AVX512},     {"avx512-vnni", NANO_ISA_AVX512_VNNI},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(e, names[i].name) != 0) continue;
        nano_isa_level l = clamp_level(names[i].l);
        if (l != names[i].l)
            fprintf(stderr, "nebula-nano: NEBULA_NANO_ISA=%s: this CPU does not run it, using %s\n", e,
                    l == NANO_ISA_PORTABLE ? "portable" : l == NANO_ISA_AVX2 ? "avx2" : "avx512");
        return l;
    }
    /* detect() runs once per process (cached), so this warns once */
    fprintf(stderr, "nebula-nano: NEBULA_NANO_ISA=%s is not one of portable, avx2, avx512, neon; ignored\n", e);
    return best;
}

nano_isa_level nano_isa(void)
{
    int l = __atomic_load_n(&cached_level, __ATOMIC_ACQUIRE);
    if (l < 0) {
        l = (int)detect();
        int expect = -1;
        /* the first thread to finish wins, so the warning's decision is made once */
        if (!__atomic_compare_exchange_n(&cached_level, &expect, l, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            l = expect;
    }
    return (nano_isa_level)l;
}

void nano_isa_force(nano_isa_level l)
{
    __atomic_store_n(&cached_level, (int)clamp_level(l), __ATOMIC_RELEASE);
}

const char *nano_isa_name(void)
{
    switch (nano_isa()) {
    case NANO_ISA_AVX512_VNNI: return "avx512-vnni";
    case NANO_ISA_AVX512: return "avx512";
    case NANO_ISA_AVX2: return "avx2";
    case NANO_ISA_NEON: return "neon";
    default: return "portable";
    }
}
