/* nebula-infer — run a .neb model with libnebula-nano: latency, peak memory, top-k.
 *
 * Linked with libnebula-nano alone (no MPI, no HDF5), so the same program runs on an
 * arm64 board. Inputs come from .npy files (or are generated: zeros for token ids,
 * uniform [-1, 1) for floats, from a fixed seed); outputs go to .npy on request. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nano/nano.h"

#define MAX_INPUTS 16

static const char USAGE[] =
    "nebula-infer - run a .neb model (libnebula-nano): latency, peak memory, top-k\n"
    "\n"
    "Usage: nebula-infer MODEL.neb [options]\n"
    "\n"
    "Options:\n"
    "  --input FILE.npy      the first input from a .npy file (repeat for the next inputs,\n"
    "                        or NAME=FILE.npy for a named one); default: generated (token\n"
    "                        ids 0..9 cycling, floats uniform in [-1, 1) from seed 1)\n"
    "  --output FILE.npy     write the first output to FILE.npy\n"
    "  --threads N           threads for the kernels (default: OMP_NUM_THREADS or all cores)\n"
    "  --repeat N            timed runs (default 10); the latency reported is their median\n"
    "  --warmup N            untimed runs first (default 2)\n"
    "  --top-k K             print the K largest values of the first output's last row (default 5; 0: none)\n"
    "  --eval X.npy          top-1 accuracy over the samples along dim 0 of X (needs --labels;\n"
    "                        the model's batch of them at a time, a last partial batch left out)\n"
    "  --labels Y.npy        integer labels of --eval\n"
    "  --profile             time per operator type over the timed runs (after the latency line)\n"
    "  --info                print the graph (inputs, outputs, ops, memory plan) and exit\n"
    "  --json                one JSON line of the figures instead of text\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 ran; 1 a run failed; 2 a wrong option or an unreadable, damaged or\n"
    "mismatched model or input file.\n";

typedef struct opts {
    const char *model;
    const char *inputs[MAX_INPUTS];
    int ninputs;
    const char *output, *eval, *labels;
    int threads, repeat, warmup, topk, info, json, profile;
} opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "nebula-infer: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(nebula-infer --help lists the options)\n");
    return 2;
}

static int parse_int(const char *s, int lo, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.repeat = 10, .warmup = 2, .topk = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) { fputs(USAGE, stdout); exit(0); }
        if (!strcmp(a, "--version")) { printf("nebula-infer (libnebula-nano, .neb version %d)\n", NEB_VERSION); exit(0); }
        if (!strcmp(a, "--info")) { o->info = 1; continue; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--profile")) { o->profile = 1; continue; }
        if (a[0] != '-' || !a[1]) {
            if (o->model) return usage_error("one model only (%s is a second)", a);
            o->model = a;
            continue;
        }
        if (!v) return usage_error("%s needs a value", a);
        i++;
        if (!strcmp(a, "--input")) {
            if (o->ninputs == MAX_INPUTS) return usage_error("more than 16 inputs (%s)", v);
            o->inputs[o->ninputs++] = v;
        } else if (!strcmp(a, "--output")) o->output = v;
        else if (!strcmp(a, "--eval")) o->eval = v;
        else if (!strcmp(a, "--labels")) o->labels = v;
        else if (!strcmp(a, "--threads")) { if (parse_int(v, 1, &o->threads)) return usage_error("--threads %s: a count of 1 or more", v); }
        else if (!strcmp(a, "--repeat")) { if (parse_int(v, 1, &o->repeat)) return usage_error("--repeat %s: a count of 1 or more", v); }
        else if (!strcmp(a, "--warmup")) { if (parse_int(v, 0, &o->warmup)) return usage_error("--warmup %s: a count of 0 or more", v); }
        else if (!strcmp(a, "--top-k")) { if (parse_int(v, 0, &o->topk)) return usage_error("--top-k %s: a count of 0 or more", v); }
        else return usage_error("unknown option %s", a);
    }
    if (!o->model) return usage_error("%s", "no model given: nebula-infer MODEL.neb [options]");
    if (!o->eval != !o->labels) return usage_error("%s", "--eval and --labels go together");
    return 0;
}

/* Fills input i from its .npy file (names checked) or generates it. */
static int fill_input(nano_model *m, int i, const opts *o) {
    nano_io in = nano_model_input(m, i);
    const char *spec = NULL;
    for (int k = 0; k < o->ninputs; k++) {
        const char *eq = strchr(o->inputs[k], '=');
        if (eq && !strncmp(o->inputs[k], in.name, (size_t)(eq - o->inputs[k])) && strlen(in.name) == (size_t)(eq - o->inputs[k]))
            spec = eq + 1;
    }
    if (!spec && i < o->ninputs && !strchr(o->inputs[i], '=')) spec = o->inputs[i];
    if (!spec) {
        uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        size_t n = in.bytes / nano_dtype_size(in.dtype);
        for (size_t k = 0; k < n; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            if (in.dtype == NANO_DT_F32) ((float *)in.data)[k] = (float)((s >> 40) * (2.0 / 16777216.0) - 1.0);
            else if (in.dtype == NANO_DT_I64) ((int64_t *)in.data)[k] = (int64_t)(k % 10);
            else if (in.dtype == NANO_DT_I32) ((int32_t *)in.data)[k] = (int32_t)(k % 10);
            else ((uint8_t *)in.data)[k] = 1;
        }
        return 0;
    }
    nano_npy a;
    char err[300];
    if (nano_npy_read(spec, &a, err, sizeof err) != NANO_OK) {
        fprintf(stderr, "nebula-infer: input %s: %s\n", in.name, err);
        return 2;
    }
    int same = a.ndim == in.ndim && a.dtype == in.dtype;
    for (int d = 0; same && d < a.ndim; d++) same = a.shape[d] == in.shape[d];
    if (!same) {
        fprintf(stderr, "nebula-infer: %s: input %s needs %s of shape (", spec, in.name, nano_dtype_name(in.dtype));
        for (int d = 0; d < in.ndim; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)in.shape[d]);
        fprintf(stderr, "); the file has %s of %d dimensions\n", nano_dtype_name(a.dtype), a.ndim);
        free(a.data);
        return 2;
    }
    memcpy(in.data, a.data, in.bytes);
    free(a.data);
    return 0;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* --profile: the time from one node's end to the next is the next node's. */
typedef struct prof {
    double last;               /* when the previous node ended (ms) */
    double ms[NANO_OP_COUNT];  /* summed per op */
    int count[NANO_OP_COUNT];  /* nodes per op and run */
} prof;

static void prof_node(void *ctx, const nano_graph *g, int node, const float *const *outs) {
    (void)outs;
    prof *p = ctx;
    double t = now_ms();
    p->ms[g->nodes[node].op] += t - p->last;
    p->last = t;
}

static void prof_print(const prof *p, const nano_graph *g, int runs) {
    int count[NANO_OP_COUNT] = {0};
    double total = 0;
    for (int n = 0; n < g->nnodes; n++) count[g->nodes[n].op]++;
    for (int op = 0; op < NANO_OP_COUNT; op++) total += p->ms[op];
    printf("profile (ms per run, %d runs):\n", runs);
    for (int op = 1; op < NANO_OP_COUNT; op++)
        if (count[op])
            printf("  %-20s %3d nodes %9.4f ms %5.1f%%\n", nano_op_name(op), count[op], p->ms[op] / runs,
                   total > 0 ? 100 * p->ms[op] / total : 0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_info(const nano_model *m) {
    const nano_graph *g = nano_model_graph(m);
    printf("nodes %d, tensors %d, arena %.2f MiB, model memory %.2f MiB, isa %s\n", g->nnodes, g->ntensors,
           g->arena_bytes / 1048576.0, nano_model_memory(m) / 1048576.0, nano_isa_name());
    for (int i = 0; i < g->ninputs + g->noutputs; i++) {
        int t = i < g->ninputs ? g->inputs[i] : g->outputs[i - g->ninputs];
        const nano_tensor *x = &g->tensors[t];
        printf("%s %s %s (", i < g->ninputs ? "input " : "output", nano_tensor_name(g, t), nano_dtype_name(x->dtype));
        for (int d = 0; d < x->ndim; d++) printf("%s%lld", d ? "," : "", (long long)x->shape[d]);
        printf(")\n");
    }
    int count[NANO_OP_COUNT] = {0};
    for (int n = 0; n < g->nnodes; n++) count[g->nodes[n].op]++;
    for (int op = 1; op < NANO_OP_COUNT; op++)
        if (count[op]) printf("  %-20s %d\n", nano_op_name(op), count[op]);
    if (g->meta) printf("meta %s\n", g->meta);
}

/* Top-1 accuracy of the first output's rows over an evaluation set. */
static int evaluate(nano_model *m, const opts *o) {
    char err[300];
    nano_npy x, y;
    if (nano_npy_read(o->eval, &x, err, sizeof err) != NANO_OK) {
        fprintf(stderr, "nebula-infer: %s\n", err);
        return 2;
    }
    if (nano_npy_read(o->labels, &y, err, sizeof err) != NANO_OK) {
        fprintf(stderr, "nebula-infer: %s\n", err);
        free(x.data);
        return 2;
    }
    nano_io in = nano_model_input(m, 0), out = nano_model_output(m, 0);
    int64_t B = in.ndim ? in.shape[0] : 1, per = (int64_t)(in.bytes / nano_dtype_size(in.dtype)) / B;
    int64_t C = out.ndim ? out.shape[out.ndim - 1] : 1, rows = (int64_t)(out.bytes / 4) / C;
    int ok = nano_model_ninputs(m) == 1 && x.dtype == in.dtype && x.ndim == in.ndim && x.count % per == 0 &&
             (y.dtype == NANO_DT_I64 || y.dtype == NANO_DT_I32) && y.count == x.count / per && out.dtype == NANO_DT_F32 &&
             rows == B;
    if (!ok) {
        fprintf(stderr, "nebula-infer: %s and %s do not fit the model: one input of %s with %lld values per sample, "
                "one label per sample, and class scores per sample as its first output\n",
                o->eval, o->labels, nano_dtype_name(in.dtype), (long long)per);
        free(x.data);
        free(y.data);
        return 2;
    }
    int64_t n = x.count / per, right = 0, seen = 0;
    size_t esz = nano_dtype_size(in.dtype);
    for (int64_t s = 0; s + B <= n; s += B) {
        memcpy(in.data, (char *)x.data + (size_t)(s * per) * esz, in.bytes);
        if (nano_model_run(m) != NANO_OK) {
            fprintf(stderr, "nebula-infer: %s\n", nano_model_error(m));
            free(x.data);
            free(y.data);
            return 1;
        }
        for (int64_t r = 0; r < B; r++) {
            const float *v = (const float *)out.data + r * C;
            int64_t best = 0;
            for (int64_t c = 1; c < C; c++)
                if (v[c] > v[best]) best = c;
            int64_t label = y.dtype == NANO_DT_I64 ? ((int64_t *)y.data)[s + r] : ((int32_t *)y.data)[s + r];
            right += best == label;
            seen++;
        }
    }
    printf("top1 %.6f over %lld samples\n", seen ? (double)right / (double)seen : 0.0, (long long)seen);
    free(x.data);
    free(y.data);
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    nano_model *m;
    char err[512];
    nano_status st = nano_model_load(&m, o.model, err, sizeof err);
    if (st != NANO_OK) {
        fprintf(stderr, "nebula-infer: %s\n", err);
        return st == NANO_E_NOMEM ? 1 : 2;
    }
    if (o.info) {
        print_info(m);
        nano_model_free(m);
        return 0;
    }
    if (o.threads) nano_model_set_threads(m, o.threads);
    if (o.eval) {
        rc = evaluate(m, &o);
        goto done;
    }
    for (int i = 0; i < nano_model_ninputs(m); i++)
        if ((rc = fill_input(m, i, &o))) goto done;
    double *ms = malloc((size_t)o.repeat * sizeof *ms);
    if (!ms) { rc = 1; goto done; }
    prof pr = {0};
    for (int r = 0; r < o.warmup + o.repeat; r++) {
        if (o.profile && r == o.warmup) nano_model_set_observer(m, prof_node, &pr);
        double t0 = now_ms();
        pr.last = t0;
        if ((st = nano_model_run(m)) != NANO_OK) {
            fprintf(stderr, "nebula-infer: %s: %s\n", o.model, nano_model_error(m));
            free(ms);
            rc = st == NANO_E_ARG ? 2 : 1;
            goto done;
        }
        if (r >= o.warmup) ms[r - o.warmup] = now_ms() - t0;
    }
    qsort(ms, (size_t)o.repeat, sizeof *ms, cmp_double);
    double med = o.repeat % 2 ? ms[o.repeat / 2] : 0.5 * (ms[o.repeat / 2 - 1] + ms[o.repeat / 2]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    nano_io out = nano_model_output(m, 0);
    if (o.json) {
        printf("{\"model\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"runs\": %d, \"latency_ms_median\": %.4f, "
               "\"latency_ms_min\": %.4f, \"peak_rss_mib\": %.2f, \"model_memory_mib\": %.2f}\n",
               o.model, nano_isa_name(), o.threads, o.repeat, med, ms[0], ru.ru_maxrss / 1024.0,
               nano_model_memory(m) / 1048576.0);
    } else {
        printf("model %s: isa %s, latency %.3f ms median of %d (min %.3f), peak RSS %.1f MiB, model memory %.1f MiB\n",
               o.model, nano_isa_name(), med, o.repeat, ms[0], ru.ru_maxrss / 1024.0, nano_model_memory(m) / 1048576.0);
        if (o.topk && out.dtype == NANO_DT_F32 && out.ndim >= 1) {
            int64_t row = out.shape[out.ndim - 1];
            const float *v = (const float *)out.data + (out.bytes / 4 - (size_t)row);
            int k = o.topk < row ? o.topk : (int)row;
            printf("top-%d of %s (last row):", k, out.name);
            char *used = calloc((size_t)row, 1);
            for (int j = 0; used && j < k; j++) {
                int64_t best = -1;
                for (int64_t c = 0; c < row; c++)
                    if (!used[c] && (best < 0 || v[c] > v[best])) best = c;
                used[best] = 1;
                printf(" %lld:%.5g", (long long)best, v[best]);
            }
            free(used);
            printf("\n");
        }
    }
    if (o.profile) prof_print(&pr, nano_model_graph(m), o.repeat);
    free(ms);
    if (o.output && nano_npy_write(o.output, out.dtype, out.ndim, out.shape, out.data, err, sizeof err) != NANO_OK) {
        fprintf(stderr, "nebula-infer: %s\n", err);
        rc = 1;
    }
done:
    nano_model_free(m);
    return rc;
}
