/* comm_nccl_group — the nccl backend of a comm_group (comm.h): vector payloads of
 * DEVICE buffers on an NCCL communicator over the group's members, each op one NCCL
 * call (or one ncclGroupStart/End of sends and receives) on the group's stream, its
 * completion an event that testall polls under comm_group's deadline.
 *
 *   allreduce       ncclAllReduce, in place
 *   reduce-scatter  ncclReduceScatter; unequal counts through a zero-padded scratch of
 *                   n blocks of the largest count (the padding's results are dropped)
 *   allgatherv      ncclAllGather (in place when the blocks are equal and back to
 *                   back), else through the same padded scratch
 *   alltoallv       a group of ncclSend/ncclRecv, my own block a device copy
 *   sendrecv        a group of one ncclSend and one ncclRecv
 *
 * The one design decision: the group's calls go to NCCL in the order the ops start,
 * on ONE stream, with no reordering: comm_group requires every member to start the
 * same ops in the same order, and that is NCCL's own rule, so nothing is added to
 * keep ranks in step (unlike the world backend's pipeline, comm_nccl.c, whose host
 * steps interleave with NCCL's). The stream waits for nothing: the caller has
 * synchronised its producer before a start. Without CUDA: STATUS_USAGE. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

#ifdef NEBULA_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

typedef struct nccl_group {
    comm_group *g;          /* the owner: members, deadline, name */
    ncclComm_t nccl;        /* over the members; NULL once aborted or destroyed */
    cudaStream_t stream;    /* every op, in start order */
    cudaEvent_t *ev;        /* [nev] request handles: handle h is ev[h - 1] */
    bool *busy;             /* [nev] the event stands for an op in flight */
    int nev;
    char *scratch;          /* device: the padded blocks of unequal counts */
    size_t scratch_bytes;
} nccl_group;

static status ng_fail_nccl(nccl_group *n, ncclResult_t r, const char *what)
{
    log_error("nccl group %s: %s: %s (%s)", n->g->opt.name ? n->g->opt.name : "", what, ncclGetErrorString(r),
              n->nccl ? ncclGetLastError(n->nccl) : "");
    log_error("HINT: rerun with NCCL_DEBUG=WARN (or INFO) to see NCCL's own account");
    if (n->nccl) ncclCommAbort(n->nccl);
    n->nccl = NULL;
    return STATUS_PEER;
}

static status ng_fail_cuda(nccl_group *n, cudaError_t e, const char *what)
{
    log_error("nccl group %s: %s: CUDA error %d (%s)", n->g->opt.name ? n->g->opt.name : "", what, (int)e,
              cudaGetErrorString(e));
    if (n->nccl) ncclCommAbort(n->nccl);
    n->nccl = NULL;
    return STATUS_PEER;
}

#define NG_CU(n, call)                                                          \
    do { cudaError_t e_ = (call);                                               \
         if (e_ != cudaSuccess) return ng_fail_cuda((n), e_, #call); } while (0)

/* A non-blocking communicator's call may answer ncclInProgress: poll until it settled,
 * at most `wait_s` seconds (0: no limit). */
static status ng_settle(nccl_group *n, ncclResult_t r, const char *what, double wait_s)
{
    double end = wait_s > 0 ? MPI_Wtime() + wait_s : 0;
    while (r == ncclInProgress) {
        if (end > 0 && MPI_Wtime() > end) {
            log_error("nccl group %s: %s did not settle within %g s", n->g->opt.name ? n->g->opt.name : "", what,
                      wait_s);
            if (n->nccl) ncclCommAbort(n->nccl);
            n->nccl = NULL;
            return STATUS_TIMEOUT;
        }
        ncclResult_t q = ncclCommGetAsyncError(n->nccl, &r);
        if (q != ncclSuccess) r = q;
        sched_yield();
    }
    return r == ncclSuccess ? STATUS_OK : ng_fail_nccl(n, r, what);
}

#define NG_TRY(n, call, what) TRY(ng_settle((n), (call), (what), (n)->g->opt.timeout_s))

static ncclDataType_t ng_type(reduce_dtype dt)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: return ncclFloat;
    case REDUCE_DTYPE_F64: return ncclDouble;
    case REDUCE_DTYPE_I32: return ncclInt32;
    case REDUCE_DTYPE_I64: return ncclInt64;
    }
    return ncclFloat;
}

static ncclRedOp_t ng_op(reduce_op op)
{
    return op == REDUCE_OP_SUM ? ncclSum : op == REDUCE_OP_MAX ? ncclMax : ncclMin;
}

/* The op just queued: record a free event after it; its handle into *req. */
static status ng_record(nccl_group *n, uint64_t *req)
{
    int i = 0;
    while (i < n->nev && n->busy[i]) i++;
    if (i == n->nev) {
        cudaEvent_t *ev = realloc(n->ev, (size_t)(n->nev + 1) * sizeof *ev);
        if (ev) n->ev = ev;
        bool *busy = ev ? realloc(n->busy, (size_t)(n->nev + 1) * sizeof *busy) : NULL;
        if (!busy) return STATUS_NOMEM;
        n->busy = busy;
        NG_CU(n, cudaEventCreateWithFlags(&n->ev[n->nev], cudaEventDisableTiming));
        n->busy[n->nev++] = false;
    }
    NG_CU(n, cudaEventRecord(n->ev[i], n->stream));
    n->busy[i] = true;
    *req = (uint64_t)i + 1;
    return STATUS_OK;
}

static status ng_usable(const nccl_group *n)
{
    if (n->nccl) return STATUS_OK;
    log_error0("nccl group: the NCCL communicator was aborted after a failure; the job must end");
    return STATUS_PEER;
}

static status ng_scratch(nccl_group *n, size_t bytes)
{
    if (bytes <= n->scratch_bytes) return STATUS_OK;
    NG_CU(n, cudaStreamSynchronize(n->stream));  /* the old scratch may still be read by queued work */
    if (n->scratch) cudaFree(n->scratch);
    n->scratch = NULL;
    n->scratch_bytes = 0;
    NG_CU(n, cudaMalloc((void **)&n->scratch, bytes));
    n->scratch_bytes = bytes;
    return STATUS_OK;
}

/* The largest of counts[0..size); *equal when they are all the same. */
static size_t ng_max_count(const int *counts, int size, bool *equal)
{
    size_t mx = 0;
    *equal = true;
    for (int r = 0; r < size; r++) {
        if ((size_t)counts[r] > mx) mx = (size_t)counts[r];
        if (counts[r] != counts[0]) *equal = false;
    }
    return mx;
}

static status ng_iallreduce(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt, reduce_op op,
                            uint64_t *req)
{
    (void)group;
    nccl_group *n = be->impl;
    TRY(ng_usable(n));
    NG_TRY(n, ncclAllReduce(buf, buf, count, ng_type(dt), ng_op(op), n->nccl, n->stream), "ncclAllReduce");
    return ng_record(n, req);
}

static status ng_ireduce_scatter(comm_backend *be, int group, const void *send, void *recv, const int *counts,
                                 reduce_dtype dt, reduce_op op, uint64_t *req)
{
    (void)group;
    nccl_group *n = be->impl;
    TRY(ng_usable(n));
    int size = n->g->size, me = n->g->rank;
    size_t esz = reduce_dtype_size(dt);
    bool equal;
    size_t mx = ng_max_count(counts, size, &equal);
    if (equal) {
        NG_TRY(n, ncclReduceScatter(send, recv, mx, ng_type(dt), ng_op(op), n->nccl, n->stream), "ncclReduceScatter");
        return ng_record(n, req);
    }
    size_t blk = mx * esz;
    TRY(ng_scratch(n, (size_t)(size + 1) * blk));
    NG_CU(n, cudaMemsetAsync(n->scratch, 0, (size_t)size * blk, n->stream));
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        if (counts[r])
            NG_CU(n, cudaMemcpyAsync(n->scratch + (size_t)r * blk, (const char *)send + at * esz,
                                     (size_t)counts[r] * esz, cudaMemcpyDeviceToDevice, n->stream));
        at += (size_t)counts[r];
    }
    char *out = n->scratch + (size_t)size * blk;
    NG_TRY(n, ncclReduceScatter(n->scratch, out, mx, ng_type(dt), ng_op(op), n->nccl, n->stream),
           "ncclReduceScatter");
    if (counts[me])
        NG_CU(n, cudaMemcpyAsync(recv, out, (size_t)counts[me] * esz, cudaMemcpyDeviceToDevice, n->stream));
    return ng_record(n, req);
}

static status ng_iallgatherv(comm_backend *be, int group, const void *send, void *recv, const int *counts,
                             const int *displs, size_t esz, uint64_t *req)
{
    (void)group;
    nccl_group *n = be->impl;
    TRY(ng_usable(n));
    int size = n->g->size, me = n->g->rank;
    bool equal;
    size_t mx = ng_max_count(counts, size, &equal);
    for (int r = 0; r < size && equal; r++)
        if ((size_t)displs[r] != (size_t)r * mx) equal = false;
    char *mine = (char *)recv + (size_t)displs[me] * esz;
    if (equal) {
        NG_TRY(n, ncclAllGather(send ? send : mine, recv, mx * esz, ncclUint8, n->nccl, n->stream), "ncclAllGather");
        return ng_record(n, req);
    }
    size_t blk = mx * esz;
    TRY(ng_scratch(n, (size_t)size * blk));
    char *slot = n->scratch + (size_t)me * blk;
    if (counts[me])
        NG_CU(n, cudaMemcpyAsync(slot, send ? send : mine, (size_t)counts[me] * esz, cudaMemcpyDeviceToDevice,
                                 n->stream));
    NG_TRY(n, ncclAllGather(slot, n->scratch, blk, ncclUint8, n->nccl, n->stream), "ncclAllGather");
    for (int r = 0; r < size; r++)
        if (counts[r] && (r != me || send))
            NG_CU(n, cudaMemcpyAsync((char *)recv + (size_t)displs[r] * esz, n->scratch + (size_t)r * blk,
                                     (size_t)counts[r] * esz, cudaMemcpyDeviceToDevice, n->stream));
    return ng_record(n, req);
}

static status ng_ialltoallv(comm_backend *be, int group, const void *send, const int *scounts, const int *sdispls,
                            void *recv, const int *rcounts, const int *rdispls, size_t esz, uint64_t *req)
{
    (void)group;
    nccl_group *n = be->impl;
    TRY(ng_usable(n));
    int size = n->g->size, me = n->g->rank;
    if (scounts[me])
        NG_CU(n, cudaMemcpyAsync((char *)recv + (size_t)rdispls[me] * esz, (const char *)send + (size_t)sdispls[me] * esz,
                                 (size_t)scounts[me] * esz, cudaMemcpyDeviceToDevice, n->stream));
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < size && r == ncclSuccess; p++) {
        if (p == me) continue;
        if (scounts[p]) r = ncclSend((const char *)send + (size_t)sdispls[p] * esz, (size_t)scounts[p] * esz,
                                     ncclUint8, p, n->nccl, n->stream);
        if (r == ncclSuccess && rcounts[p])
            r = ncclRecv((char *)recv + (size_t)rdispls[p] * esz, (size_t)rcounts[p] * esz, ncclUint8, p, n->nccl,
                         n->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    NG_TRY(n, r != ncclSuccess ? r : e, "ncclSend/ncclRecv");
    return ng_record(n, req);
}

static status ng_isendrecv(comm_backend *be, int group, const void *send, size_t send_bytes, int dest,
                           int send_tag, void *recv, size_t recv_bytes, int source, int recv_tag, uint64_t *req)
{
    (void)group, (void)send_tag, (void)recv_tag;  /* NCCL matches a pair's messages in call order: the tag is the caller's order */
    nccl_group *n = be->impl;
    TRY(ng_usable(n));
    req[1] = 0;
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess && source >= 0 && recv_bytes > 0)
        r = ncclRecv(recv, recv_bytes, ncclUint8, source, n->nccl, n->stream);
    if (r == ncclSuccess && dest >= 0 && send_bytes > 0)
        r = ncclSend(send, send_bytes, ncclUint8, dest, n->nccl, n->stream);
    ncclResult_t e = ncclGroupEnd();
    NG_TRY(n, r != ncclSuccess ? r : e, "ncclSend/ncclRecv");
    return ng_record(n, &req[0]);
}

static status ng_testall(comm_backend *be, uint64_t *reqs, int nreq, bool *done)
{
    nccl_group *n = be->impl;
    *done = true;
    for (int i = 0; i < nreq; i++) {
        if (reqs[i] == 0) continue;
        int k = (int)reqs[i] - 1;
        cudaError_t e = cudaEventQuery(n->ev[k]);
        if (e == cudaErrorNotReady) {
            *done = false;
            continue;
        }
        if (e != cudaSuccess) return ng_fail_cuda(n, e, "cudaEventQuery");
        n->busy[k] = false;
        reqs[i] = 0;
    }
    if (*done || !n->nccl) return STATUS_OK;
    ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(n->nccl, &async);
    if (q != ncclSuccess) async = q;
    if (async != ncclSuccess && async != ncclInProgress) return ng_fail_nccl(n, async, "asynchronous NCCL error");
    return STATUS_OK;
}

static void ng_free(comm_backend *be)
{
    nccl_group *n = be->impl;
    if (!n) return;
    be->impl = NULL;
    bool idle = true;
    for (int i = 0; i < n->nev; i++) idle = idle && !n->busy[i];
    if (n->nccl && idle) {  /* nothing in flight: finalize (it may need the members), else abort */
        if (ng_settle(n, ncclCommFinalize(n->nccl), "ncclCommFinalize", COMM_NCCL_INIT_MIN_S) == STATUS_OK)
            ncclCommDestroy(n->nccl);
    } else if (n->nccl) {
        ncclCommAbort(n->nccl);
    }
    if (idle) {  /* queued work may still use them otherwise: left to the ending job */
        for (int i = 0; i < n->nev; i++) cudaEventDestroy(n->ev[i]);
        if (n->stream) cudaStreamDestroy(n->stream);
        if (n->scratch) cudaFree(n->scratch);
    }
    free(n->ev);
    free(n->busy);
    free(n);
}

static const comm_backend_ops nccl_group_ops = {
    .name = "nccl",
    .iallreduce = ng_iallreduce,
    .ireduce_scatter = ng_ireduce_scatter,
    .iallgatherv = ng_iallgatherv,
    .ialltoallv = ng_ialltoallv,
    .isendrecv = ng_isendrecv,
    .testall = ng_testall,
    .free = ng_free,
    .abandon = ng_free,  /* it finalizes only when nothing is in flight, else aborts */
};

/* Member 0 makes the unique id, the members receive it, then a non-blocking init
 * under the group's deadline (at least COMM_NCCL_INIT_MIN_S, as the world backend's). */
status comm_nccl_group_backend_init(comm_group *g)
{
    nccl_group *n = calloc(1, sizeof *n);
    if (!n) return STATUS_NOMEM;
    n->g = g;
    g->be = (comm_backend){ .ops = &nccl_group_ops, .impl = n };
    g->be.group_rank[COMM_GROUP_WORLD_COLL] = g->be.group_rank[COMM_GROUP_WORLD_P2P] = g->rank;
    g->be.group_size[COMM_GROUP_WORLD_COLL] = g->be.group_size[COMM_GROUP_WORLD_P2P] = g->size;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = g->rank != 0 || ncclGetUniqueId(&id) == ncclSuccess;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, g->members));
    if (!ok) {
        log_error0("nccl group: ncclGetUniqueId failed on the group's first member");
        ng_free(&g->be);
        return STATUS_PEER;
    }
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g->members));
    cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        status st = ng_fail_cuda(n, e, "cudaStreamCreateWithFlags");
        ng_free(&g->be);
        return st;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = g->opt.name ? g->opt.name : "nebula-group";
    double t = g->opt.timeout_s > COMM_NCCL_INIT_MIN_S || g->opt.timeout_s == 0 ? g->opt.timeout_s : COMM_NCCL_INIT_MIN_S;
    status st = ng_settle(n, ncclCommInitRankConfig(&n->nccl, g->size, id, g->rank, &cfg), "ncclCommInitRankConfig", t);
    if (st != STATUS_OK) {
        ng_free(&g->be);
        return st;
    }
    int v = 0;
    ncclGetVersion(&v);
    snprintf(g->be.describe, sizeof g->be.describe, "nccl %d.%d.%d (group of %d)", v / 10000, v % 10000 / 100,
             v % 100, g->size);
    return STATUS_OK;
}

#else /* !NEBULA_CUDA */

status comm_nccl_group_backend_init(comm_group *g)
{
    (void)g;
    log_error0("comm_group with the nccl backend: built without CUDA (nvcc was not found when building)");
    log_error0("HINT: install the CUDA toolkit with NCCL and rebuild (make USE_CUDA=1), or use the mpi backend");
    return STATUS_USAGE;
}

#endif
