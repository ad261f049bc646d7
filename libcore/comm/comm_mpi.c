/* comm_mpi — the MPI backend of comm: every group is its own duplicate
 * communicator, every primitive is non-blocking so comm.c can bound its waits.
 * Request handles are MPI_Request values stored in a uint64_t. */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

#define NGROUPS COMM_NGROUPS

typedef struct comm_mpi {
    MPI_Comm group[NGROUPS];   /* MPI_COMM_NULL where this rank is not a member */
} comm_mpi;



static MPI_Datatype mpi_dtype(reduce_dtype dt)
{
    switch (dt) {
    case REDUCE_DTYPE_F32: return MPI_FLOAT;
    case REDUCE_DTYPE_F64: return MPI_DOUBLE;
    case REDUCE_DTYPE_I32: return MPI_INT32_T;
    case REDUCE_DTYPE_I64: return MPI_INT64_T;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(reduce_op op)
{
    return op == REDUCE_OP_SUM ? MPI_SUM : op == REDUCE_OP_MAX ? MPI_MAX : MPI_MIN;
}

static MPI_Comm group_comm(comm_backend *be, int group)
{
    MPI_Comm c = ((comm_mpi *)be->impl)->group[group];
    CHECK(c != MPI_COMM_NULL, "an algorithm used a group this rank is not a member of");
    return c;
}

static MPI_Request *as_req(uint64_t *req)
{
    return (MPI_Request *)(void *)req;
}

static status mpi_iallreduce(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt,
                             reduce_op op, uint64_t *req)
{
    CHECK(count <= (size_t)INT32_MAX, "split messages above 2^31 elements");
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_dtype(dt), mpi_op(op),
                             group_comm(be, group), as_req(req)));
    return STATUS_OK;
}

static status mpi_allreduce(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt, reduce_op op)
{
    CHECK(count <= (size_t)INT32_MAX, "split messages above 2^31 elements");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_dtype(dt), mpi_op(op), group_comm(be, group)));
    return STATUS_OK;
}

static status mpi_ireduce_scatter(comm_backend *be, int group, const void *send, void *recv,
                                  const int *counts, reduce_dtype dt, reduce_op op, uint64_t *req)
{
    MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, mpi_dtype(dt), mpi_op(op), group_comm(be, group),
                                  as_req(req)));
    return STATUS_OK;
}

/* Elements of esz bytes are only moved: any MPI type of that size moves the same bits. */
static MPI_Datatype mpi_move_type(size_t esz)
{
    switch (esz) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_FLOAT;
    case 8: return MPI_DOUBLE;
    }
    die("comm", "an element size other than 1, 2, 4 or 8 bytes", "pass the size of the buffer's element type");
    return MPI_DATATYPE_NULL;
}

static status mpi_iallgatherv(comm_backend *be, int group, const void *send, void *recv, const int *counts,
                              const int *displs, size_t esz, uint64_t *req)
{
    MPI_Datatype t = mpi_move_type(esz);
    MPI_Comm mc = group_comm(be, group);
    int me = 0;
    MPI_Comm_rank(mc, &me);
    MPI_CHECK(MPI_Iallgatherv(send ? send : MPI_IN_PLACE, send ? counts[me] : 0, send ? t : MPI_DATATYPE_NULL, recv,
                              counts, displs, t, mc, as_req(req)));
    return STATUS_OK;
}

static status mpi_ialltoallv(comm_backend *be, int group, const void *send, const int *scounts, const int *sdispls,
                             void *recv, const int *rcounts, const int *rdispls, size_t esz, uint64_t *req)
{
    MPI_Datatype t = mpi_move_type(esz);
    MPI_CHECK(MPI_Ialltoallv(send, scounts, sdispls, t, recv, rcounts, rdispls, t, group_comm(be, group),
                             as_req(req)));
    return STATUS_OK;
}

static status mpi_isend(comm_backend *be, int group, const void *buf, size_t bytes, int peer, int tag,
                        uint64_t *req)
{
    CHECK(bytes <= (size_t)INT32_MAX, "split messages above 2 GiB");
    MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, group_comm(be, group), as_req(req)));
    return STATUS_OK;
}

static status mpi_irecv(comm_backend *be, int group, void *buf, size_t bytes, int peer, int tag,
                        uint64_t *req)
{
    CHECK(bytes <= (size_t)INT32_MAX, "split messages above 2 GiB");
    MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, group_comm(be, group), as_req(req)));
    return STATUS_OK;
}

static status mpi_isendrecv(comm_backend *be, int group, const void *send, size_t send_bytes, int dest,
                            int send_tag, void *recv, size_t recv_bytes, int source, int recv_tag, uint64_t *req)
{
    *as_req(&req[0]) = MPI_REQUEST_NULL;
    *as_req(&req[1]) = MPI_REQUEST_NULL;
    /* the receive first: a peer's matching send then finds it posted */
    if (source >= 0 && recv_bytes > 0) TRY(mpi_irecv(be, group, recv, recv_bytes, source, recv_tag, &req[0]));
    if (dest >= 0 && send_bytes > 0) TRY(mpi_isend(be, group, send, send_bytes, dest, send_tag, &req[1]));
    return STATUS_OK;
}

/* One MPI_Testall is one pass of OpenMPI's progress engine (and one yield when
 * oversubscribed); testing requests one by one would make one pass each. */
static status mpi_testall(comm_backend *be, uint64_t *reqs, int n, bool *done)
{
    (void)be;
    _Static_assert(sizeof(MPI_Request) == sizeof(uint64_t), "request handles are stored as an array");
    int flag = 0;
    MPI_CHECK(MPI_Testall(n, (MPI_Request *)(void *)reqs, &flag, MPI_STATUSES_IGNORE));
    *done = flag != 0;
    return STATUS_OK;
}

static void mpi_free(comm_backend *be)
{
    comm_mpi *m = be->impl;
    for (int g = 0; g < NGROUPS; g++)
        if (m->group[g] != MPI_COMM_NULL) MPI_Comm_free(&m->group[g]);
    free(m);
    be->impl = NULL;
}

/* A group's backend runs on the members' communicator itself: it is not ours to free. */
static void mpi_group_free(comm_backend *be)
{
    free(be->impl);
    be->impl = NULL;
}

/* After a failed wait: the duplicates stay (freeing them is collective), the job is ending. */
static void mpi_abandon(comm_backend *be)
{
    free(be->impl);
    be->impl = NULL;
}

/* The primitives, the same for the world backend and a group's. */
#define COMM_MPI_PRIMITIVES                  \
    .name = "mpi",                           \
    .iallreduce = mpi_iallreduce,            \
    .allreduce = mpi_allreduce,              \
    .ireduce_scatter = mpi_ireduce_scatter,  \
    .iallgatherv = mpi_iallgatherv,          \
    .ialltoallv = mpi_ialltoallv,            \
    .isend = mpi_isend,                      \
    .irecv = mpi_irecv,                      \
    .isendrecv = mpi_isendrecv,              \
    .testall = mpi_testall

/* The world backend: the primitives and the allreduce engine's host half. */
static const comm_backend_ops comm_mpi_ops = {
    COMM_MPI_PRIMITIVES,
    .abandon = mpi_abandon,
    .op_resolve = comm_host_resolve,
    .op_start = comm_host_op_start,
    .op_progress = comm_host_op_progress,
    .op_timeout = comm_diag_timeout,
    .set_stream = comm_host_set_stream,
    .free = mpi_free,
};

/* OpenMPI 4 records the PML it selected in mca_pml_base_selected_component, whose
 * layout begins with mca_base_component_t (opal/mca/mca.h): three ints, then the
 * project, type and component names, each of the first two followed by three ints. A weak reference keeps other MPIs linking;
 * the "pml" control variable is only the user's request (Debian sets "^ucx"). */
typedef struct ompi_component_prefix {
    int mca_major, mca_minor, mca_release;
    char project_name[16];
    int project_major, project_minor, project_release;
    char type_name[32];
    int type_major, type_minor, type_release;
    char component_name[64];
} ompi_component_prefix;
extern ompi_component_prefix mca_pml_base_selected_component __attribute__((weak));

static void mpi_pml_name(char *out, size_t len)
{
    snprintf(out, len, "unknown");
    if (&mca_pml_base_selected_component && !strcmp(mca_pml_base_selected_component.type_name, "pml") &&
        mca_pml_base_selected_component.component_name[0]) {
        snprintf(out, len, "%.63s", mca_pml_base_selected_component.component_name);
        return;
    }
    int provided, ncvar = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return;
    MPI_T_cvar_get_num(&ncvar);
    for (int i = 0; i < ncvar; i++) {
        char name[256], desc[1024];
        int nlen = sizeof name, dlen = sizeof desc, verb, bind, scope;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(i, name, &nlen, &verb, &dt, &en, desc, &dlen, &bind, &scope) != MPI_SUCCESS)
            continue;
        if (strcmp(name, "pml") != 0 || dt != MPI_CHAR) continue;
        MPI_T_cvar_handle h;
        int n;
        char val[256] = "";
        if (MPI_T_cvar_handle_alloc(i, NULL, &h, &n) == MPI_SUCCESS) {
            if (MPI_T_cvar_read(h, val) == MPI_SUCCESS && val[0]) snprintf(out, len, "%s", val);
            MPI_T_cvar_handle_free(&h);
        }
    }
    MPI_T_finalize();
}

status comm_mpi_backend_init(comm_backend *be, const runtime *rt)
{
    comm_mpi *m = calloc(1, sizeof *m);
    if (!m) return STATUS_NOMEM;
    for (int g = 0; g < NGROUPS; g++) m->group[g] = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(rt->world, &m->group[COMM_GROUP_WORLD_COLL]));
    MPI_CHECK(MPI_Comm_dup(rt->world, &m->group[COMM_GROUP_WORLD_P2P]));
    /* Part j of the hierarchical split is owned on each node by local rank
     * floor(j * local_size / nparts); its owners form group CHUNK0 + j. */
    int nparts = comm_hier_nparts(rt);
    for (int j = 0; j < nparts; j++) {
        int owner = (int)((long)j * rt->local_size / nparts);
        MPI_CHECK(MPI_Comm_split(rt->world, owner == rt->local_rank ? 0 : MPI_UNDEFINED, rt->node_id,
                                 &m->group[COMM_GROUP_CHUNK0 + j]));
    }
    for (int g = 0; g < NGROUPS; g++) {
        be->group_rank[g] = -1;
        be->group_size[g] = 0;
        if (m->group[g] != MPI_COMM_NULL) {
            MPI_Comm_rank(m->group[g], &be->group_rank[g]);
            MPI_Comm_size(m->group[g], &be->group_size[g]);
        }
    }
    be->ops = &comm_mpi_ops;
    be->impl = m;

    char version[MPI_MAX_LIBRARY_VERSION_STRING], pml[64];
    int vlen;
    MPI_Get_library_version(version, &vlen);
    char *nl = strpbrk(version, ",\n");
    if (nl) *nl = '\0';
    mpi_pml_name(pml, sizeof pml);
    snprintf(be->describe, sizeof be->describe, "mpi (%.100s, pml %.40s)", version, pml);
    return STATUS_OK;
}

/* A group's backend: the primitives only (comm_group runs no allreduce engine); free
 * leaves the members' communicator alone. */
static const comm_backend_ops comm_mpi_group_ops = {
    COMM_MPI_PRIMITIVES,
    .free = mpi_group_free,
    .abandon = mpi_group_free,
};

status comm_mpi_group_backend_init(comm_backend *be, MPI_Comm members)
{
    comm_mpi *m = calloc(1, sizeof *m);
    if (!m) return STATUS_NOMEM;
    for (int g = 0; g < NGROUPS; g++) {
        m->group[g] = MPI_COMM_NULL;
        be->group_rank[g] = -1;
        be->group_size[g] = 0;
    }
    m->group[COMM_GROUP_WORLD_COLL] = m->group[COMM_GROUP_WORLD_P2P] = members;
    for (int g = COMM_GROUP_WORLD_COLL; g <= COMM_GROUP_WORLD_P2P; g++) {
        MPI_Comm_rank(members, &be->group_rank[g]);
        MPI_Comm_size(members, &be->group_size[g]);
    }
    be->ops = &comm_mpi_group_ops;
    be->impl = m;
    snprintf(be->describe, sizeof be->describe, "mpi (the members' communicator)");
    return STATUS_OK;
}
