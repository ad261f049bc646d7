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
    return comm_group_init(&z->node_group, z->comm, &go);
}

/* The rounds at the first use (they depend on pack_numel): shards in index order, a
 * round closed before any rank's load in any stage would pass half of pack_numel. */
static status zero_hier_setup(zero *z)
{
    if (z->pack_numel == 0) z->pack_numel = ZERO_PACK_NUMEL;
    size_t half = z->pack_numel / 2 ? z->pack_numel / 2 : 1, need = 1;
    size_t *load = calloc(2 * (size_t)z->size, sizeof *load);  /* as delegate, as owner */
    z->round_first = malloc(((size_t)z->nshards + 2) * sizeof(int));
    z->a2a = malloc(5 * (size_t)z->size * sizeof(int));
    z->hsrc = malloc(((size_t)z->size + 1) * sizeof *z->hsrc);
    if (!load || !z->round_first || !z->a2a || !z->hsrc) {
        free(load);
        return STATUS_NOMEM;
    }
    size_t total = 0, peak = 0;
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
    free(load);
    need = peak > need ? peak : need;
    z->hbuf_half = need;
    z->hbuf = malloc(2 * need * sizeof(float));
    if (!z->hbuf) {
        log_error("zero: out of memory for the hierarchical exchange's %.1f MiB", (double)need * 8 / 1048576.0);
        return STATUS_NOMEM;
    }
    return STATUS_OK;
}

/* An all-to-all stage of one round. Each shard s in [a, b) is sent by `from(s)` to the
 * ranks `to(s)` lists; send and receive blocks hold the shards in index order. */
typedef enum stage { RS_NODE, RS_OWNER, AG_NODES, AG_NODE } stage;

/* Whether this rank sends shard s to rank r in stage st (r != me). */
static bool sends_to(const zero *z, stage st, int s, int r)
{
    int me = z->rank, mn = z->node_of[me], rn = z->node_of[r], o = z->shards[s].owner;
    switch (st) {
    case RS_NODE: return rn == mn && delegate(z, mn, s) == r;
    case RS_OWNER: return r == o && rn != mn && delegate(z, mn, s) == me;
    case AG_NODES: return me == o && rn != mn && delegate(z, rn, s) == r;
    case AG_NODE: return rn == mn && delegate(z, mn, s) == me;
    }
    return false;
}

static status zero_hier_stage(zero *z, stage st, int a, int b, const float *src, float *send, float *recv)
{
    int *sc = z->a2a, *sd = sc + z->size, *rc = sd + z->size, *rd = rc + z->size;
    size_t sat = 0, rat = 0;
    for (int r = 0; r < z->size; r++) {
        sc[r] = rc[r] = 0;
        if (r == z->rank) continue;
        for (int s = a; s < b; s++) {
            int c = (int)z->shards[s].count;
            if (sends_to(z, st, s, r)) {
                memcpy(send + sat + (size_t)sc[r], src + z->shards[s].offset, (size_t)c * sizeof(float));
                sc[r] += c;
            }
            /* what r sends me: the same rule seen from r */
            int me = z->rank, mn = z->node_of[me], rn = z->node_of[r], o = z->shards[s].owner;
            bool from;
            switch (st) {
            case RS_NODE: from = rn == mn && delegate(z, mn, s) == me; break;
            case RS_OWNER: from = me == o && rn != mn && delegate(z, rn, s) == r; break;
            case AG_NODES: from = r == o && rn != mn && delegate(z, mn, s) == me; break;
            default: from = rn == mn && delegate(z, mn, s) == r; break;
            }
            if (from) rc[r] += c;
        }
        sd[r] = (int)sat, rd[r] = (int)rat;
        sat += (size_t)sc[r], rat += (size_t)rc[r];
    }
    CHECK(sat <= z->hbuf_half && rat <= z->hbuf_half, "zero: a round past its buffer");
    comm_group *g = st == RS_NODE || st == AG_NODE ? z->node_group : z->group;
    return comm_group_alltoallv(g, send, sc, sd, recv, rc, rd, sizeof(float));
}

status zero_hier_reduce_scatter(zero *z, float *grads, double scale, double timeout_s)
{
    if (!z->hbuf) TRY(zero_hier_setup(z));
    comm_group_set_timeout(z->group, timeout_s);
    comm_group_set_timeout(z->node_group, timeout_s);
    float *send = z->hbuf, *recv = z->hbuf + z->hbuf_half;
    int me = z->rank, mn = z->node_of[me], *cur = z->a2a + 4 * z->size;
    const float **src = z->hsrc;
    for (int k = 0; k < z->nrounds; k++) {
        int a = z->round_first[k], b = z->round_first[k + 1];
        TRY(zero_hier_stage(z, RS_NODE, a, b, grads, send, recv));
        memcpy(cur, z->a2a + 3 * z->size, (size_t)z->size * sizeof(int));  /* each source's next float */
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
        TRY(zero_hier_stage(z, RS_OWNER, a, b, grads, send, recv));
        memcpy(cur, z->a2a + 3 * z->size, (size_t)z->size * sizeof(int));
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

/* Unpacks a stage's receive: shard s from rank `from(s)` (or none: -1), in index order. */
static void zero_hier_unpack(zero *z, stage st, int a, int b, const float *recv, float *params)
{
    int me = z->rank, mn = z->node_of[me], *cur = z->a2a + 4 * z->size;
    memcpy(cur, z->a2a + 3 * z->size, (size_t)z->size * sizeof(int));
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
    if (!z->hbuf) TRY(zero_hier_setup(z));
    comm_group_set_timeout(z->group, timeout_s);
    comm_group_set_timeout(z->node_group, timeout_s);
    float *send = z->hbuf, *recv = z->hbuf + z->hbuf_half;
    for (int k = 0; k < z->nrounds; k++) {
        int a = z->round_first[k], b = z->round_first[k + 1];
        TRY(zero_hier_stage(z, AG_NODES, a, b, params, send, recv));
        zero_hier_unpack(z, AG_NODES, a, b, recv, params);
        TRY(zero_hier_stage(z, AG_NODE, a, b, params, send, recv));
        zero_hier_unpack(z, AG_NODE, a, b, recv, params);
    }
    return STATUS_OK;
}
