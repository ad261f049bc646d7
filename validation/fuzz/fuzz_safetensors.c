/* fuzz_safetensors — libFuzzer harness of the safetensors reader: any bytes as a
 * file to st_open; whatever it accepts must satisfy the invariants st_file
 * promises (checked here, abort on a violation), every tensor must be found by
 * name, and every float tensor must read. Built by `make fuzz` with libFuzzer,
 * ASan and UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "ckpt/tool/safetensors.h"


static void check_file(const st_file *f)
{
    uint64_t at = f->data_start;
    for (int i = 0; i < f->count; i++) {
        const st_info *t = &f->tensors[i];
        fuzz_require(t->name[0] != '\0' && st_find(f, t->name) == t, "every tensor is found by its name");
        fuzz_require(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "ndim within ST_MAX_DIMS");
        fuzz_require(t->offset == at, "tensors tile the data section in order");
        uint64_t span = 1;  /* product of the non-zero dimensions: must fit, so callers' products do */
        bool wraps = false, empty = false;
        for (int d = 0; d < t->ndim; d++) {
            fuzz_require(t->shape[d] >= 0, "dimensions are non-negative");
            empty |= t->shape[d] == 0;
            wraps |= t->shape[d] != 0 && __builtin_mul_overflow(span, (uint64_t)t->shape[d], &span);
        }
        fuzz_require(!wraps && span <= INT64_MAX && t->numel == (empty ? 0 : span), "numel is the product of the shape");
        fuzz_require(t->bytes % st_dtype_size(t->dtype) == 0 && t->bytes / st_dtype_size(t->dtype) == t->numel,
                "bytes == numel x dtype size, without wrapping");
        fuzz_require(t->bytes <= f->size - t->offset, "tensor ends inside the file");
        at += t->bytes;
        if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_F16 && t->dtype != ST_DTYPE_BF16) continue;
        float *dst = malloc(t->numel * sizeof *dst + 1);
        fuzz_require(dst != NULL, "a tensor of a small file fits in memory");
        fuzz_require(st_read_f32(f, t, dst, t->numel) == STATUS_OK, "a validated float tensor reads");
        free(dst);
    }
    fuzz_require(at == f->size, "the tensors end at the end of the file");
    for (int i = 0; i < f->meta_count; i++)
        fuzz_require(st_meta_get(f, f->meta[i].key) != NULL, "every metadata key is found");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_open(data, size, path, sizeof path);
    st_file f;
    status st = st_open(&f, path);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "st_open of a readable file is OK or STATUS_INPUT");
    if (st == STATUS_OK) {
        check_file(&f);
        st_close(&f);
    }
    close(fd);
    return 0;
}
