/* blas — see blas.h. Each library names its thread control and its version
 * differently; nothing else here. */
#include "blas.h"

#include <stdio.h>

#if defined(NEBULA_BLAS_MKL)
#include <mkl_service.h>
void blas_set_threads(int n) { mkl_set_num_threads(n); }
void blas_describe(char *buf, size_t len)
{
    char v[198];
    mkl_get_version_string(v, (int)sizeof v);
    snprintf(buf, len, "%s", v);
}
const char *blas_core(void) { return NULL; }
#elif defined(NEBULA_BLAS_BLIS)
#include <blis.h>
void blas_set_threads(int n) { bli_thread_set_num_threads(n); }
void blas_describe(char *buf, size_t len)
{
    snprintf(buf, len, "BLIS %s (arch %s)", bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()));
}
const char *blas_core(void) { return bli_arch_string(bli_arch_query_id()); }
#elif defined(NEBULA_BLAS_FLEXIBLAS)
#include <flexiblas_api.h>
void blas_set_threads(int n) { flexiblas_set_num_threads(n); }
void blas_describe(char *buf, size_t len)
{
    char name[128] = "";
    flexiblas_current_backend(name, sizeof name);
    snprintf(buf, len, "FlexiBLAS (backend %s)", name[0] ? name : "unknown");
}
const char *blas_core(void) { return NULL; }
#else
/* OpenBLAS's own extensions (cblas.h declares them). */
void blas_set_threads(int n) { openblas_set_num_threads(n); }
void blas_describe(char *buf, size_t len)
{
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64" and the kernel
     * its DYNAMIC_ARCH build picked for this CPU */
    const char *config = openblas_get_config(), *core = openblas_get_corename();
    snprintf(buf, len, "%s (core %s)", config && config[0] ? config : "OpenBLAS", core && core[0] ? core : "unknown");
}
const char *blas_core(void)
{
    const char *core = openblas_get_corename();
    return core && core[0] ? core : NULL;
}
#endif
