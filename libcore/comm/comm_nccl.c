/* comm_nccl — see comm_nccl.h.
 *
 * The one design decision (the header says it too): the sequence of NCCL calls on
 * the node communicator is fixed before any of them runs — every reduce-scatter at
 * start, then the all-gathers in bucket order as their MPI steps finish, one
 * allreduce in flight — so host timing cannot reorder collectives between ranks.
 *
 * Streams and events, per bucket b (P staging slots, slot b % P):
 *   stream  [wait ready] RS(0) rec rs[0] ... RS(n-1) rec rs[n-1] | wait h2d[b] AG(b) ... rec done
 *   copy    (staged MPI) wait rs[b], D2H part -> slot, rec d2h[b]; after MPI(b): H2D, rec h2d[b]
 * The host posts MPI(b) when d2h[b] (staged) or rs[b] (CUDA-aware) completed, in
 * bucket order, at most P in flight; D2H(b+P) is queued behind H2D(b) on the copy
 * stream, so a slot is refilled only after the GPU has read it back. The copy stream
 * waits only for reduce-scatters, which never wait for it: no cycle.
 *
 * Buckets are `bucket_count` floats (a multiple of the node size L), the last one
 * shorter; the count % L floats left over form one extra bucket of L floats in a
 * zeroed device scratch (zeros add nothing), copied back after its all-gather. */
#include "comm_nccl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NEBULA_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm_impl.h"

/* OpenMPI declares MPIX_Query_cuda_support in mpi-ext.h when its cuda extension is
 * built (Debian's is, answering 0: the library itself was built without CUDA). */
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

typedef struct nccl_bucket {
    float *work;           /* device: RS and AG run in place here (user buffer or tail scratch) */
    size_t len;            /* floats of work, a multiple of the node size */
    size_t part;           /* len / L: the floats this rank owns and exchanges between nodes */
    MPI_Request req;       /* the inter-node allreduce of the part */
} nccl_bucket;

struct comm_nccl {
    const runtime *rt;     /* placement */
    comm_nccl_options opt; /* as given, defaults filled in */
    ncclComm_t nccl;       /* the node's communicator; NULL once aborted or destroyed */
    ncclRedOp_t op;        /* ncclSum, or pre-multiply by 1/world size when averaging */
    bool op_created;       /* op is ours to destroy */
    MPI_Comm peers;        /* duplicate of rt->peers: only our allreduces run there */
    bool inter;            /* more than one node: the MPI step exists */
    bool cuda_aware;       /* MPI takes device pointers */
    cudaStream_t stream;   /* NCCL calls, all-gathers, the tail copies */
    cudaStream_t copy;     /* staging copies */
    cudaEvent_t *ev_rs;    /* per bucket: its reduce-scatter finished */
    cudaEvent_t *ev_d2h;   /* per bucket: its part is in the staging slot */
    cudaEvent_t *ev_h2d;   /* per bucket: the reduced part is back on the device */
    cudaEvent_t ev_done;   /* the last all-gather (and tail copy) finished */
    int nevents;           /* events created in each per-bucket array */
    float *stage;          /* pinned host: nslots slots of slot_count floats (staged only) */
    size_t slot_count;     /* floats per slot = bucket_count / L */
    int nslots;            /* MPI steps in flight at most */
    float *tail;           /* device scratch: L floats for the count % L leftover (L > 1) */
    size_t bucket_count;   /* floats per full bucket, a multiple of L */
    int nb_max;            /* buckets the largest allreduce needs */
    nccl_bucket *bk;       /* nb_max buckets */
    /* The allreduce in flight. */
    bool active;           /* started and not yet waited for */
    float *buf;            /* the caller's device buffer */
    size_t count;          /* its floats */
    size_t tail_off;       /* first float of the leftover (count - count % L) */
    size_t tail_len;       /* count % L */
    int nb;                /* buckets of this allreduce */
    int next_mpi;          /* next bucket whose MPI step is posted */
    int next_ag;           /* next bucket whose all-gather is queued */
    bool done_recorded;    /* ev_done is recorded after the last all-gather */
    bool failed;           /* a wait failed: the communicator is unusable */
    comm probe;            /* comm_diag.c's state only: rt, diag, seq, diag_last, opt.timeout_s */
    comm_op probe_op;      /* what comm_diag_timeout reports: seq, count, t_start */
    char describe[224];    /* comm_nccl_describe */
};

/* Where the allreduce in flight is stuck, from the host's bookkeeping. */
static const char *nccl_stage_name(const comm_nccl *c)
{
    if (!c->inter) return "node's reduce-scatter or all-gather (NCCL)";
    if (c->next_ag < c->next_mpi) return "MPI step between nodes";
    if (c->next_mpi < c->nb) return "node's reduce-scatter (NCCL)";
    return "node's all-gather (NCCL)";
}

static void nccl_abort(comm_nccl *c)
{
    if (!c->nccl) return;
    ncclCommAbort(c->nccl);  /* tells kernels stuck waiting for a peer to exit */
    c->nccl = NULL;
}

static status nccl_fail_cuda(comm_nccl *c, cudaError_t e, const char *what)
{
    log_error("comm_nccl: %s: CUDA error %d (%s)", what, (int)e, cudaGetErrorString(e));
    c->failed = true;
    nccl_abort(c);
    return STATUS_PEER;
}

static status nccl_fail_nccl(comm_nccl *c, ncclResult_t r, const char *what)
{
    log_error("comm_nccl: %s: %s (%s)", what, ncclGetErrorString(r), c->nccl ? ncclGetLastError(c->nccl) : "");
    log_error("HINT: rerun with NCCL_DEBUG=WARN (or INFO) to see NCCL's own account");
    c->failed = true;
    nccl_abort(c);
    return STATUS_PEER;  /* a peer, the network or the device failed: the job must end */
}

#define CU_TRY(c, call)                                                         \
    do { cudaError_t cu_e_ = (call);                                            \
         if (cu_e_ != cudaSuccess) return nccl_fail_cuda((c), cu_e_, #call); } while (0)

/* The deadline passed: name the ranks that did not arrive (every rank that waits
 * answers the probe), then abort — in that order, because an abort can take a while
 * and a rank that does not answer probes would itself be named. */
static status nccl_fail_timeout(comm_nccl *c, const char *where)
{
    c->failed = true;
    if (c->probe_op.seq == 0)
        log_error("comm_nccl: %s missed the %.1f s deadline of init", where, c->probe.opt.timeout_s);
    else
        log_error("comm_nccl: allreduce #%llu of %zu floats stuck in the %s (bucket %d of %d; MPI posted for %d, "
                  "all-gathers queued for %d)", (unsigned long long)c->probe_op.seq, c->count, where,
                  (c->next_ag < c->nb ? c->next_ag : c->nb - 1) + 1, c->nb, c->next_mpi, c->next_ag);
    status st = comm_diag_timeout(&c->probe, &c->probe_op);
    nccl_abort(c);
    return st;
}

/* Non-blocking communicators may answer ncclInProgress: the call completes in the
 * background, and no other NCCL call may be made on the communicator until
 * ncclCommGetAsyncError says it is over. */
static status nccl_settle(comm_nccl *c, ncclResult_t r, const char *what, double deadline)
{
    while (r == ncclInProgress) {
        if (deadline > 0 && MPI_Wtime() > deadline) return nccl_fail_timeout(c, what);
        comm_diag_service(&c->probe, c->probe_op.seq, false);
        ncclResult_t q = ncclCommGetAsyncError(c->nccl, &r);
        if (q != ncclSuccess) r = q;
        if (c->rt->oversubscribed) sched_yield();
    }
    return r == ncclSuccess ? STATUS_OK : nccl_fail_nccl(c, r, what);
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
        if (rt->gpu < 0) log_error("comm_nccl: no CUDA device visible to this rank");
        log_error0("HINT: the NCCL backend needs one GPU per rank; use the MPI backend on CPU-only nodes");
        return STATUS_USAGE;
    }
    if (all[1] != rt->max_local_size) {
        log_error0("comm_nccl: nodes differ in size (%d to %d ranks): the hierarchical split needs equal nodes",
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
        log_error("comm_nccl: local ranks %d and %d of node %d share GPU %s; NCCL needs one GPU per rank of a node",
                  rt->local_rank, dup, rt->node_id, bus);
    if (any_dup) {
        log_error0("HINT: run at most as many ranks per node as GPUs (on one GPU: --ranks-per-node 1)");
        return STATUS_USAGE;
    }
    return STATUS_OK;
}

/* ncclGetUniqueId on local rank 0, broadcast over the node, non-blocking init. */
static status nccl_comm_create(comm_nccl *c, double deadline)
{
    const runtime *rt = c->rt;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = 1;
    if (rt->local_rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            log_error("comm_nccl: ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
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
    TRY(nccl_settle(c, ncclCommInitRankConfig(&c->nccl, rt->local_size, id, rt->local_rank, &cfg),
                    "ncclCommInitRankConfig", deadline));
    if (c->opt.average) {
        /* Each input is multiplied by 1/size before the sum (exact for power-of-two
         * worlds); the MPI step then only sums. */
        float scale = 1.0f / (float)rt->size;
        TRY(nccl_settle(c, ncclRedOpCreatePreMulSum(&c->op, &scale, ncclFloat, ncclScalarHostImmediate, c->nccl),
                        "ncclRedOpCreatePreMulSum", deadline));
        c->op_created = true;
    } else {
        c->op = ncclSum;
    }
    return STATUS_OK;
}

static status nccl_alloc(comm_nccl *c)
{
    const runtime *rt = c->rt;
    CU_TRY(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CU_TRY(c, cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    CU_TRY(c, cudaEventCreateWithFlags(&c->ev_done, cudaEventDisableTiming));
    c->bk = calloc((size_t)c->nb_max, sizeof *c->bk);
    c->ev_rs = calloc((size_t)c->nb_max, sizeof *c->ev_rs);
    c->ev_d2h = calloc((size_t)c->nb_max, sizeof *c->ev_d2h);
    c->ev_h2d = calloc((size_t)c->nb_max, sizeof *c->ev_h2d);
    if (!c->bk || !c->ev_rs || !c->ev_d2h || !c->ev_h2d) return STATUS_NOMEM;
    for (; c->nevents < c->nb_max; c->nevents++) {
        CU_TRY(c, cudaEventCreateWithFlags(&c->ev_rs[c->nevents], cudaEventDisableTiming));
        CU_TRY(c, cudaEventCreateWithFlags(&c->ev_d2h[c->nevents], cudaEventDisableTiming));
        CU_TRY(c, cudaEventCreateWithFlags(&c->ev_h2d[c->nevents], cudaEventDisableTiming));
    }
    if (rt->local_size > 1) {
        cudaError_t e = cudaMalloc((void **)&c->tail, (size_t)rt->local_size * sizeof(float));
        if (e != cudaSuccess) return nccl_fail_cuda(c, e, "cudaMalloc of the tail scratch");
        CU_TRY(c, cudaMemset(c->tail, 0, (size_t)rt->local_size * sizeof(float)));
    }
    if (c->inter && !c->cuda_aware) {
        size_t bytes = (size_t)c->nslots * c->slot_count * sizeof(float);
        cudaError_t e = cudaMallocHost((void **)&c->stage, bytes);
        if (e != cudaSuccess) {
            log_error("comm_nccl: cannot pin %zu bytes of staging: %s", bytes, cudaGetErrorString(e));
            return STATUS_NOMEM;
        }
        memset(c->stage, 0, bytes);  /* first touch now, not in the first step */
    }
    return STATUS_OK;
}

static void nccl_describe(comm_nccl *c)
{
    int v = 0;
    ncclGetVersion(&v);
    char mpi[96];
    if (!c->inter) snprintf(mpi, sizeof mpi, "no MPI step (one node)");
    else if (c->cuda_aware) snprintf(mpi, sizeof mpi, "MPI on device pointers (CUDA-aware)");
    else snprintf(mpi, sizeof mpi, "MPI staged through %d pinned slots of %zu KiB", c->nslots,
                  c->slot_count * sizeof(float) >> 10);
    snprintf(c->describe, sizeof c->describe, "nccl %d.%d.%d (%d node%s of %d, %s, buckets %zu KiB, %s)",
             v / 10000, v % 10000 / 100, v % 100, c->rt->nnodes, c->rt->nnodes == 1 ? "" : "s", c->rt->local_size, mpi,
             c->bucket_count * sizeof(float) >> 10, c->opt.average ? "average" : "sum");
}

status comm_nccl_init(comm_nccl **out, const runtime *rt, const comm_nccl_options *o)
{
    *out = NULL;
    CHECK(o->max_count > 0, "comm_nccl_options.max_count must be the largest allreduce in floats");
    TRY(nccl_check_placement(rt));
    cudaError_t e = cudaSetDevice(rt->gpu);
    if (e != cudaSuccess) {
        log_error("comm_nccl: cudaSetDevice(%d): %s", rt->gpu, cudaGetErrorString(e));
        return STATUS_PEER;
    }
    comm_nccl *c = calloc(1, sizeof *c);
    if (!c) return STATUS_NOMEM;
    c->rt = rt;
    c->opt = *o;
    if (c->opt.bucket_bytes == 0) c->opt.bucket_bytes = COMM_NCCL_BUCKET_BYTES;
    size_t L = (size_t)rt->local_size;
    c->bucket_count = c->opt.bucket_bytes / sizeof(float) / L * L;
    if (c->bucket_count < L) c->bucket_count = L;
    c->slot_count = c->bucket_count / L;
    CHECK(c->slot_count <= (size_t)INT32_MAX, "a bucket's part must fit MPI's int count: lower bucket_bytes");
    size_t nb = (o->max_count + c->bucket_count - 1) / c->bucket_count + 1;  /* + the leftover bucket */
    CHECK(nb <= (size_t)1 << 20, "more than 2^20 buckets: raise bucket_bytes");
    c->nb_max = (int)nb;
    c->nslots = c->nb_max < COMM_NCCL_STAGE_SLOTS ? c->nb_max : COMM_NCCL_STAGE_SLOTS;
    c->inter = rt->nnodes > 1;
    c->cuda_aware = c->inter && !o->force_staged && nccl_mpi_cuda_aware();
    c->peers = MPI_COMM_NULL;
    c->probe.diag = MPI_COMM_NULL;
    c->probe.rt = rt;
    c->probe.opt.timeout_s = o->timeout_s;
    MPI_CHECK(MPI_Comm_dup(rt->peers, &c->peers));
    MPI_CHECK(MPI_Comm_dup(rt->world, &c->probe.diag));
    double deadline = o->timeout_s > 0 ? MPI_Wtime() + o->timeout_s : 0;
    c->probe_op = (comm_op){ .seq = 0, .algo = COMM_ALGO_HIER, .dtype = REDUCE_DTYPE_F32, .t_start = MPI_Wtime() };
    status st = nccl_alloc(c);
    /* Every rank must agree before NCCL's bootstrap, which would wait for a rank that left. */
    int ok = st == STATUS_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, rt->world));
    if (ok) st = nccl_comm_create(c, deadline);
    else if (st == STATUS_OK) st = STATUS_PEER;  /* another rank failed */
    if (st != STATUS_OK) {
        c->failed = false;  /* nothing is in flight yet (NCCL is aborted or absent): free everything */
        comm_nccl_free(c);
        return st;
    }
    nccl_describe(c);
    *out = c;
    return STATUS_OK;
}

const char *comm_nccl_describe(const comm_nccl *c)
{
    return c->describe;
}

const char *comm_nccl_late_ranks(const comm_nccl *c)
{
    return c->probe.diag_late;
}

/* Staged: copy bucket b's part into its slot once its reduce-scatter is done. */
static status nccl_queue_d2h(comm_nccl *c, int b)
{
    nccl_bucket *k = &c->bk[b];
    float *slot = c->stage + (size_t)(b % c->nslots) * c->slot_count;
    CU_TRY(c, cudaStreamWaitEvent(c->copy, c->ev_rs[b], 0));
    CU_TRY(c, cudaMemcpyAsync(slot, k->work + (size_t)c->rt->local_rank * k->part, k->part * sizeof(float),
                              cudaMemcpyDeviceToHost, c->copy));
    CU_TRY(c, cudaEventRecord(c->ev_d2h[b], c->copy));
    return STATUS_OK;
}

/* Bucket b's part is reduced over all nodes (or there is one node): gather it over
 * the node, then copy the leftover bucket back into the caller's buffer. */
static status nccl_queue_allgather(comm_nccl *c, int b, double deadline)
{
    nccl_bucket *k = &c->bk[b];
    float *mine = k->work + (size_t)c->rt->local_rank * k->part;
    if (c->inter && !c->cuda_aware) {
        float *slot = c->stage + (size_t)(b % c->nslots) * c->slot_count;
        CU_TRY(c, cudaMemcpyAsync(mine, slot, k->part * sizeof(float), cudaMemcpyHostToDevice, c->copy));
        CU_TRY(c, cudaEventRecord(c->ev_h2d[b], c->copy));
        CU_TRY(c, cudaStreamWaitEvent(c->stream, c->ev_h2d[b], 0));
        if (b + c->nslots < c->nb) TRY(nccl_queue_d2h(c, b + c->nslots));  /* behind the H2D: the slot is free */
    }
    TRY(nccl_settle(c, ncclAllGather(mine, k->work, k->part, ncclFloat, c->nccl, c->stream), "ncclAllGather",
                    deadline));
    if (k->work == c->tail)
        CU_TRY(c, cudaMemcpyAsync(c->buf + c->tail_off, c->tail, c->tail_len * sizeof(float),
                                  cudaMemcpyDeviceToDevice, c->stream));
    return STATUS_OK;
}

/* 1 when the event completed, 0 while in flight; a CUDA failure fails the op. */
static status nccl_event_done(comm_nccl *c, cudaEvent_t ev, bool *done)
{
    cudaError_t e = cudaEventQuery(ev);
    *done = e == cudaSuccess;
    if (e == cudaSuccess || e == cudaErrorNotReady) return STATUS_OK;
    return nccl_fail_cuda(c, e, "cudaEventQuery");
}

/* One non-blocking pass over the host steps, in bucket order. */
static status nccl_progress(comm_nccl *c, double deadline)
{
    const runtime *rt = c->rt;
    while (c->inter && c->next_mpi < c->nb && c->next_mpi - c->next_ag < c->nslots) {
        int b = c->next_mpi;
        bool ready;
        TRY(nccl_event_done(c, c->cuda_aware ? c->ev_rs[b] : c->ev_d2h[b], &ready));
        if (!ready) break;
        nccl_bucket *k = &c->bk[b];
        float *data = c->cuda_aware ? k->work + (size_t)rt->local_rank * k->part
                                    : c->stage + (size_t)(b % c->nslots) * c->slot_count;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, (int)k->part, MPI_FLOAT, MPI_SUM, c->peers, &k->req));
        c->next_mpi++;
    }
    while (c->inter && c->next_ag < c->next_mpi) {
        int flag = 0;
        MPI_CHECK(MPI_Test(&c->bk[c->next_ag].req, &flag, MPI_STATUS_IGNORE));
        if (!flag) break;
        TRY(nccl_queue_allgather(c, c->next_ag, deadline));
        c->next_ag++;
    }
    if (c->next_ag == c->nb && !c->done_recorded) {
        CU_TRY(c, cudaEventRecord(c->ev_done, c->stream));
        c->done_recorded = true;
    }
    return STATUS_OK;
}

status comm_nccl_allreduce_start(comm_nccl *c, float *dev_buf, size_t count, cuda_event ready)
{
    CHECK(!c->failed, "comm_nccl used after a failed wait: the job must end");
    CHECK(!c->active, "comm_nccl_allreduce_start while an allreduce is in flight: wait for it first");
    CHECK(count <= c->opt.max_count, "allreduce larger than comm_nccl_options.max_count");
    const runtime *rt = c->rt;
    size_t L = (size_t)rt->local_size;
    c->probe.seq++;
    c->probe_op.seq = c->probe.seq;
    c->probe_op.count = count;
    c->probe_op.t_start = MPI_Wtime();
    double deadline = c->opt.timeout_s > 0 ? c->probe_op.t_start + c->opt.timeout_s : 0;
    c->buf = dev_buf;
    c->count = count;
    c->tail_len = count % L;
    c->tail_off = count - c->tail_len;
    c->nb = c->next_mpi = c->next_ag = 0;
    c->done_recorded = false;
    if (count == 0) return STATUS_OK;  /* nothing to exchange; wait returns at once */
    for (size_t off = 0; off < c->tail_off; off += c->bucket_count) {
        size_t len = c->tail_off - off < c->bucket_count ? c->tail_off - off : c->bucket_count;
        c->bk[c->nb++] = (nccl_bucket){ .work = dev_buf + off, .len = len, .part = len / L, .req = MPI_REQUEST_NULL };
    }
    if (c->tail_len) c->bk[c->nb++] = (nccl_bucket){ .work = c->tail, .len = L, .part = 1, .req = MPI_REQUEST_NULL };
    CHECK(c->nb <= c->nb_max, "bucket table sized at init is too small");
    if (ready) CU_TRY(c, cudaStreamWaitEvent(c->stream, (cudaEvent_t)ready, 0));
    if (c->tail_len) {  /* zero padding: re-zeroed every time, so nothing depends on the last use */
        CU_TRY(c, cudaMemsetAsync(c->tail, 0, L * sizeof(float), c->stream));
        CU_TRY(c, cudaMemcpyAsync(c->tail, dev_buf + c->tail_off, c->tail_len * sizeof(float),
                                  cudaMemcpyDeviceToDevice, c->stream));
    }
    c->active = true;
    for (int b = 0; b < c->nb; b++) {
        nccl_bucket *k = &c->bk[b];
        TRY(nccl_settle(c, ncclReduceScatter(k->work, k->work + (size_t)rt->local_rank * k->part, k->part, ncclFloat,
                                             c->op, c->nccl, c->stream), "ncclReduceScatter", deadline));
        CU_TRY(c, cudaEventRecord(c->ev_rs[b], c->stream));
    }
    if (!c->inter) {  /* one node: nothing for the host to do between the two halves */
        for (int b = 0; b < c->nb; b++) TRY(nccl_queue_allgather(c, b, deadline));
        c->next_mpi = c->next_ag = c->nb;
    } else if (!c->cuda_aware) {
        for (int b = 0; b < c->nb && b < c->nslots; b++) TRY(nccl_queue_d2h(c, b));
    }
    return nccl_progress(c, deadline);
}

status comm_nccl_progress(comm_nccl *c)
{
    if (!c->active || c->failed) return STATUS_OK;
    double deadline = c->opt.timeout_s > 0 ? c->probe_op.t_start + c->opt.timeout_s : 0;
    return nccl_progress(c, deadline);
}

status comm_nccl_wait(comm_nccl *c, double timeout_s)
{
    if (c->failed) return STATUS_PEER;
    if (!c->active) return STATUS_OK;
    double t = timeout_s > 0 ? timeout_s : c->opt.timeout_s;
    double deadline = t > 0 ? MPI_Wtime() + t : 0;
    c->probe.opt.timeout_s = t;  /* the probe's grace period derives from it */
    for (;;) {
        TRY(nccl_progress(c, deadline));
        if (c->done_recorded) {
            bool done;
            TRY(nccl_event_done(c, c->ev_done, &done));
            if (done) {
                c->active = false;
                return STATUS_OK;
            }
        }
        ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(c->nccl, &async);
        if (q != ncclSuccess) async = q;
        if (async != ncclSuccess && async != ncclInProgress)  /* in progress: a background enqueue */
            return nccl_fail_nccl(c, async, "asynchronous NCCL error");
        comm_diag_service(&c->probe, c->probe_op.seq, false);
        if (deadline > 0 && MPI_Wtime() > deadline) return nccl_fail_timeout(c, nccl_stage_name(c));
        if (c->rt->oversubscribed) sched_yield();
    }
}

/* A failed communicator may still have MPI writing into the staging and GPU work in
 * flight: only host memory that neither can touch is freed (the job is ending). */
void comm_nccl_free(comm_nccl *c)
{
    if (!c) return;
    bool clean = !c->failed && !c->active;
    if (clean && c->nccl) {
        if (c->op_created) ncclRedOpDestroy(c->op, c->nccl);
        double deadline = MPI_Wtime() + (c->opt.timeout_s > 0 ? c->opt.timeout_s : 60);
        ncclResult_t r = ncclCommFinalize(c->nccl);  /* flushes our work; may need the node's ranks */
        while (r == ncclInProgress && MPI_Wtime() < deadline) {
            if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
            if (c->rt->oversubscribed) sched_yield();
        }
        if (r == ncclSuccess) ncclCommDestroy(c->nccl);
        else ncclCommAbort(c->nccl);
        c->nccl = NULL;
    } else {
        nccl_abort(c);
    }
    if (clean) {
        for (int i = 0; i < c->nevents; i++) {
            cudaEventDestroy(c->ev_rs[i]);
            cudaEventDestroy(c->ev_d2h[i]);
            cudaEventDestroy(c->ev_h2d[i]);
        }
        if (c->ev_done) cudaEventDestroy(c->ev_done);
        if (c->stream) cudaStreamDestroy(c->stream);
        if (c->copy) cudaStreamDestroy(c->copy);
        if (c->tail) cudaFree(c->tail);
        if (c->stage) cudaFreeHost(c->stage);
        if (c->peers != MPI_COMM_NULL) MPI_Comm_free(&c->peers);
        if (c->probe.diag != MPI_COMM_NULL) MPI_Comm_free(&c->probe.diag);
    }
    free(c->ev_rs);
    free(c->ev_d2h);
    free(c->ev_h2d);
    free(c->bk);
    free(c);
}

#else /* !NEBULA_CUDA: every entry point exists; init says why it cannot work. */

struct comm_nccl {
    char describe[64];     /* comm_nccl_describe */
};

status comm_nccl_init(comm_nccl **out, const runtime *rt, const comm_nccl_options *o)
{
    (void)o, (void)rt;
    *out = NULL;
    log_error0("comm_nccl: built without CUDA (nvcc was not found when building)");
    log_error0("HINT: install the CUDA toolkit with NCCL and rebuild (make USE_CUDA=1), or use the MPI backend");
    return STATUS_USAGE;
}

void comm_nccl_free(comm_nccl *c)
{
    free(c);
}

const char *comm_nccl_describe(const comm_nccl *c)
{
    (void)c;
    return "nccl (built without CUDA)";
}

status comm_nccl_allreduce_start(comm_nccl *c, float *dev_buf, size_t count, cuda_event ready)
{
    (void)c, (void)dev_buf, (void)count, (void)ready;
    log_error("comm_nccl: built without CUDA");
    return STATUS_USAGE;
}

status comm_nccl_progress(comm_nccl *c)
{
    (void)c;
    return STATUS_USAGE;
}

status comm_nccl_wait(comm_nccl *c, double timeout_s)
{
    (void)c, (void)timeout_s;
    log_error("comm_nccl: built without CUDA");
    return STATUS_USAGE;
}

const char *comm_nccl_late_ranks(const comm_nccl *c)
{
    (void)c;
    return "";
}

#endif
