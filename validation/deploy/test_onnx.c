/* test_onnx — the ONNX importer and exporter (libcore/deploy/deploy_onnx*.c).
 *
 * With a models directory (argv[1], written by validation/deploy/make_models.py: resnet18,
 * mobilenet_v2, gpt2, bert, ops, each model.onnx + input.npy + ref.npy): every model imports,
 * its op counts are printed, its output has the expected shape, the nano runtime's output
 * on input.npy matches PyTorch's ref.npy, and export → import → export gives the same
 * bytes with every weight intact (and the re-imported graph computes the same output).
 * Always: refusals of hostile and unsupported files built here with protobuf-c — every
 * truncation of a file, an unknown op (named), raw_data shorter than the dims, a symbolic
 * input dimension without input_shapes, a wrong opset, external data, a custom domain.
 *
 * The one design decision: the round trip is checked on bytes (export(import(export(g)))
 * == export(g)), which needs no graph comparison that knows about unfused activations.
 * Usage: test_onnx [MODELS_DIR]; one line per check, exit 1 on any failure. */
#include "../check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deploy/deploy.h"
#include "deploy/onnx.pb-c.h"
#include "nano/nano.h"

/* ---- tiny models built here ------------------------------------------------------ */

typedef struct tiny {
    const char *op;      /* the node's op_type */
    const char *domain;  /* the node's domain (NULL: default) */
    int opset;           /* 0: 17 */
    int raw_len;         /* bytes of w's raw_data (16 is right) */
    int symbolic;        /* x's dim 0 is "batch" */
    int external;        /* w's data_location is EXTERNAL */
} tiny;

/* y = op(x, w): x float (1 or "batch", 4), w float [4]. */
static void write_tiny(const char *path, const tiny *o) {
    static const float w[4] = {1, 2, 3, 4};
    Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                      d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, *dims[2] = {&d0, &d1};
    if (o->symbolic) {
        d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d0.dim_param = "batch";
    } else {
        d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d0.dim_value = 1;
    }
    d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d1.dim_value = 4;
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 2;
    shape.dim = dims;
    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT, ty = ONNX__TYPE_PROTO__TENSOR__INIT;
    tt.has_elem_type = ty.has_elem_type = 1;
    tt.elem_type = ty.elem_type = 1;
    tt.shape = &shape;
    Onnx__TypeProto tx = ONNX__TYPE_PROTO__INIT, tyy = ONNX__TYPE_PROTO__INIT;
    tx.value_case = tyy.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tx.tensor_type = &tt;
    tyy.tensor_type = &ty;
    Onnx__ValueInfoProto vx = ONNX__VALUE_INFO_PROTO__INIT, vy = ONNX__VALUE_INFO_PROTO__INIT;
    Onnx__ValueInfoProto *ins[1] = {&vx}, *outs[1] = {&vy};
    vx.name = "x";
    vx.type = &tx;
    vy.name = "y";
    vy.type = &tyy;
    int64_t wdims[1] = {4};
    Onnx__TensorProto wt = ONNX__TENSOR_PROTO__INIT, *inits[1] = {&wt};
    wt.name = "w";
    wt.n_dims = 1;
    wt.dims = wdims;
    wt.has_data_type = 1;
    wt.data_type = 1;
    wt.has_raw_data = 1;
    wt.raw_data.len = (size_t)o->raw_len;
    wt.raw_data.data = (uint8_t *)w;
    if (o->external) {
        wt.has_data_location = 1;
        wt.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    }
    char *nin[2] = {"x", "w"}, *nout[1] = {"y"};
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT, *nodes[1] = {&node};
    node.name = "node0";
    node.op_type = (char *)o->op;
    node.domain = (char *)o->domain;
    node.n_input = 2;
    node.input = nin;
    node.n_output = 1;
    node.output = nout;
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    gp.name = "tiny";
    gp.n_node = 1;
    gp.node = nodes;
    gp.n_initializer = 1;
    gp.initializer = inits;
    gp.n_input = 1;
    gp.input = ins;
    gp.n_output = 1;
    gp.output = outs;
    Onnx__OperatorSetIdProto ops = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsp[1] = {&ops};
    ops.domain = "";
    ops.has_version = 1;
    ops.version = o->opset ? o->opset : 17;
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.producer_name = "test_onnx";
    m.n_opset_import = 1;
    m.opset_import = opsp;
    m.graph = &gp;
    size_t n = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    if (!buf || onnx__model_proto__pack(&m, buf) != n) { perror("pack"); exit(1); }
    write_bytes(path, buf, n);
    free(buf);
}

/* deploy_onnx_read of path must give want with every text in the NULL-terminated list
 * in its message. */
static void expect(test_ctx *t, const char *what, const char *path, const char *shapes, nano_status want, ...) {
    nano_graph g;
    char err[1024] = "";
    nano_status st = deploy_onnx_read(&g, path, shapes, err, sizeof err);
    va_list ap;
    va_start(ap, want);
    const char *missing = NULL;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!missing && !strstr(err, s)) missing = s;
    va_end(ap);
    check(t, st == want && !missing, "%s: status %d (want %d)%s%s; message: %s", what, st, want,
          missing ? ", message lacks " : "", missing ? missing : "", err);
    if (st == NANO_OK) nano_graph_free(&g);
}

static void refusals(test_ctx *t) {
    char p[256], q[256];
    scratch_path(t, "tiny.onnx", p, sizeof p);
    tiny ok = {.op = "Add", .raw_len = 16};
    write_tiny(p, &ok);
    nano_graph g;
    char err[1024] = "";
    nano_status st = deploy_onnx_read(&g, p, NULL, err, sizeof err);
    check(t, st == NANO_OK && g.nnodes == 1 && g.noutputs == 1 && g.tensors[g.outputs[0]].ndim == 2 &&
             g.tensors[g.outputs[0]].shape[1] == 4, "tiny Add model imports: %s", st ? err : "y (1, 4)");
    if (st == NANO_OK) nano_graph_free(&g);

    size_t len;
    unsigned char *bytes = read_file(p, &len);
    int bad = 0;
    scratch_path(t, "trunc.onnx", q, sizeof q);
    for (size_t k = 0; k < len; k++) { /* every truncation, the empty file included */
        write_bytes(q, bytes, k);
        st = deploy_onnx_read(&g, q, NULL, err, sizeof err);
        if (st == NANO_OK) { nano_graph_free(&g); bad++; }
        else if (st != NANO_E_FORMAT || !strstr(err, q)) bad++;
    }
    check(t, bad == 0, "all %zu truncations of the tiny model are refused (NANO_E_FORMAT naming the file): %d not", len, bad);
    free(bytes);

    tiny foo = ok;
    foo.op = "FooBar";
    write_tiny(p, &foo);
    expect(t, "unknown op FooBar", p, NULL, NANO_E_UNSUPPORTED, "FooBar", "node0", "supported:", NULL);
    tiny shortw = ok;
    shortw.raw_len = 12;
    write_tiny(p, &shortw);
    expect(t, "raw_data shorter than dims", p, NULL, NANO_E_FORMAT, "initializer w", "raw_data has 12 bytes", "16", NULL);
    tiny sym = ok;
    sym.symbolic = 1;
    write_tiny(p, &sym);
    expect(t, "symbolic input dimension without input_shapes", p, NULL, NANO_E_ARG, "input x", "dimension 0",
           "batch", "input_shapes", NULL);
    expect(t, "symbolic input dimension given by input_shapes", p, "x:3x4", NANO_OK, NULL);
    expect(t, "input_shapes naming a missing input", p, "z:3x4", NANO_E_ARG, "'z'", NULL);
    expect(t, "input_shapes with a bad rank", p, "x:3x4x1", NANO_E_ARG, "x", "dimensions", NULL);
    tiny old = ok;
    old.opset = 9;
    write_tiny(p, &old);
    expect(t, "opset 9", p, NULL, NANO_E_UNSUPPORTED, "opset 9", "11 to 21", NULL);
    tiny ext = ok;
    ext.external = 1;
    write_tiny(p, &ext);
    expect(t, "external data", p, NULL, NANO_E_UNSUPPORTED, "initializer w", "external", NULL);
    tiny dom = ok;
    dom.domain = "com.microsoft";
    write_tiny(p, &dom);
    expect(t, "a custom domain", p, NULL, NANO_E_UNSUPPORTED, "node0", "com.microsoft", NULL);
    scratch_path(t, "missing.onnx", q, sizeof q);
    expect(t, "a missing file", q, NULL, NANO_E_IO, "missing.onnx", NULL);
}

/* ---- the exported models --------------------------------------------------------- */

/* Runs g on dir/input.npy and compares output 0 with dir/ref.npy. */
static void run_check(test_ctx *t, nano_graph *g, const char *dir, const char *what) {
    char p[512], err[512] = "";
    nano_npy in = {0}, ref = {0};
    nano_model *m = NULL;
    snprintf(p, sizeof p, "%s/input.npy", dir);
    nano_status st = nano_npy_read(p, &in, err, sizeof err);
    snprintf(p, sizeof p, "%s/ref.npy", dir);
    if (!st) st = nano_npy_read(p, &ref, err, sizeof err);
    if (!st) st = nano_graph_plan(g, err, sizeof err);
    if (!st) st = nano_model_from_graph(&m, g, err, sizeof err);
    double maxd = 0, maxr = 0;
    if (!st) {
        nano_io x = nano_model_input(m, 0);
        if (x.bytes != (size_t)in.count * nano_dtype_size(in.dtype) || x.dtype != in.dtype) {
            snprintf(err, sizeof err, "input.npy has %lld %s values, the model wants %zu bytes of %s",
                     (long long)in.count, nano_dtype_name(in.dtype), x.bytes, nano_dtype_name(x.dtype));
            st = NANO_E_ARG;
        } else {
            memcpy(x.data, in.data, x.bytes);
            if ((st = nano_model_run(m))) snprintf(err, sizeof err, "%s", nano_model_error(m));
        }
    }
    if (!st) {
        nano_io y = nano_model_output(m, 0);
        if (y.dtype != NANO_DT_F32 || ref.dtype != NANO_DT_F32 || y.bytes != (size_t)ref.count * 4) {
            snprintf(err, sizeof err, "output of %zu bytes, ref.npy has %lld values", y.bytes, (long long)ref.count);
            st = NANO_E_ARG;
        }
        for (int64_t i = 0; !st && i < ref.count; i++) {
            double a = ((const float *)y.data)[i], b = ((const float *)ref.data)[i];
            maxd = fmax(maxd, isfinite(a) ? fabs(a - b) : INFINITY);
            maxr = fmax(maxr, fabs(b));
        }
    }
    double tol = 1e-4 + 1e-3 * maxr;
    check(t, !st && maxd <= tol, "%s: runs and matches PyTorch: max |diff| %.3g (limit %.3g)%s%s", what, maxd, tol,
          st ? "; " : "", st ? err : "");
    nano_model_free(m);
    free(in.data);
    free(ref.data);
}

static void one_model(test_ctx *t, const char *dir, const char *name, int ndim, const int64_t *want) {
    char d[400], p[512], a[256], b[256], err[1024] = "";
    snprintf(d, sizeof d, "%s/%s", dir, name);
    snprintf(p, sizeof p, "%s/model.onnx", d);
    nano_graph g, g2;
    nano_status st = deploy_onnx_read(&g, p, NULL, err, sizeof err);
    if (!check(t, st == NANO_OK, "%s: imports%s%s", name, st ? ": " : "", st ? err : "")) return;
    int count[NANO_OP_COUNT] = {0};
    for (int i = 0; i < g.nnodes; i++) count[g.nodes[i].op]++;
    printf("# %s: %d nodes, %d tensors:", name, g.nnodes, g.ntensors);
    for (int op = 1; op < NANO_OP_COUNT; op++)
        if (count[op]) printf(" %s %d", nano_op_name(op), count[op]);
    printf("\n");
    const nano_tensor *y = g.noutputs == 1 ? &g.tensors[g.outputs[0]] : NULL;
    int same = y && y->ndim == ndim && y->dtype == NANO_DT_F32;
    for (int k = 0; same && k < ndim; k++) same = y->shape[k] == want[k];
    check(t, same, "%s: one f32 output of shape (%lld, %lld%s)", name, (long long)want[0], (long long)want[1],
          ndim == 3 ? ", ..." : "");
    st = nano_graph_validate(&g, err, sizeof err);
    check(t, st == NANO_OK, "%s: the graph validates%s%s", name, st ? ": " : "", st ? err : "");
    run_check(t, &g, d, name);

    snprintf(a, sizeof a, "%s/%s.a.onnx", t->dir, name);
    snprintf(b, sizeof b, "%s/%s.b.onnx", t->dir, name);
    st = deploy_onnx_write(&g, a, err, sizeof err);
    if (!check(t, st == NANO_OK, "%s: exports%s%s", name, st ? ": " : "", st ? err : "")) goto out;
    st = deploy_onnx_read(&g2, a, NULL, err, sizeof err);
    if (!check(t, st == NANO_OK, "%s: its export imports%s%s", name, st ? ": " : "", st ? err : "")) goto out;
    int lost = 0;
    for (int i = 0; i < g.ntensors; i++) { /* every weight survives, by name and bytes */
        const nano_tensor *c = &g.tensors[i];
        if (c->kind != NANO_T_CONST) continue;
        int j = nano_graph_find(&g2, nano_tensor_name(&g, i));
        if (j < 0 || g2.tensors[j].kind != NANO_T_CONST || nano_tensor_bytes(&g2.tensors[j]) != nano_tensor_bytes(c) ||
            memcmp(g2.tensors[j].data, c->data, nano_tensor_bytes(c)))
            lost++;
    }
    check(t, lost == 0, "%s: every constant is in the re-imported graph with the same bytes (%d differ)", name, lost);
    run_check(t, &g2, d, "re-imported export");
    st = deploy_onnx_write(&g2, b, err, sizeof err);
    if (check(t, st == NANO_OK, "%s: re-exports%s%s", name, st ? ": " : "", st ? err : "")) {
        size_t la, lb;
        unsigned char *ba = read_file(a, &la), *bb = read_file(b, &lb);
        check(t, la == lb && !memcmp(ba, bb, la), "%s: export(import(export(g))) == export(g) (%zu and %zu bytes)",
              name, la, lb);
        free(ba);
        free(bb);
    }
    nano_graph_free(&g2);
out:
    nano_graph_free(&g);
}

int main(int argc, char **argv) {
    test_ctx t = {0};
    scratch_dir(&t, "onnx");
    refusals(&t);
    struct stat sb;
    if (argc > 1 && stat(argv[1], &sb) == 0 && S_ISDIR(sb.st_mode)) {
        static const int64_t cls[2] = {1, 10}, lm[3] = {1, 16, 64}, pooled[2] = {1, 32}, ops[2] = {1, 64};
        one_model(&t, argv[1], "resnet18", 2, cls);
        one_model(&t, argv[1], "mobilenet_v2", 2, cls);
        one_model(&t, argv[1], "gpt2", 3, lm);
        one_model(&t, argv[1], "bert", 2, pooled);
        one_model(&t, argv[1], "ops", 2, ops);
    } else {
        printf("# no models directory given: the exported models are not checked "
               "(run validation/deploy/make_models.py DIR, then test_onnx DIR)\n");
    }
    scratch_free(&t);
    printf("%s: %d failure(s)\n", argv[0], t.failures);
    return t.failures ? 1 : 0;
}
