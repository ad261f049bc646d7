/* comm_provenance — a run's provenance object (base/provenance.h) with every field: what
 * this process knows, the kernels' libraries and ISA, and every rank's host.
 *
 * It lives in comm because it needs both: the kernels sit below comm, and the hosts are
 * gathered with a control-plane collective (ctl.h, with its deadline), which only comm
 * may call. A single process (nebula-bench dgc, the nebula-chaos supervisor, which finds
 * its ranks' hosts in their registry) uses comm_provenance_local alone. */
#ifndef NEBULA_COMM_PROVENANCE_H
#define NEBULA_COMM_PROVENANCE_H

#include "base/provenance.h"
#include "base/runtime.h"

/* provenance_new(cfg, argc, argv, 1) plus blas, onednn, cpu_model, cpu_isa and
 * cpu_isa_detail. No MPI call but MPI_Get_library_version, which may precede MPI_Init.
 * A NEBULA_CPU_ISA the machine cannot run is not reported here (cpu_isa "unknown"):
 * the device's start-up check refuses it with its message. */
json_t *comm_provenance_local(const config *cfg, int argc, char *const *argv);

/* Collective over rt->world: every rank's host name, gathered with a deadline of
 * timeout_s seconds (0: none), into p's hosts and ranks on every rank. */
status comm_provenance_hosts(json_t *p, const runtime *rt, double timeout_s);

#endif
