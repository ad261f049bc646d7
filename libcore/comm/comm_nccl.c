/* comm_nccl — the nccl backend of comm: allreduce of DEVICE buffers, NCCL inside a
 * node, MPI between nodes, every wait bounded by comm's deadline (comm.h).
 *
 * One op = an in-place sum of `count` floats on this rank's GPU, cut into chunks
 * (boundaries fixed by nccl_chunk_bytes and the node size, so the reduction order is
 * fixed for a given world layout). Per chunk, on a communication stream:
 *   reduce-scatter  ncclReduceScatter over the node: local rank lr owns part lr;
 *   inter           MPI allreduce of that part among the ranks with the same local
 *                   rank on every node (runtime's peers), run by the host once the
 *                   stream reached it: device pointers when MPI is CUDA-aware,
 *                   otherwise through pinned host staging slots;
 *   allgather       ncclAllGather over the node, in place.
 * While the host runs the MPI step of chunk b, the GPU reduce-scatters later chunks
 * and all-gathers earlier ones.
 *
 * The one design decision: the order of NCCL calls is fixed before any of them runs.
 * All reduce-scatters of an op are queued when it is posted, its all-gathers
 * afterwards in chunk order, and ops run ONE AT A TIME in start order: comm.c posts
 * op k+1 (ordering class COMM_CLASS_NCCL) only once op k completed on the device.
 * So host timing can never make two ranks of a node issue NCCL collectives in
 * different orders (which would hang or mix chunks). What that costs: the bucket
 * manager's buckets do not overlap each other's communication — bucket k+1's
 * reduce-scatter waits for bucket k's all-gather — though every bucket still
 * overlaps the backward computation that follows its start, and inside one bucket
 * the chunks pipeline NCCL against MPI. Interleaving two ops would need both ranks of
 * a node to agree on one merged call order at post time.
 *
 * Ordering against the producer: comm_set_stream names the caller's stream; each
 * start records an event there and makes the communication stream wait for it, at
 * the start call (not at the post), so a deferred op still waits only for the work
 * queued before its start.
 *
 * The node communicator is non-blocking (ncclConfig.blocking = 0): init, enqueues and
 * tests poll instead of blocking, so a missing rank costs a deadline, after which
 * the ranks that did not arrive are named (comm_diag.c, the probe every comm
 * backend shares), the node communicator is aborted and STATUS_TIMEOUT returned.
 *
 * Chunks are `chunk_count` floats (a multiple of the node size L), the last one
 * shorter; the count % L floats left over form one extra chunk of L floats in a
 * zeroed device scratch (zeros add nothing), copied back after its all-gather.
 * Streams and events, per chunk b (P staging slots, slot b % P):
 *   stream  [wait ready] RS(0) rec rs[0] ... RS(n-1) rec rs[n-1] | wait h2d[b] AG(b) ... rec done
 *   copy    (staged MPI) wait rs[b], D2H part -> slot, rec d2h[b]; after MPI(b): H2D, rec h2d[b]
 * The host posts MPI(b) when d2h[b] (staged) or rs[b] (CUDA-aware) completed, in
 * chunk order, at most P in flight; D2H(b+P) is queued behind H2D(b) on the copy
 * stream, so a slot is refilled only after the GPU has read it back. The copy stream
 * waits only for reduce-scatters, which never wait for it: no cycle.
 *
 * Memory: streams, the tail scratch and the NCCL communicator at init; per-chunk
 * events and the pinned staging are sized by the largest op so far (at its post,
 * when nothing is in flight) and reused, so steady-state steps allocate nothing.
 *
 * Without CUDA (NEBULA_CUDA undefined) the backend's init says so: STATUS_USAGE. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

#ifdef NEBULA_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

/* OpenMPI declares MPIX_Query_cuda_support in mpi-ext.h when its cuda extension is
 * built (Debian's is, answering 0: the library itself was built without CUDA). */
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

typedef struct nccl_chunk {
    float *work;           /* device: RS and AG run in place here (user buffer or tail scratch) */
    size_t len;            /* floats of work, a multiple of the node size */
    size_t part;           /* len / L: the floats this rank owns and exchanges between nodes */
    MPI_Request req;       /* the inter-node allreduce of the part */
} nccl_chunk;

typedef struct comm_nccl {
    comm *c;               /* the owner: rt, opt, failed, the diagnosis channel */
    const runtime *rt;     /* placement */
    ncclComm_t nccl;       /* the node's communicator; NULL once aborted or destroyed */
    ncclRedOp_t op;        /* ncclSum, or the pre-multiplied sum by op_scale */
    double op_scale;       /* the factor `op` multiplies by (1: ncclSum) */
    bool op_created;       /* op is ours to destroy */
    MPI_Comm peers;        /* duplicate of rt->peers: only our allreduces run there */
    bool inter;            /* more than one node: the MPI step exists */
    bool cuda_aware;       /* MPI takes device pointers */
    cudaStream_t stream;   /* NCCL calls, all-gathers, the tail copies */
    cudaStream_t copy;     /* staging copies */
    cudaStream_t producer; /* comm_set_stream's stream; NULL: none */
    cudaEvent_t ev_ready;  /* recorded on producer at each start */
    cudaEvent_t ev_done;   /* the last all-gather (and tail copy) of the op finished */
    cudaEvent_t *ev_rs;    /* per chunk: its reduce-scatter finished */
    cudaEvent_t *ev_d2h;   /* per chunk: its part is in the staging slot */
    cudaEvent_t *ev_h2d;   /* per chunk: the reduced part is back on the device */
    int nevents;           /* events created in each per-chunk array */
    int nb_max;            /* capacity of the per-chunk arrays */
    nccl_chunk *ck;        /* nb_max chunks */
    float *stage;          /* pinned host: nslots slots of slot_count floats (staged only) */
    size_t slot_count;     /* floats per slot = chunk_count / L */
    int nslots;            /* MPI steps in flight at most: min(nb_max, COMM_NCCL_STAGE_SLOTS); staged: slots */
    float *tail;           /* device scratch: L floats for the count % L leftover (L > 1) */
    size_t chunk_count;    /* floats per full chunk, a multiple of L */
    /* The op in flight (posted, not yet complete on the device). */
    comm_op *cur;          /* NULL when idle */
    float *buf;            /* its device buffer */
    size_t count;          /* its floats */
    size_t tail_off;       /* first float of the leftover (count - count % L) */
    size_t tail_len;       /* count % L */
    int nb;                /* chunks of this op */
    int next_mpi;          /* next chunk whose MPI step is posted */
    int next_ag;           /* next chunk whose all-gather is queued */
    bool done_recorded;    /* ev_done is recorded after the last all-gather */
} comm_nccl;

/* Where the op in flight is stuck, from the host's bookkeeping. */
static const char *nccl_stage_name(const comm_nccl *n)
{
    if (!n->inter) return "node's reduce-scatter or all-gather (NCCL)";
    if (n->next_ag < n->next_mpi) return "MPI step between nodes";
    if (n->next_mpi < n->nb) return "node's reduce-scatter (NCCL)";
    return "node's all-gather (NCCL)";
}

static void nccl_abort(comm_nccl *n)
{
    if (!n->nccl) return;
    ncclCommAbort(n->nccl);  /* tells kernels stuck waiting for a peer to exit */
    n->nccl = NULL;
}

static status nccl_fail_cuda(comm_nccl *n, cudaError_t e, const char *what)
{
    log_error("nccl: %s: CUDA error %d (%s)", what, (int)e, cudaGetErrorString(e));
    nccl_abort(n);
    return STATUS_PEER;
}

static status nccl_fail_nccl(comm_nccl *n, ncclResult_t r, const char *what)
{
    log_error("nccl: %s: %s (%s)", what, ncclGetErrorString(r), n->nccl ? ncclGetLastError(n->nccl) : "");
    log_error("HINT: rerun with NCCL_DEBUG=WARN (or INFO) to see NCCL's own account");
    nccl_abort(n);
    return STATUS_PEER;  /* a peer, the network or the device failed: the job must end */
}

#define CU_TRY(n, call)                                                         \
    do { cudaError_t cu_e_ = (call);                                            \
         if (cu_e_ != cudaSuccess) return nccl_fail_cuda((n), cu_e_, #call); } while (0)

/* The deadline of o passed: say where the op in flight is, name the ranks that did
 * not arrive (every rank that waits answers the probe), then abort — in that order,
 * because an abort can take a while and a rank that does not answer probes would
 * itself be named. o->seq == 0: NCCL's init. */
static status nccl_timeout(comm_nccl *n, const comm_op *o, const char *where)
{
    if (o->seq == 0)
        log_error("nccl: %s missed the deadline of init", where);
    else if (n->cur)
        log_error("nccl: allreduce #%llu of %zu floats stuck in the %s (chunk %d of %d; MPI posted for %d, "
                  "all-gathers queued for %d)%s", (unsigned long long)n->cur->seq, n->count, where,
                  (n->next_ag < n->nb ? n->next_ag : n->nb - 1) + 1, n->nb, n->next_mpi, n->next_ag,
                  n->cur == o ? "" : "; later allreduces wait behind it");
    status st = comm_diag_timeout(n->c, o);
    nccl_abort(n);
    return st;
}

/* Non-blocking communicators may answer ncclInProgress: the call completes in the
 * background, and no other NCCL call may be made on the communicator until
 * ncclCommGetAsyncError says it is over. The deadline is o's. */
static status nccl_settle(comm_nccl *n, ncclResult_t r, const char *what, const comm_op *o)
{
    while (r == ncclInProgress) {
        if (o->deadline > 0 && MPI_Wtime() > o->deadline) return nccl_timeout(n, o, what);
        comm_diag_service(n->c, o->seq, false);
        ncclResult_t q = ncclCommGetAsyncError(n->nccl, &r);
        if (q != ncclSuccess) r = q;
        if (n->rt->oversubscribed) sched_yield();
    }
    return r == ncclSuccess ? STATUS_OK : nccl_fail_nccl(n, r, what);
}

static bool nccl_mpi_cuda_aware(void)
{
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() == 1;  /* the library loaded now, not the headers */
#else
    return false;
#endif
}

/* Collective checks before any NCCL call, so every rank returns the same status:
 * all ranks have a GPU, nodes are equal (parts must line up across nodes), and no
 * two ranks of a node share a GPU (NCCL refuses that). Compared by PCI bus id, since
 * ranks with their own CUDA_VISIBLE_DEVICES all see "device 0". */
static status nccl_check_placement(const runtime *rt)
{
    int mine[2] = { rt->gpu >= 0, rt->local_size }, all[2];  /* min: every rank has one; smallest node */
    MPI_CHECK(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, rt->world));
    if (!all[0]) {
        if (rt->gpu < 0) log_error("nccl: no CUDA device visible to this rank");
        log_error0("HINT: the NCCL backend needs one GPU per rank; use the MPI backend on CPU-only nodes");
        return STATUS_USAGE;
    }
    if (all[1] != rt->max_local_size) {
        log_error0("nccl: nodes differ in size (%d to %d ranks): the hierarchical split needs equal nodes",
                   all[1], rt->max_local_size);
        log_error0("HINT: launch the same number of ranks on every node (or set --ranks-per-node to divide them)");
        return STATUS_USAGE;
    }
    char bus[32] = "", *buses = malloc((size_t)rt->local_size * sizeof bus);
    CHECK(buses, "out of memory for the node's PCI bus ids");
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, rt->gpu) != cudaSuccess) snprintf(bus, sizeof bus, "gpu%d", rt->gpu);
    MPI_CHECK(MPI_Allgather(bus, (int)sizeof bus, MPI_CHAR, buses, (int)sizeof bus, MPI_CHAR, rt->node));
    int dup = -1;
    for (int i = 0; i < rt->local_size && dup < 0; i++)
        if (i != rt->local_rank && !strcmp(buses + (size_t)i * sizeof bus, bus)) dup = i;
    free(buses);
    int any_dup = dup >= 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any_dup, 1, MPI_INT, MPI_MAX, rt->world));
    if (dup >= 0)
        log_error("nccl: local ranks %d and %d of node %d share GPU %s; NCCL needs one GPU per rank of a node",
                  rt->local_rank, dup, rt->node_id, bus);
    if (any_dup) {
        log_error0("HINT: run at most as many ranks per node as GPUs (on one GPU: --ranks-per-node 1)");
        return STATUS_USAGE;
    }
    return STATUS_OK;
}

/* ncclGetUniqueId on local rank 0, broadcast over the node, non-blocking init. */
static status nccl_comm_create(comm_nccl *n, const comm_op *init)
{
    const runtime *rt = n->rt;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = 1;
    if (rt->local_rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            log_error("nccl: ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
            log_error("HINT: NCCL's bootstrap needs a socket interface; try NCCL_SOCKET_IFNAME=lo on one host");
            ok = 0;
        }
    }
    MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, rt->node));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, rt->world));
    if (!ok) return STATUS_PEER;
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, rt->node));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  /* init and every call return at once; we poll with a deadline */
    cfg.commName = "nebula-node";
    TRY(nccl_settle(n, ncclCommInitRankConfig(&n->nccl, rt->local_size, id, rt->local_rank, &cfg),
                    "ncclCommInitRankConfig", init));
    n->op = ncclSum;
    n->op_scale = 1.0;
    return STATUS_OK;
}

static status nccl_alloc(comm_nccl *n)
{
    const runtime *rt = n->rt;
    CU_TRY(n, cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    CU_TRY(n, cudaStreamCreateWithFlags(&n->copy, cudaStreamNonBlocking));
    CU_TRY(n, cudaEventCreateWithFlags(&n->ev_done, cudaEventDisableTiming));
    CU_TRY(n, cudaEventCreateWithFlags(&n->ev_ready, cudaEventDisableTiming));
    if (rt->local_size > 1) {
        cudaError_t e = cudaMalloc((void **)&n->tail, (size_t)rt->local_size * sizeof(float));
        if (e != cudaSuccess) return nccl_fail_cuda(n, e, "cudaMalloc of the tail scratch");
        CU_TRY(n, cudaMemset(n->tail, 0, (size_t)rt->local_size * sizeof(float)));
    }
    return STATUS_OK;
}

/* Sizes the per-chunk tables and the staging for an op of nb chunks. Called at a
 * post, when no op is in flight: nothing on the device uses what is replaced. */
static status nccl_grow(comm_nccl *n, int nb)
{
    if (nb <= n->nb_max) return STATUS_OK;
    nccl_chunk *ck = realloc(n->ck, (size_t)nb * sizeof *ck);
    if (ck) n->ck = ck;
    cudaEvent_t *rs = ck ? realloc(n->ev_rs, (size_t)nb * sizeof *rs) : NULL;
    if (rs) n->ev_rs = rs;
    cudaEvent_t *d2h = rs ? realloc(n->ev_d2h, (size_t)nb * sizeof *d2h) : NULL;
    if (d2h) n->ev_d2h = d2h;
    cudaEvent_t *h2d = d2h ? realloc(n->ev_h2d, (size_t)nb * sizeof *h2d) : NULL;
    if (h2d) n->ev_h2d = h2d;
    if (!h2d) {
        log_error("nccl: cannot allocate the tables of %d chunks", nb);
        return STATUS_NOMEM;
    }
    for (; n->nevents < nb; n->nevents++) {
        CU_TRY(n, cudaEventCreateWithFlags(&n->ev_rs[n->nevents], cudaEventDisableTiming));
        CU_TRY(n, cudaEventCreateWithFlags(&n->ev_d2h[n->nevents], cudaEventDisableTiming));
        CU_TRY(n, cudaEventCreateWithFlags(&n->ev_h2d[n->nevents], cudaEventDisableTiming));
    }
    n->nb_max = nb;
    int slots = nb < COMM_NCCL_STAGE_SLOTS ? nb : COMM_NCCL_STAGE_SLOTS;
    if (n->cuda_aware || !n->inter) n->nslots = slots;  /* MPI steps in flight; no staging */
    else if (slots > n->nslots) {
        if (n->stage) cudaFreeHost(n->stage);
        n->stage = NULL;
        n->nslots = 0;
        size_t bytes = (size_t)slots * n->slot_count * sizeof(float);
        cudaError_t e = cudaMallocHost((void **)&n->stage, bytes);
        if (e != cudaSuccess) {
            log_error("nccl: cannot pin %zu bytes of staging: %s", bytes, cudaGetErrorString(e));
            return STATUS_NOMEM;
        }
        memset(n->stage, 0, bytes);  /* first touch now, not in the MPI step */
        n->nslots = slots;
    }
    return STATUS_OK;
}

/* The pre-multiplied sum for o's scale. Called at a post: the op it replaces is
 * complete on the device. */
static status nccl_set_scale(comm_nccl *n, const comm_op *o)
{
    if (o->scale == n->op_scale) return STATUS_OK;
    if (n->op_created) ncclRedOpDestroy(n->op, n->nccl);
    n->op_created = false;
    n->op = ncclSum;
    n->op_scale = 1.0;
    if (o->scale == 1.0) return STATUS_OK;
    /* Each input times (float)scale before the sum, on the device; the MPI step then
     * only sums (exact averaging for power-of-two worlds). */
    float s = (float)o->scale;
    TRY(nccl_settle(n, ncclRedOpCreatePreMulSum(&n->op, &s, ncclFloat, ncclScalarHostImmediate, n->nccl),
                    "ncclRedOpCreatePreMulSum", o));
    n->op_created = true;
    n->op_scale = o->scale;
    return STATUS_OK;
}

static void nccl_describe(comm_nccl *n, char *out, size_t len)
{
    int v = 0;
    ncclGetVersion(&v);
    char mpi[64];
    if (!n->inter) snprintf(mpi, sizeof mpi, "no MPI step (one node)");
    else if (n->cuda_aware) snprintf(mpi, sizeof mpi, "MPI on device pointers (CUDA-aware)");
    else snprintf(mpi, sizeof mpi, "MPI staged via up to %d pinned slots of %zu KiB", COMM_NCCL_STAGE_SLOTS,
                  n->slot_count * sizeof(float) >> 10);
    snprintf(out, len, "nccl %d.%d.%d (%d node%s of %d, %s, chunks %zu KiB)", v / 10000, v % 10000 / 100, v % 100,
             n->rt->nnodes, n->rt->nnodes == 1 ? "" : "s", n->rt->local_size, mpi,
             n->chunk_count * sizeof(float) >> 10);
}

/* Staged: copy chunk b's part into its slot once its reduce-scatter is done. */
static status nccl_queue_d2h(comm_nccl *n, int b)
{
    nccl_chunk *k = &n->ck[b];
    float *slot = n->stage + (size_t)(b % n->nslots) * n->slot_count;
    CU_TRY(n, cudaStreamWaitEvent(n->copy, n->ev_rs[b], 0));
    CU_TRY(n, cudaMemcpyAsync(slot, k->work + (size_t)n->rt->local_rank * k->part, k->part * sizeof(float),
                              cudaMemcpyDeviceToHost, n->copy));
    CU_TRY(n, cudaEventRecord(n->ev_d2h[b], n->copy));
    return STATUS_OK;
}

/* Chunk b's part is reduced over all nodes (or there is one node): gather it over
 * the node, then copy the leftover chunk back into the caller's buffer. */
static status nccl_queue_allgather(comm_nccl *n, int b)
{
    nccl_chunk *k = &n->ck[b];
    float *mine = k->work + (size_t)n->rt->local_rank * k->part;
    if (n->inter && !n->cuda_aware) {
        float *slot = n->stage + (size_t)(b % n->nslots) * n->slot_count;
        CU_TRY(n, cudaMemcpyAsync(mine, slot, k->part * sizeof(float), cudaMemcpyHostToDevice, n->copy));
        CU_TRY(n, cudaEventRecord(n->ev_h2d[b], n->copy));
        CU_TRY(n, cudaStreamWaitEvent(n->stream, n->ev_h2d[b], 0));
        if (b + n->nslots < n->nb) TRY(nccl_queue_d2h(n, b + n->nslots));  /* behind the H2D: the slot is free */
    }
    TRY(nccl_settle(n, ncclAllGather(mine, k->work, k->part, ncclFloat, n->nccl, n->stream), "ncclAllGather",
                    n->cur));
    if (k->work == n->tail)
        CU_TRY(n, cudaMemcpyAsync(n->buf + n->tail_off, n->tail, n->tail_len * sizeof(float),
                                  cudaMemcpyDeviceToDevice, n->stream));
    return STATUS_OK;
}

/* 1 when the event completed, 0 while in flight; a CUDA failure fails the op. */
static status nccl_event_done(comm_nccl *n, cudaEvent_t ev, bool *done)
{
    cudaError_t e = cudaEventQuery(ev);
    *done = e == cudaSuccess;
    if (e == cudaSuccess || e == cudaErrorNotReady) return STATUS_OK;
    return nccl_fail_cuda(n, e, "cudaEventQuery");
}

/* One non-blocking pass over the host steps of the op in flight, in chunk order. */
static status nccl_host_steps(comm_nccl *n)
{
    const runtime *rt = n->rt;
    while (n->inter && n->next_mpi < n->nb && n->next_mpi - n->next_ag < n->nslots) {
        int b = n->next_mpi;
        bool ready;
        TRY(nccl_event_done(n, n->cuda_aware ? n->ev_rs[b] : n->ev_d2h[b], &ready));
        if (!ready) break;
        nccl_chunk *k = &n->ck[b];
        float *data = n->cuda_aware ? k->work + (size_t)rt->local_rank * k->part
                                    : n->stage + (size_t)(b % n->nslots) * n->slot_count;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, (int)k->part, MPI_FLOAT, MPI_SUM, n->peers, &k->req));
        n->next_mpi++;
    }
    while (n->inter && n->next_ag < n->next_mpi) {
        int flag = 0;
        MPI_CHECK(MPI_Test(&n->ck[n->next_ag].req, &flag, MPI_STATUS_IGNORE));
        if (!flag) break;
        TRY(nccl_queue_allgather(n, n->next_ag));
        n->next_ag++;
    }
    if (n->next_ag == n->nb && !n->done_recorded) {
        CU_TRY(n, cudaEventRecord(n->ev_done, n->stream));
        n->done_recorded = true;
    }
    return STATUS_OK;
}

/* ---- the vtable ---------------------------------------------------------------- */

static status nccl_usable(const comm_nccl *n)
{
    if (n->nccl) return STATUS_OK;
    log_error0("nccl: the node's NCCL communicator was aborted after a failure; the job must end");
    return STATUS_PEER;
}

/* At comm_allreduce_start: refuse what the pipeline cannot do, and order the op
 * after the producer's work queued so far. */
static status nccl_op_start(comm *c, comm_op *o)
{
    comm_nccl *n = c->be.impl;
    if (o->dtype != REDUCE_DTYPE_F32 || o->op != REDUCE_OP_SUM) {
        log_error0("nccl: allreduce of %s with %s: the nccl backend sums f32 buffers only",
                   o->dtype == REDUCE_DTYPE_F32 ? "f32" : o->dtype == REDUCE_DTYPE_F64 ? "f64" : "integers",
                   o->op == REDUCE_OP_SUM ? "sum" : o->op == REDUCE_OP_MAX ? "max" : "min");
        log_error0("HINT: reduce control values (losses, counters) on an mpi comm or with comm_ctl_*");
        return STATUS_USAGE;
    }
    CHECK(o->count <= ((size_t)1 << 20) * n->chunk_count, "more than 2^20 chunks: raise nccl_chunk_bytes");
    /* A host buffer would fail inside NCCL's kernels (or MPI), far from the cause. */
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, o->buf);
    if (e != cudaSuccess || (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged)) {
        if (e != cudaSuccess) cudaGetLastError();  /* clear it: it is the caller's mistake, not a CUDA failure */
        log_error("nccl: allreduce buffer %p is not device memory", o->buf);
        log_error("HINT: the nccl backend reduces device buffers; reduce host buffers on a comm with comm.backend = mpi");
        return STATUS_USAGE;
    }
    TRY(nccl_usable(n));
    if (n->producer) {
        CU_TRY(n, cudaEventRecord(n->ev_ready, n->producer));
        CU_TRY(n, cudaStreamWaitEvent(n->stream, n->ev_ready, 0));
    }
    o->ticket = c->ticket_issued[COMM_CLASS_NCCL]++;
    return STATUS_OK;
}

/* auto and hier are its pipeline; the host algorithms cannot run on device buffers.
 * Every rank passes the same algo, so every rank refuses alike. */
static status nccl_resolve(comm *c, comm_algo *algo, size_t bytes, bool blocking)
{
    (void)c, (void)bytes, (void)blocking;
    if (*algo == COMM_ALGO_AUTO || *algo == COMM_ALGO_HIER || *algo == COMM_ALGO_NCCL) {
        *algo = COMM_ALGO_NCCL;
        return STATUS_OK;
    }
    log_error0("allreduce with algorithm %s on the nccl backend: mpi, flat and ring run on host buffers only",
               comm_algo_name(*algo));
    log_error0("HINT: pass COMM_ALGO_AUTO (or HIER) with comm.backend = nccl, or use comm.backend = mpi");
    return STATUS_USAGE;
}

/* Its turn came (the op before it completed): queue every reduce-scatter. */
static status nccl_op_post(comm *c, comm_op *o)
{
    comm_nccl *n = c->be.impl;
    CHECK(!n->cur, "an nccl op was posted while another is in flight");
    TRY(nccl_usable(n));
    const runtime *rt = n->rt;
    size_t L = (size_t)rt->local_size, count = o->count;
    float *dev_buf = o->buf;
    n->buf = dev_buf;
    n->count = count;
    n->tail_len = count % L;
    n->tail_off = count - n->tail_len;
    size_t nb = (n->tail_off + n->chunk_count - 1) / n->chunk_count + (n->tail_len ? 1 : 0);
    TRY(nccl_grow(n, (int)nb));
    TRY(nccl_set_scale(n, o));
    n->cur = o;
    n->nb = n->next_mpi = n->next_ag = 0;
    n->done_recorded = false;
    for (size_t off = 0; off < n->tail_off; off += n->chunk_count) {
        size_t len = n->tail_off - off < n->chunk_count ? n->tail_off - off : n->chunk_count;
        n->ck[n->nb++] = (nccl_chunk){ .work = dev_buf + off, .len = len, .part = len / L, .req = MPI_REQUEST_NULL };
    }
    if (n->tail_len) n->ck[n->nb++] = (nccl_chunk){ .work = n->tail, .len = L, .part = 1, .req = MPI_REQUEST_NULL };
    if (n->tail_len) {  /* zero padding: re-zeroed every time, so nothing depends on the last use */
        CU_TRY(n, cudaMemsetAsync(n->tail, 0, L * sizeof(float), n->stream));
        CU_TRY(n, cudaMemcpyAsync(n->tail, dev_buf + n->tail_off, n->tail_len * sizeof(float),
                                  cudaMemcpyDeviceToDevice, n->stream));
    }
    for (int b = 0; b < n->nb; b++) {
        nccl_chunk *k = &n->ck[b];
        TRY(nccl_settle(n, ncclReduceScatter(k->work, k->work + (size_t)rt->local_rank * k->part, k->part, ncclFloat,
                                             n->op, n->nccl, n->stream), "ncclReduceScatter", o));
        CU_TRY(n, cudaEventRecord(n->ev_rs[b], n->stream));
    }
    if (!n->inter) {  /* one node: nothing for the host to do between the two halves */
        for (int b = 0; b < n->nb; b++) TRY(nccl_queue_allgather(n, b));
        n->next_mpi = n->next_ag = n->nb;
    } else if (!n->cuda_aware) {
        for (int b = 0; b < n->nb && b < n->nslots; b++) TRY(nccl_queue_d2h(n, b));
    }
    return nccl_host_steps(n);
}

/* Advances the host steps; *done once the op is complete on the device. The
 * deadline is comm.c's (check_deadline, then nccl_op_timeout). */
static status nccl_op_test(comm *c, comm_op *o, bool *done)
{
    comm_nccl *n = c->be.impl;
    *done = false;
    CHECK(n->cur == o, "an nccl op was tested before its post");
    TRY(nccl_host_steps(n));
    if (n->done_recorded) {
        TRY(nccl_event_done(n, n->ev_done, done));
        if (*done) {
            n->cur = NULL;
            return STATUS_OK;
        }
    }
    ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(n->nccl, &async);
    if (q != ncclSuccess) async = q;
    if (async != ncclSuccess && async != ncclInProgress)  /* in progress: a background enqueue */
        return nccl_fail_nccl(n, async, "asynchronous NCCL error");
    if (n->rt->oversubscribed) sched_yield();
    return STATUS_OK;
}

/* The op whose ticket is next is posted when the one before it completed (comm's list
 * is in start order, so that happens in the same pass), then tested. */
static status nccl_op_progress(comm *c, comm_op *o, bool *done)
{
    *done = false;
    if (!o->posted) {
        if (c->ticket_next[COMM_CLASS_NCCL] != o->ticket) return STATUS_OK;
        o->posted = 1;
        TRY(nccl_op_post(c, o));
    }
    TRY(nccl_op_test(c, o, done));
    if (*done) c->ticket_next[COMM_CLASS_NCCL]++;
    return STATUS_OK;
}

static status nccl_op_timeout(comm *c, const comm_op *o)
{
    comm_nccl *n = c->be.impl;
    return nccl_timeout(n, o, n->cur ? nccl_stage_name(n) : "queue");
}

static status nccl_set_stream(comm *c, cuda_stream s)
{
    ((comm_nccl *)c->be.impl)->producer = (cudaStream_t)s;
    return STATUS_OK;
}

/* clean: nothing in flight, so everything is freed (NCCL finalized). Otherwise MPI
 * may still write into the staging and GPU work may be in flight: only host memory
 * that neither can touch is freed (the job is ending). */
static void nccl_release(comm_nccl *n, bool clean)
{
    if (clean && n->nccl) {
        if (n->op_created) ncclRedOpDestroy(n->op, n->nccl);
        double t = n->c->opt.timeout_s > 0 ? n->c->opt.timeout_s : 60;
        double deadline = MPI_Wtime() + (t > COMM_NCCL_INIT_MIN_S ? t : COMM_NCCL_INIT_MIN_S);
        ncclResult_t r = ncclCommFinalize(n->nccl);  /* flushes our work; may need the node's ranks */
        while (r == ncclInProgress && MPI_Wtime() < deadline) {
            if (ncclCommGetAsyncError(n->nccl, &r) != ncclSuccess) break;
            if (n->rt->oversubscribed) sched_yield();
        }
        if (r == ncclSuccess) ncclCommDestroy(n->nccl);
        else ncclCommAbort(n->nccl);
        n->nccl = NULL;
    } else {
        nccl_abort(n);
    }
    if (clean) {
        for (int i = 0; i < n->nevents; i++) {
            cudaEventDestroy(n->ev_rs[i]);
            cudaEventDestroy(n->ev_d2h[i]);
            cudaEventDestroy(n->ev_h2d[i]);
        }
        if (n->ev_done) cudaEventDestroy(n->ev_done);
        if (n->ev_ready) cudaEventDestroy(n->ev_ready);
        if (n->stream) cudaStreamDestroy(n->stream);
        if (n->copy) cudaStreamDestroy(n->copy);
        if (n->tail) cudaFree(n->tail);
        if (n->stage) cudaFreeHost(n->stage);
        if (n->peers != MPI_COMM_NULL) MPI_Comm_free(&n->peers);
    }
    free(n->ev_rs);
    free(n->ev_d2h);
    free(n->ev_h2d);
    free(n->ck);
    free(n);
}

static void nccl_free(comm_backend *be)
{
    comm_nccl *n = be->impl;
    if (!n) return;
    be->impl = NULL;
    nccl_release(n, !n->c->failed && !n->c->head && !n->cur);
}

static const comm_backend_ops nccl_ops = {
    .name = "nccl",
    .free = nccl_free,
    .abandon = nccl_free,  /* host memory only after a failure (nccl_release checks) */
    .op_resolve = nccl_resolve,
    .op_start = nccl_op_start,
    .op_progress = nccl_op_progress,
    .op_timeout = nccl_op_timeout,
    .set_stream = nccl_set_stream,
};

/* Collective over the world. Makes rt->gpu the calling thread's current device;
 * creates the node's NCCL communicator (bootstrapped over MPI), a duplicate of the
 * peers communicator, streams and the tail scratch. STATUS_USAGE when a rank has no
 * GPU, two ranks of a node share one GPU, or nodes differ in size; STATUS_TIMEOUT
 * when NCCL's init misses its deadline (comm.timeout, at least COMM_NCCL_INIT_MIN_S:
 * a bootstrap takes seconds on real hardware, and short step deadlines must not fail
 * it); STATUS_PEER on an NCCL or CUDA failure. */
status comm_nccl_backend_init(comm *c)
{
    const runtime *rt = c->rt;
    TRY(nccl_check_placement(rt));
    cudaError_t e = cudaSetDevice(rt->gpu);
    if (e != cudaSuccess) {
        log_error("nccl: cudaSetDevice(%d): %s", rt->gpu, cudaGetErrorString(e));
        return STATUS_PEER;
    }
    comm_nccl *n = calloc(1, sizeof *n);
    if (!n) return STATUS_NOMEM;
    n->c = c;
    n->rt = rt;
    size_t L = (size_t)rt->local_size, bytes = c->opt.nccl_chunk_bytes ? c->opt.nccl_chunk_bytes : COMM_NCCL_CHUNK_BYTES;
    n->chunk_count = bytes / sizeof(float) / L * L;
    if (n->chunk_count < L) n->chunk_count = L;
    n->slot_count = n->chunk_count / L;
    CHECK(n->slot_count <= (size_t)INT32_MAX, "a chunk's part must fit MPI's int count: lower nccl_chunk_bytes");
    n->inter = rt->nnodes > 1;
    n->cuda_aware = n->inter && !c->opt.nccl_staged && nccl_mpi_cuda_aware();
    n->peers = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(rt->peers, &n->peers));
    double t = c->opt.timeout_s > COMM_NCCL_INIT_MIN_S ? c->opt.timeout_s : COMM_NCCL_INIT_MIN_S;
    comm_op init = { .seq = 0, .algo = COMM_ALGO_NCCL, .dtype = REDUCE_DTYPE_F32, .t_start = MPI_Wtime() };
    init.deadline = c->opt.timeout_s > 0 ? init.t_start + t : 0;
    status st = nccl_alloc(n);
    /* Every rank must agree before NCCL's bootstrap, which would wait for a rank that left. */
    int ok = st == STATUS_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, rt->world));
    if (ok) st = nccl_comm_create(n, &init);
    else if (st == STATUS_OK) st = STATUS_PEER;  /* another rank failed */
    if (st != STATUS_OK) {
        nccl_release(n, true);  /* nothing is in flight yet (NCCL is aborted or absent) */
        return st;
    }
    c->be = (comm_backend){ .ops = &nccl_ops, .impl = n };
    nccl_describe(n, c->be.describe, sizeof c->be.describe);
    return STATUS_OK;
}

#else /* !NEBULA_CUDA */

status comm_nccl_backend_init(comm *c)
{
    (void)c;
    log_error0("comm.backend = nccl: built without CUDA (nvcc was not found when building)");
    log_error0("HINT: install the CUDA toolkit with NCCL and rebuild (make USE_CUDA=1), or use comm.backend = mpi");
    return STATUS_USAGE;
}

#endif
