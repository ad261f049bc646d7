/* nano_plan — the static memory plan: one arena for every activation of a run.
 *
 * A tensor lives from the node that writes it to the last node that reads it; inputs and
 * outputs live for the whole run. Tensors are placed largest first, each at the lowest
 * 64-byte-aligned offset that no placed tensor with an overlapping lifetime covers (the
 * greedy-by-size heuristic of TFLite's and MNN's planners), so the arena is close to the
 * largest set of tensors alive at one time rather than their sum. The loader checks a
 * stored plan with nano_graph_check_plan instead of trusting it. */
#include "nano_graph.h"

#include <stdio.h>
#include <stdlib.h>

#define ALIGN 64

typedef struct life {
    int t;          /* tensor index */
    int first, last; /* node indices: written at first, last read at last */
    int64_t bytes;  /* aligned size */
} life;

static int is_placed(const nano_tensor *t) {
    return t->kind != NANO_T_CONST;
}

/* Lifetimes of every non-constant tensor; returns the count, -1 when out of memory. */
static int lifetimes(const nano_graph *g, life **out) {
    life *l = malloc(((size_t)g->ntensors + 1) * sizeof *l);
    int *idx = malloc(((size_t)g->ntensors + 1) * sizeof *idx);
    if (!l || !idx) {
        free(l);
        free(idx);
        return -1;
    }
    int n = 0;
    for (int t = 0; t < g->ntensors; t++) {
        idx[t] = -1;
        const nano_tensor *x = &g->tensors[t];
        if (!is_placed(x)) continue;
        int whole = x->kind == NANO_T_INPUT || x->kind == NANO_T_OUTPUT;
        l[n] = (life){t, whole ? -1 : g->nnodes, whole ? g->nnodes : -1,
                      ((int64_t)nano_tensor_bytes(x) + ALIGN - 1) / ALIGN * ALIGN};
        if (l[n].bytes == 0) l[n].bytes = ALIGN;
        idx[t] = n++;
    }
    for (int k = 0; k < g->nnodes; k++) {
        const nano_node *nd = &g->nodes[k];
        for (int o = 0; o < nd->nout; o++) {
            int i = nd->out[o] >= 0 ? idx[nd->out[o]] : -1;
            if (i >= 0 && l[i].first > k) l[i].first = k;
            if (i >= 0 && l[i].last < k) l[i].last = k;
        }
        for (int j = 0; j < nd->nin; j++) {
            int i = nd->in[j] >= 0 ? idx[nd->in[j]] : -1;
            if (i >= 0 && l[i].last < k) l[i].last = k;
        }
    }
    free(idx);
    *out = l;
    return n;
}

static int by_size(const void *a, const void *b) {
    const life *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->t - y->t;
}

static int overlap_time(const life *a, const life *b) {
    return a->first <= b->last && b->first <= a->last;
}

nano_status nano_graph_plan(nano_graph *g, char *err, size_t errlen) {
    life *l;
    int n = lifetimes(g, &l);
    if (n < 0) {
        snprintf(err, errlen, "out of memory planning %d tensors", g->ntensors);
        return NANO_E_NOMEM;
    }
    qsort(l, (size_t)n, sizeof *l, by_size);
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    if (!off) {
        free(l);
        snprintf(err, errlen, "out of memory planning %d tensors", g->ntensors);
        return NANO_E_NOMEM;
    }
    int64_t arena = 0;
    for (int i = 0; i < n; i++) {
        /* the lowest offset clear of every placed, time-overlapping tensor: try 0 and
         * the end of each of those, keep the lowest that fits */
        int64_t best = -1;
        for (int c = -1; c < i; c++) {
            int64_t cand = c < 0 ? 0 : off[c] + l[c].bytes;
            if (c >= 0 && !overlap_time(&l[c], &l[i])) continue;
            if (best >= 0 && cand >= best) continue;
            int ok = 1;
            for (int j = 0; j < i && ok; j++)
                if (overlap_time(&l[j], &l[i]) && cand < off[j] + l[j].bytes && off[j] < cand + l[i].bytes) ok = 0;
            if (ok) best = cand;
        }
        off[i] = best;
        g->tensors[l[i].t].arena_off = best;
        if (best + l[i].bytes > arena) arena = best + l[i].bytes;
    }
    g->arena_bytes = arena;
    free(off);
    free(l);
    return NANO_OK;
}

nano_status nano_graph_check_plan(const nano_graph *g, char *err, size_t errlen) {
    life *l;
    int n = lifetimes(g, &l);
    if (n < 0) {
        snprintf(err, errlen, "out of memory checking the plan");
        return NANO_E_NOMEM;
    }
    nano_status st = NANO_OK;
    if (g->arena_bytes < 0 || g->arena_bytes > ((int64_t)1 << 40)) {
        snprintf(err, errlen, "arena of %lld bytes", (long long)g->arena_bytes);
        st = NANO_E_FORMAT;
        goto done;
    }
    for (int i = 0; i < n && st == NANO_OK; i++) {
        const nano_tensor *x = &g->tensors[l[i].t];
        if (x->arena_off < 0 || x->arena_off % ALIGN || x->arena_off > g->arena_bytes - l[i].bytes) {
            snprintf(err, errlen, "tensor %s: arena offset %lld (+%lld bytes) outside the arena of %lld or unaligned",
                     nano_tensor_name(g, l[i].t), (long long)x->arena_off, (long long)l[i].bytes, (long long)g->arena_bytes);
            st = NANO_E_FORMAT;
        }
    }
    for (int i = 0; i < n && st == NANO_OK; i++)
        for (int j = i + 1; j < n && st == NANO_OK; j++) {
            int64_t a = g->tensors[l[i].t].arena_off, b = g->tensors[l[j].t].arena_off;
            if (overlap_time(&l[i], &l[j]) && a < b + l[j].bytes && b < a + l[i].bytes) {
                snprintf(err, errlen, "tensors %s and %s are alive at once and share arena bytes",
                         nano_tensor_name(g, l[i].t), nano_tensor_name(g, l[j].t));
                st = NANO_E_FORMAT;
            }
        }
done:
    free(l);
    return st;
}
