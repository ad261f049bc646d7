/* comm_provenance — see comm_provenance.h. */
#include "comm_provenance.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/blas.h"
#include "cpu/dnn.h"
#include "cpu/gemm.h"
#include "cpu/isa.h"
#include "cpu/matmul.h"
#include "ctl.h"

/* bytes of a host name on the wire, NUL included (POSIX HOST_NAME_MAX is 255; Linux's 64) */
#define PROVENANCE_HOST_BYTES 256

json_t *comm_provenance_local(const config *cfg, int argc, char *const *argv)
{
    json_t *p = provenance_new(cfg, argc, argv, 1);
    char text[512];
    blas_describe(text, sizeof text);
    provenance_set(p, "blas", text);
    dnn_version(text, sizeof text);
    provenance_set(p, "onednn", text);
    provenance_set(p, "cpu_model", isa_cpu_model());
    if (isa_env_check(text, sizeof text)) {  /* else isa_active() would end the process here */
        provenance_set(p, "cpu_isa", isa_name(isa_active()));
        isa_describe(text, sizeof text);
        provenance_set(p, "cpu_isa_detail", text);
        if (gemm_env_check(text, sizeof text)) {
            gemm_describe(text, sizeof text);
            provenance_set(p, "gemm", text);
        }
    }
    return p;
}

status comm_provenance_hosts(json_t *p, const runtime *rt, double timeout_s)
{
    char mine[PROVENANCE_HOST_BYTES] = "";
    gethostname(mine, sizeof mine - 1);
    char *all = calloc((size_t)rt->size, PROVENANCE_HOST_BYTES);
    CHECK(all, "out of memory for the host names");
    comm_ctl ctl = comm_ctl_watched(comm_ctl_named(rt->world, timeout_s, "provenance hosts"), rt->wd);
    status st = comm_ctl_allgather(ctl, mine, PROVENANCE_HOST_BYTES, MPI_CHAR, all, PROVENANCE_HOST_BYTES, MPI_CHAR);
    if (st == STATUS_OK) provenance_set_hosts(p, all, rt->size, PROVENANCE_HOST_BYTES);
    free(all);
    return st;
}
