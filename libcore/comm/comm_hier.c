/* comm_hier — hierarchical allreduce inside the node, then between nodes.
 *
 * Per pipeline chunk of at most `slot` bytes (the same on every node, so parts line
 * up across nodes):
 *   reduce    the chunk is cut into L parts (the largest node's size, at most
 *             COMM_MAX_LOCAL); local rank lr owns the parts j with
 *             floor(j * local_size / L) == lr (none when lr is past L) and sums
 *             them over all local ranks, in local-rank order;
 *   inter     each owned part is allreduced with the owners of the same part on
 *             the other nodes (the flat engine on group CHUNK0 + j), barrier;
 *   gather    every local rank collects the whole result chunk.
 * Only 1/local_size of the data crosses the node boundary per rank.
 *
 * The node exchange runs one of two ways; whether cma is permitted is decided once
 * per node at init, and messages below CMA_MIN_BYTES take copy anyway:
 *   cma   (Linux Cross Memory Attach, where the kernel permits it) every rank
 *         publishes its buffer's address in the node segment; the owner of a part
 *         reads the peers' copies of it in place with process_vm_readv, piece by
 *         piece into an L2-sized temporary, and reduces into its own buffer; the
 *         gather reads the peers' reduced parts straight into the own buffer.
 *         Each byte is copied once by the kernel and read once by the reduction:
 *         about half the memory traffic of the copy path.
 *   copy  (the fallback) every rank copies its chunk into its slot of a node-shared
 *         segment (MPI_Win_allocate_shared), the owner sums the slots into a shared
 *         result buffer, and every rank copies the result out.
 * Both sum in the same order, so they give the same bits. A single-node message up
 * to HIER_SMALL_BYTES takes a one-barrier variant of copy (see there).
 *
 * Races the barriers rule out. copy: one result buffer serves every chunk; a rank
 * can only reduce chunk k+1 after every local rank passed chunk k+1's first barrier,
 * which each reaches only after copying chunk k out. cma: a rank writes into its own
 * buffer only its own parts (reduce) and, after chunk k's barrier, the peers' parts
 * of chunk k (gather), while the peers read its raw data of their parts of the chunk
 * they reduce: chunk k's barrier orders the two, and chunk k+1's raw data is not
 * touched before chunk k+1's barrier. A barrier at the start (the addresses are
 * published) and one at the end (no peer reads my buffer any more when the op
 * completes and the caller may reuse it) close the op.
 * Hier ops run one at a time per rank (ordering class HIER); the node barrier is a
 * counter that only grows, so a rank racing ahead cannot confuse a slower one. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_impl.h"
#include "cpu/reduce.h"

enum { HIER_ENTER = 0, HIER_COPYIN, HIER_REDUCE, HIER_INTER, HIER_COPYOUT, HIER_LEAVE, HIER_SMALL, HIER_DONE };

/* The node segment: the barrier counter in its own cache line, then one line per
 * local rank (its pid and, for cma, the buffer of the op in progress), rounded up to
 * a page; then, on nodes of two ranks or more, the small area (2 x local_size cells
 * of HIER_SMALL_BYTES), local_size input slots and the result slot. */
typedef struct shm_peer {
    int64_t pid;           /* the rank's process id (cma reads its memory) */
    uint64_t addr;         /* cma: address of the buffer of the hier op in progress */
    char pad[48];          /* one cache line per rank: publishing does not false-share */
} shm_peer;
_Static_assert(sizeof(shm_peer) == 64, "one cache line per local rank");

/* cma: the reduction reads a peer's piece into a temporary of this size, which stays
 * in L2 (1 MiB and more per core on current x86) for the reduce that follows. Each
 * process_vm_readv costs several microseconds besides the copy (the peer's mm,
 * the access check, pinning its pages): measured on Zen 4, read-and-reduce runs at
 * 3.8 GB/s in 256 KiB pieces and 5.0 GB/s in 1 MiB pieces. */
#define CMA_PIECE_BYTES (1u << 20)
/* Below this, copy: its copies stay in L2, while cma pays two more barriers per op and
 * a system call of several microseconds per peer and piece. The value is a judgement,
 * not a measured crossover (the shared 2-core test machine was too noisy to place it). */
#define CMA_MIN_BYTES (256u << 10)

/* A single-node message up to this size takes one barrier instead of two: every rank
 * copies it into its cell of the small area, and after the barrier every rank sums
 * all cells itself, in local-rank order (so all hold the owners' bits). Cells
 * alternate between two sets by op parity: a rank can only write the set of op k+2
 * after op k+1's barrier, which every peer reaches only after reading op k's. At
 * latency sizes the second barrier (a cache line crossing cores twice) is half the
 * time. Nothing else uses the small area, so other ops cannot clobber it. */
#define HIER_SMALL_BYTES (8u << 10)
#define CMA_PROBE_MAGIC 0x4e6562756c61434dull  /* "NebulaCM" */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the node barrier needs lock-free 64-bit atomics");

int comm_hier_nparts(const runtime *rt)
{
    return rt->max_local_size < COMM_MAX_LOCAL ? rt->max_local_size : COMM_MAX_LOCAL;
}

static size_t shm_header_bytes(const runtime *rt)
{
    return (64 + (size_t)rt->local_size * sizeof(shm_peer) + 4095) / 4096 * 4096;
}

static _Atomic unsigned long long *shm_counter(const comm *c)
{
    return (_Atomic unsigned long long *)(void *)c->shm_base;
}

static shm_peer *shm_peer_of(const comm *c, int lr)
{
    return (shm_peer *)(void *)(c->shm_base + 64) + lr;
}

static char *shm_small(const comm *c, uint64_t parity, int lr)
{
    return c->shm_base + shm_header_bytes(c->rt) + ((size_t)parity * (size_t)c->rt->local_size + (size_t)lr) * HIER_SMALL_BYTES;
}

static char *shm_slot(const comm *c, int lr)
{
    return shm_small(c, 2, 0) + (size_t)lr * c->shm_slot_bytes;
}

static char *shm_result(const comm *c)
{
    return shm_slot(c, c->rt->local_size);  /* after the local_size input slots */
}

/* Reads `bytes` at `addr` in local rank lr's process into dst. After the probe at
 * init succeeded, a failure means the peer's published buffer is gone: the peer died
 * or freed the buffer of an op in flight. */
static status cma_read(const comm *c, int lr, void *dst, uint64_t addr, size_t bytes)
{
    const shm_peer *p = shm_peer_of(c, lr);
    char *d = dst;
    while (bytes > 0) {
        struct iovec l = { d, bytes }, r = { (void *)(uintptr_t)addr, bytes };
        ssize_t n = process_vm_readv((pid_t)p->pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            log_error("comm hier: reading %zu bytes of local rank %d (pid %lld) failed: %s", bytes, lr,
                      (long long)p->pid, n < 0 ? log_errno_str() : "nothing read");
            return STATUS_PEER;
        }
        d += n;
        addr += (uint64_t)n;
        bytes -= (size_t)n;
    }
    return STATUS_OK;
}

/* Whether every local rank can read every other's memory with process_vm_readv.
 * CMA needs processes of one user and ptrace permission (Yama's ptrace_scope 1
 * refuses non-descendants without CAP_SYS_PTRACE; a container's seccomp profile may
 * refuse the call: EPERM or ENOSYS). Probed on a word each rank publishes; the node
 * agrees (MAX of the errnos), so all of its ranks read in place or none does. */
static int cma_probe(const runtime *rt)
{
    volatile uint64_t word = CMA_PROBE_MAGIC ^ (uint64_t)getpid();
    int64_t me[2] = { (int64_t)getpid(), (int64_t)(uintptr_t)&word }, *all = malloc(16 * (size_t)rt->local_size);
    CHECK(all, "out of memory for the CMA probe");
    MPI_CHECK(MPI_Allgather(me, 2, MPI_INT64_T, all, 2, MPI_INT64_T, rt->node));
    int err = 0;
    for (int lr = 0; lr < rt->local_size && !err; lr++) {
        if (lr == rt->local_rank) continue;
        uint64_t got = 0;
        struct iovec l = { &got, sizeof got }, r = { (void *)(uintptr_t)all[2 * lr + 1], sizeof got };
        ssize_t n = process_vm_readv((pid_t)all[2 * lr], &l, 1, &r, 1, 0);
        if (n != (ssize_t)sizeof got) err = n < 0 ? errno : EIO;
        else if (got != (CMA_PROBE_MAGIC ^ (uint64_t)all[2 * lr])) err = EFAULT;
    }
    /* Every peer has read my word once this returns: `word` may then go. */
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_INT, MPI_MAX, rt->node));
    free(all);
    return err;
}

/* Decides copy or cma for this node and says why when it is copy. */
static void choose_exchange(comm *c)
{
    const runtime *rt = c->rt;
    const char *env = getenv("NEBULA_COMM_CMA");
    bool off = c->opt.hier_copy || (env && !strcmp(env, "0"));
    c->cma = false;
    if (rt->local_size == 1) return;  /* a node of one works in place */
    if (off) {
        log_info0("comm: hier copies through node shared memory (%s)",
                  c->opt.hier_copy ? "comm_options.hier_copy" : "NEBULA_COMM_CMA=0");
        return;
    }
    int err = cma_probe(rt);
    c->cma = err == 0;
    if (err && rt->local_rank == 0)
        log_warn("comm: hier on node %d copies through node shared memory: process_vm_readv between its ranks "
                 "fails (%s)", rt->node_id, strerror(err));
    if (err && rt->local_rank == 0)
        log_warn("HINT: single-copy reads need ranks of one user and ptrace permission "
                 "(kernel.yama.ptrace_scope = 0, or a container that allows process_vm_readv)");
}

status comm_hier_init(comm *c)
{
    const runtime *rt = c->rt;
    /* The slot size must be equal on every node (parts must line up across nodes),
     * so it derives from the largest node: 32 MiB per node, 256 KiB to 4 MiB a slot.
     * cma pipelines in chunks of the same size, so both exchanges split alike. */
    size_t slot = (32u << 20) / (size_t)rt->max_local_size;
    slot = slot < (256u << 10) ? (256u << 10) : slot > COMM_SHM_SLOT_BYTES ? COMM_SHM_SLOT_BYTES : slot;
    c->shm_slot_bytes = slot / 64 * 64;
    choose_exchange(c);
    /* A node of one works in place: no slots. cma nodes keep them for small messages. */
    bool slots = rt->local_size > 1;
    size_t cells = 2 * (size_t)rt->local_size * HIER_SMALL_BYTES;
    size_t total = shm_header_bytes(rt) + (slots ? cells + (size_t)(rt->local_size + 1) * c->shm_slot_bytes : 0);
    char *mine;
    MPI_CHECK(MPI_Win_allocate_shared(rt->local_rank == 0 ? (MPI_Aint)total : 0, 1, MPI_INFO_NULL, rt->node,
                                      &mine, &c->shm_win));
    MPI_Aint size;
    int disp;
    MPI_CHECK(MPI_Win_shared_query(c->shm_win, 0, &size, &disp, &c->shm_base));
    if (rt->local_rank == 0) {
        memset(c->shm_base, 0, total);  /* first touch now, not in the first timed call */
        atomic_init(shm_counter(c), 0);
    }
    MPI_CHECK(MPI_Barrier(rt->node));
    shm_peer_of(c, rt->local_rank)->pid = (int64_t)getpid();
    MPI_CHECK(MPI_Barrier(rt->node));
    return STATUS_OK;
}

const char *comm_hier_exchange(const comm *c)
{
    if (comm_on_device(c)) return "nccl";
    return c->rt->local_size == 1 ? "none" : c->cma ? "cma" : "copy";
}

void comm_hier_free(comm *c)
{
    if (c->shm_win != MPI_WIN_NULL) MPI_Win_free(&c->shm_win);
}

/* Elements per pipeline chunk. Chunks bound the node segment's slots (copy) and the
 * inter-node step's scratch, and must be equal on every node so that parts line up;
 * a single-node job reading in place (cma) needs neither, and runs the whole message
 * as one chunk: each chunk is a node barrier, and a barrier waits for the slowest
 * rank, so fewer of them lose less to a rank that was descheduled. */
static size_t chunk_cap(const comm *c, bool cma, size_t esz)
{
    if (cma && c->rt->nnodes == 1) return SIZE_MAX / esz;
    return c->shm_slot_bytes / esz;
}

/* Whether an op of `bytes` reads in place (CMA_MIN_BYTES says why not below it). */
static bool op_uses_cma(const comm *c, size_t bytes)
{
    return c->cma && c->rt->local_size > 1 && bytes >= CMA_MIN_BYTES;
}

/* The flat engine's scratch for one part of a chunk (several nodes); cma's two
 * reduction temporaries use the same scratch before the inter-node step starts. */
size_t comm_hier_scratch_bytes(const comm *c, size_t count, reduce_dtype dt)
{
    size_t esz = reduce_dtype_size(dt), part = 0;
    bool cma = op_uses_cma(c, count * esz);
    size_t cap = chunk_cap(c, cma, esz);
    if (c->rt->nnodes > 1) part = ((count < cap ? count : cap) / (size_t)comm_hier_nparts(c->rt) + 1) * esz;
    return cma && part < 2 * CMA_PIECE_BYTES ? 2 * CMA_PIECE_BYTES : part;
}

static void barrier_arrive(comm *c, comm_op *o)
{
    o->barrier_gen = ++c->shm_gen;
    o->spin_since = 0;
    atomic_fetch_add_explicit(shm_counter(c), 1, memory_order_acq_rel);
}

/* Spin, then yield: a barrier usually completes within microseconds, but with more
 * ranks than cores the rank we wait for may need this very core, so after
 * SPIN_SECONDS of polling the wait gives the core away on every poll (as OpenMPI
 * does when oversubscribed). */
#define SPIN_SECONDS 20e-6

static bool barrier_passed(const comm *c, comm_op *o)
{
    bool passed = atomic_load_explicit(shm_counter(c), memory_order_acquire) >=
                  o->barrier_gen * (uint64_t)c->rt->local_size;
    if (passed || !c->rt->oversubscribed) return passed;
    double now = MPI_Wtime();
    if (o->spin_since == 0) o->spin_since = now;
    else if (now - o->spin_since > SPIN_SECONDS) sched_yield();
    return false;
}

/* Local rank lr's parts [j0, j1) of a chunk of mk elements, and their element range [*a, *b). */
static void owned_parts(const comm *c, int lr, size_t mk, int *j0, int *j1, size_t *a, size_t *b)
{
    int L = comm_hier_nparts(c->rt), Ls = c->rt->local_size;
    size_t off, len;
    *j0 = (lr * L + Ls - 1) / Ls;
    *j1 = ((lr + 1) * L + Ls - 1) / Ls;
    comm_split_even(mk, L, *j0, &off, &len);
    *a = off;
    comm_split_even(mk, L, *j1 - 1, &off, &len);
    *b = *j1 > *j0 ? off + len : *a;
}

/* Where the chunk's result lives: in shared memory (copy), or in place. */
static char *chunk_result(const comm *c, const comm_op *o)
{
    if (c->rt->local_size == 1 || op_uses_cma(c, o->count * reduce_dtype_size(o->dtype))) return (char *)o->buf + o->chunk_off * reduce_dtype_size(o->dtype);
    return shm_result(c);
}

/* copy: sums the slots' elements [a, b) of the chunk, in local-rank order. */
static void copy_reduce(comm *c, comm_op *o, size_t a, size_t b)
{
    size_t esz = reduce_dtype_size(o->dtype);
    char *res = chunk_result(c, o);
    memcpy(res + a * esz, shm_slot(c, 0) + a * esz, (b - a) * esz);
    for (int lr = 1; lr < c->rt->local_size; lr++)
        reduce_apply(res + a * esz, shm_slot(c, lr) + a * esz, b - a, o->dtype, o->op);
}

/* cma: sums elements [a, b) of the chunk over the local ranks into my buffer, piece
 * by piece. The order is the copy path's, ((x0 op x1) op x2) ...: the ranks before
 * me fold into temporary t0, my own values join as the right operand
 * (reduce_apply_rev), the ranks after me fold into my buffer. */
static status cma_reduce(comm *c, comm_op *o, size_t a, size_t b)
{
    int me = c->rt->local_rank, Ls = c->rt->local_size;
    size_t esz = reduce_dtype_size(o->dtype), piece = CMA_PIECE_BYTES / esz;
    char *t0 = o->scratch, *t1 = t0 + CMA_PIECE_BYTES;
    for (size_t p = a; p < b; p += piece) {
        size_t n = b - p < piece ? b - p : piece, off = (o->chunk_off + p) * esz;
        char *own = (char *)o->buf + off;
        if (me > 0) {
            TRY(cma_read(c, 0, t0, shm_peer_of(c, 0)->addr + off, n * esz));
            for (int lr = 1; lr < me; lr++) {
                TRY(cma_read(c, lr, t1, shm_peer_of(c, lr)->addr + off, n * esz));
                reduce_apply(t0, t1, n, o->dtype, o->op);
            }
            reduce_apply_rev(own, t0, n, o->dtype, o->op);
        }
        for (int lr = me + 1; lr < Ls; lr++) {
            TRY(cma_read(c, lr, t1, shm_peer_of(c, lr)->addr + off, n * esz));
            reduce_apply(own, t1, n, o->dtype, o->op);
        }
    }
    return STATUS_OK;
}

/* cma: reads every peer's reduced parts of the chunk straight into my buffer. */
static status cma_gather(comm *c, comm_op *o)
{
    size_t esz = reduce_dtype_size(o->dtype), a, b;
    int j0, j1;
    for (int lr = 0; lr < c->rt->local_size; lr++) {
        if (lr == c->rt->local_rank) continue;
        owned_parts(c, lr, o->chunk_len, &j0, &j1, &a, &b);
        if (b == a) continue;
        size_t off = (o->chunk_off + a) * esz;
        TRY(cma_read(c, lr, (char *)o->buf + off, shm_peer_of(c, lr)->addr + off, (b - a) * esz));
    }
    return STATUS_OK;
}

/* Starts the inter-node allreduce of part o->part, skipping empty parts. */
static void start_part(comm *c, comm_op *o, int j1)
{
    size_t esz = reduce_dtype_size(o->dtype), off, len;
    for (; o->part < j1; o->part++) {
        comm_split_even(o->chunk_len, comm_hier_nparts(c->rt), o->part, &off, &len);
        if (len == 0) continue;
        comm_flat_begin(c, &o->flat, COMM_GROUP_CHUNK0 + o->part, chunk_result(c, o) + off * esz, len, o->dtype,
                        o->scratch, o->seq, false);
        o->posted = 0;
        return;
    }
}

status comm_hier_progress(comm *c, comm_op *o, bool *done)
{
    const runtime *rt = c->rt;
    size_t esz = reduce_dtype_size(o->dtype), a, b;
    int j0, j1, me = rt->local_rank;
    bool shared = rt->local_size > 1, cma = op_uses_cma(c, o->count * esz), copy = shared && !cma;
    size_t cap = chunk_cap(c, cma, esz);
    *done = false;
    for (;;) {
        switch (o->phase) {
        case HIER_ENTER:
            if (c->ticket_next[COMM_CLASS_HIER] != o->ticket) return STATUS_OK;
            o->chunk_off = 0;
            if (shared && rt->nnodes == 1 && o->count * esz <= HIER_SMALL_BYTES) {
                comm_phase_mark(o, COMM_PHASE_FLAT);
                memcpy(shm_small(c, o->ticket & 1, me), o->buf, o->count * esz);
                barrier_arrive(c, o);
                o->phase = HIER_SMALL;
                break;
            }
            if (cma) {  /* publish my buffer; chunk 0's reduce waits for every rank's */
                shm_peer_of(c, me)->addr = (uint64_t)(uintptr_t)o->buf;
                barrier_arrive(c, o);
            }
            o->phase = HIER_COPYIN;
            break;
        case HIER_COPYIN:  /* the phases: reduce-scatter up to the reduce, inter, then gather */
            comm_phase_mark(o, COMM_PHASE_INTRA_REDUCE_SCATTER);
            o->chunk_len = o->count - o->chunk_off < cap ? o->count - o->chunk_off : cap;
            if (copy) {
                memcpy(shm_slot(c, me), (char *)o->buf + o->chunk_off * esz, o->chunk_len * esz);
                barrier_arrive(c, o);
            }
            o->phase = HIER_REDUCE;
            break;
        case HIER_REDUCE:  /* cma: the barrier is the previous chunk's (or the start's) */
            if (shared && !barrier_passed(c, o)) return STATUS_OK;
            owned_parts(c, me, o->chunk_len, &j0, &j1, &a, &b);
            if (copy && b > a) copy_reduce(c, o, a, b);
            if (cma && b > a) TRY(cma_reduce(c, o, a, b));
            o->part = rt->nnodes > 1 ? j0 : j1;
            if (rt->nnodes > 1) comm_phase_mark(o, COMM_PHASE_INTER_ALLREDUCE);
            start_part(c, o, j1);
            o->phase = HIER_INTER;
            break;
        case HIER_INTER:
            owned_parts(c, me, o->chunk_len, &j0, &j1, &a, &b);
            if (o->part < j1) {
                bool fin;
                TRY(comm_flat_progress(c, o, &o->flat, &fin));
                if (!fin) return STATUS_OK;
                o->part++;
                start_part(c, o, j1);
                break;
            }
            comm_phase_mark(o, COMM_PHASE_INTRA_ALLGATHER);
            if (shared) barrier_arrive(c, o);
            o->phase = HIER_COPYOUT;
            break;
        case HIER_COPYOUT:
            if (shared && !barrier_passed(c, o)) return STATUS_OK;
            if (copy) memcpy((char *)o->buf + o->chunk_off * esz, chunk_result(c, o), o->chunk_len * esz);
            if (cma) TRY(cma_gather(c, o));
            o->chunk_off += o->chunk_len;
            o->phase = o->chunk_off < o->count ? HIER_COPYIN : HIER_LEAVE;
            if (o->phase == HIER_LEAVE && cma) barrier_arrive(c, o);  /* my peers' reads of my buffer */
            break;
        case HIER_LEAVE:
            if (cma && !barrier_passed(c, o)) return STATUS_OK;
            o->phase = HIER_DONE;
            break;
        case HIER_SMALL:  /* my own values are cell me's: rank 0 starts from them in place */
            if (!barrier_passed(c, o)) return STATUS_OK;
            if (me != 0) memcpy(o->buf, shm_small(c, o->ticket & 1, 0), o->count * esz);
            for (int lr = 1; lr < rt->local_size; lr++)
                reduce_apply(o->buf, shm_small(c, o->ticket & 1, lr), o->count, o->dtype, o->op);
            o->phase = HIER_DONE;
            break;
        default:
            c->ticket_next[COMM_CLASS_HIER]++;
            *done = true;
            return STATUS_OK;
        }
    }
}
