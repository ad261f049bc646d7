/* test_tp — the process grid (comm/grid.h), the transformers' tensor parallelism
 * (gpt2_init_tp, bert_init_tp) and their pipeline stages (model_init_parallel's
 * nn_stage), at 1-4 ranks.
 *
 * Checks: the shape rules (dp derived, a product that is not the world refused); every
 * rank's coordinates and its groups' members follow rank = t + tp (p + pp d); the dp
 * group's runtime has the right nodes; tp groups inside nodes are seen as such; the
 * model's grid rules (tp must divide the heads and the padded vocabulary, pp at most the
 * blocks, tp and pp only for the transformers). Then, for every tp that divides the world
 * (tp2 x dp2 at 4 ranks too), each rank builds the whole GPT-2 tiny (BERT tiny: tp2) and
 * its tensor-parallel shard from
 * one seed and compares: the shard's parameters are slices of the whole model's (exact);
 * the loss of one forward (with ignored targets); after the backward, every gradient
 * shard against the slice of the whole gradient.
 *
 * Tolerances, derived: the shard computes the same sums in another association (a
 * row-parallel matmul adds tp partial sums of K/tp terms; the vocabulary-parallel
 * lse adds tp partial double sums), so each result differs by a few float roundings of
 * the terms' magnitude: rel 1e-5 on the loss (about 100 eps_f32 of a quantity of order
 * log V); on a gradient element |d| <= 1e-4 |ref| + 1e-5 max|ref| of the tensor (a
 * gradient is a sum of BT products through L blocks, each term rounded: sqrt(BT L)
 * eps_f32 relative to the largest term, times a margin of 10).
 *
 * Pipeline stages, on every rank alone: GPT-2 tiny's and BERT tiny's blocks as two
 * stages, two micro-batches in flight (activation sets 0 and 1, forwards of both before
 * either backward, as 1F1B's warm-up does), the boundary copied between the stages by
 * hand: the losses, and every gradient but the tied embedding's, are bit-identical to
 * the whole model's (the same operations in the same order); the embedding's two
 * halves, summed, match the whole model's within the tolerance above (the four
 * contributions added in another order); each stage counts the whole model's FLOPs.
 * Usage: test_tp [--ranks-per-node N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/runtime.h"
#include "comm/grid.h"
#include "nn/model.h"
#define CHECK_MPI
#include "../check.h"

static void test_shapes(const runtime *rt)
{
    grid_shape s = { 1, 1, 0 };
    check(rt, grid_shape_resolve(&s, 4, NULL) == STATUS_OK && s.dp == 4, "dp = 0 is derived: tp1 x pp1 at 4 ranks is dp4",
          "not derived");
    s = (grid_shape){ 2, 1, 0 };
    check(rt, grid_shape_resolve(&s, 4, NULL) == STATUS_OK && s.dp == 2, "tp2 at 4 ranks derives dp2", "not dp2");
    s = (grid_shape){ 2, 2, 2 };
    status a = grid_shape_resolve(&s, 4, "test.ini:3");
    s = (grid_shape){ 3, 1, 0 };
    status b = grid_shape_resolve(&s, 4, NULL);
    check(rt, a == STATUS_INPUT, "tp2 x pp2 x dp2 at 4 ranks is refused (product 8)", "accepted");
    check(rt, b == STATUS_INPUT, "tp3 does not divide 4 ranks: refused", "accepted");
}

static void test_grid(const runtime *rt, int tp, int pp)
{
    grid_shape s = { tp, pp, 0 };
    if (rt->size % (tp * pp) != 0) return;
    CHECK(grid_shape_resolve(&s, rt->size, NULL) == STATUS_OK, "shape");
    grid g;
    CHECK(grid_init(&g, rt, &s, 30) == STATUS_OK, "grid_init");
    char what[128];
    snprintf(what, sizeof what, "tp%d x pp%d x dp%d: coordinates, group ranks and sizes", tp, pp, s.dp);
    int r, n[3], rk[3];
    MPI_Comm_size(g.tp_comm, &n[0]), MPI_Comm_rank(g.tp_comm, &rk[0]);
    MPI_Comm_size(g.pp_comm, &n[1]), MPI_Comm_rank(g.pp_comm, &rk[1]);
    MPI_Comm_size(g.dp_comm, &n[2]), MPI_Comm_rank(g.dp_comm, &rk[2]);
    r = grid_rank_of(&s, g.tp_rank, g.pp_rank, g.dp_rank);
    bool ok = r == rt->rank && n[0] == tp && n[1] == pp && n[2] == s.dp && rk[0] == g.tp_rank && rk[1] == g.pp_rank &&
              rk[2] == g.dp_rank && g.dp_rt.size == s.dp && g.dp_rt.rank == g.dp_rank;
    /* the members of my tp group are world ranks r - t + k */
    int members[64];
    MPI_Allgather(&rt->rank, 1, MPI_INT, members, 1, MPI_INT, g.tp_comm);
    for (int k = 0; k < tp; k++) ok = ok && members[k] == rt->rank - g.tp_rank + k;
    check(rt, ok, what, "a coordinate or a group differs from rank = t + tp (p + pp d)");
    /* the dp runtime's nodes: the world's nodes its members are on */
    int nodes = 0, *node = calloc((size_t)s.dp, sizeof *node);
    MPI_Allgather(&rt->node_id, 1, MPI_INT, node, 1, MPI_INT, g.dp_comm);
    for (int k = 0; k < s.dp; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen = seen || node[j] == node[k];
        nodes += !seen;
    }
    free(node);
    snprintf(what, sizeof what, "tp%d x pp%d x dp%d: the dp group's runtime has %d nodes, tp groups %s nodes", tp, pp,
             s.dp, nodes, g.tp_in_node ? "inside" : "across");
    int lo = rt->node_id, hi = rt->node_id;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, g.tp_comm);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, g.tp_comm);
    int inside = lo == hi;
    MPI_Allreduce(MPI_IN_PLACE, &inside, 1, MPI_INT, MPI_LAND, rt->world);
    check(rt, g.dp_rt.nnodes == nodes && g.tp_in_node == (inside != 0), what, "node counts disagree");
    grid_print(&g, rt, stdout);
    grid_free(&g);
}

static void spec_gpt2_tiny(model_spec *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "gpt2-tiny");
    s->family = MODEL_FAMILY_GPT2;
    CHECK(gpt2_config_named(&s->gpt2, "gpt2-tiny") == STATUS_OK, "gpt2-tiny");
}

static void spec_bert_tiny(model_spec *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "bert-tiny");
    s->family = MODEL_FAMILY_BERT;
    CHECK(bert_config_named(&s->bert, "bert-tiny") == STATUS_OK, "bert-tiny");
}

static void test_model_rules(const runtime *rt)
{
    model_spec s, b, b4, r;
    spec_gpt2_tiny(&s);
    spec_bert_tiny(&b);
    b4 = b;
    b4.bert.num_heads = 4;  /* 4 heads, and 30522 = 2 x 15261 rows that 4 ranks cannot split */
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "resnet18");
    r.family = MODEL_FAMILY_RESNET;
    status ok2 = model_spec_check_grid(&s, 2, 2), heads = model_spec_check_grid(&s, 3, 1);
    status deep = model_spec_check_grid(&s, 1, 3), bert = model_spec_check_grid(&b, 2, 2);
    status bdeep = model_spec_check_grid(&b, 1, 3), rpp = model_spec_check_grid(&r, 1, 2);
    status bheads = model_spec_check_grid(&b, 4, 1), bvocab = model_spec_check_grid(&b4, 4, 1);
    status resnet = model_spec_check_grid(&r, 2, 1);
    check(rt, ok2 == STATUS_OK, "gpt2-tiny (4 heads, 2 blocks) takes tp2 x pp2", "refused");
    check(rt, heads == STATUS_INPUT, "tp3 does not divide 4 heads: refused", "accepted");
    check(rt, deep == STATUS_INPUT, "pp3 for 2 blocks: refused", "accepted");
    check(rt, bert == STATUS_OK, "bert-tiny takes tp2 x pp2", "refused");
    check(rt, bdeep == STATUS_INPUT, "BERT: pp3 for 2 blocks refused", "accepted");
    check(rt, rpp == STATUS_INPUT, "pp2 for ResNet: refused", "accepted");
    check(rt, bheads == STATUS_INPUT && bvocab == STATUS_INPUT,
          "BERT: tp4 refused for 2 heads, and for a vocabulary of 30522 rows", "accepted");
    check(rt, resnet == STATUS_INPUT, "tp2 for ResNet: refused", "accepted");
}

/* |got - ref| <= rtol |ref| + atol_frac max|ref| over n; the worst excess in *worst. */
static bool close_all(const float *got, const float *ref, size_t n, double rtol, double atol_frac, double *worst)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]), lim = rtol * fabs(ref[i]) + atol_frac * mx;
        if (!(d <= lim)) ok = false;
        if (lim > 0 && d / lim > *worst) *worst = d / lim;
    }
    return ok;
}

/* A tensor-parallel shard of spec's model against the whole model: parameters exact
 * slices, the loss within 1e-5, every gradient shard the whole gradient's slice. */
static void test_tp_shard(const runtime *rt, int tp, const model_spec *spec)
{
    if (rt->size % tp != 0) return;
    grid_shape gs = { tp, 1, 0 };
    CHECK(grid_shape_resolve(&gs, rt->size, NULL) == STATUS_OK, "shape");
    grid g;
    CHECK(grid_init(&g, rt, &gs, 30) == STATUS_OK, "grid_init");
    nn_tp t = { .size = tp, .rank = g.tp_rank,
                .group = g.tp_group, .failed = STATUS_OK };
    model_spec s = *spec;
    int B = 2, T = 16;
    model whole, shard;
    CHECK(model_init(&whole, &s, B, T, 1234, true) == STATUS_OK, "whole model");
    CHECK(model_init_parallel(&shard, &s, B, T, 1234, true, NULL, &t, NULL) == STATUS_OK, "shard");
    param_table *pw = model_params(&whole), *ps = model_params(&shard);
    char what[160];
    /* the shard's parameters: exact slices of the whole model's */
    size_t maxn = 0;
    for (int e = 0; e < pw->count; e++) maxn = pw->entries[e].count > maxn ? pw->entries[e].count : maxn;
    float *slice = malloc(maxn * sizeof *slice);
    CHECK(slice != NULL, "slice");
    bool same = ps->count == pw->count;
    size_t held = 0;
    for (int e = 0; same && e < ps->count; e++) {
        const param_entry *es = &ps->entries[e], *ew = &pw->entries[e];
        same = !strcmp(es->name, ew->name) && param_entry_full_count(ps, es) == ew->count;
        if (!same) break;
        param_tp_copy(ps, es, slice, model_buffers(&whole)->params + ew->offset, false);
        same = !memcmp(slice, model_buffers(&shard)->params + es->offset, es->count * sizeof *slice);
        held += es->count;
    }
    snprintf(what, sizeof what, "%s tp%d: the shard's %zu parameters (of %zu) are slices of the whole model's", s.name, tp, held,
             param_numel(pw));
    check(rt, same, what, "a tensor differs");
    /* one forward: the same batch (a few ignored targets) on every rank of the tp group */
    model_batch b;
    CHECK(model_batch_init(&b, &whole) == STATUS_OK, "batch");
    model_batch_synthetic(&b, &whole, 99);
    b.targets[3] = b.targets[17] = -1;
    param_zero_grads(model_buffers(&whole), pw);
    param_zero_grads(model_buffers(&shard), ps);
    CHECK(model_forward(&whole, &b, true) == STATUS_OK && model_forward(&shard, &b, true) == STATUS_OK, "forward");
    double lw = model_loss(&whole), lt = model_loss(&shard);
    snprintf(what, sizeof what, "%s tp%d: loss %.9g against the whole model's %.9g (rel %.2g <= 1e-5)", s.name, tp, lt, lw,
             fabs(lt - lw) / lw);
    check(rt, fabs(lt - lw) <= 1e-5 * lw && model_tp_status(&shard) == STATUS_OK, what, "loss differs");
    model_backward(&whole);
    model_backward(&shard);
    check(rt, model_tp_status(&shard) == STATUS_OK, "tp: the backward's reductions completed", "a reduction failed");
    double worst = 0, gmax = 0, kbias = 0;
    bool grads = true;
    const char *bad = "";
    for (size_t i = 0; i < pw->total; i++) gmax = fmax(gmax, fabs(model_buffers(&whole)->grads[i]));
    for (int e = 0; e < ps->count; e++) {
        const param_entry *es = &ps->entries[e], *ew = &pw->entries[e];
        param_tp_copy(ps, es, slice, model_buffers(&whole)->grads + ew->offset, false);
        if (strstr(es->name, "key.bias")) {
            /* BERT's key bias adds q.b to every score of a query: the softmax cancels it, so
             * its exact gradient is 0 and both sides hold rounding only, checked as such */
            for (size_t i = 0; i < es->count; i++)
                kbias = fmax(kbias, fmax(fabs(slice[i]), fabs(model_buffers(&shard)->grads[es->offset + i])));
            continue;
        }
        if (!close_all(model_buffers(&shard)->grads + es->offset, slice, es->count, 1e-4, 1e-5, &worst)) {
            if (grads) bad = es->name;
            grads = false;
        }
    }
    snprintf(what, sizeof what, "%s tp%d: every gradient shard matches the whole gradient's slice (worst %.2f of the limit)",
             s.name, tp, worst);
    char why[160];
    snprintf(why, sizeof why, "first mismatch in %s", bad);
    check(rt, grads, what, why);
    if (s.family == MODEL_FAMILY_BERT) {
        snprintf(what, sizeof what, "%s tp%d: the key biases' gradients are rounding only: max %.2g <= 1e-6 x the "
                 "largest gradient %.2g", s.name, tp, kbias, gmax);
        check(rt, kbias <= 1e-6 * gmax, what, "a key bias has a real gradient");
    }
    free(slice);
    model_batch_free(&b);
    model_free(&shard);
    model_free(&whole);
    grid_free(&g);
}

/* `first_only` and `last_only`: a tensor of the first stage's embeddings and one of the
 * last stage's head. */
static void test_stages(const runtime *rt, const model_spec *spec, const char *first_only, const char *last_only)
{
    model_spec s = *spec;
    const char *tied = model_tied_name(&s);
    int B = 2, T = 16;
    model whole, st[2];
    nn_stage parts[2] = { { 0, 1, 2 }, { 1, 2, 2 } };
    CHECK(model_init(&whole, &s, B, T, 1234, true) == STATUS_OK, "whole model");
    for (int k = 0; k < 2; k++)
        CHECK(model_init_parallel(&st[k], &s, B, T, 1234, true, NULL, NULL, &parts[k]) == STATUS_OK, "stage");
    param_table *pw = model_params(&whole);
    model_batch b[2];
    for (int i = 0; i < 2; i++) {
        CHECK(model_batch_init(&b[i], &whole) == STATUS_OK, "batch");
        model_batch_synthetic(&b[i], &whole, 99 + (uint64_t)i);
    }
    b[1].targets[5] = -1;
    param_zero_grads(model_buffers(&whole), pw);
    for (int k = 0; k < 2; k++) param_zero_grads(model_buffers(&st[k]), model_params(&st[k]));
    /* the whole model: A forward, A backward, B forward, B backward */
    double lw[2];
    for (int i = 0; i < 2; i++) {
        CHECK(model_forward(&whole, &b[i], true) == STATUS_OK, "forward");
        lw[i] = model_loss(&whole);
        model_backward(&whole);
    }
    /* the stages: both forwards (sets 0 and 1), then both backwards */
    size_t n = model_stage_floats(&whole);
    double ls[2];
    for (int i = 0; i < 2; i++) {
        model_set_slot(&st[0], i, &b[i]);
        model_set_slot(&st[1], i, &b[i]);
        CHECK(model_forward(&st[0], &b[i], true) == STATUS_OK, "stage 0 forward");
        memcpy(model_stage_in(&st[1]), model_stage_out(&st[0]), n * sizeof(float));
        CHECK(model_forward(&st[1], &b[i], true) == STATUS_OK, "stage 1 forward");
        ls[i] = model_loss(&st[1]);
    }
    for (int i = 0; i < 2; i++) {
        model_set_slot(&st[1], i, &b[i]);
        model_backward(&st[1]);
        model_set_slot(&st[0], i, &b[i]);
        memcpy(model_stage_grad(&st[0]), model_stage_grad(&st[1]), n * sizeof(float));
        model_backward(&st[0]);
    }
    char what[200];
    snprintf(what, sizeof what, "%s pp2 with 2 micro-batches in flight: losses %.9g, %.9g bit-identical to the whole "
             "model's", s.name, ls[0], ls[1]);
    check(rt, ls[0] == lw[0] && ls[1] == lw[1], what, "a loss differs");
    const param_table *p0 = model_params(&st[0]), *p1 = model_params(&st[1]);
    bool split = p0->count + p1->count == pw->count + 1 && param_find(p0, tied) >= 0 && param_find(p1, tied) >= 0 &&
                 param_find(p0, first_only) >= 0 && param_find(p1, first_only) < 0 && param_find(p1, last_only) >= 0 &&
                 param_find(p0, last_only) < 0;
    snprintf(what, sizeof what, "%s pp2: stage 0 holds the embeddings (%s) and block 0, stage 1 block 1, the head (%s) "
             "and the tied %s", s.name, first_only, last_only, tied);
    check(rt, split, what, "tables differ");
    snprintf(what, sizeof what, "%s pp2: each stage counts the whole model's FLOPs (6 per parameter and token)", s.name);
    double count = 0;
    for (int e = 0; e < pw->count; e++) count += (double)pw->entries[e].count;
    check(rt, model_flops_per_step(&whole) == 6.0 * count * B * T &&
              model_flops_per_step(&st[0]) == model_flops_per_step(&whole) &&
              model_flops_per_step(&st[1]) == model_flops_per_step(&whole), what, "a stage's count differs");
    bool exact = true, params = true;
    double worst = 0;
    const char *bad = "";
    for (int e = 0; e < pw->count; e++) {
        const param_entry *ew = &pw->entries[e];
        const float *gw = model_buffers(&whole)->grads + ew->offset;
        if (!strcmp(ew->name, tied)) {
            const param_entry *a = &p0->entries[param_find(p0, ew->name)], *c = &p1->entries[param_find(p1, ew->name)];
            float *sum = malloc(ew->count * sizeof *sum);
            CHECK(sum != NULL, "sum");
            for (size_t i = 0; i < ew->count; i++)
                sum[i] = model_buffers(&st[0])->grads[a->offset + i] + model_buffers(&st[1])->grads[c->offset + i];
            bool ok = close_all(sum, gw, ew->count, 1e-4, 1e-5, &worst);
            free(sum);
            snprintf(what, sizeof what, "%s pp2: the tied %s's two gradient halves sum to the whole model's (worst %.2f "
                     "of the limit)", s.name, tied, worst);
            check(rt, ok, what, "the tied tensor differs");
            continue;
        }
        int k = param_find(p0, ew->name) >= 0 ? 0 : 1;
        const param_table *pk = k ? p1 : p0;
        const param_entry *es = &pk->entries[param_find(pk, ew->name)];
        if (memcmp(model_buffers(&st[k])->params + es->offset, model_buffers(&whole)->params + ew->offset,
                   ew->count * sizeof(float)))
            params = false;
        if (memcmp(model_buffers(&st[k])->grads + es->offset, gw, ew->count * sizeof(float))) {
            if (exact) bad = ew->name;
            exact = false;
        }
    }
    snprintf(what, sizeof what, "%s pp2: each stage's parameters are the whole model's (the same init streams)", s.name);
    check(rt, params, what, "a tensor differs");
    char where[PARAM_NAME_MAX + 32];
    snprintf(where, sizeof where, "first difference in %s", bad);
    snprintf(what, sizeof what, "%s pp2: every other gradient is bit-identical to the whole model's", s.name);
    check(rt, exact, what, where);
    for (int i = 0; i < 2; i++) model_batch_free(&b[i]);
    for (int k = 0; k < 2; k++) model_free(&st[k]);
    model_free(&whole);
}

/* Heterogeneous ranks' micro-batches (model_set_micro_batch): a model built for 4
 * samples running 2 computes the loss and every gradient of a model built for 2, bit
 * for bit (the same operations on the same numbers), and back at 4 its own again. */
static void test_micro_batch(const runtime *rt, const model_spec *spec)
{
    model_spec s = *spec;
    int T = 16;
    model big, small;
    CHECK(model_init(&big, &s, 4, T, 77, true) == STATUS_OK, "model for 4");
    CHECK(model_init(&small, &s, 2, T, 77, true) == STATUS_OK, "model for 2");
    model_batch b4, b2;
    CHECK(model_batch_init(&b4, &big) == STATUS_OK && model_batch_init(&b2, &small) == STATUS_OK, "batches");
    model_batch_synthetic(&b4, &big, 5);
    size_t n2 = (size_t)2 * (size_t)T * sizeof(int32_t);  /* the first two samples of b4 */
    memcpy(b2.ids, b4.ids, n2), memcpy(b2.targets, b4.targets, n2);
    if (b4.mask) memcpy(b2.mask, b4.mask, n2);
    const param_table *pt = model_params(&big);
    double l4[2];
    bool same = true;
    for (int round = 0; round < 2; round++) {  /* 4 samples, 2, 4 again, 2 again */
        param_zero_grads(model_buffers(&big), pt);
        CHECK(model_set_micro_batch(&big, 4) == STATUS_OK, "set 4");
        CHECK(model_forward(&big, &b4, true) == STATUS_OK, "forward 4");
        l4[round] = model_loss(&big);
        model_backward(&big);
        param_zero_grads(model_buffers(&big), pt);
        param_zero_grads(model_buffers(&small), model_params(&small));
        CHECK(model_set_micro_batch(&big, 2) == STATUS_OK, "set 2");
        CHECK(model_forward(&big, &b4, true) == STATUS_OK && model_forward(&small, &b2, true) == STATUS_OK, "forward 2");
        same = same && model_loss(&big) == model_loss(&small);
        model_backward(&big);
        model_backward(&small);
        same = same && !memcmp(model_buffers(&big)->grads, model_buffers(&small)->grads, pt->total * sizeof(float));
    }
    char what[200];
    snprintf(what, sizeof what, "%s built for 4 samples, run at 2 (model_set_micro_batch): loss and gradients "
             "bit-identical to a model built for 2, twice; at 4 again the same loss %.9g", s.name, l4[0]);
    check(rt, same && l4[0] == l4[1], what, same ? "the loss at 4 changed" : "a loss or gradient differs");
    model_batch_free(&b4), model_batch_free(&b2);
    model_free(&big), model_free(&small);
}

int main(int argc, char **argv)
{
    runtime rt;
    mpi_test_start(&rt, &argc, &argv);
    if (rt.rank == 0) printf("# test_tp: %d ranks on %d nodes\n", rt.size, rt.nnodes);
    test_shapes(&rt);
    test_model_rules(&rt);
    test_grid(&rt, 1, 1);
    test_grid(&rt, 2, 1);
    test_grid(&rt, 1, 2);
    test_grid(&rt, 2, 2);
    test_grid(&rt, 4, 1);
    model_spec gpt2, bert;
    spec_gpt2_tiny(&gpt2);
    spec_bert_tiny(&bert);
    for (int tp = 2; tp <= rt.size; tp *= 2) test_tp_shard(&rt, tp, &gpt2);
    if (rt.size == 1) test_tp_shard(&rt, 1, &gpt2);
    if (rt.size >= 2) test_tp_shard(&rt, 2, &bert);  /* bert-tiny's 2 heads: tp2 at most */
    if (rt.size == 1) test_tp_shard(&rt, 1, &bert);
    test_stages(&rt, &gpt2, "wpe.weight", "ln_f.bias");
    test_stages(&rt, &bert, "embeddings.position_embeddings.weight", "cls.predictions.bias");
    test_micro_batch(&rt, &gpt2);
    test_micro_batch(&rt, &bert);
    if (rt.rank == 0) printf("%s: %d failed checks\n", failures ? "FAIL" : "ok", failures);
    int f = failures;
    runtime_free(&rt);
    return f ? 1 : 0;
}
