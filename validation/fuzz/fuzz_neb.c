/* fuzz_neb — libFuzzer harness of the .neb loader (libcore/nano/neb_format.c): the bytes
 * go to neb_read through a memfd (open, fstat, mmap: the production path) as they are,
 * then to neb_parse once more with the header's and every section's CRC-32 made right,
 * so mutations reach the parser and the graph checks behind the checksums. A refusal
 * must be NANO_E_FORMAT, UNSUPPORTED or ARG with a reason. An accepted graph must pass
 * nano_graph_validate and nano_graph_check_plan, every constant's bytes must lie inside
 * the file, and a small one (arena <= 16 MiB, tensors <= 1M elements, <= 200 nodes) is
 * built with nano_model_from_graph and run once on zeroed inputs: a hostile but valid
 * graph may be refused at run time (a Gather index out of range), never crash a kernel.
 *
 * The one design decision: the checksums are fixed in the harness, not switched off in
 * the loader, so the loader fuzzed is the one shipped (the as-is pass still covers the
 * CRC checks themselves). Built by `make fuzz` with libFuzzer, ASan and UBSan, and by
 * `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "nano/nano.h"

#include <string.h>

#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NEB_HEAD 64
#define NEB_SECTIONS 7
#define SMALL_ARENA ((int64_t)16 << 20)
#define SMALL_NUMEL ((int64_t)1 << 20)
#define SMALL_NODES 200

static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static void require_refusal(nano_status st, const char *err)
{
    fuzz_require(st == NANO_E_FORMAT || st == NANO_E_UNSUPPORTED || st == NANO_E_ARG,
                 "a refused file is NANO_E_FORMAT, UNSUPPORTED or ARG");
    fuzz_require(err[0] != '\0', "a refused file says why");
}

/* The header's CRC (at byte 40, over the header with it zero) and each section's CRC
 * (second word of its 32-byte entry) recomputed where the entry lies inside the file. */
static void fix_crcs(uint8_t *p, size_t n)
{
    if (n < NEB_HEAD) return;
    uint64_t table = rd64(p + 24);
    for (int k = 0; table == NEB_HEAD && n >= NEB_HEAD + NEB_SECTIONS * 32 && k < NEB_SECTIONS; k++) {
        uint8_t *e = p + NEB_HEAD + 32 * k;
        uint64_t off = rd64(e + 8), bytes = rd64(e + 16);
        if (off <= n && bytes <= n - off) wr32(e + 4, (uint32_t)crc32(0, p + off, (uInt)bytes));
    }
    wr32(p + 40, 0);
    wr32(p + 40, (uint32_t)crc32(0, p, NEB_HEAD));
}

/* The promises of an accepted file, then one run when it is small. */
static void check_graph(const nano_graph *g, const uint8_t *buf, size_t len)
{
    char err[512] = "";
    fuzz_require(nano_graph_validate(g, err, sizeof err) == NANO_OK, "an accepted graph validates");
    fuzz_require(nano_graph_check_plan(g, err, sizeof err) == NANO_OK, "an accepted graph's plan checks");
    int small = g->arena_bytes <= SMALL_ARENA && g->nnodes <= SMALL_NODES;
    for (int t = 0; t < g->ntensors; t++) {
        const nano_tensor *x = &g->tensors[t];
        small &= nano_tensor_numel(x) <= SMALL_NUMEL;
        if (x->kind != NANO_T_CONST) continue;
        const uint8_t *d = x->data;
        size_t bytes = nano_tensor_bytes(x);
        fuzz_require(x->owned || (d >= buf && (size_t)(d - buf) <= len && bytes <= len - (size_t)(d - buf)),
                     "a constant's bytes lie inside the file (or were decoded into its own buffer)");
    }
    if (!small) return;
    nano_model *m = NULL;
    err[0] = 0;
    nano_status st = nano_model_from_graph(&m, g, err, sizeof err);
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
    /* as it is, through the file path */
    char path[64], err[512] = "";
    int fd = fuzz_input_open(data, size, path, sizeof path);
    nano_graph g;
    void *map = NULL;
    size_t map_len = 0;
    nano_status st = neb_read(&g, path, &map, &map_len, err, sizeof err);
    close(fd);
    if (st == NANO_OK) {
        check_graph(&g, map, map_len);
        nano_graph_free(&g);
        neb_unmap(map, map_len);
    } else {
        require_refusal(st, err);
        fuzz_require(!map && !g.tensors && !g.nodes, "a refused file leaves nothing mapped or allocated");
    }

    /* with its checksums right, from memory */
    uint8_t *copy = malloc(size + 1);
    fuzz_require(copy != NULL, "memory");
    memcpy(copy, data, size);
    fix_crcs(copy, size);
    err[0] = 0;
    st = neb_parse(&g, copy, size, "fuzz.neb", err, sizeof err);
    if (st == NANO_OK) {
        check_graph(&g, copy, size);
        nano_graph_free(&g);
    } else {
        require_refusal(st, err);
    }
    free(copy);
    return 0;
}
