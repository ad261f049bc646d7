/* nano_ops_impl — what the light operators' files share (nano_ops.c, nano_ops_norm.c,
 * nano_ops_move.c): the OpenMP pragmas as macros, so every loop says once whether it
 * runs in parallel or vectorised and the files build without OpenMP too. */
#ifndef NEBULA_NANO_OPS_IMPL_H
#define NEBULA_NANO_OPS_IMPL_H

#define NANO_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#define NANO_SIMD NANO_PRAGMA(omp simd)
#define NANO_PAR_FOR(nt, cond) NANO_PRAGMA(omp parallel for schedule(static) num_threads(nt) if (cond))
#else
#define NANO_SIMD
#define NANO_PAR_FOR(nt, cond) if ((void)(nt), (void)(cond), 1) /* serial: uses its operands */
#endif

/* The scalar building blocks of the vector loops: inlined into every clone. */
#define NANO_INLINE static inline __attribute__((always_inline))

/* A loop function built once per x86-64 vector width (AVX-512, AVX2, SSE2), picked by the
 * loader: the same operations in the same order on every width (nothing is contracted),
 * so the results do not depend on which one runs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define NANO_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NANO_CLONES
#endif

#endif
