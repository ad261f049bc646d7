/* runtime — see runtime.h.
 *
 * Design decision: node membership is decided once, here, and every other module
 * reads it from `runtime`. Virtual nodes split the real shared-memory node, so a
 * virtual node is always inside one host and shared-memory paths stay valid. */
#include "runtime.h"

#include "config.h"

#include <hwloc.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef NEBULA_CUDA
#endif

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x < 0 || x > 1 << 20) ? -1 : (int)x;
}

void runtime_preinit(const char *prog)
{
    static const char *rank_vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID" };
    int rank = -1;
    for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0] && rank < 0; i++)
        rank = env_int(rank_vars[i], -1);
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';
    /* Size 2 makes messages carry the rank prefix; rank > 0 stays quiet in log_msg0. */
    log_set_identity(prog, host, rank, rank >= 0 ? 2 : 1);
}

/* How long a failing rank waits for the others to fail alike (runtime_exit_early). */
#define RUNTIME_EXIT_EARLY_WAIT_MS 10000

int runtime_exit_early(int code)
{
    static const char *size_vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS" };
    int size = -1;
    for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0] && size < 0; i++)
        size = env_int(size_vars[i], -1);
    fflush(stdout);
    fflush(stderr);
    if (code == 0 || size <= 1) return code;
    int provided, done = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    /* Bounded: ranks that parsed the same argv differently (a node-local --config) are in
     * runtime_init's collectives instead and never join; after the deadline this rank
     * exits unfinalized and the launcher ends the job, as without the wait. */
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    struct timespec nap = { 0, 10 * 1000 * 1000 };
    for (int waited_ms = 0; !done && waited_ms < RUNTIME_EXIT_EARLY_WAIT_MS; waited_ms += 10) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) nanosleep(&nap, NULL);
    }
    if (done) MPI_Finalize();
    return code;
}

/* A process is "unbound" when its CPU set covers every PU of the machine. */
static bool runtime_bind_core(runtime *rt, hwloc_topology_t topo, runtime_bind policy)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    bool bound = false;
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
        hwloc_const_bitmap_t all = hwloc_topology_get_complete_cpuset(topo);
        bool launcher_bound = !hwloc_bitmap_isincluded(all, set);
        int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        if (ncores > 0 && (policy == RUNTIME_BIND_CORE || (policy == RUNTIME_BIND_AUTO && !launcher_bound))) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE,
                                                     (unsigned)(rt->host_local_rank % ncores));
            if (core && hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_PROCESS) == 0) bound = true;
            else log_warn("could not bind to core %d: %s", rt->host_local_rank % ncores, log_errno_str());
        }
        hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS);
        hwloc_bitmap_list_snprintf(rt->cpus, sizeof rt->cpus, set);
    } else {
        snprintf(rt->cpus, sizeof rt->cpus, "?");
    }
    hwloc_bitmap_free(set);
    return bound;
}

/* Under a bare `srun` without PMIx, OpenMPI starts every task as a singleton of
 * size 1; the job would then train N independent models. mpirun sets
 * OMPI_COMM_WORLD_SIZE and knows its size, so only direct launches are checked, and only
 * inside an srun step (SLURM_STEP_NUM_TASKS): a single process started by the batch
 * script itself (nebula-ckpt verify in a 4-task job) is not a launch of the job's ranks. */
static status runtime_check_slurm(const runtime *rt)
{
    int ntasks = env_int("SLURM_STEP_NUM_TASKS", 0);
    if (getenv("OMPI_COMM_WORLD_SIZE") || ntasks <= 0 || ntasks == rt->size) return STATUS_OK;
    log_error0("world size is %d but the srun step has %d tasks (SLURM_STEP_NUM_TASKS): the ranks did not find "
               "each other", rt->size, ntasks);
    log_msg0(LOG_LEVEL_ERROR, "HINT: launch with `srun --mpi=pmix` (Debian's OpenMPI supports only the "
             "PMIx plugin) or with `mpirun` inside the allocation; a bare srun starts singletons");
    return STATUS_USAGE;
}

/* This kernel's identity: its boot id (the same in every network namespace and container
 * of one machine), else the host name. */
static uint64_t runtime_kernel_key(const runtime *rt)
{
    char id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(id, sizeof id, f)) snprintf(id, sizeof id, "%s", rt->host);
    if (f) fclose(f);
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (const char *c = id; *c && *c != '\n'; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    return h;
}

/* Counts the ranks on this kernel and those whose CPU sets overlap mine (after binding).
 * MPI's shared-memory split cannot: ranks in network namespaces look like separate hosts,
 * yet their threads fight over the same cores. */
static void runtime_cpu_share(runtime *rt, int npus)
{
    typedef struct { uint64_t key; cpu_set_t set; } share_row;
    share_row me = { .key = runtime_kernel_key(rt) };
    if (sched_getaffinity(0, sizeof me.set, &me.set) != 0) CPU_ZERO(&me.set);
    share_row *all = calloc((size_t)rt->size, sizeof *all);
    CHECK(all, "out of memory for the CPU sets of every rank");
    watchdog_enter(rt->wd, "start-up: gathering every rank's CPU set", rt->timeout_s);
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, rt->world));
    watchdog_leave(rt->wd);
    int kernel = 0, sharers = 0;
    for (int r = 0; r < rt->size; r++) {
        if (all[r].key != me.key) continue;
        kernel++;
        cpu_set_t both;
        CPU_AND(&both, &all[r].set, &me.set);
        sharers += r == rt->rank || CPU_COUNT(&both) > 0;
    }
    free(all);
    rt->cpu_sharers = sharers;
    rt->oversubscribed = npus > 0 && kernel > npus;  /* kernel >= host_size: MPI's host is one kernel */
}

static void runtime_split(runtime *rt, MPI_Comm host_comm)
{
    int host_rank, host_size;
    MPI_CHECK(MPI_Comm_rank(host_comm, &host_rank));
    MPI_CHECK(MPI_Comm_size(host_comm, &host_size));
    rt->host_local_rank = host_rank;
    rt->host_size = host_size;
    if (rt->ranks_per_node > 0) {
        MPI_CHECK(MPI_Comm_split(host_comm, host_rank / rt->ranks_per_node, host_rank, &rt->node));
    } else {
        MPI_CHECK(MPI_Comm_dup(host_comm, &rt->node));
    }
    MPI_CHECK(MPI_Comm_rank(rt->node, &rt->local_rank));
    MPI_CHECK(MPI_Comm_size(rt->node, &rt->local_size));

    /* Node ids: leaders ordered by world rank; every rank learns its node's id. */
    MPI_CHECK(MPI_Comm_split(rt->world, rt->local_rank == 0 ? 0 : MPI_UNDEFINED, rt->rank, &rt->leaders));
    int ids[2] = { 0, 0 };
    if (rt->leaders != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(rt->leaders, &ids[0]));
        MPI_CHECK(MPI_Comm_size(rt->leaders, &ids[1]));
    }
    MPI_CHECK(MPI_Bcast(ids, 2, MPI_INT, 0, rt->node));
    rt->node_id = ids[0];
    rt->nnodes = ids[1];
    MPI_CHECK(MPI_Comm_split(rt->world, rt->local_rank, rt->node_id, &rt->peers));
    MPI_CHECK(MPI_Allreduce(&rt->local_size, &rt->max_local_size, 1, MPI_INT, MPI_MAX, rt->world));
}

status runtime_init(runtime *rt, int *argc, char ***argv, const runtime_options *opt)
{
    memset(rt, 0, sizeof *rt);
    rt->world = rt->node = rt->leaders = rt->peers = MPI_COMM_NULL;
    rt->gpu = -1;
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    rt->t_start = MPI_Wtime();
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &rt->world));
    MPI_CHECK(MPI_Comm_rank(rt->world, &rt->rank));
    MPI_CHECK(MPI_Comm_size(rt->world, &rt->size));
    gethostname(rt->host, sizeof rt->host - 1);
    char *dot = strchr(rt->host, '.');
    if (dot) *dot = '\0';
    log_set_identity((*argv)[0], rt->host, rt->rank, rt->size);
    rt->timeout_s = opt->timeout_s;
    TRY(watchdog_start(&rt->wd, rt->rank, rt->size, opt->timeout_s));

    rt->ranks_per_node = opt->ranks_per_node;
    if (rt->ranks_per_node == 0) rt->ranks_per_node = env_int("NEBULA_RANKS_PER_NODE", 0);
    if (rt->ranks_per_node < 0) {
        log_error0("NEBULA_RANKS_PER_NODE='%s' is not a non-negative integer", getenv("NEBULA_RANKS_PER_NODE"));
        return STATUS_INPUT;
    }
    TRY(runtime_check_slurm(rt));
    TRY(runtime_check_versions(rt));  /* first collective: builds that cannot talk stop here */

    MPI_Comm host_comm;
    watchdog_enter(rt->wd, "start-up: splitting the world into node, leaders and peers communicators",
                   rt->timeout_s);
    MPI_CHECK(MPI_Comm_split_type(rt->world, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &host_comm));
    runtime_split(rt, host_comm);
    MPI_CHECK(MPI_Comm_free(&host_comm));
    watchdog_leave(rt->wd);

    hwloc_topology_t topo;
    int npus = 0;
    if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0) {
        rt->bound_by_us = runtime_bind_core(rt, topo, opt->bind);
        npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
        hwloc_topology_destroy(topo);
    }
    runtime_cpu_share(rt, npus);
    if (opt->gpus > 0) rt->gpu = rt->host_local_rank % opt->gpus;
    return STATUS_OK;
}

typedef struct placement_row {
    char host[64];
    char slurm_node[64];  /* SLURMD_NODENAME: differs from host when several slurmd share one */
    char cpus[64];
    int node_id, local_rank, gpu, bound_by_us;
} placement_row;

void runtime_print_placement(const runtime *rt, FILE *f)
{
    placement_row me = { .node_id = rt->node_id, .local_rank = rt->local_rank, .gpu = rt->gpu,
                         .bound_by_us = rt->bound_by_us };
    memcpy(me.host, rt->host, sizeof me.host);
    const char *sn = getenv("SLURMD_NODENAME");
    snprintf(me.slurm_node, sizeof me.slurm_node, "%s", sn && *sn ? sn : "-");
    memcpy(me.cpus, rt->cpus, sizeof me.cpus);
    placement_row *all = rt->rank == 0 ? calloc((size_t)rt->size, sizeof *all) : NULL;
    CHECK(rt->rank != 0 || all, "out of memory for the placement table");
    watchdog_enter(rt->wd, "start-up: gathering the placement table", rt->timeout_s);
    MPI_CHECK(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, rt->world));
    watchdog_leave(rt->wd);
    if (rt->rank == 0) {
        fprintf(f, "placement: %d ranks on %d %snode%s\n", rt->size, rt->nnodes,
                rt->ranks_per_node ? "virtual " : "", rt->nnodes == 1 ? "" : "s");
        fprintf(f, "  %5s  %-16s %-12s %5s %6s  %-10s %4s\n", "rank", "host", "slurm node", "node", "local", "cpus",
                "gpu");
        for (int r = 0; r < rt->size; r++) {
            char gpu[16];
            if (all[r].gpu >= 0) snprintf(gpu, sizeof gpu, "%d", all[r].gpu);
            else snprintf(gpu, sizeof gpu, "-");
            fprintf(f, "  %5d  %-16s %-12s %5d %6d  %-10s %4s%s\n", r, all[r].host, all[r].slurm_node, all[r].node_id,
                    all[r].local_rank, all[r].cpus, gpu, all[r].bound_by_us ? "  (bound by nebula)" : "");
        }
        fflush(f);
        free(all);
    }
}

void runtime_sub_init(runtime *sub, const runtime *rt, MPI_Comm members)
{
    *sub = *rt;
    sub->world = sub->node = sub->leaders = sub->peers = MPI_COMM_NULL;
    watchdog_enter(rt->wd, "start-up: splitting a group into node, leaders and peers communicators", rt->timeout_s);
    MPI_CHECK(MPI_Comm_dup(members, &sub->world));
    MPI_CHECK(MPI_Comm_rank(sub->world, &sub->rank));
    MPI_CHECK(MPI_Comm_size(sub->world, &sub->size));
    MPI_CHECK(MPI_Comm_split(sub->world, rt->node_id, sub->rank, &sub->node));
    MPI_CHECK(MPI_Comm_rank(sub->node, &sub->local_rank));
    MPI_CHECK(MPI_Comm_size(sub->node, &sub->local_size));
    MPI_CHECK(MPI_Comm_split(sub->world, sub->local_rank == 0 ? 0 : MPI_UNDEFINED, rt->node_id, &sub->leaders));
    int ids[2] = { 0, 0 };
    if (sub->leaders != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(sub->leaders, &ids[0]));
        MPI_CHECK(MPI_Comm_size(sub->leaders, &ids[1]));
    }
    MPI_CHECK(MPI_Bcast(ids, 2, MPI_INT, 0, sub->node));
    sub->node_id = ids[0];
    sub->nnodes = ids[1];
    MPI_CHECK(MPI_Comm_split(sub->world, sub->local_rank, sub->node_id, &sub->peers));
    MPI_CHECK(MPI_Allreduce(&sub->local_size, &sub->max_local_size, 1, MPI_INT, MPI_MAX, sub->world));
    watchdog_leave(rt->wd);
}

void runtime_sub_free(runtime *sub)
{
    if (sub->leaders != MPI_COMM_NULL) MPI_Comm_free(&sub->leaders);
    if (sub->peers != MPI_COMM_NULL) MPI_Comm_free(&sub->peers);
    if (sub->node != MPI_COMM_NULL) MPI_Comm_free(&sub->node);
    if (sub->world != MPI_COMM_NULL) MPI_Comm_free(&sub->world);
}

void runtime_free(runtime *rt)
{
    /* A communicator free and MPI_Finalize may wait for every rank (OpenMPI's finalize
     * ends in a barrier): a rank that never comes would hold the others forever. */
    watchdog_enter(rt->wd, "shutdown: freeing the communicators and MPI_Finalize", rt->timeout_s);
    if (rt->leaders != MPI_COMM_NULL) MPI_Comm_free(&rt->leaders);
    if (rt->peers != MPI_COMM_NULL) MPI_Comm_free(&rt->peers);
    if (rt->node != MPI_COMM_NULL) MPI_Comm_free(&rt->node);
    if (rt->world != MPI_COMM_NULL) MPI_Comm_free(&rt->world);
    MPI_Finalize();
    watchdog_leave(rt->wd);
    watchdog_finish(rt->wd);  /* no rank left stuck in MPI_Finalize's last steps */
    watchdog_stop(rt->wd);
    rt->wd = NULL;
}

bool runtime_must_abort(status st)
{
    return st == STATUS_TIMEOUT || st == STATUS_PEER || st == STATUS_IO || st == STATUS_NOMEM;
}

_Noreturn void runtime_exit(runtime *rt, status st)
{
    fflush(stdout);
    fflush(stderr);
    if (!runtime_must_abort(st)) {
        runtime_free(rt);
        exit(status_exit_code(st));
    }
    MPI_Abort(MPI_COMM_WORLD, status_exit_code(st));
    exit(status_exit_code(st));
}

void runtime_options_from_config(const config *cfg, runtime_options *opt)
{
    const char *bind = config_str(cfg, "runtime.bind");
    opt->ranks_per_node = (int)config_int(cfg, "runtime.ranks_per_node");
    opt->gpus = 0;  /* the caller counts them (device_gpu_count): base knows no devices */
    opt->timeout_s = 0;  /* comm.timeout is the caller's key, where it has one */
    opt->bind = !strcmp(bind, "core") ? RUNTIME_BIND_CORE : !strcmp(bind, "none") ? RUNTIME_BIND_NONE
                                                                                 : RUNTIME_BIND_AUTO;
}

int runtime_threads(const runtime *rt, int64_t configured)
{
    if (configured > 0) return (int)configured;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (rt->cpu_sharers > 1) n /= rt->cpu_sharers;
    return n < 1 ? 1 : n;
}
