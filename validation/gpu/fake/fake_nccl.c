/* fake_nccl — NCCL's communicator and the collectives comm_nccl.c and comm_nccl_group.c
 * use (ReduceScatter, AllGather, AllReduce, grouped Send/Recv), on the
 * host, for the NCCL logic test (see fake_cuda.c for what that test can and cannot
 * show).
 *
 * The one design decision: a collective is a "kernel" queued on its stream (see
 * fake_cuda.c) whose messages are MPI point-to-point between the communicator's
 * ranks, tagged with its sequence number on the communicator and carrying a header
 * (kind, sequence, count). So it is asynchronous like NCCL's — a rank whose peer
 * is absent stays blocked on its stream while the host goes on polling, which is
 * what the deadline path needs — and two ranks that enqueue collectives in a
 * different order or with different counts fail at once with both sides named,
 * instead of hanging or mixing buckets as real NCCL would.
 *
 * Non-blocking behaviour is modelled: init answers ncclInProgress and completes in
 * ncclCommGetAsyncError, every other enqueue answers ncclInProgress, and any NCCL
 * call on a communicator that has not settled (or after ncclCommFinalize) fails.
 * ncclCommAbort cancels what the communicator has in flight; its queued kernels
 * then end without data, as aborted NCCL kernels do. Reductions are float sums only
 * (ncclSum and ncclRedOpCreatePreMulSum with a host scalar), in rank order; AllGather
 * and Send/Recv move any type. Send/Recv between ncclGroupStart and ncclGroupEnd
 * become one kernel that posts them all, as NCCL fuses a group. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_impl.h"
#include "nccl.h"

#define FAKE_MAGIC 0x4e424641u     /* "AFBN": a unique id made by this fake */
#define FAKE_BOOT_TAG 27000        /* bootstrap messages on MPI_COMM_WORLD: FAKE_BOOT_TAG + 0..1999 */
#define FAKE_TAG_SPAN 30000        /* collective tags: sequence % span (MPI guarantees tags to 32767) */
#define FAKE_MAX_OPS 16            /* PreMulSum operators per communicator */
#define FAKE_OP_BASE 1000          /* ncclRedOp_t of operator i: FAKE_OP_BASE + i */

typedef struct fake_id {
    uint32_t magic;
    int root;                      /* world rank that made it: rank 0 of the communicator */
    int serial;                    /* its ncclGetUniqueId calls so far */
} fake_id;

enum { FAKE_RS = 1, FAKE_AG = 2, FAKE_AR = 3 };
static const char *kind_name(uint32_t k)
{
    return k == FAKE_RS ? "ReduceScatter" : k == FAKE_AG ? "AllGather" : k == FAKE_AR ? "AllReduce" : "?";
}
#define FAKE_P2P_TAG 30001         /* Send/Recv: MPI keeps one pair's messages in order on one tag */

typedef struct fake_head {
    uint32_t kind;                 /* FAKE_RS, FAKE_AG or FAKE_AR */
    uint32_t pad;
    uint64_t seq;                  /* collectives enqueued before it on the communicator */
    uint64_t count;                /* bytes per rank's part */
} fake_head;

typedef struct fake_coll {
    struct fake_coll *next;        /* the communicator's collectives in flight */
    ncclComm_t comm;               /* NULL once the communicator was aborted */
    uint32_t kind;
    uint64_t seq;
    size_t count;                  /* elements per part (AllReduce: of the whole buffer) */
    size_t esz;                    /* bytes per element (4 for the reductions: float) */
    const float *send;
    float *recv;
    float scale;                   /* 1, or the PreMulSum factor */
    bool posted;                   /* messages posted (at the head of the stream) */
    MPI_Request *req;              /* n-1 receives, then n-1 sends */
    char *rbuf, *sbuf;             /* messages: header and part */
} fake_coll;

enum { FAKE_COMM_BOOT, FAKE_COMM_READY, FAKE_COMM_FINALIZING, FAKE_COMM_FINALIZED };

struct ncclComm {
    int n, rank;                   /* ranks, this one */
    int state;                     /* FAKE_COMM_* */
    bool busy;                     /* the last call answered ncclInProgress, not yet settled */
    int root, tag;                 /* bootstrap: world rank of rank 0, tag on MPI_COMM_WORLD */
    int *world_of;                 /* world rank of each rank (from the bootstrap) */
    int *hello;                    /* rank 0: n-1 (rank, world rank) pairs; others: their own */
    MPI_Request *boot;             /* bootstrap requests in flight */
    int nboot;
    MPI_Comm mc;                   /* the ranks in communicator order */
    uint64_t next_seq;             /* collectives enqueued so far */
    unsigned enqueues;             /* every other one answers ncclInProgress */
    fake_coll *inflight;           /* enqueued, not complete */
    float scale[FAKE_MAX_OPS];     /* PreMulSum factors */
    bool op_live[FAKE_MAX_OPS];
};

/* ---- communicator ------------------------------------------------------------ */

ncclResult_t ncclGetVersion(int *version)
{
    *version = 0;  /* "nccl 0.0.0" in comm_nccl_describe: not a real NCCL */
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid)
{
    static int serial;
    fake_id id = { .magic = FAKE_MAGIC, .root = fake_rank(), .serial = serial++ };
    memset(uid, 0, sizeof *uid);
    memcpy(uid->internal, &id, sizeof id);
    return ncclSuccess;
}

static void comm_create(ncclComm_t c)
{
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, c->n, c->world_of, &g);
    MPI_Comm_create_group(MPI_COMM_WORLD, g, c->tag, &c->mc);  /* collective over the n ranks only */
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN);  /* a size mismatch is reported, not fatal in MPI */
    free(c->boot);
    c->boot = NULL;
    c->nboot = 0;
    c->state = FAKE_COMM_READY;
    fake_nccl_live++;
}

/* Rank 0 collects (rank, world rank) from the others and sends back the table. */
static void boot_progress(ncclComm_t c)
{
    int done = 0;
    MPI_Testall(c->nboot, c->boot, &done, MPI_STATUSES_IGNORE);
    if (!done) return;
    if (c->rank == 0) {
        for (int i = 0; i < c->n - 1; i++) {
            int r = c->hello[2 * i], w = c->hello[2 * i + 1];
            if (r <= 0 || r >= c->n || c->world_of[r] >= 0)
                fake_fail("ncclCommInitRankConfig: two ranks claim rank %d of a communicator of %d", r, c->n);
            c->world_of[r] = w;
        }
        for (int r = 1; r < c->n; r++) MPI_Send(c->world_of, c->n, MPI_INT, c->world_of[r], c->tag, MPI_COMM_WORLD);
    }
    comm_create(c);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId uid, int rank, ncclConfig_t *config)
{
    fake_id id;
    memcpy(&id, uid.internal, sizeof id);
    if (id.magic != FAKE_MAGIC) fake_fail("ncclCommInitRankConfig: the unique id was not made by ncclGetUniqueId");
    if (n < 1 || rank < 0 || rank >= n) return ncclInvalidArgument;
    int me = fake_rank();
    if ((rank == 0) != (me == id.root))
        fake_fail("ncclCommInitRankConfig: rank %d; the fake needs rank 0 to be the rank that made the id (world "
                  "rank %d)", rank, id.root);
    ncclComm_t c = calloc(1, sizeof *c);
    c->world_of = malloc((size_t)n * sizeof(int));
    c->hello = malloc((size_t)(2 * n) * sizeof(int));
    c->boot = calloc((size_t)n + 1, sizeof *c->boot);
    if (!c || !c->world_of || !c->hello || !c->boot) return ncclSystemError;
    c->n = n;
    c->rank = rank;
    c->root = id.root;
    c->tag = FAKE_BOOT_TAG + (id.root * 64 + id.serial) % 2000;
    c->mc = MPI_COMM_NULL;
    for (int r = 0; r < n; r++) c->world_of[r] = -1;
    c->world_of[rank] = me;
    if (rank == 0) {
        for (int i = 0; i < n - 1; i++)
            MPI_Irecv(&c->hello[2 * i], 2, MPI_INT, MPI_ANY_SOURCE, c->tag, MPI_COMM_WORLD, &c->boot[c->nboot++]);
    } else {
        c->hello[0] = rank;
        c->hello[1] = me;
        MPI_Isend(c->hello, 2, MPI_INT, id.root, c->tag, MPI_COMM_WORLD, &c->boot[c->nboot++]);
        MPI_Irecv(c->world_of, n, MPI_INT, id.root, c->tag, MPI_COMM_WORLD, &c->boot[c->nboot++]);
    }
    c->state = FAKE_COMM_BOOT;
    *out = c;
    if (config && config->blocking == 0) return ncclInProgress;  /* settles in ncclCommGetAsyncError */
    while (c->state == FAKE_COMM_BOOT) boot_progress(c);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    if (!c) fake_fail("ncclCommGetAsyncError on a NULL communicator (aborted or destroyed?)");
    if (c->state == FAKE_COMM_BOOT) boot_progress(c);
    fake_progress();
    if (c->state == FAKE_COMM_BOOT) *err = ncclInProgress;
    else if (c->state == FAKE_COMM_FINALIZING && c->inflight) *err = ncclInProgress;
    else {
        if (c->state == FAKE_COMM_FINALIZING) c->state = FAKE_COMM_FINALIZED;
        c->busy = false;
        *err = ncclSuccess;
    }
    return ncclSuccess;
}

/* Every call but the polls needs a settled, live communicator. */
static void comm_usable(ncclComm_t c, const char *what)
{
    if (!c) fake_fail("%s on a NULL communicator (aborted or destroyed?)", what);
    if (c->state == FAKE_COMM_BOOT)
        fake_fail("%s while ncclCommInitRankConfig is in progress: poll ncclCommGetAsyncError until ncclSuccess "
                  "first", what);
    if (c->busy)
        fake_fail("%s while the previous call's ncclInProgress has not settled (ncclCommGetAsyncError)", what);
    if (c->state != FAKE_COMM_READY) fake_fail("%s after ncclCommFinalize", what);
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    comm_usable(c, "ncclCommFinalize");
    c->state = FAKE_COMM_FINALIZING;
    return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c) fake_fail("ncclCommDestroy(NULL)");
    if (c->state != FAKE_COMM_FINALIZED)
        fake_fail("ncclCommDestroy before ncclCommFinalize completed (state %d, %s collectives in flight)", c->state,
                  c->inflight ? "with" : "no");
    MPI_Comm_free(&c->mc);
    free(c->world_of);
    free(c->hello);
    free(c);
    fake_nccl_live--;
    return ncclSuccess;
}

/* Cancels the receives, lets the sends go (their buffers are leaked: MPI may still
 * read them), and ends the queued kernels without data. The MPI communicator is
 * leaked too: a late peer's messages must not reach a reused context. */
static void requests_drop(MPI_Request *req, int n)
{
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
        if (flag) continue;
        MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c) return ncclSuccess;
    if (c->boot) requests_drop(c->boot, c->nboot);
    for (fake_coll *k = c->inflight; k; k = k->next) {
        if (k->posted) requests_drop(k->req, 2 * (c->n - 1));
        k->comm = NULL;
    }
    if (c->state != FAKE_COMM_BOOT) fake_nccl_live--;
    fake_nccl_aborts++;
    free(c->world_of);
    free(c);  /* c->hello too may still be read by a bootstrap send: leaked */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    static const char *names[] = { "no error", "unhandled cuda error", "unhandled system error", "internal error",
                                   "invalid argument", "invalid usage", "remote process exited or there was a "
                                   "network error", "NCCL operation in progress" };
    return r >= 0 && r < ncclNumResults ? names[r] : "unknown result code";
}

const char *ncclGetLastError(ncclComm_t c)
{
    (void)c;
    return "(fake NCCL keeps no error text)";
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t type,
                                      ncclScalarResidence_t residence, ncclComm_t c)
{
    comm_usable(c, "ncclRedOpCreatePreMulSum");
    if (type != ncclFloat) fake_fail("ncclRedOpCreatePreMulSum: type %d; the fake models float only", (int)type);
    if (residence == ncclScalarDevice) fake_check_device(scalar, sizeof(float), "ncclRedOpCreatePreMulSum scalar");
    int i = 0;
    while (i < FAKE_MAX_OPS && c->op_live[i]) i++;
    if (i == FAKE_MAX_OPS) return ncclInternalError;
    memcpy(&c->scale[i], scalar, sizeof(float));
    c->op_live[i] = true;
    *op = (ncclRedOp_t)(FAKE_OP_BASE + i);
    return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c)
{
    comm_usable(c, "ncclRedOpDestroy");
    int i = (int)op - FAKE_OP_BASE;
    if (i < 0 || i >= FAKE_MAX_OPS || !c->op_live[i]) fake_fail("ncclRedOpDestroy of operator %d not live", (int)op);
    c->op_live[i] = false;
    return ncclSuccess;
}

/* ---- collectives --------------------------------------------------------------- */

static size_t msg_bytes(const fake_coll *k) { return sizeof(fake_head) + k->count * k->esz; }

static void coll_post(fake_coll *k)
{
    ncclComm_t c = k->comm;
    int n = c->n, peers = n - 1;
    size_t m = msg_bytes(k), part = k->count * k->esz;
    fake_check_device(k->send, (k->kind == FAKE_RS ? (size_t)n : 1) * part, "queued NCCL send buffer");
    fake_check_device(k->recv, (k->kind == FAKE_AG ? (size_t)n : 1) * part, "queued NCCL receive buffer");
    k->req = malloc((size_t)(2 * peers + 1) * sizeof *k->req);
    k->rbuf = malloc((size_t)peers * m + 1);
    k->sbuf = malloc((k->kind == FAKE_RS ? (size_t)peers : 1) * m + 1);
    if (!k->req || !k->rbuf || !k->sbuf) fake_fail("out of memory for a collective's messages");
    fake_head h = { .kind = k->kind, .seq = k->seq, .count = part };
    int tag = (int)(k->seq % FAKE_TAG_SPAN), j = 0;
    for (int p = 0; p < n; p++)
        if (p != c->rank) MPI_Irecv(k->rbuf + (size_t)j * m, (int)m, MPI_BYTE, p, tag, c->mc, &k->req[j]), j++;
    for (int p = 0; p < n; p++) {
        if (p == c->rank) continue;
        char *msg = k->sbuf + (k->kind == FAKE_RS ? (size_t)(j - peers) * m : 0);
        if (k->kind == FAKE_RS || j == peers) {  /* RS: part p, pre-multiplied; AG, AR: ours, once */
            memcpy(msg, &h, sizeof h);
            if (k->kind == FAKE_AG) {
                memcpy(msg + sizeof h, k->send, part);
            } else {
                float *dst = (float *)(msg + sizeof h);
                const float *src = k->send + (k->kind == FAKE_RS ? (size_t)p * k->count : 0);
                for (size_t i = 0; i < k->count; i++) dst[i] = k->scale * src[i];
            }
        }
        MPI_Isend(msg, (int)m, MPI_BYTE, p, tag, c->mc, &k->req[j]);
        j++;
    }
    k->posted = true;
}

/* Every peer's message is in: check the headers, then reduce or gather. */
static void coll_finish(fake_coll *k, MPI_Status *st)
{
    ncclComm_t c = k->comm;
    size_t m = msg_bytes(k), part = k->count * k->esz;
    int j = 0;
    for (int p = 0; p < c->n; p++) {
        if (p == c->rank) continue;
        fake_head h;
        memcpy(&h, k->rbuf + (size_t)j * m, sizeof h);
        int got = 0;
        MPI_Get_count(&st[j], MPI_BYTE, &got);
        if ((size_t)got != m || h.kind != k->kind || h.seq != k->seq || h.count != part)
            fake_fail("NCCL collective #%llu on a communicator of %d: this rank (%d) called %s of %zu bytes per "
                      "rank, rank %d sent %s #%llu of %llu (%d bytes): the ranks did not enqueue the same "
                      "collectives in the same order", (unsigned long long)k->seq, c->n, c->rank,
                      kind_name(k->kind), part, p, kind_name(h.kind), (unsigned long long)h.seq,
                      (unsigned long long)h.count, got);
        j++;
    }
    if (k->kind != FAKE_AG) {  /* sum in rank order; the own part may be recv itself (in place) */
        const float *own = k->send + (k->kind == FAKE_RS ? (size_t)c->rank * k->count : 0);
        for (size_t i = 0; i < k->count; i++) {
            float acc = 0.0f;
            for (int p = 0, q = 0; p < c->n; p++) {
                if (p == c->rank) acc += k->scale * own[i];
                else acc += ((const float *)(k->rbuf + (size_t)q++ * m + sizeof(fake_head)))[i];
            }
            k->recv[i] = acc;
        }
    } else {
        for (int p = 0, q = 0; p < c->n; p++) {
            char *dst = (char *)k->recv + (size_t)p * part;
            if (p == c->rank) memmove(dst, k->send, part);
            else memcpy(dst, k->rbuf + (size_t)q++ * m + sizeof(fake_head), part);
        }
    }
}

static void coll_unlink(ncclComm_t c, fake_coll *k)
{
    for (fake_coll **p = &c->inflight; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            return;
        }
}

/* The kernel: posts at the head of its stream, completes when every message is in. */
static bool coll_step(void *arg)
{
    fake_coll *k = arg;
    if (!k->comm) {  /* aborted: the kernel exits; buffers MPI may still use are leaked */
        free(k);
        return true;
    }
    ncclComm_t c = k->comm;
    int nreq = 2 * (c->n - 1);
    if (!k->posted) coll_post(k);
    MPI_Status *st = malloc((size_t)(nreq + 1) * sizeof *st);
    int done = 0, rc = MPI_Testall(nreq, k->req, &done, st);
    if (rc != MPI_SUCCESS)
        fake_fail("NCCL collective #%llu (%s of %zu floats per rank) on a communicator of %d: a peer's message "
                  "did not fit (MPI error %d): the ranks did not enqueue the same collectives in the same order",
                  (unsigned long long)k->seq, kind_name(k->kind), k->count, c->n, rc);
    if (done) {
        coll_finish(k, st);
        coll_unlink(c, k);
        free(k->req);
        free(k->rbuf);
        free(k->sbuf);
        free(k);
    }
    free(st);
    return done;
}

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

static ncclResult_t coll_enqueue(uint32_t kind, const void *send, void *recv, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    const char *what = kind == FAKE_RS ? "ncclReduceScatter" : kind == FAKE_AG ? "ncclAllGather" : "ncclAllReduce";
    comm_usable(c, what);
    if (kind != FAKE_AG && type != ncclFloat) fake_fail("%s: type %d; the fake reduces float only", what, (int)type);
    size_t esz = type_size(type);
    if (count * esz + sizeof(fake_head) > (size_t)INT32_MAX) fake_fail("%s: count too large", what);
    float scale = 1.0f;
    int i = (int)op - FAKE_OP_BASE;
    if (op != ncclSum) {
        if (i < 0 || i >= FAKE_MAX_OPS || !c->op_live[i]) fake_fail("%s: operator %d not modelled", what, (int)op);
        scale = c->scale[i];
    }
    size_t part = count * esz, all = (size_t)c->n * part;
    fake_check_device(send, kind == FAKE_RS ? all : part, what);
    fake_check_device(recv, kind == FAKE_AG ? all : part, what);
    fake_coll *k = calloc(1, sizeof *k);
    if (!k) return ncclSystemError;
    *k = (fake_coll){ .next = c->inflight, .comm = c, .kind = kind, .seq = c->next_seq++, .count = count,
                      .esz = esz, .send = send, .recv = recv, .scale = scale };
    c->inflight = k;
    fake_enqueue_step(stream, coll_step, k, send, kind == FAKE_RS ? all : part, recv, kind == FAKE_AG ? all : part);
    if (++c->enqueues % 2) return ncclSuccess;
    c->busy = true;  /* "enqueued in the background": settle before the next call */
    return ncclInProgress;
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return coll_enqueue(FAKE_RS, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return coll_enqueue(FAKE_AG, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return coll_enqueue(FAKE_AR, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

/* ---- point to point ------------------------------------------------------------ */

typedef struct fake_xfer {
    bool send;                     /* a send, else a receive */
    void *buf;                     /* device memory */
    size_t bytes;
    int peer;                      /* rank in the communicator */
} fake_xfer;

/* A group's transfers: one kernel that posts them all and completes with the last. */
typedef struct fake_p2p {
    ncclComm_t comm;
    cudaStream_t stream;
    int n, cap;
    fake_xfer *x;
    MPI_Request *req;              /* NULL until posted */
} fake_p2p;

static int group_depth;            /* ncclGroupStart nesting */
static fake_p2p *group_open;       /* transfers collected since the outermost ncclGroupStart */

static bool p2p_step(void *arg)
{
    fake_p2p *g = arg;
    if (!g->req) {
        g->req = malloc((size_t)(g->n + 1) * sizeof *g->req);
        if (!g->req) fake_fail("out of memory for a group's requests");
        for (int i = 0; i < g->n; i++) {
            fake_xfer *x = &g->x[i];
            fake_check_device(x->buf, x->bytes, x->send ? "queued ncclSend buffer" : "queued ncclRecv buffer");
            if (x->send) MPI_Isend(x->buf, (int)x->bytes, MPI_BYTE, x->peer, FAKE_P2P_TAG, g->comm->mc, &g->req[i]);
            else MPI_Irecv(x->buf, (int)x->bytes, MPI_BYTE, x->peer, FAKE_P2P_TAG, g->comm->mc, &g->req[i]);
        }
    }
    MPI_Status *st = malloc((size_t)(g->n + 1) * sizeof *st);
    int done = 0;
    if (MPI_Testall(g->n, g->req, &done, st) != MPI_SUCCESS)
        fake_fail("ncclRecv: a peer's message did not fit: the ranks' Send/Recv sizes differ");
    for (int i = 0; done && i < g->n; i++) {
        int got = 0;
        if (g->x[i].send) continue;
        MPI_Get_count(&st[i], MPI_BYTE, &got);
        if ((size_t)got != g->x[i].bytes)
            fake_fail("ncclRecv of %zu bytes from rank %d got %d: the ranks' Send/Recv sizes differ", g->x[i].bytes,
                      g->x[i].peer, got);
    }
    free(st);
    if (done) free(g->req), free(g->x), free(g);
    return done;
}

static fake_p2p *p2p_new(ncclComm_t c, cudaStream_t s)
{
    fake_p2p *g = calloc(1, sizeof *g);
    if (!g) fake_fail("out of memory for a Send/Recv group");
    g->comm = c;
    g->stream = s;
    return g;
}

static void p2p_launch(fake_p2p *g)
{
    if (g->n == 0) {
        free(g->x), free(g);
        return;
    }
    fake_enqueue_step(g->stream, p2p_step, g, NULL, 0, NULL, 0);
}

static ncclResult_t p2p_add(bool send, void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                            cudaStream_t s)
{
    const char *what = send ? "ncclSend" : "ncclRecv";
    comm_usable(c, what);
    if (peer < 0 || peer >= c->n || peer == c->rank) fake_fail("%s to rank %d of %d", what, peer, c->n);
    size_t bytes = count * type_size(type);
    if (bytes > (size_t)INT32_MAX) fake_fail("%s: count too large", what);
    fake_check_device(buf, bytes, what);
    fake_p2p *g = group_depth > 0 ? group_open : p2p_new(c, s);
    if (!g) g = group_open = p2p_new(c, s);
    if (g->comm != c || g->stream != s) fake_fail("%s: one group's transfers on two communicators or streams", what);
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->x = realloc(g->x, (size_t)g->cap * sizeof *g->x);
        if (!g->x) fake_fail("out of memory for a Send/Recv group");
    }
    g->x[g->n++] = (fake_xfer){ .send = send, .buf = buf, .bytes = bytes, .peer = peer };
    if (group_depth == 0) p2p_launch(g);
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return p2p_add(true, (void *)sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return p2p_add(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) fake_fail("ncclGroupEnd without ncclGroupStart");
    if (--group_depth == 0 && group_open) {
        p2p_launch(group_open);
        group_open = NULL;
    }
    return ncclSuccess;
}
