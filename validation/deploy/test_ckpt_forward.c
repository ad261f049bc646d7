/* test_ckpt_forward — the Nebula side of validation/deploy/test_ckpt_export.sh: a
 * committed checkpoint loaded as nebula-train resumes (ckpt_load: checksums, model and
 * table hash checked), Nebula's eval forward of a fixed batch, and .npy files of the
 * batch and the logits for the ONNX Runtime comparison; then the graph
 * deploy_from_checkpoint builds of the same checkpoint at the same shape, checked
 * (nano_graph_validate, one input and one output of the right shapes, every tensor
 * shaped and uniquely named, the shapes those nano_graph_infer_shapes finds) and,
 * where the nano runtime runs it (planned, nano_model_from_graph), its logits too.
 *
 *     test_ckpt_forward CKPT_DIR OUT_DIR B [T]
 *
 * The batch is model_batch_synthetic's (seed 1234): token ids, or images in [-0.5, 0.5).
 * The forward is the evaluation one: GPT-2 without targets, logits cut to the real
 * vocabulary (B, T, V); BERT without a mask or targets, the MLM head at every position
 * (B, T, V); ResNet with its running statistics, and the MLP: (B, classes). Written:
 * OUT_DIR/input.npy (int64 ids or f32 images), OUT_DIR/nebula.npy, and OUT_DIR/nano.npy
 * when nano_model_from_graph and nano_model_run succeed (else one "nano: ..." line says
 * why). Exit 0 when nebula.npy is written and the graph checks pass, 1 otherwise, 2 on
 * bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/runtime.h"
#include "ckpt/tool/offline.h"
#include "deploy/deploy.h"
#include "nano/nano.h"
#include "nn/model.h"
#include "train/train.h"

enum { BATCH_SEED = 1234 };

static status spec_of_checkpoint(const char *dir, model_spec *spec)
{
    ckpt_catalog cat;
    TRY(ckpt_catalog_open(&cat, dir));
    config mc;
    status st = STATUS_OK;
    if (model_config_from_ini(&mc, cat.config) != STATUS_OK || model_spec_from_config(spec, &mc) != STATUS_OK ||
        strcmp(spec->name, cat.h.model) != 0) {
        log_error0("%s: its stored [model] section does not describe the model '%s' it holds", dir, cat.h.model);
        st = STATUS_INPUT;
    }
    ckpt_catalog_free(&cat);
    return st;
}

static int write_npy(const char *dir, const char *name, int dtype, int ndim, const int64_t *shape, const void *data)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (nano_npy_write(path, dtype, ndim, shape, data, err, sizeof err) == NANO_OK) return 0;
    fprintf(stderr, "cannot write %s: %s\n", path, err);
    return 1;
}

/* The batch as the graph's input: int64 ids (B, T) or the images (B, 3, S, S). */
static int write_input(const model *m, const model_batch *b, const char *out, int64_t *shape, int *ndim, void **data)
{
    int B = m->B, T = m->T, S = m->spec.image_size;
    if (model_spec_images(&m->spec)) {
        *ndim = 4, shape[0] = B, shape[1] = 3, shape[2] = S, shape[3] = S;
        *data = b->images;
        return write_npy(out, "input.npy", NANO_DT_F32, 4, shape, b->images);
    }
    int64_t *ids = malloc((size_t)B * T * sizeof *ids);
    if (!ids) return 1;
    for (int i = 0; i < B * T; i++) ids[i] = b->ids[i];
    *ndim = 2, shape[0] = B, shape[1] = T;
    *data = ids;
    return write_npy(out, "input.npy", NANO_DT_I64, 2, shape, ids);
}

/* Nebula's logits of the last forward, (B, T, V) or (B, classes), into a new buffer. */
static float *nebula_logits(model *m, int64_t *shape, int *ndim)
{
    int B = m->B, T = m->T, K;
    const model_spec *s = &m->spec;
    if (model_spec_images(s)) {
        const float *l = model_class_logits(m, &K);
        float *v = malloc((size_t)B * K * sizeof *v);
        if (v) memcpy(v, l, (size_t)B * K * sizeof *v);
        *ndim = 2, shape[0] = B, shape[1] = K;
        return v;
    }
    bool gpt2 = s->family == MODEL_FAMILY_GPT2;
    int V = model_vocab_size(s), Vp = gpt2 ? model_padded_vocab_size(s) : V;
    const float *l = gpt2 ? m->gpt2.acts.logits : m->bert.acts.logits;
    float *v = malloc((size_t)B * T * V * sizeof *v);
    for (size_t r = 0; v && r < (size_t)B * T; r++) memcpy(v + r * V, l + r * Vp, (size_t)V * sizeof *v);
    *ndim = 3, shape[0] = B, shape[1] = T, shape[2] = V;
    return v;
}

/* The shapes the builder set against nano_graph_infer_shapes' (which rewrites them). */
static int check_inferred(nano_graph *g)
{
    char err[512];
    int n = g->ntensors, bad = 0;
    nano_tensor *mine = malloc((size_t)n * sizeof *mine);
    if (!mine) return 1;
    memcpy(mine, g->tensors, (size_t)n * sizeof *mine);
    if (nano_graph_infer_shapes(g, err, sizeof err) != NANO_OK) {
        fprintf(stderr, "graph: nano_graph_infer_shapes: %s\n", err);
        bad = 1;
    }
    for (int t = 0; t < n && !bad; t++)
        if (mine[t].ndim != g->tensors[t].ndim || mine[t].dtype != g->tensors[t].dtype ||
            memcmp(mine[t].shape, g->tensors[t].shape, (size_t)mine[t].ndim * sizeof *mine[t].shape) != 0) {
            fprintf(stderr, "graph: tensor %s: the builder's shape and dtype differ from the inferred ones\n",
                    nano_tensor_name(g, t));
            bad = 1;
        }
    free(mine);
    return bad;
}

/* The exported graph: structure and shapes, then (where the runtime runs it) its logits. */
static int check_graph(const char *dir, const char *out, int B, int T, int in_ndim, const int64_t *in_shape,
                       const void *in, int out_ndim, const int64_t *out_shape)
{
    nano_graph g;
    char err[512];
    nano_status ns = deploy_from_checkpoint(&g, dir, B, T, err, sizeof err);
    if (ns != NANO_OK) {
        fprintf(stderr, "deploy_from_checkpoint(%s, %d, %d): %s (status %d)\n", dir, B, T, err, (int)ns);
        return 1;
    }
    int bad = 0;
    if ((ns = nano_graph_validate(&g, err, sizeof err)) != NANO_OK) fprintf(stderr, "graph: %s\n", err), bad++;
    const nano_tensor *ti = g.ninputs == 1 ? &g.tensors[g.inputs[0]] : NULL;
    const nano_tensor *to = g.noutputs == 1 ? &g.tensors[g.outputs[0]] : NULL;
    if (!ti || ti->ndim != in_ndim || memcmp(ti->shape, in_shape, (size_t)in_ndim * sizeof *in_shape) != 0)
        fprintf(stderr, "graph: the input is not the batch's shape\n"), bad++;
    if (!to || to->ndim != out_ndim || memcmp(to->shape, out_shape, (size_t)out_ndim * sizeof *out_shape) != 0)
        fprintf(stderr, "graph: the output is not the logits' shape\n"), bad++;
    int consts = 0;
    for (int t = 0; t < g.ntensors; t++) {
        consts += g.tensors[t].kind == NANO_T_CONST;
        if (nano_graph_find(&g, nano_tensor_name(&g, t)) != t && bad++ < 8)  /* ONNX names a value once */
            fprintf(stderr, "graph: two tensors are named %s\n", nano_tensor_name(&g, t));
        for (int d = 0; d < g.tensors[t].ndim; d++)
            if (g.tensors[t].shape[d] < 1 && bad++ < 8)
                fprintf(stderr, "graph: tensor %s has no shape\n", nano_tensor_name(&g, t));
    }
    bad += check_inferred(&g);
    printf("graph: %d nodes, %d tensors (%d constants), %s\n", g.nnodes, g.ntensors, consts, bad ? "BAD" : "ok");
    nano_model *nm = NULL;
    ns = bad ? NANO_E_FORMAT : nano_graph_plan(&g, err, sizeof err);
    if (ns == NANO_OK) ns = nano_model_from_graph(&nm, &g, err, sizeof err);
    if (ns == NANO_OK) {
        nano_io i = nano_model_input(nm, 0);
        memcpy(i.data, in, i.bytes);
        ns = nano_model_run(nm);
        if (ns != NANO_OK) snprintf(err, sizeof err, "nano_model_run failed (status %d)", (int)ns);
    }
    if (ns == NANO_OK) {
        nano_io o = nano_model_output(nm, 0);
        bad += write_npy(out, "nano.npy", NANO_DT_F32, o.ndim, o.shape, o.data);
    } else if (!bad) {
        printf("nano: the runtime does not run the graph: %s\n", err);
    }
    if (nm) nano_model_free(nm);
    nano_graph_free(&g);
    return bad ? 1 : 0;
}

static int run(const runtime *rt, const char *dir, const char *out, int B, int T)
{
    model_spec spec;
    if (spec_of_checkpoint(dir, &spec) != STATUS_OK) return 1;
    bool images = model_spec_images(&spec);
    model m;
    memset(&m, 0, sizeof m);
    if (model_init(&m, &spec, B, images ? 0 : T, 0, false) != STATUS_OK) return 1;
    ckpt_content c = { .model = spec.name, .table_hash = param_table_hash(model_params(&m)) };
    c.groups[c.ngroups++] = (ckpt_tensors){ TRAIN_CKPT_PARAMS, model_params(&m), model_buffers(&m)->params, false };
    if (model_state_table(&m))
        c.groups[c.ngroups++] = (ckpt_tensors){ TRAIN_CKPT_BUFFERS, model_state_table(&m), model_state(&m), false };
    ckpt_info info;
    model_batch b;
    int rc = 1;
    if (ckpt_load(rt->world, NULL, dir, &c, &info) == STATUS_OK && model_batch_init(&b, &m) == STATUS_OK) {
        model_batch_synthetic(&b, &m, BATCH_SEED);
        status st = spec.family == MODEL_FAMILY_BERT   ? bert_forward(&m.bert, b.ids, NULL, NULL, NULL)
                    : spec.family == MODEL_FAMILY_GPT2 ? gpt2_forward(&m.gpt2, b.ids, NULL)
                                                       : model_forward(&m, &b, false);
        int64_t ishape[NANO_MAX_DIMS], oshape[NANO_MAX_DIMS];
        int indim = 0, ondim = 0;
        void *in = NULL;
        float *logits = st == STATUS_OK ? nebula_logits(&m, oshape, &ondim) : NULL;
        if (logits && write_input(&m, &b, out, ishape, &indim, &in) == 0 &&
            write_npy(out, "nebula.npy", NANO_DT_F32, ondim, oshape, logits) == 0) {
            printf("%s: %s at step %lld, batch %d%s -> %s/nebula.npy\n", dir, spec.name, (long long)info.step, B,
                   images ? " images" : " sequences", out);
            rc = check_graph(dir, out, B, images ? 0 : T, indim, ishape, in, ondim, oshape);
        }
        if (in && in != b.images) free(in);
        free(logits);
        model_batch_free(&b);
    }
    model_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s CKPT_DIR OUT_DIR B [T]\n", argv[0]);
        return 2;
    }
    int B = atoi(argv[3]), T = argc > 4 ? atoi(argv[4]) : 0;
    if (B < 1 || T < 0) {
        fprintf(stderr, "%s: B must be positive, T (tokens; 0 for images) not negative\n", argv[0]);
        return 2;
    }
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    int rc = run(&rt, argv[1], argv[2], B, T);
    runtime_free(&rt);
    return rc;
}
