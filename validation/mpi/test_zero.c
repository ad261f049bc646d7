/* test_zero — ZeRO-1 shards and consistent-hash ownership (zero.h), at 1-4 ranks.
 *
 * Checks: ownership is deterministic and the same on every rank; every shard has exactly
 * one owner and the packed sizes sum to the parameter count; the consistent-hashing
 * property for N -> M (exactly: on a shrink a shard whose owner survives keeps it, on a
 * grow shards move only to new ranks; statistically: the moved fraction is within a
 * derived tolerance of 1 - M/N or 1 - N/M); the load balance; the sharded AdamW and SGD
 * steps followed by the all-gather equal the whole-buffer steps bit for bit on random
 * data; a checkpoint with a sharded group reads back into full and into sharded buffers;
 * the gradient's reduce-scatter to the owners (in one round and in many) gives each owner
 * the exact scaled sum of its shards, leaves the others' floats alone and counts
 * (n-1)/n of the gradient's bytes, and the norm from the owned shards matches the whole
 * reduced gradient's; across the runtime's nodes (np3 as 2 + 1, np4 as 2 x 2) the two-level
 * path's owned floats equal a reference summed in its documented order bit for bit (in one
 * round and in many), its all-gather delivers every owner's floats, and the group counts
 * exactly the floats that cross between nodes, once each way.
 * Usage: test_zero [--ranks-per-node N] */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "nn/optim.h"
#include "nn/param.h"
#include "base/runtime.h"
#include "nn/zero.h"
#include "cpu/optim.h"
#define CHECK_MPI  /* check() agreed by every rank */
#include "../check.h"

/* A small transformer-like table: matrices (decay), biases and norms (no decay), a
 * scalar; sizes not multiples of the shard size, so tails are short. */
static void table_build(param_table *pt, int layers)
{
    param_table_init(pt);
    param_add(pt, "wte.weight", 0, true, 2, 300, 64, 0, 0);
    for (int l = 0; l < layers; l++) {
        char n[64];
        snprintf(n, sizeof n, "h.%d.ln_1.weight", l);
        param_add(pt, n, l + 1, false, 1, 64, 0, 0, 0);
        snprintf(n, sizeof n, "h.%d.attn.c_attn.weight", l);
        param_add(pt, n, l + 1, true, 2, 64, 192, 0, 0);
        snprintf(n, sizeof n, "h.%d.attn.c_attn.bias", l);
        param_add(pt, n, l + 1, false, 1, 192, 0, 0, 0);
        snprintf(n, sizeof n, "h.%d.mlp.c_fc.weight", l);
        param_add(pt, n, l + 1, true, 2, 64, 257, 0, 0);
    }
    param_add(pt, "logit_scale", layers + 1, false, 0, 0, 0, 0, 0);
}

static uint64_t rnd_state;
static float rnd(void)
{
    rnd_state = zero_mix(rnd_state);
    return (float)((double)(rnd_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The same random content on every rank (same seed). */
static void fill_random(const param_table *pt, float *buf, uint64_t seed, bool positive)
{
    rnd_state = seed;
    for (int e = 0; e < pt->count; e++)
        for (size_t i = 0; i < pt->entries[e].count; i++) {
            float x = rnd();
            buf[pt->entries[e].offset + i] = positive ? x * x * 1e-3f : x;
        }
}

static void test_ownership(const runtime *rt)
{
    param_table pt;
    table_build(&pt, 12);
    zero_options o = { 2048, ZERO_VNODES_DEFAULT, 2, 0 };
    zero a, b;
    CHECK(zero_init(&a, rt->world, &pt, &o) == STATUS_OK && zero_init(&b, rt->world, &pt, &o) == STATUS_OK, "zero");
    char why[256] = "";
    bool same = a.nshards == b.nshards && a.owned == b.owned;
    for (int i = 0; same && i < a.nshards; i++) same = a.shards[i].owner == b.shards[i].owner;
    check(rt, same, "ownership is deterministic (two inits agree)", "two inits differ");
    /* the same owners on every rank: rank 0's hash of the owner array against everyone's */
    uint64_t h = 0xcbf29ce484222325ull, h0;
    for (int i = 0; i < a.nshards; i++) h = zero_mix(h ^ (uint64_t)a.shards[i].owner ^ ((uint64_t)i << 32));
    h0 = h;
    MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, rt->world);
    check(rt, h == h0, "the owner map is identical on every rank", "owner map differs from rank 0's");
    /* exactly one owner per shard */
    int *held = calloc((size_t)a.nshards, sizeof *held);
    for (int i = 0; i < a.nshards; i++) held[i] = a.ck_mine[i];
    MPI_Allreduce(MPI_IN_PLACE, held, a.nshards, MPI_INT, MPI_SUM, rt->world);
    int bad = 0;
    for (int i = 0; i < a.nshards; i++) bad += held[i] != 1;
    snprintf(why, sizeof why, "%d of %d shards held by other than one rank", bad, a.nshards);
    check(rt, bad == 0, "every shard is owned by exactly one rank", why);
    free(held);
    unsigned long long owned = a.owned, sum = 0;
    MPI_Allreduce(&owned, &sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, rt->world);
    size_t counted = 0;
    for (int r = 0; r < a.size; r++) counted += (size_t)a.counts[r];
    snprintf(why, sizeof why, "sum %llu, counts %zu, parameters %zu", sum, counted, param_numel(&pt));
    check(rt, sum == param_numel(&pt) && counted == sum && a.numel == sum,
          "packed sizes sum to the parameter count", why);
    /* shards tile the tensors and never cross one */
    bool tile = true;
    for (int i = 0; i < a.nshards && tile; i++) {
        const zero_shard *s = &a.shards[i];
        const param_entry *e = &pt.entries[s->entry];
        tile = s->offset >= e->offset && s->offset + s->count <= e->offset + e->count && s->count <= o.shard_numel;
    }
    check(rt, tile, "shards stay inside their tensors, at most shard_numel floats", "a shard crosses a tensor");
    /* balance: V = 256 points (the default) give a rank's share of the ring a relative
     * spread of about 1/sqrt(256) = 6%; 1.5x the mean leaves room for the shards' own
     * granularity (a few hundred shards) */
    size_t mx;
    double mean;
    zero_balance(&a, &mx, &mean);
    snprintf(why, sizeof why, "largest %zu floats, mean %.0f (%d shards)", mx, mean, a.nshards);
    check(rt, a.nshards >= 200 && (double)mx <= 1.5 * mean, "loads balanced: max owned <= 1.5 x mean (default zero.vnodes)", why);
    if (rt->rank == 0) printf("# %d shards, largest share %.3f of the mean\n", a.nshards, (double)mx / mean);
    zero_free(&a);
    zero_free(&b);
    param_table_free(&pt);
}

/* N -> M for several pairs; pure computation, the same on every rank. */
static void test_resize(const runtime *rt)
{
    param_table pt;
    table_build(&pt, 24);
    zero_shard *sh;
    int n;
    CHECK(zero_shards_build(&pt, 256, &sh, &n) == STATUS_OK, "shards");
    const int pairs[][2] = { { 4, 3 }, { 4, 2 }, { 8, 5 }, { 16, 12 }, { 3, 1 }, { 3, 4 }, { 2, 4 }, { 5, 8 }, { 12, 16 } };
    const int V = ZERO_VNODES_DEFAULT;
    char why[256];
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        int N = pairs[p][0], M = pairs[p][1];
        zero_ring rn, rm;
        CHECK(zero_ring_init(&rn, N, V) == STATUS_OK && zero_ring_init(&rm, M, V) == STATUS_OK, "rings");
        int moved = 0, violations = 0;
        for (int i = 0; i < n; i++) {
            int a = zero_ring_owner(&rn, sh[i].key), b = zero_ring_owner(&rm, sh[i].key);
            if (a != b) moved++;
            if (M < N && a < M && a != b) violations++;  /* a surviving owner must keep its shard */
            if (M > N && a != b && b < N) violations++;  /* a shard may only move to a new rank */
        }
        snprintf(why, sizeof why, "%d shards moved where they must not", violations);
        char what[160];
        snprintf(what, sizeof what, "%d -> %d ranks: %s", N, M,
                 M < N ? "shards of surviving ranks keep their owner" : "shards move only to the new ranks");
        check(rt, violations == 0, what, why);
        /* Expected fraction f = k/big with k = |N - M| ranks added or removed. Spread: the
         * k ranks' share of the ring (V arcs each of about exponential length 1/(big V)):
         * sqrt(k) / (big sqrt(V)); the sampling of n shards: sqrt(f(1-f)/n). 4 sigma. */
        int big = N > M ? N : M, k = abs(N - M);
        double f = (double)k / big, got = (double)moved / n;
        double sigma = sqrt((double)k / ((double)big * big * V) + f * (1 - f) / n);
        snprintf(why, sizeof why, "moved %.4f, expected %.4f +- %.4f", got, f, 4 * sigma);
        snprintf(what, sizeof what, "%d -> %d ranks: moved fraction %.3f within 4 sigma of 1 - %d/%d = %.3f", N, M, got,
                 M < N ? M : N, big, f);
        check(rt, fabs(got - f) <= 4 * sigma, what, why);
        zero_ring_free(&rn);
        zero_ring_free(&rm);
    }
    if (rt->rank == 0) printf("# %d shards in the resize checks\n", n);
    free(sh);
    param_table_free(&pt);
}

/* The sharded step + all-gather against the whole-buffer step, 3 updates, bit for bit. */
static void test_step(const runtime *rt, bool sgd)
{
    param_table pt;
    table_build(&pt, 6);
    param_buffers full, part;
    CHECK(param_buffers_init(&full, &pt, true) == STATUS_OK && param_buffers_init(&part, &pt, false) == STATUS_OK,
          "buffers");
    fill_random(&pt, full.params, 1, false);
    fill_random(&pt, full.m, 2, false);
    fill_random(&pt, full.v, 3, true);
    memcpy(part.params, full.params, pt.total * sizeof(float));
    zero_options o = { 1000, ZERO_VNODES_DEFAULT, sgd ? 1 : 2, 0 };
    zero z;
    CHECK(zero_init(&z, rt->world, &pt, &o) == STATUS_OK, "zero");
    for (int i = 0; i < z.nmine; i++) {  /* the owned part of the same starting moments */
        memcpy(z.m + z.mine[i].packed, full.m + z.mine[i].offset, z.mine[i].count * sizeof(float));
        if (z.v) memcpy(z.v + z.mine[i].packed, full.v + z.mine[i].offset, z.mine[i].count * sizeof(float));
    }
    float *scratch = malloc(pt.total * sizeof(float));
    adamw_hparams ah = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    sgd_hparams sh = { .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2 };
    for (long t = 1; t <= 3; t++) {
        fill_random(&pt, full.grads, 100 + (uint64_t)t, false);
        memcpy(part.grads, full.grads, pt.total * sizeof(float));
        double lr = 1e-2 / (double)t;
        if (sgd) {
            optim_sgd_step(&pt, &full, &sh, lr, t);
            zero_sgd_step(&z, &pt, &part, &sh, lr, t);
        } else {
            optim_adamw_step(&pt, &full, &ah, lr, t);
            zero_adamw_step(&z, &pt, &part, &ah, lr, t);
        }
        CHECK(zero_allgather_params(&z, part.params, scratch, 300) == STATUS_OK, "zero_allgather_params");
    }
    size_t diff = 0, mdiff = 0;
    for (size_t i = 0; i < pt.total; i++) diff += memcmp(&full.params[i], &part.params[i], sizeof(float)) != 0;
    for (int i = 0; i < z.nmine; i++) {
        const optim_range *r = &z.mine[i];
        mdiff += memcmp(z.m + r->packed, full.m + r->offset, r->count * sizeof(float)) != 0;
        if (z.v) mdiff += memcmp(z.v + r->packed, full.v + r->offset, r->count * sizeof(float)) != 0;
    }
    char what[128], why[128];
    snprintf(why, sizeof why, "%zu params and %zu owned moment shards differ", diff, mdiff);
    snprintf(what, sizeof what, "sharded %s step + all-gather equals the full step bit for bit (3 updates)",
             sgd ? "SGD (Nesterov, weight decay)" : "AdamW");
    check(rt, diff == 0 && mdiff == 0, what, why);
    free(scratch);
    zero_free(&z);
    param_buffers_free(&full);
    param_buffers_free(&part);
    param_table_free(&pt);
}

/* A checkpoint whose optim/m group is sharded: written by this world size, read back
 * into a full buffer (as a run without ZeRO would) and into fresh packed buffers. */
static void test_ckpt(const runtime *rt)
{
    char base[256] = "";
    mpi_test_tmpdir(rt, "zero", base, sizeof base);
    param_table pt;
    table_build(&pt, 4);
    param_buffers pb;
    CHECK(param_buffers_init(&pb, &pt, true) == STATUS_OK, "buffers");
    fill_random(&pt, pb.params, 7, false);
    fill_random(&pt, pb.m, 8, false);
    zero_options o = { 777, ZERO_VNODES_DEFAULT, 1, 0 };
    zero z;
    CHECK(zero_init(&z, rt->world, &pt, &o) == STATUS_OK, "zero");
    for (int i = 0; i < z.nmine; i++)
        memcpy(z.m + z.mine[i].packed, pb.m + z.mine[i].offset, z.mine[i].count * sizeof(float));
    uint64_t blob = 42 + (uint64_t)rt->rank;
    ckpt_content c;
    memset(&c, 0, sizeof c);
    c.step = 5, c.model = "tiny-test", c.table_hash = param_table_hash(&pt);
    c.groups[0] = (ckpt_tensors){ "params", &pt, pb.params, false };
    c.groups[1] = (ckpt_tensors){ "optim/m", &pt, z.m, false };
    c.shards[1] = &z.ck;
    c.ngroups = 2;
    c.blobs[0] = (ckpt_blob){ "rng", &blob, sizeof blob, false, false };
    c.nblobs = 1;
    ckpt_writer *w;
    status st = ckpt_writer_init(&w, rt->world, base, 2, false, &c);
    if (st == STATUS_OK) st = ckpt_save(w, &c);
    if (st == STATUS_OK) st = ckpt_wait(w);
    ckpt_writer_free(w);
    check(rt, st == STATUS_OK, "a checkpoint with a sharded group is written", status_str(st));

    /* read as a run without ZeRO: full buffers */
    param_buffers got;
    CHECK(param_buffers_init(&got, &pt, true) == STATUS_OK, "buffers");
    ckpt_content r = c;
    r.groups[0].data = got.params, r.groups[1].data = got.m, r.shards[1] = NULL;
    ckpt_info info;
    st = ckpt_load(rt->world, base, "auto", &r, &info);
    bool same = st == STATUS_OK && !memcmp(got.params, pb.params, pt.total * sizeof(float)) &&
                !memcmp(got.m, pb.m, pt.total * sizeof(float));
    check(rt, same, "the sharded checkpoint loads into full buffers (checksums verified)", status_str(st));

    /* read sharded again: a different shard size, so other ranges than were written */
    zero_options o2 = { 500, ZERO_VNODES_DEFAULT, 1, 0 };
    zero z2;
    CHECK(zero_init(&z2, rt->world, &pt, &o2) == STATUS_OK, "zero");
    r.groups[1].data = z2.m, r.shards[1] = &z2.ck;
    st = ckpt_load(rt->world, base, "auto", &r, &info);
    size_t bad = 0;
    for (int i = 0; i < z2.nmine; i++)
        bad += memcmp(z2.m + z2.mine[i].packed, pb.m + z2.mine[i].offset, z2.mine[i].count * sizeof(float)) != 0;
    check(rt, st == STATUS_OK && bad == 0, "the checkpoint loads into other shards (checksums verified)",
          status_str(st));
    zero_free(&z2);
    param_buffers_free(&got);
    zero_free(&z);
    param_buffers_free(&pb);
    param_table_free(&pt);
    MPI_Barrier(rt->world);
    mpi_test_rmtree(rt, base);
}

/* zero_reduce_scatter_grads against the allreduce it replaces, on integer inputs (every
 * sum exact in any order; scale 1/4 exact): owned floats bit for bit, the others
 * untouched; in one round and in rounds of 777 floats; bytes and the norm. */
static void test_reduce_scatter(const runtime *rt)
{
    param_table pt;
    table_build(&pt, 6);
    zero_options o = { 1000, ZERO_VNODES_DEFAULT, 2, 0 };
    float *g = malloc(pt.total * sizeof(float)), *want = malloc(pt.total * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        zero z;
        o.pack_numel = pass == 1 ? 777 : 0;
        CHECK(zero_init(&z, rt->world, &pt, &o) == STATUS_OK, "zero");
        bool ok = true;
        uint64_t before = comm_group_bytes(z.group);
        for (int t = 0; t < 2 && ok; t++) {  /* twice: the tables are reused */
            for (size_t i = 0; i < pt.total; i++) {
                g[i] = (float)((int)((i * 7 + (size_t)rt->rank * 13 + (size_t)t) % 61) - 30);
                double sum = 0;
                for (int r = 0; r < rt->size; r++) sum += (int)((i * 7 + (size_t)r * 13 + (size_t)t) % 61) - 30;
                want[i] = (float)(sum * 0.25);
            }
            ok = zero_reduce_scatter_grads(&z, g, 0.25, 60) == STATUS_OK;
            for (int k = 0; k < z.nshards && ok; k++) {
                const zero_shard *s = &z.shards[k];
                for (size_t i = s->offset; i < s->offset + s->count && ok; i++)
                    ok = s->owner == z.rank ? g[i] == want[i]
                                            : g[i] == (float)((int)((i * 7 + (size_t)rt->rank * 13 + (size_t)t) % 61) - 30);
            }
        }
        uint64_t bytes = comm_group_bytes(z.group) - before,
                 expect = 2 * (uint64_t)((double)z.numel * 4 * (rt->size - 1) / rt->size);
        char what[160], why[128];
        snprintf(what, sizeof what, "reduce-scatter to the owners %s: owned floats exact, the rest untouched",
                 pass ? "in rounds of 777 floats" : "in one round");
        check(rt, ok, what, "a wrong or clobbered float");
        snprintf(why, sizeof why, "counted %llu, expected %llu", (unsigned long long)bytes,
                 (unsigned long long)expect);
        check(rt, pass == 1 || bytes == expect, "the reduce-scatter counts (n-1)/n of the gradient's bytes", why);
        if (pass == 0) {  /* the norm from the owned shards against the whole reduced gradient's (its
                             alignment gaps zero, as a trainer's zeroed gradient has them) */
            float *w = calloc(pt.total, sizeof(float));
            for (int k = 0; k < z.nshards; k++)
                memcpy(w + z.shards[k].offset, want + z.shards[k].offset, z.shards[k].count * sizeof(float));
            double sq = 0, whole = grad_norm_sq(w, pt.total);
            free(w);
            ok = zero_grad_norm_sq(&z, &pt, g, 60, &sq, NULL) == STATUS_OK &&
                 fabs(sq - whole) <= 1e-12 * whole;
            snprintf(why, sizeof why, "%.17g against %.17g", sq, whole);
            check(rt, ok, "the squared norm from the owned shards matches the whole gradient's", why);
        }
        zero_free(&z);
    }
    free(g), free(want);
    param_table_free(&pt);
}

/* One rank's gradient in test_hier: not integers, so the order of every sum shows. */
static float hier_grad(size_t i, int r)
{
    uint64_t x = zero_mix((uint64_t)i * 1000003u + (uint64_t)r * 7919u + 17u);
    return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (float)(1 + r);
}

/* The two-level path (zero_use_nodes) on the runtime's nodes: each owner's floats equal,
 * bit for bit, a reference summed in the documented order (each node's ranks in
 * local-index order, then the nodes in order; 1/3 scale: not exact), in one round and
 * in rounds of 777 floats; the all-gather gives every rank every owner's floats; the
 * group counts exactly the floats that cross between nodes, once each way. */
static void test_hier(const runtime *rt)
{
    param_table pt;
    table_build(&pt, 6);
    zero_options o = { 1000, ZERO_VNODES_DEFAULT, 2, 0 };
    float *g = malloc(pt.total * sizeof(float)), *want = malloc(pt.total * sizeof(float));
    float *p = malloc(pt.total * sizeof(float));
    int *node = malloc((size_t)rt->size * sizeof(int));
    MPI_Allgather(&rt->node_id, 1, MPI_INT, node, 1, MPI_INT, rt->world);
    for (int pass = 0; pass < 2; pass++) {
        zero z;
        o.pack_numel = pass == 1 ? 777 : 0;
        CHECK(zero_init(&z, rt->world, &pt, &o) == STATUS_OK, "zero");
        CHECK(zero_use_nodes(&z, rt->node_id, 60) == STATUS_OK, "zero_use_nodes");
        bool expect_hier = rt->nnodes > 1 && rt->max_local_size > 1;
        check(rt, z.hier == expect_hier, "the two-level path is taken exactly with several nodes of which one "
              "has two ranks", "wrong choice");
        if (!z.hier) {
            zero_free(&z);
            break;
        }
        for (size_t i = 0; i < pt.total; i++) {
            float acc = 0;
            for (int n = 0; n < rt->nnodes; n++) {
                float part = 0;
                bool first = true;
                for (int r = 0; r < rt->size; r++)  /* local index: ascending rank within the node */
                    if (node[r] == n) part = first ? hier_grad(i, r) : part + hier_grad(i, r), first = false;
                acc = n == 0 ? part : acc + part;
            }
            want[i] = (float)(acc * (1.0 / 3.0));
            g[i] = hier_grad(i, rt->rank);
        }
        uint64_t before = comm_group_bytes(z.group), nbefore = comm_group_bytes(z.node_group);
        bool ok = zero_reduce_scatter_grads(&z, g, 1.0 / 3.0, 60) == STATUS_OK;
        size_t wrong = 0, crossed = 0, inside = 0;
        for (int k = 0; k < z.nshards && ok; k++) {
            const zero_shard *s = &z.shards[k];
            for (size_t i = s->offset; i < s->offset + s->count; i++)
                if (s->owner == z.rank) wrong += memcmp(&g[i], &want[i], sizeof(float)) != 0;
            crossed += s->count * (size_t)(rt->nnodes - 1);
            inside += s->count * (size_t)(rt->size - rt->nnodes);
        }
        char what[160], why[160];
        snprintf(why, sizeof why, "%zu floats differ", wrong);
        snprintf(what, sizeof what, "two-level reduce-scatter %s: owned floats equal the node-then-nodes sum bit "
                 "for bit", pass ? "in rounds of 777 floats" : "in one round");
        check(rt, ok && wrong == 0, what, why);
        /* the all-gather: each owner's floats (its rank's mark) reach every rank */
        for (int k = 0; k < z.nshards; k++)
            for (size_t i = z.shards[k].offset; i < z.shards[k].offset + z.shards[k].count; i++)
                p[i] = z.shards[k].owner == z.rank ? (float)(i % 1000) + 0.25f * (float)z.rank : -1.0f;
        ok = zero_allgather_params(&z, p, g, 60) == STATUS_OK;
        wrong = 0;
        for (int k = 0; k < z.nshards && ok; k++)
            for (size_t i = z.shards[k].offset; i < z.shards[k].offset + z.shards[k].count; i++)
                wrong += p[i] != (float)(i % 1000) + 0.25f * (float)z.shards[k].owner;
        snprintf(why, sizeof why, "%zu floats differ", wrong);
        check(rt, ok && wrong == 0, "two-level all-gather: every owner's floats on every rank", why);
        /* bytes: summed over the group, each float crosses between nodes once per non-owning
           node each way, and moves inside nodes once per other rank of its node */
        uint64_t mine[2] = { comm_group_bytes(z.group) - before, comm_group_bytes(z.node_group) - nbefore }, all[2];
        MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, rt->world);
        uint64_t ex[2] = { 2 * 4 * (uint64_t)crossed, 2 * 4 * (uint64_t)inside };
        snprintf(why, sizeof why, "between nodes %llu (expected %llu), inside %llu (expected %llu)",
                 (unsigned long long)all[0], (unsigned long long)ex[0], (unsigned long long)all[1],
                 (unsigned long long)ex[1]);
        check(rt, all[0] == ex[0] && all[1] == ex[1], "the group counts 2G(nodes - 1) between nodes per step", why);
        zero_free(&z);
    }
    free(g), free(want), free(p), free(node);
    param_table_free(&pt);
}

int main(int argc, char **argv)
{
    runtime rt;
    mpi_test_start(&rt, &argc, &argv);
    if (rt.rank == 0) printf("# test_zero: %d ranks\n", rt.size);
    test_ownership(&rt);
    test_resize(&rt);
    test_step(&rt, false);
    test_step(&rt, true);
    test_ckpt(&rt);
    test_reduce_scatter(&rt);
    test_hier(&rt);
    if (rt.rank == 0) printf("%s: %d failed checks\n", failures ? "FAIL" : "ok", failures);
    int f = failures;
    runtime_free(&rt);
    return f ? 1 : 0;
}
