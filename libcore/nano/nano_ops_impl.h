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

#endif
