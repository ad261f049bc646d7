/* zero_hier — ZeRO-1's two-level reduce-scatter and all-gather (zero.h), for a
 * data-parallel group whose ranks sit on several nodes.
 *
 * The one design decision: every float crosses between nodes once each way, as on
 * the hierarchical allreduce (comm_hier.c), and every sum has a fixed order. A
 * shard's delegate on node N is the rank of N whose local index is the owner's
 * local index modulo N's size (the owner itself on its own node), so uneven nodes
 * (2 + 1) need no special case. Reduce-scatter: every rank sends its gradient of a
 * shard to its node's delegate, which sums the node's copies in local-index order
 * (the node's partial); the delegates send their partials to the owner, which sums
 * them in node order and scales. All-gather: the owner sends the updated shard to
 * its delegate on every other node, and each delegate to the other ranks of its
 * node. Each stage is one all-to-all on the group's comm_group; the shards travel in
 * rounds whose every rank's send and receive stay within half of pack_numel floats
 * (a single larger shard gets a round of its own), so the extra memory is bounded. */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

static int node_size(const zero *z, int n)
{
    return z->node_start[n + 1] - z->node_start[n];
}

/* The delegate of shard s on node n. */
static int delegate(const zero *z, int n, int s)
{
    int o = z->shards[s].owner;
    return z->node_rank[z->node_start[n] + z->lidx_of[o] % node_size(z, n)];
}

static status zero_hier_setup(zero *z);

status zero_use_nodes(zero *z, int node_id, double timeout_s)
{
    int *ids = malloc((size_t)z->size * sizeof *ids), *counts = malloc(2 * (size_t)z->size * sizeof *counts);
    if (!ids || !counts) {
        free(ids), free(counts);
        return STATUS_NOMEM;
    }
    for (int r = 0; r < z->size; r++) counts[r] = 1, counts[z->size + r] = r;
    ids[z->rank] = node_id;
    comm_group_set_timeout(z->group, timeout_s);
    status st = comm_group_allgatherv(z->group, NULL, ids, counts, counts + z->size, sizeof(int));
    free(counts);
    if (st != STATUS_OK) return st;
    /* nodes renumbered 0.. in the order of their ids; within a node, local index by group rank */
    int nn = 0, maxl = 0;
    z->node_of = malloc((size_t)z->size * sizeof(int));
    z->lidx_of = malloc((size_t)z->size * sizeof(int));
    z->node_rank = malloc((size_t)z->size * sizeof(int));
    z->node_start = malloc(((size_t)z->size + 1) * sizeof(int));
    if (!z->node_of || !z->lidx_of || !z->node_rank || !z->node_start) {
        free(ids);
        return STATUS_NOMEM;
    }
    int k = 0;
    for (int prev = INT32_MIN;;) {  /* the next larger id each pass */
        int next = INT32_MAX;
        bool any = false;
        for (int r = 0; r < z->size; r++)
            if (ids[r] > prev && ids[r] <= next) next = ids[r], any = true;
        if (!any) break;
        z->node_start[nn] = k;
        for (int r = 0; r < z->size; r++)
            if (ids[r] == next) z->node_of[r] = nn, z->lidx_of[r] = k - z->node_start[nn], z->node_rank[k++] = r;
        maxl = k - z->node_start[nn] > maxl ? k - z->node_start[nn] : maxl;
        nn++;
        if (next == INT32_MAX) break;
        prev = next;
    }
    z->node_start[nn] = k;
    z->nnodes = nn;
    free(ids);
    /* one node, or one rank per node: the flat reduce-scatter already crosses once */
    z->hier = nn > 1 && maxl > 1;
    if (!z->hier) return STATUS_OK;
    /* the stages inside nodes on a group of their own (the same communicator): z->group
       then counts only the bytes between nodes */
    comm_group_options go = { .backend = COMM_BACKEND_MPI, .name = "zero node" };
    TRY(comm_group_init(&z->node_group, z->comm, &go));
    free(z->pack);  /* the flat path's buffer is not used again */
    z->pack = NULL;
    return zero_hier_setup(z);
}

/* An all-to-all stage of one round: shards go from `from` to the ranks the stage's rule
 * names (sends()); send and receive blocks hold each peer's shards in index order. */
typedef enum stage { RS_NODE, RS_OWNER, AG_NODES, AG_NODE, NSTAGES } stage;

/* Whether rank `from` sends shard s to rank `to` (from != to) in stage st. */
static bool sends(const zero *z, stage st, int s, int from, int to)
{
    int fn = z->node_of[from], tn = z->node_of[to], o = z->shards[s].owner;
    switch (st) {
    case RS_NODE: return tn == fn && delegate(z, fn, s) == to;  /* to the node's delegate */
    case RS_OWNER: return to == o && tn != fn && delegate(z, fn, s) == from;  /* the partial to the owner */
    case AG_NODES: return from == o && tn != fn && delegate(z, tn, s) == to;  /* the owner to each delegate */
    case AG_NODE: return tn == fn && delegate(z, fn, s) == from;  /* the delegate to its node */
    default: return false;
    }
}

/* The rounds: shards in index order, a round closed before any rank's load in any stage
 * would pass half of pack_numel. Returns the largest load (floats). */
static size_t zero_hier_rounds(zero *z, size_t *load)
{
    size_t half = z->pack_numel / 2 ? z->pack_numel / 2 : 1, total = 0, peak = 1;
    z->nrounds = 0;
    z->round_first[0] = 0;
    for (int s = 0; s < z->nshards; s++) {
        size_t c = z->shards[s].count, add = c * (size_t)(z->nnodes - 1), top = total + c;
        for (int n = 0; n < z->nnodes; n++) {
            size_t l = load[delegate(z, n, s)] + c * (size_t)(node_size(z, n) - 1);
            top = l > top ? l : top;
        }
        size_t lo = load[z->size + z->shards[s].owner] + add;
        top = lo > top ? lo : top;
        if (top > half && s > z->round_first[z->nrounds]) {  /* close the round before s */
            z->round_first[++z->nrounds] = s;
            memset(load, 0, 2 * (size_t)z->size * sizeof *load);
            total = 0;
            s--;
            continue;
        }
        for (int n = 0; n < z->nnodes; n++) load[delegate(z, n, s)] += c * (size_t)(node_size(z, n) - 1);
        load[z->size + z->shards[s].owner] += add;
        total += c;
        peak = top > peak ? top : peak;
    }
    z->round_first[++z->nrounds] = z->nshards;
    return peak;
}

/* Each round's and stage's all-to-all, fixed for the run: counts, displacements and the
 * shards this rank sends, in the send block's order (by receiver, then index). `pool`
 * NULL counts the ints the plans need into *need. */
static void zero_hier_plans(zero *z, int *pool, size_t *need)
{
    int me = z->rank, P = z->size;
    size_t at = 0;
    for (int k = 0; k < z->nrounds; k++)
        for (int st = 0; st < NSTAGES; st++) {
            zero_hier_plan *p = pool ? &z->hplan[k * NSTAGES + st] : NULL;
            if (p) {
                p->sc = pool + at, p->sd = p->sc + P, p->rc = p->sd + P, p->rd = p->rc + P;
                p->send = p->rd + P, p->nsend = 0;
            }
            at += 4 * (size_t)P;
            size_t sat = 0, rat = 0;
            for (int r = 0; r < P; r++) {
                size_t sc = 0, rc = 0;
                for (int s = z->round_first[k]; r != me && s < z->round_first[k + 1]; s++) {
                    if (sends(z, (stage)st, s, me, r)) {
                        if (p) p->send[p->nsend++] = s;
                        sc += z->shards[s].count, at++;
                    }
                    if (sends(z, (stage)st, s, r, me)) rc += z->shards[s].count;
                }
                if (p) p->sc[r] = (int)sc, p->rc[r] = (int)rc, p->sd[r] = (int)sat, p->rd[r] = (int)rat;
                sat += sc, rat += rc;
            }
            CHECK(sat <= z->hbuf_half && rat <= z->hbuf_half, "zero: a round past its buffer");
        }
    *need = at;
}

/* Sized once, at zero_use_nodes: the rounds, their plans and the exchange buffer. */
static status zero_hier_setup(zero *z)
{
    size_t *load = calloc(2 * (size_t)z->size, sizeof *load);  /* as delegate, as owner */
    z->round_first = malloc(((size_t)z->nshards + 2) * sizeof(int));
    z->hcur = malloc((size_t)z->size * sizeof(int));
    z->hsrc = malloc(((size_t)z->size + 1) * sizeof *z->hsrc);
    if (!load || !z->round_first || !z->hcur || !z->hsrc) {
        free(load);
        return STATUS_NOMEM;
    }
    z->hbuf_half = zero_hier_rounds(z, load);
    free(load);
    size_t ints;
    zero_hier_plans(z, NULL, &ints);
    z->hplan = malloc((size_t)z->nrounds * NSTAGES * sizeof *z->hplan);
    z->hpool = malloc((ints ? ints : 1) * sizeof(int));
    z->hbuf = malloc(2 * z->hbuf_half * sizeof(float));
    if (!z->hplan || !z->hpool || !z->hbuf) {
        log_error("zero: out of memory for the hierarchical exchange's %.1f MiB",
                  (double)z->hbuf_half * 8 / 1048576.0);
        return STATUS_NOMEM;
    }
    zero_hier_plans(z, z->hpool, &ints);
    return STATUS_OK;
}

/* Runs stage st of round k: packs this rank's sends from src, one all-to-all. */
static status zero_hier_stage(zero *z, int k, stage st, const float *src, float *send, float *recv)
{
    const zero_hier_plan *p = &z->hplan[k * NSTAGES + st];
    size_t at = 0;
    for (int i = 0; i < p->nsend; i++) {
        const zero_shard *sh = &z->shards[p->send[i]];
        memcpy(send + at, src + sh->offset, sh->count * sizeof(float));
        at += sh->count;
    }
    memcpy(z->hcur, p->rd, (size_t)z->size * sizeof(int));  /* each source's next float */
    comm_group *g = st == RS_NODE || st == AG_NODE ? z->node_group : z->group;
    return comm_group_alltoallv(g, send, p->sc, p->sd, recv, p->rc, p->rd, sizeof(float));
}

status zero_hier_reduce_scatter(zero *z, float *grads, double scale, double timeout_s)
{
    comm_group_set_timeout(z->group, timeout_s);
    comm_group_set_timeout(z->node_group, timeout_s);
    float *send = z->hbuf, *recv = z->hbuf + z->hbuf_half;
    int me = z->rank, mn = z->node_of[me], *cur = z->hcur;
    const float **src = z->hsrc;
    for (int k = 0; k < z->nrounds; k++) {
        int a = z->round_first[k], b = z->round_first[k + 1];
        TRY(zero_hier_stage(z, k, RS_NODE, grads, send, recv));
        for (int s = a; s < b; s++) {  /* the node's partials, in local-index order */
            if (delegate(z, mn, s) != me) continue;
            float *g = grads + z->shards[s].offset;
            int l0 = z->node_start[mn], L = node_size(z, mn);
            for (int j = 0; j < L; j++) {
                int r = z->node_rank[l0 + j];
                src[j] = r == me ? g : recv + cur[r];
                if (r != me) cur[r] += (int)z->shards[s].count;
            }
            for (size_t i = 0; i < z->shards[s].count; i++) {
                float acc = src[0][i];
                for (int j = 1; j < L; j++) acc += src[j][i];
                g[i] = acc;
            }
        }
        TRY(zero_hier_stage(z, k, RS_OWNER, grads, send, recv));
        for (int s = a; s < b; s++) {  /* the owner: the nodes' partials in node order, scaled */
            if (z->shards[s].owner != me) continue;
            float *g = grads + z->shards[s].offset;
            for (int n = 0; n < z->nnodes; n++) {
                int r = delegate(z, n, s);
                src[n] = n == mn ? g : recv + cur[r];
                if (n != mn) cur[r] += (int)z->shards[s].count;
            }
            for (size_t i = 0; i < z->shards[s].count; i++) {
                float acc = src[0][i];
                for (int n = 1; n < z->nnodes; n++) acc += src[n][i];
                g[i] = scale == 1.0 ? acc : (float)(acc * scale);
            }
        }
    }
    return STATUS_OK;
}

/* Unpacks a stage's receive: shard s from the one rank that sends it to me (or none), in
 * index order. */
static void zero_hier_unpack(zero *z, stage st, int a, int b, const float *recv, float *params)
{
    int me = z->rank, mn = z->node_of[me], *cur = z->hcur;
    for (int s = a; s < b; s++) {
        int o = z->shards[s].owner, d = delegate(z, mn, s), r = -1;
        if (st == AG_NODES && d == me && z->node_of[o] != mn) r = o;
        if (st == AG_NODE && d != me) r = d;
        if (r < 0) continue;
        memcpy(params + z->shards[s].offset, recv + cur[r], z->shards[s].count * sizeof(float));
        cur[r] += (int)z->shards[s].count;
    }
}

status zero_hier_allgather(zero *z, float *params, double timeout_s)
{
    comm_group_set_timeout(z->group, timeout_s);
    comm_group_set_timeout(z->node_group, timeout_s);
    float *send = z->hbuf, *recv = z->hbuf + z->hbuf_half;
    for (int k = 0; k < z->nrounds; k++) {
        int a = z->round_first[k], b = z->round_first[k + 1];
        TRY(zero_hier_stage(z, k, AG_NODES, params, send, recv));
        zero_hier_unpack(z, AG_NODES, a, b, recv, params);
        TRY(zero_hier_stage(z, k, AG_NODE, params, send, recv));
        zero_hier_unpack(z, AG_NODE, a, b, recv, params);
    }
    return STATUS_OK;
}
