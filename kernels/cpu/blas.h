/* blas — the one place that knows which CBLAS the build links (mk/detect.mk's BLAS=):
 * OpenBLAS, BLIS, Intel MKL or FlexiBLAS. Kernels include this instead of <cblas.h>
 * and call cblas_* as usual; the thread count and the description printed in
 * provenance and benchmark headers go through the two functions below, the only
 * calls that differ between the libraries. */
#ifndef NEBULA_KERNELS_BLAS_H
#define NEBULA_KERNELS_BLAS_H

#include <stddef.h>

/* Each library's cblas.h lies in its own include directory (mk/detect.mk puts it
 * first on the path); MKL names it mkl_cblas.h. */
#if defined(NEBULA_BLAS_MKL)
#include <mkl_cblas.h>
#else
#include <cblas.h>
#endif

/* Threads the library's own GEMMs use (with OpenMP builds: the kernels' pool). */
void blas_set_threads(int n);
/* "OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core Haswell)", "BLIS 0.9.0 (...)", ...: the
 * library, its version and, where it says so, the kernel it picked for this CPU. */
void blas_describe(char *buf, size_t len);
/* The kernel set the library picked for this CPU: OpenBLAS's core name ("Haswell",
 * "Prescott"), BLIS's architecture ("zen3"); NULL for libraries that dispatch on CPU
 * flags per call (MKL, FlexiBLAS's backends are not asked). gemm.h reads it. */
const char *blas_core(void);

#endif
