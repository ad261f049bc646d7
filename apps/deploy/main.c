/* nebula-deploy — from an ONNX file or a Nebula checkpoint to a .neb model for the edge.
 *
 *   nebula-deploy edge --model resnet50.onnx --target arm64 --quantize auto --output model.neb
 *   nebula-deploy export RUN_DIR --output model.onnx
 *
 * main() reads like the road the model takes: read, fold, fuse, prune, quantise, plan,
 * write; every step is libcore/deploy's, this file only parses and reports. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deploy/deploy.h"
#include "nano/nano.h"

static const char USAGE[] =
    "nebula-deploy - ONNX models and Nebula checkpoints to .neb files for libnebula-nano\n"
    "\n"
    "Usage:\n"
    "  nebula-deploy edge --model MODEL --output FILE.neb [options]\n"
    "  nebula-deploy export CHECKPOINT --output FILE.onnx [--batch N] [--seq T]\n"
    "\n"
    "edge: MODEL is an .onnx file or a Nebula checkpoint (run dir, its ckpt/ or a step dir).\n"
    "  --target T            x86-64 (default) or arm64 (aarch64): the kernels chosen at run time\n"
    "                        are the target's; --quantize auto decides without timing here\n"
    "  --quantize Q          none (default), fp16 (half weights), int8 (per-channel weights,\n"
    "                        calibrated activations), auto (int8 per layer where faster and\n"
    "                        within the accuracy budget)\n"
    "  --calib X.npy         calibration inputs, samples along dim 0 (int8/auto; default: the\n"
    "                        eval set, else 16 generated inputs)\n"
    "  --eval X.npy          held-out inputs for the accuracy budget, with --labels Y.npy\n"
    "  --labels Y.npy        integer class labels of --eval\n"
    "  --max-accuracy-drop P largest top-1 drop allowed, in points or % (default 1%)\n"
    "  --prune S             magnitude pruning to sparsity S in [0, 1) (default 0: none)\n"
    "  --prune-channels      prune whole output channels instead (structured)\n"
    "  --input-shape SPEC    fix input dimensions: NAME:1x3x224x224[,NAME2:1x128]\n"
    "  --batch N, --seq T    checkpoint inputs: batch (default 1) and sequence length (default: context)\n"
    "  --threads N           threads for calibration and timing (default: all)\n"
    "  --bundle DIR          with --target arm64: DIR/ gets the .neb and nebula-infer for aarch64\n"
    "  --output FILE         the .neb (edge) or .onnx (export) to write\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 written; 1 a failure while running or writing; 2 a wrong option, or an\n"
    "unreadable, damaged or unsupported model, checkpoint or data file.\n";

typedef struct opts {
    const char *cmd, *model, *output, *calib, *eval, *labels, *shapes, *bundle;
    int arm64, quant, prune_channels, threads, batch, seq;
    double max_drop, prune;
} opts;

static int usage_error(const char *what, const char *arg) {
    fprintf(stderr, "nebula-deploy: %s%s\n(nebula-deploy --help lists the options)\n", what, arg ? arg : "");
    return 2;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.max_drop = 0.01, .batch = 1};
    if (argc < 2) return usage_error("no command: edge or export", NULL);
    if (!strcmp(argv[1], "--help")) { fputs(USAGE, stdout); exit(0); }
    if (!strcmp(argv[1], "--version")) { printf("nebula-deploy (.neb version %d)\n", NEB_VERSION); exit(0); }
    o->cmd = argv[1];
    if (strcmp(o->cmd, "edge") && strcmp(o->cmd, "export")) return usage_error("unknown command (edge, export): ", o->cmd);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) { fputs(USAGE, stdout); exit(0); }
        if (!strcmp(a, "--prune-channels")) { o->prune_channels = 1; continue; }
        if (a[0] != '-') {
            if (o->model) return usage_error("one model only; a second: ", a);
            o->model = a;
            continue;
        }
        if (!v) return usage_error("a value is missing after ", a);
        i++;
        char *end;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--output")) o->output = v;
        else if (!strcmp(a, "--calib")) o->calib = v;
        else if (!strcmp(a, "--eval")) o->eval = v;
        else if (!strcmp(a, "--labels")) o->labels = v;
        else if (!strcmp(a, "--input-shape")) o->shapes = v;
        else if (!strcmp(a, "--bundle")) o->bundle = v;
        else if (!strcmp(a, "--target")) {
            if (!strcmp(v, "arm64") || !strcmp(v, "aarch64")) o->arm64 = 1;
            else if (strcmp(v, "x86-64") && strcmp(v, "x86_64")) return usage_error("--target is x86-64 or arm64, not ", v);
        } else if (!strcmp(a, "--quantize")) {
            static const char *const q[] = {"none", "fp16", "int8", "auto"};
            o->quant = -1;
            for (int k = 0; k < 4; k++)
                if (!strcmp(v, q[k])) o->quant = k;
            if (o->quant < 0) return usage_error("--quantize is none, fp16, int8 or auto, not ", v);
        } else if (!strcmp(a, "--max-accuracy-drop")) {
            double p = strtod(v, &end);
            if (end == v || p < 0 || p > 100 || (*end && strcmp(end, "%")))
                return usage_error("--max-accuracy-drop is points or a percentage such as 1%, not ", v);
            o->max_drop = p / 100.0;
        } else if (!strcmp(a, "--prune")) {
            o->prune = strtod(v, &end);
            if (end == v || *end || o->prune < 0 || o->prune >= 1) return usage_error("--prune is a sparsity in [0, 1), not ", v);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--batch") || !strcmp(a, "--seq")) {
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < (strcmp(a, "--seq") ? 1 : 0) || n > 1 << 20)
                return usage_error(!strcmp(a, "--seq") ? "--seq is a length (0: the model's context), not " : "a count of 1 or more, not ", v);
            *(!strcmp(a, "--threads") ? &o->threads : !strcmp(a, "--batch") ? &o->batch : &o->seq) = (int)n;
        } else {
            return usage_error("unknown option ", a);
        }
    }
    if (!o->model) return usage_error(!strcmp(o->cmd, "edge") ? "--model is required" : "a checkpoint is required", NULL);
    if (!o->output) return usage_error("--output is required", NULL);
    if (o->labels && !o->eval) return usage_error("--labels needs --eval", NULL);
    if (o->eval && !o->labels) return usage_error("--eval needs --labels (the accuracy budget is top-1)", NULL);
    if (o->bundle && !o->arm64) return usage_error("--bundle is for --target arm64", NULL);
    return 0;
}

static int is_dir(const char *p) {
    struct stat sb;
    return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) ? -1 : (long)sb.st_size;
}

/* 16 generated calibration batches for the first input, when none is given: uniform
 * [-1, 1) for floats, ids 0..9 for tokens (a fixed seed). Ranges from them fit inputs
 * normalised to about unit scale; --calib with real samples is what gives real ones. */
static int generated_calib(const nano_graph *g, deploy_data *d) {
    const nano_tensor *x = &g->tensors[g->inputs[0]];
    *d = (deploy_data){.dtype = x->dtype, .ndim = x->ndim};
    int64_t n = 16;
    for (int k = 0; k < x->ndim; k++) {
        d->shape[k] = x->shape[k] * (k == 0 ? 16 : 1);
        n *= k == 0 ? x->shape[k] : x->shape[k];
    }
    d->x = malloc((size_t)n * nano_dtype_size(x->dtype) + 1);
    if (!d->x) return -1;
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        if (x->dtype == NANO_DT_F32) ((float *)d->x)[i] = (float)((s >> 40) * (2.0 / 16777216.0) - 1.0);
        else if (x->dtype == NANO_DT_I64) ((int64_t *)d->x)[i] = i % 10;
        else if (x->dtype == NANO_DT_I32) ((int32_t *)d->x)[i] = (int32_t)(i % 10);
        else ((uint8_t *)d->x)[i] = 1;
    }
    return 0;
}

static int exit_code(nano_status st) {
    return st == NANO_E_NOMEM ? 1 : 2;
}

/* nebula-infer for aarch64, beside this program in the build tree or the install. */
static int bundle(const char *dir, const char *neb) {
    char self[PATH_MAX], cand[2][PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) return 1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(cand[0], sizeof cand[0], "%s/../aarch64/bin/nebula-infer", self);
    snprintf(cand[1], sizeof cand[1], "%s/../share/nebula/aarch64/nebula-infer", self);
    const char *src = access(cand[0], R_OK) == 0 ? cand[0] : access(cand[1], R_OK) == 0 ? cand[1] : NULL;
    if (!src) {
        fprintf(stderr, "nebula-deploy: no nebula-infer for aarch64 next to this program (HINT: make aarch64-nano)\n");
        return 1;
    }
    char cmd[4 * PATH_MAX];
    int k = snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/nebula-infer' && cp '%s' '%s/'", dir, src, dir, neb, dir);
    if (k < 0 || (size_t)k >= sizeof cmd || strchr(dir, '\'') || strchr(neb, '\'') || system(cmd)) {
        fprintf(stderr, "nebula-deploy: could not fill the bundle %s\n", dir);
        return 1;
    }
    printf("bundle %s: nebula-infer (aarch64, static) and %s\n", dir, neb);
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    char err[1024];
    nano_graph g;
    nano_graph_init(&g);
    nano_status st = is_dir(o.model) ? deploy_from_checkpoint(&g, o.model, o.batch, o.seq, err, sizeof err)
                                     : deploy_onnx_read(&g, o.model, o.shapes, err, sizeof err);
    if (st != NANO_OK) {
        fprintf(stderr, "nebula-deploy: %s\n", err);
        nano_graph_free(&g);
        return exit_code(st);
    }
    if (!strcmp(o.cmd, "export")) {
        st = deploy_onnx_write(&g, o.output, err, sizeof err);
        nano_graph_free(&g);
        if (st != NANO_OK) {
            fprintf(stderr, "nebula-deploy: %s\n", err);
            return st == NANO_E_IO ? 1 : 2;
        }
        printf("wrote %s (%ld bytes)\n", o.output, file_size(o.output));
        return 0;
    }
    deploy_data calib = {0}, eval = {0};
    deploy_report rep = {.acc_before = -1, .acc_after = -1};
    deploy_opts dopt = {.quant = o.quant, .max_drop = o.max_drop, .prune = o.prune, .prune_channels = o.prune_channels,
                        .threads = o.threads, .target_arm64 = o.arm64};
    if (o.eval && (st = deploy_data_read(&eval, o.eval, o.labels, err, sizeof err)) != NANO_OK) goto fail;
    if (o.calib && (st = deploy_data_read(&calib, o.calib, NULL, err, sizeof err)) != NANO_OK) goto fail;
    dopt.eval = o.eval ? &eval : NULL;
    dopt.calib = o.calib ? &calib : o.eval ? &eval : NULL;
    if (!dopt.calib && (o.quant == DEPLOY_QUANT_INT8 || o.quant == DEPLOY_QUANT_AUTO)) {
        if (generated_calib(&g, &calib)) {
            snprintf(err, sizeof err, "out of memory for the calibration inputs");
            st = NANO_E_NOMEM;
            goto fail;
        }
        dopt.calib = &calib;
        fprintf(stderr, "nebula-deploy: no --calib or --eval: activation ranges from 16 generated inputs "
                        "(uniform [-1, 1) or ids 0..9); give --calib with real samples for real ranges, "
                        "and --eval/--labels to check the accuracy budget\n");
    }
    int nodes_in = g.nnodes;
    if ((st = deploy_fold(&g, err, sizeof err)) != NANO_OK) goto fail;
    if ((st = deploy_fuse(&g, err, sizeof err)) != NANO_OK) goto fail;
    if (o.prune > 0 && (st = deploy_prune(&g, &dopt, &rep, err, sizeof err)) != NANO_OK) goto fail;
    if (o.quant != DEPLOY_QUANT_NONE) {
        deploy_report pruned = rep; /* quantisation reports afresh: keep pruning's sparsity and first accuracy */
        if ((st = deploy_quantize(&g, &dopt, &rep, err, sizeof err)) != NANO_OK) goto fail;
        rep.sparsity = pruned.sparsity;
        if (pruned.acc_before >= 0) rep.acc_before = pruned.acc_before;
    }
    if ((st = nano_graph_plan(&g, err, sizeof err)) != NANO_OK) goto fail;
    char meta[1024];
    snprintf(meta, sizeof meta,
             "{\"source\": \"%s\", \"target\": \"%s\", \"quantize\": \"%s\", \"layers_int8\": %d, \"layers_fp16\": %d, "
             "\"sparsity\": %.4f, \"accuracy_before\": %.4f, \"accuracy_after\": %.4f}",
             o.model, o.arm64 ? "arm64" : "x86-64", (const char *[]){"none", "fp16", "int8", "auto"}[o.quant],
             rep.layers_int8, rep.layers_fp16, rep.sparsity, rep.acc_before, rep.acc_after);
    free(g.meta);
    g.meta = strdup(meta);
    if ((st = neb_write(&g, o.output, err, sizeof err)) != NANO_OK) {
        fprintf(stderr, "nebula-deploy: %s\n", err);
        rc = 1;
        goto release;
    }
    long in_bytes = is_dir(o.model) ? -1 : file_size(o.model), out_bytes = file_size(o.output);
    printf("wrote %s: %ld bytes", o.output, out_bytes);
    if (in_bytes > 0) printf(" (%.1f%% of %s, %ld bytes)", 100.0 * out_bytes / in_bytes, o.model, in_bytes);
    printf("; nodes %d -> %d; arena %.2f MiB; int8 layers %d, fp16 layers %d", nodes_in, g.nnodes,
           g.arena_bytes / 1048576.0, rep.layers_int8, rep.layers_fp16);
    if (rep.acc_before >= 0) printf("; top-1 %.2f%% -> %.2f%%", 100 * rep.acc_before, 100 * rep.acc_after);
    if (o.prune > 0) printf("; sparsity %.1f%%", 100 * rep.sparsity);
    printf("\n");
    if (o.bundle) rc = bundle(o.bundle, o.output);
    goto release;
fail:
    fprintf(stderr, "nebula-deploy: %s\n", err);
    rc = exit_code(st);
release:
    deploy_data_free(&calib);
    deploy_data_free(&eval);
    nano_graph_free(&g);
    return rc;
}
