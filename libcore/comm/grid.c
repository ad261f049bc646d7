/* grid — see grid.h. Three MPI_Comm_split calls on the world, keyed by the two
 * coordinates a group shares; the dp group also becomes a runtime view. */
#include "grid.h"

#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "ctl.h"

void grid_shape_from_config(const config *cfg, grid_shape *s)
{
    s->tp = (int)config_int(cfg, "parallel.tp");
    s->pp = (int)config_int(cfg, "parallel.pp");
    s->dp = (int)config_int(cfg, "parallel.dp");
}

void grid_shape_name(const grid_shape *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "tp%d x pp%d x dp%d", s->tp, s->pp, s->dp);
}

status grid_shape_resolve(grid_shape *s, int world, const char *origin)
{
    const char *at = origin && *origin ? origin : "the config";
    if (s->tp < 1 || s->pp < 1 || s->dp < 0) {
        log_error0("parallel.tp = %d, parallel.pp = %d (%s) must be at least 1 and parallel.dp = %d at least 0",
                   s->tp, s->pp, at, s->dp);
        return STATUS_INPUT;
    }
    long tpp = (long)s->tp * s->pp;
    if (s->dp == 0) {
        if (world % tpp != 0) {
            log_error0("parallel.tp x parallel.pp = %d x %d = %ld (%s) does not divide the world size %d: "
                       "launch a multiple of %ld ranks, or choose tp x pp among the divisors of %d",
                       s->tp, s->pp, tpp, at, world, tpp, world);
            return STATUS_INPUT;
        }
        s->dp = (int)(world / tpp);
    }
    if (tpp * s->dp != world) {
        log_error0("parallel.tp x parallel.pp x parallel.dp = %d x %d x %d = %ld (%s), but the world has %d ranks: "
                   "the product must equal the world size (set parallel.dp = 0 to derive it)",
                   s->tp, s->pp, s->dp, tpp * s->dp, at, world);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status grid_init(grid *g, const runtime *rt, const grid_shape *shape, double timeout_s)
{
    memset(g, 0, sizeof *g);
    g->shape = *shape;
    g->tp_comm = g->pp_comm = g->dp_comm = MPI_COMM_NULL;
    g->timeout_s = timeout_s;
    g->wd = rt->wd;
    CHECK((long)shape->tp * shape->pp * shape->dp == rt->size, "grid_init: an unresolved shape");
    int tp = shape->tp, pp = shape->pp, r = rt->rank;
    g->tp_rank = r % tp;
    g->pp_rank = (r / tp) % pp;
    g->dp_rank = r / (tp * pp);
    watchdog_enter(rt->wd, "start-up: splitting the world into tp, pp and dp groups", rt->timeout_s);
    /* colour: the coordinates the group shares; key: the one it varies in */
    MPI_CHECK(MPI_Comm_split(rt->world, g->pp_rank + pp * g->dp_rank, g->tp_rank, &g->tp_comm));
    MPI_CHECK(MPI_Comm_split(rt->world, g->tp_rank + tp * g->dp_rank, g->pp_rank, &g->pp_comm));
    MPI_CHECK(MPI_Comm_split(rt->world, g->tp_rank + tp * g->pp_rank, g->dp_rank, &g->dp_comm));
    /* a tp group inside one node: its members' node ids agree */
    int lo = rt->node_id, hi = rt->node_id, in_node;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, g->tp_comm));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, g->tp_comm));
    in_node = lo == hi;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &in_node, 1, MPI_INT, MPI_LAND, rt->world));
    g->tp_in_node = in_node != 0;
    watchdog_leave(rt->wd);
    runtime_sub_init(&g->dp_rt, rt, g->dp_comm);
    /* the groups' vector payloads (activations' sums, the pipeline's sends, ZeRO's
       shards) run on the same communicators, host buffers: nothing is communicated */
    comm_group_options o = { .backend = COMM_BACKEND_MPI, .timeout_s = timeout_s, .name = "tp", .wd = rt->wd };
    TRY(comm_group_init(&g->tp_group, g->tp_comm, &o));
    o.name = "pp";
    TRY(comm_group_init(&g->pp_group, g->pp_comm, &o));
    o.name = "dp";
    TRY(comm_group_init(&g->dp_group, g->dp_comm, &o));
    return STATUS_OK;
}

/* "{0,1} {2,3}": the members of every group of one kind, by world rank. */
static void grid_groups(const grid_shape *s, char kind, char *buf, size_t cap)
{
    size_t at = 0;
    int n = kind == 't' ? s->tp : kind == 'p' ? s->pp : s->dp;
    int groups = s->tp * s->pp * s->dp / n;
    buf[0] = 0;
    for (int gi = 0; gi < groups && at + 32 < cap; gi++) {
        at += (size_t)snprintf(buf + at, cap - at, "%s{", gi ? " " : "");
        for (int k = 0; k < n && at + 16 < cap; k++) {
            int t, p, d;
            if (kind == 't') t = k, p = gi % s->pp, d = gi / s->pp;
            else if (kind == 'p') t = gi % s->tp, p = k, d = gi / s->tp;
            else t = gi % s->tp, p = gi / s->tp, d = k;
            at += (size_t)snprintf(buf + at, cap - at, "%s%d", k ? "," : "", grid_rank_of(s, t, p, d));
        }
        at += (size_t)snprintf(buf + at, cap - at, "}");
    }
    if (at + 32 >= cap) snprintf(buf + cap - 5, 5, " ...");
}

void grid_print(const grid *g, const runtime *rt, FILE *f)
{
    /* the node of every rank, for "inside a node" per kind */
    int *node = rt->rank == 0 ? calloc((size_t)rt->size, sizeof *node) : NULL;
    CHECK(rt->rank != 0 || node, "out of memory for the grid table");
    comm_ctl c = comm_ctl_watched(comm_ctl_named(rt->world, g->timeout_s, "world"), rt->wd);
    if (comm_ctl_gather(c, &rt->node_id, 1, MPI_INT, node, 1, MPI_INT, 0) != STATUS_OK) {
        free(node);
        return;
    }
    if (rt->rank != 0) return;
    char name[64];
    grid_shape_name(&g->shape, name, sizeof name);
    fprintf(f, "grid: %s over %d ranks (rank = tp + %d x (pp + %d x dp))\n", name, rt->size, g->shape.tp,
            g->shape.pp);
    static const char kinds[3] = { 't', 'p', 'd' };
    static const char *labels[3] = { "tp", "pp", "dp" };
    for (int k = 0; k < 3; k++) {
        char members[512];
        grid_groups(&g->shape, kinds[k], members, sizeof members);
        /* a kind's groups stay inside nodes when every member shares its first's node */
        const grid_shape *s = &g->shape;
        int n = kinds[k] == 't' ? s->tp : kinds[k] == 'p' ? s->pp : s->dp;
        bool inside = true;
        for (int r = 0; r < rt->size; r++) {
            int t = r % s->tp, p = (r / s->tp) % s->pp, d = r / (s->tp * s->pp);
            int first = kinds[k] == 't' ? grid_rank_of(s, 0, p, d) : kinds[k] == 'p' ? grid_rank_of(s, t, 0, d)
                                                                                  : grid_rank_of(s, t, p, 0);
            inside = inside && node[r] == node[first];
        }
        fprintf(f, "  %s  %4d rank%s per group: %s  (%s)\n", labels[k], n, n == 1 ? " " : "s", members,
                n == 1 ? "no communication" : inside ? "inside nodes" : "across nodes");
    }
    if (!g->tp_in_node)
        fprintf(f, "  warning: tensor-parallel groups cross nodes (tp = %d, at most %d ranks per node): their "
                   "per-layer reductions will run over the network; choose tp dividing the ranks per node\n",
                g->shape.tp, rt->max_local_size);
    fflush(f);
    free(node);
}

void grid_free(grid *g)
{
    comm_group_free(g->tp_group), comm_group_free(g->pp_group), comm_group_free(g->dp_group);
    g->tp_group = g->pp_group = g->dp_group = NULL;
    runtime_sub_free(&g->dp_rt);
    if (g->tp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->tp_comm);
    if (g->pp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->pp_comm);
    if (g->dp_comm != MPI_COMM_NULL) MPI_Comm_free(&g->dp_comm);
}
