/* comm_hier — hierarchical allreduce through node shared memory.
 *
 * Per pipeline chunk of at most `slot` bytes:
 *   copy-in   every local rank copies its chunk into its slot of a node-shared
 *             segment (MPI_Win_allocate_shared on the node communicator), barrier;
 *   reduce    the chunk is cut into L parts (the largest node's size, at most
 *             COMM_MAX_LOCAL); local rank lr owns the parts j with
 *             floor(j * local_size / L) == lr (none when lr is past L) and sums
 *             them over all slots, in local-rank order, into a result buffer;
 *   inter     each owned part is allreduced with the owners of the same part on
 *             the other nodes (the flat engine on group CHUNK0 + j), barrier;
 *   copy-out  every local rank copies the whole result chunk out.
 * Only 1/local_size of the data crosses the node boundary per rank, and inside
 * the node every byte is copied in once, read once and copied out once.
 *
 * One result buffer serves every chunk: a rank can only reduce chunk k+1 after
 * every local rank passed chunk k+1's first barrier, which each reaches only after
 * copying chunk k out, so the buffer is never overwritten while it is read.
 * Hier ops run one at a time per rank (ordering class HIER); the node barrier is a
 * counter that only grows, so a rank racing ahead cannot confuse a slower one. */
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "comm_impl.h"
#include "cpu/reduce.h"

enum { HIER_ENTER = 0, HIER_COPYIN, HIER_REDUCE, HIER_INTER, HIER_COPYOUT, HIER_DONE };

#define SHM_HEADER_BYTES 4096

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the node barrier needs lock-free 64-bit atomics");

int comm_hier_nparts(const runtime *rt)
{
    return rt->max_local_size < COMM_MAX_LOCAL ? rt->max_local_size : COMM_MAX_LOCAL;
}

static _Atomic unsigned long long *shm_counter(const comm *c)
{
    return (_Atomic unsigned long long *)(void *)c->shm_base;
}

static char *shm_slot(const comm *c, int lr)
{
    return c->shm_base + SHM_HEADER_BYTES + (size_t)lr * c->shm_slot_bytes;
}

static char *shm_result(const comm *c)
{
    return shm_slot(c, c->rt->local_size);  /* after the local_size input slots */
}

status comm_hier_init(comm *c)
{
    const runtime *rt = c->rt;
    /* The slot size must be equal on every node (parts must line up across nodes),
     * so it derives from the largest node: 32 MiB per node, 256 KiB to 4 MiB a slot. */
    size_t slot = (32u << 20) / (size_t)rt->max_local_size;
    slot = slot < (256u << 10) ? (256u << 10) : slot > COMM_SHM_SLOT_BYTES ? COMM_SHM_SLOT_BYTES : slot;
    c->shm_slot_bytes = slot / 64 * 64;
    /* A node of one works in place and needs no slots. */
    size_t total = SHM_HEADER_BYTES + (rt->local_size > 1 ? (size_t)(rt->local_size + 1) * c->shm_slot_bytes : 0);
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
    return STATUS_OK;
}

void comm_hier_free(comm *c)
{
    if (c->shm_win != MPI_WIN_NULL) MPI_Win_free(&c->shm_win);
}

size_t comm_hier_scratch_bytes(const comm *c, size_t count, reduce_dtype dt)
{
    size_t esz = reduce_dtype_size(dt), cap = c->shm_slot_bytes / esz;
    size_t part = (count < cap ? count : cap) / (size_t)comm_hier_nparts(c->rt) + 1;
    return part * esz;
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

/* My parts [j0, j1) of the chunk, and their element range [*a, *b). */
static void owned_parts(const comm *c, size_t mk, int *j0, int *j1, size_t *a, size_t *b)
{
    int L = comm_hier_nparts(c->rt), Ls = c->rt->local_size, lr = c->rt->local_rank;
    size_t off, len;
    *j0 = (lr * L + Ls - 1) / Ls;
    *j1 = ((lr + 1) * L + Ls - 1) / Ls;
    comm_split_even(mk, L, *j0, &off, &len);
    *a = off;
    comm_split_even(mk, L, *j1 - 1, &off, &len);
    *b = *j1 > *j0 ? off + len : *a;
}

/* Where the chunk's result lives: in shared memory, or in place for a node of one. */
static char *chunk_result(const comm *c, const comm_op *o)
{
    if (c->rt->local_size == 1) return (char *)o->buf + o->chunk_off * reduce_dtype_size(o->dtype);
    return shm_result(c);
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
    size_t esz = reduce_dtype_size(o->dtype), cap = c->shm_slot_bytes / esz, a, b;
    int j0, j1;
    bool shared = rt->local_size > 1;
    *done = false;
    for (;;) {
        switch (o->phase) {
        case HIER_ENTER:
            if (c->ticket_next[COMM_CLASS_HIER] != o->ticket) return STATUS_OK;
            o->chunk_off = 0;
            o->phase = HIER_COPYIN;
            break;
        case HIER_COPYIN:
            o->chunk_len = o->count - o->chunk_off < cap ? o->count - o->chunk_off : cap;
            if (shared) {
                memcpy(shm_slot(c, rt->local_rank), (char *)o->buf + o->chunk_off * esz, o->chunk_len * esz);
                barrier_arrive(c, o);
            }
            o->phase = HIER_REDUCE;
            break;
        case HIER_REDUCE:
            if (shared && !barrier_passed(c, o)) return STATUS_OK;
            owned_parts(c, o->chunk_len, &j0, &j1, &a, &b);
            if (shared && b > a) {
                char *res = chunk_result(c, o);
                memcpy(res + a * esz, shm_slot(c, 0) + a * esz, (b - a) * esz);
                for (int lr = 1; lr < rt->local_size; lr++)
                    reduce_apply(res + a * esz, shm_slot(c, lr) + a * esz, b - a, o->dtype, o->op);
            }
            o->part = rt->nnodes > 1 ? j0 : j1;
            start_part(c, o, j1);
            o->phase = HIER_INTER;
            break;
        case HIER_INTER:
            owned_parts(c, o->chunk_len, &j0, &j1, &a, &b);
            if (o->part < j1) {
                bool fin;
                TRY(comm_flat_progress(c, o, &o->flat, &fin));
                if (!fin) return STATUS_OK;
                o->part++;
                start_part(c, o, j1);
                break;
            }
            if (shared) barrier_arrive(c, o);
            o->phase = HIER_COPYOUT;
            break;
        case HIER_COPYOUT:
            if (shared && !barrier_passed(c, o)) return STATUS_OK;
            if (shared) memcpy((char *)o->buf + o->chunk_off * esz, chunk_result(c, o), o->chunk_len * esz);
            o->chunk_off += o->chunk_len;
            o->phase = o->chunk_off < o->count ? HIER_COPYIN : HIER_DONE;
            break;
        default:
            c->ticket_next[COMM_CLASS_HIER]++;
            *done = true;
            return STATUS_OK;
        }
    }
}
