/* fuzz_onnx — libFuzzer harness of the ONNX importer (libcore/deploy/deploy_onnx*.c over
 * protobuf-c): the bytes as a file (a memfd, so read_file runs as in production) to
 * deploy_onnx_read twice, with the file's own input shapes (input_shapes NULL) and with
 * FUZZ_SHAPES overriding them. A refusal must be NANO_E_FORMAT, UNSUPPORTED or ARG with
 * a reason; an accepted graph must validate, go through deploy_fold, deploy_fuse and
 * nano_graph_plan as nebula-deploy runs them (refusals allowed, with a reason), check
 * its plan, and a small one (arena <= 16 MiB, tensors <= 1M elements, <= 200 nodes) is
 * built and run once on zeroed inputs.
 *
 * The one design decision: the override names the input of the seed models ("input")
 * with a different rank and size, so one input exercises both the file's shapes and
 * shapes the file did not plan for (every converter's shape arithmetic sees new
 * values). Built by `make fuzz` with libFuzzer, ASan and UBSan, and by `make` as a
 * replay program (replay.c). */
#include "fuzz_input.h"
#include "deploy/deploy.h"
#include "nano/nano.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SHAPES "input:2x3x5x5"
#define SMALL_ARENA ((int64_t)16 << 20)
#define SMALL_NUMEL ((int64_t)1 << 20)
#define SMALL_NODES 200

static void require_refusal(nano_status st, const char *err)
{
    fuzz_require(st == NANO_E_FORMAT || st == NANO_E_UNSUPPORTED || st == NANO_E_ARG,
                 "a refused model is NANO_E_FORMAT, UNSUPPORTED or ARG");
    fuzz_require(err[0] != '\0', "a refused model says why");
}

static int is_small(const nano_graph *g)
{
    if (g->arena_bytes > SMALL_ARENA || g->nnodes > SMALL_NODES) return 0;
    for (int t = 0; t < g->ntensors; t++)
        if (nano_tensor_numel(&g->tensors[t]) > SMALL_NUMEL) return 0;
    return 1;
}

/* What nebula-deploy does with an imported graph before quantising: fold, fuse, plan,
 * then one run of a small one. */
static void check_graph(nano_graph *g)
{
    char err[512] = "";
    fuzz_require(nano_graph_validate(g, err, sizeof err) == NANO_OK, "an imported graph validates");
    nano_status st = deploy_fold(g, err, sizeof err);
    if (st == NANO_OK) st = deploy_fuse(g, err, sizeof err);
    if (st != NANO_OK) {
        require_refusal(st, err);
        return;
    }
    if (!is_small(g)) return; /* the plan is quadratic in the tensors; a run's arena as large */
    st = nano_graph_infer_shapes(g, err, sizeof err);
    fuzz_require(st == NANO_OK, "the passes leave a graph whose shapes infer");
    fuzz_require(nano_graph_plan(g, err, sizeof err) == NANO_OK, "a small graph plans");
    fuzz_require(nano_graph_check_plan(g, err, sizeof err) == NANO_OK, "a fresh plan checks");
    if (!is_small(g)) return;
    nano_model *m = NULL;
    err[0] = 0;
    st = nano_model_from_graph(&m, g, err, sizeof err);
    if (st != NANO_OK) {
        require_refusal(st, err);
        return;
    }
    nano_model_set_threads(m, 1);
    for (int i = 0; i < nano_model_ninputs(m); i++) {
        nano_io in = nano_model_input(m, i);
        memset(in.data, 0, in.bytes);
    }
    st = nano_model_run(m);
    fuzz_require(st == NANO_OK || nano_model_error(m)[0] != '\0', "a refused run says why");
    nano_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_open(data, size, path, sizeof path);
    static const char *const shapes[2] = {NULL, FUZZ_SHAPES};
    for (int k = 0; k < 2; k++) {
        nano_graph g;
        char err[512] = "";
        nano_status st = deploy_onnx_read(&g, path, shapes[k], err, sizeof err);
        if (st != NANO_OK) {
            require_refusal(st, err);
            fuzz_require(!g.tensors && !g.nodes && !g.strings, "a refused model leaves nothing allocated");
            continue;
        }
        check_graph(&g);
        nano_graph_free(&g);
    }
    close(fd);
    return 0;
}
