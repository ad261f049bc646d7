/* llmc — see llmc.h. One table (llmc_tensors) drives the parameter count, the
 * size check of the reader and both directions of the mapping, so they cannot
 * disagree about llm.c's order. */
#include "llmc.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Header and parameters are copied between memory and file as they are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c files are little-endian");

typedef unsigned long long ull;  /* for printf of 64-bit sizes */

typedef enum llmc_dim {
    LLMC_DIM_ONE = 0,  /* 1: the second dimension of a vector */
    LLMC_DIM_VP,       /* padded_vocab_size */
    LLMC_DIM_T,        /* max_seq_len */
    LLMC_DIM_C,        /* channels */
    LLMC_DIM_3C,       /* 3 * channels */
    LLMC_DIM_4C,       /* 4 * channels */
} llmc_dim;

typedef struct llmc_tensor {
    const char *name;    /* Nebula's (HF) name; "%d" is the layer when per_layer */
    bool per_layer;      /* stored as L consecutive copies, layer 0 first */
    llmc_dim rows;       /* Nebula's shape (rows, cols) ... */
    llmc_dim cols;       /* ... cols LLMC_DIM_ONE for a vector */
    bool transposed;     /* llm.c stores (cols, rows): nn.Linear (out, in) vs HF Conv1D (in, out) */
} llmc_tensor;

/* llm.c's order: train_gpt2.c fill_in_parameter_sizes. */
static const llmc_tensor llmc_tensors[] = {
    { "wte.weight", false, LLMC_DIM_VP, LLMC_DIM_C, false },
    { "wpe.weight", false, LLMC_DIM_T, LLMC_DIM_C, false },
    { "h.%d.ln_1.weight", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "h.%d.ln_1.bias", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "h.%d.attn.c_attn.weight", true, LLMC_DIM_C, LLMC_DIM_3C, true },
    { "h.%d.attn.c_attn.bias", true, LLMC_DIM_3C, LLMC_DIM_ONE, false },
    { "h.%d.attn.c_proj.weight", true, LLMC_DIM_C, LLMC_DIM_C, true },
    { "h.%d.attn.c_proj.bias", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "h.%d.ln_2.weight", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "h.%d.ln_2.bias", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "h.%d.mlp.c_fc.weight", true, LLMC_DIM_C, LLMC_DIM_4C, true },
    { "h.%d.mlp.c_fc.bias", true, LLMC_DIM_4C, LLMC_DIM_ONE, false },
    { "h.%d.mlp.c_proj.weight", true, LLMC_DIM_4C, LLMC_DIM_C, true },
    { "h.%d.mlp.c_proj.bias", true, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "ln_f.weight", false, LLMC_DIM_C, LLMC_DIM_ONE, false },
    { "ln_f.bias", false, LLMC_DIM_C, LLMC_DIM_ONE, false },
};
#define LLMC_NUM_TENSORS ((int)(sizeof llmc_tensors / sizeof llmc_tensors[0]))

/* Header fields are positive int32 here, so every dimension fits in 34 bits. */
static uint64_t llmc_dim_value(llmc_dim d, const gpt2_config *c)
{
    switch (d) {
    case LLMC_DIM_ONE: return 1;
    case LLMC_DIM_VP: return (uint64_t)c->padded_vocab_size;
    case LLMC_DIM_T: return (uint64_t)c->max_seq_len;
    case LLMC_DIM_C: return (uint64_t)c->channels;
    case LLMC_DIM_3C: return 3 * (uint64_t)c->channels;
    case LLMC_DIM_4C: return 4 * (uint64_t)c->channels;
    }
    die("llmc_dim_value", "unknown dimension", "llmc_tensors holds a value outside llmc_dim");
}

/* Floats in llm.c's layout for cfg; false when the count overflows 64 bits. */
static bool llmc_count(const gpt2_config *cfg, uint64_t *count)
{
    uint64_t total = 0;
    for (int k = 0; k < LLMC_NUM_TENSORS; k++) {
        const llmc_tensor *t = &llmc_tensors[k];
        uint64_t n;
        if (__builtin_mul_overflow(llmc_dim_value(t->rows, cfg), llmc_dim_value(t->cols, cfg), &n)) return false;
        if (t->per_layer && __builtin_mul_overflow(n, (uint64_t)cfg->num_layers, &n)) return false;
        if (__builtin_add_overflow(total, n, &total)) return false;
    }
    *count = total;
    return true;
}

/* One tensor (of one layer) in both layouts: element (r, c) of Nebula's
 * (rows, cols) tensor is nebula[r * cols + c] and flat[r * flat_rs + c * flat_cs]. */
typedef struct llmc_piece {
    size_t nebula;   /* first float in the Nebula flat buffer */
    size_t flat;     /* first float in llm.c's flat buffer */
    size_t rows;     /* Nebula's shape (rows, cols) ... */
    size_t cols;     /* ... 1 for a vector */
    size_t flat_rs;  /* llm.c's stride of r: cols, or 1 when it holds the transpose */
    size_t flat_cs;  /* llm.c's stride of c: 1, or rows when it holds the transpose */
} llmc_piece;

/* Matches every llm.c tensor to its table entry and checks the shape; *plan gets
 * the 4 + 12 L pieces in llm.c's order (the caller frees it). */
static status llmc_plan(const gpt2_config *cfg, const param_table *pt, llmc_piece **plan, int *npieces)
{
    int L = cfg->num_layers, n = 0;
    int64_t want = 4 + 12 * (int64_t)L;  /* L comes from a file: no int overflow */
    if (pt->count != want) {
        log_error("the parameter table has %d tensors; a GPT-2 of %d layers in llm.c's layout has %lld", pt->count,
                  L, (long long)want);
        return STATUS_INPUT;
    }
    llmc_piece *p = calloc((size_t)want, sizeof *p);
    if (!p) {
        log_error("out of memory mapping %lld tensors to llm.c's layout", (long long)want);
        return STATUS_NOMEM;
    }
    size_t flat = 0;
    for (int k = 0; k < LLMC_NUM_TENSORS; k++) {
        const llmc_tensor *t = &llmc_tensors[k];
        size_t rows = llmc_dim_value(t->rows, cfg), cols = llmc_dim_value(t->cols, cfg);
        int ndim = t->cols == LLMC_DIM_ONE ? 1 : 2;
        for (int l = 0; l < (t->per_layer ? L : 1); l++) {
            char name[PARAM_NAME_MAX];
            snprintf(name, sizeof name, t->name, l);
            int i = param_find(pt, name);
            const param_entry *e = i >= 0 ? &pt->entries[i] : NULL;
            if (!e || e->ndim != ndim || e->shape[0] != rows || (ndim == 2 && e->shape[1] != cols)) {
                char shape[64];
                if (ndim == 2) snprintf(shape, sizeof shape, "(%zu, %zu)", rows, cols);
                else snprintf(shape, sizeof shape, "(%zu)", rows);
                log_error("tensor %s is %s; a GPT-2 with channels %d, max_seq_len %d and padded_vocab_size %d "
                          "needs it with shape %s", name, e ? "of another shape" : "missing from the table",
                          cfg->channels, cfg->max_seq_len, cfg->padded_vocab_size, shape);
                free(p);
                return STATUS_INPUT;
            }
            p[n++] = (llmc_piece){ e->offset, flat, rows, cols, t->transposed ? 1 : cols, t->transposed ? rows : 1 };
            flat += rows * cols;
        }
    }
    *plan = p;
    *npieces = n;
    return STATUS_OK;
}

/* dst[r*drs + c*dcs] = src[r*srs + c*scs] for a (rows, cols) tensor. */
static void llmc_copy(float *dst, size_t drs, size_t dcs, const float *src, size_t srs, size_t scs, size_t rows,
                      size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[r * drs + c * dcs] = src[r * srs + c * scs];
}

status llmc_from_table(llmc_model *m, const gpt2_config *cfg, const param_table *pt, const float *params)
{
    memset(m, 0, sizeof *m);
    llmc_piece *plan;
    int n;
    uint64_t count;
    TRY(llmc_plan(cfg, pt, &plan, &n));
    CHECK(llmc_count(cfg, &count), "a GPT-2 whose table exists cannot overflow llm.c's parameter count");
    m->params = malloc(count * sizeof *m->params);
    if (!m->params) {
        log_error("out of memory for %llu parameters in llm.c's layout", (ull)count);
        free(plan);
        return STATUS_NOMEM;
    }
    m->cfg = *cfg;
    m->version = LLMC_VERSION_FP32;
    m->num_params = count;
    for (int i = 0; i < n; i++) {
        const llmc_piece *p = &plan[i];
        llmc_copy(m->params + p->flat, p->flat_rs, p->flat_cs, params + p->nebula, p->cols, 1, p->rows, p->cols);
    }
    free(plan);
    return STATUS_OK;
}

status llmc_to_table(const llmc_model *m, const param_table *pt, float *params)
{
    llmc_piece *plan;
    int n;
    TRY(llmc_plan(&m->cfg, pt, &plan, &n));
    for (int i = 0; i < n; i++) {
        const llmc_piece *p = &plan[i];
        llmc_copy(params + p->nebula, p->cols, 1, m->params + p->flat, p->flat_rs, p->flat_cs, p->rows, p->cols);
    }
    free(plan);
    return STATUS_OK;
}

void llmc_free(llmc_model *m)
{
    free(m->params);
    memset(m, 0, sizeof *m);
}

/* ---- the file ---- */

/* Round to nearest, ties to even (torch's float -> bfloat16); NaN stays a quiet NaN. */
static uint16_t llmc_f32_to_bf16(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* The header's fields, checked in order; each message names the field and file. */
static status llmc_check_header(const char *path, const int32_t *h, uint64_t size, gpt2_config *cfg, uint64_t *count)
{
    if (h[0] != LLMC_MAGIC) {
        log_error("%s: magic %d is not %d, the first int32 of an llm.c GPT-2 model file (train_gpt2.py "
                  "write_model)%s", path, h[0], LLMC_MAGIC,
                  h[0] == 20240520 ? "; this is an llm.c token data file" :
                  h[0] == 20240328 ? "; this is an llm.c tokenizer file" : "");
        return STATUS_INPUT;
    }
    if (h[1] != LLMC_VERSION_FP32 && h[1] != LLMC_VERSION_BF16) {
        log_error("%s: version %d is not one this reader knows: 3 (fp32) or 5 (bf16), the versions llm.c writes "
                  "since the vocabulary is padded; re-export the model with a current llm.c", path, h[1]);
        return STATUS_INPUT;
    }
    static const char *const field[] = { "max_seq_len", "vocab_size", "num_layers", "num_heads", "channels",
                                         "padded_vocab_size" };
    for (int i = 0; i < 6; i++)
        if (h[2 + i] < 1) {
            log_error("%s: header[%d] %s = %d; it must be at least 1", path, 2 + i, field[i], h[2 + i]);
            return STATUS_INPUT;
        }
    *cfg = (gpt2_config){ .max_seq_len = h[2], .vocab_size = h[3], .num_layers = h[4], .num_heads = h[5],
                          .channels = h[6], .padded_vocab_size = h[7] };
    if (cfg->channels % cfg->num_heads != 0) {
        log_error("%s: header num_heads = %d does not divide channels = %d", path, cfg->num_heads, cfg->channels);
        return STATUS_INPUT;
    }
    if (cfg->padded_vocab_size < cfg->vocab_size) {
        log_error("%s: header padded_vocab_size = %d is smaller than vocab_size = %d; padding only adds rows", path,
                  cfg->padded_vocab_size, cfg->vocab_size);
        return STATUS_INPUT;
    }
    uint64_t elt = h[1] == LLMC_VERSION_FP32 ? 4 : 2, need;
    if (!llmc_count(cfg, count) || __builtin_mul_overflow(*count, elt, &need) ||
        __builtin_add_overflow(need, (uint64_t)LLMC_HEADER_INTS * 4, &need)) {
        log_error("%s: the header's sizes (max_seq_len %d, padded_vocab_size %d, num_layers %d, channels %d) "
                  "describe more than 2^64 bytes of parameters", path, cfg->max_seq_len, cfg->padded_vocab_size,
                  cfg->num_layers, cfg->channels);
        return STATUS_INPUT;
    }
    if (need != size) {
        char diff[64];
        if (size < need) snprintf(diff, sizeof diff, "truncated: %llu bytes are missing", (ull)(need - size));
        else snprintf(diff, sizeof diff, "%llu bytes too long", (ull)(size - need));
        log_error("%s: %llu bytes, but its header (max_seq_len %d, vocab_size %d, padded_vocab_size %d, "
                  "num_layers %d, num_heads %d, channels %d, version %d) describes %llu parameters of %llu bytes: "
                  "%llu bytes with the 1024-byte header; the file is %s", path, (ull)size, cfg->max_seq_len,
                  cfg->vocab_size, cfg->padded_vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels, h[1],
                  (ull)*count, (ull)elt, (ull)need, diff);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status llmc_read_params(llmc_model *m, int fd, const char *path)
{
    uint64_t off = (uint64_t)LLMC_HEADER_INTS * 4;
    int rc = 0;
    if (m->version == LLMC_VERSION_FP32) {
        rc = path_read_all_at(fd, m->params, m->num_params * sizeof(float), off);
    } else {  /* widen through a small buffer: the file is never held twice */
        uint16_t buf[4096];
        size_t chunk = sizeof buf / sizeof buf[0];
        for (size_t done = 0; done < m->num_params && !rc; done += chunk) {
            size_t n = m->num_params - done < chunk ? m->num_params - done : chunk;
            rc = path_read_all_at(fd, buf, n * 2, off + done * 2);
            for (size_t i = 0; i < n && !rc; i++) {
                uint32_t bits = (uint32_t)buf[i] << 16;
                memcpy(&m->params[done + i], &bits, sizeof bits);
            }
        }
    }
    if (rc) {
        log_error("cannot read the parameters of %s: %s", path,
                  errno ? log_errno_str() : "the file is shorter than when it was opened");
        return STATUS_IO;
    }
    return STATUS_OK;
}

status llmc_read(llmc_model *m, const char *path)
{
    memset(m, 0, sizeof *m);
    int32_t h[LLMC_HEADER_INTS];
    struct stat sb;
    status st = STATUS_INPUT;
    uint64_t count;
    char kind[160];
    int fd = -1;
    if (path_open_regular(path, &fd, &sb, 0, kind, sizeof kind) != 0) {  /* a FIFO would block open(2) */
        log_error("the llm.c model file %s %s", path, kind);
        goto close_fd;
    }
    if (!S_ISREG(sb.st_mode)) {
        log_error("%s is not a regular file; an llm.c model file was expected", path);
        goto close_fd;
    }
    if ((uint64_t)sb.st_size < sizeof h) {
        log_error("%s: %llu bytes, shorter than the %zu-byte header of an llm.c model file", path,
                  (ull)sb.st_size, sizeof h);
        goto close_fd;
    }
    if (path_read_all_at(fd, h, sizeof h, 0) != 0) {
        log_error("cannot read the header of %s: %s", path, errno ? log_errno_str() : "the file shrank");
        st = STATUS_IO;
        goto close_fd;
    }
    if ((st = llmc_check_header(path, h, (uint64_t)sb.st_size, &m->cfg, &count)) != STATUS_OK) goto close_fd;
    m->version = (llmc_version)h[1];
    m->num_params = count;
    m->params = malloc(count * sizeof *m->params);  /* count <= file size / 2: no overflow */
    if (!m->params) {
        log_error("%s: out of memory for %llu parameters", path, (ull)count);
        st = STATUS_NOMEM;
        goto close_fd;
    }
    st = llmc_read_params(m, fd, path);
close_fd:
    if (fd >= 0) close(fd);
    if (st != STATUS_OK) llmc_free(m);
    return st;
}

typedef struct llmc_writer {
    const llmc_model *m;   /* what to write */
    llmc_version version;  /* how */
} llmc_writer;

/* n floats from src (NULL: zeros) in the writer's dtype. */
static int llmc_emit(int fd, const float *src, size_t n, llmc_version version)
{
    if (src && version == LLMC_VERSION_FP32) return path_write_all(fd, src, n * sizeof *src);
    union { float f[2048]; uint16_t h[2048]; } buf;
    for (size_t done = 0; done < n; done += 2048) {
        size_t k = n - done < 2048 ? n - done : 2048;
        for (size_t i = 0; i < k; i++) {
            float v = src ? src[done + i] : 0.0f;
            if (version == LLMC_VERSION_FP32) buf.f[i] = v;
            else buf.h[i] = llmc_f32_to_bf16(v);
        }
        if (path_write_all(fd, &buf, k * (version == LLMC_VERSION_FP32 ? 4 : 2))) return -1;
    }
    return 0;
}

static int llmc_fill(void *ctx, int fd)
{
    const llmc_writer *w = ctx;
    const gpt2_config *c = &w->m->cfg;
    int32_t h[LLMC_HEADER_INTS] = { LLMC_MAGIC, (int32_t)w->version, c->max_seq_len, c->vocab_size,
                                    c->num_layers, c->num_heads, c->channels, c->padded_vocab_size };
    size_t real = (size_t)c->vocab_size * (size_t)c->channels, wte = (size_t)c->padded_vocab_size * (size_t)c->channels;
    const float *p = w->m->params;
    if (path_write_all(fd, h, sizeof h)) return -1;
    if (llmc_emit(fd, p, real, w->version) || llmc_emit(fd, NULL, wte - real, w->version)) return -1;
    return llmc_emit(fd, p + wte, w->m->num_params - wte, w->version);
}

status llmc_write(const llmc_model *m, const char *path, llmc_version version)
{
    uint64_t count;
    CHECK(version == LLMC_VERSION_FP32 || version == LLMC_VERSION_BF16, "llmc_write takes an llmc_version");
    CHECK(llmc_count(&m->cfg, &count) && count == m->num_params, "llmc_write needs params sized for m->cfg");
    llmc_writer w = { m, version };
    return path_write_atomic(path, "llm.c model file", llmc_fill, &w);
}
