/* test_llmc — llm.c's GPT-2 model file: the layout against llm.c's
 * fill_in_parameter_sizes computed independently here (order, offsets, the four
 * transposed matrices), Nebula -> llm.c -> Nebula bit-exact through an fp32 file,
 * zeroed vocabulary padding, bf16 rounding (ties to even, NaN, overflow to inf),
 * tables that do not match, and hostile files built here (every header field,
 * truncation at every length, mislabelled dtypes, sizes that overflow 64 bits).
 *
 * Each hostile file must be refused with STATUS_INPUT and one message naming the
 * file; none may crash. Runs without mpirun. One line per check, exit 1 on failure. */
#include "nn/gpt2.h"
#include "ckpt/tool/llmc.h"
#include "../check.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* maxT 8, V 10 padded to 16, 2 layers, 2 heads, 8 channels: every kind of tensor, small. */
static const gpt2_config CFG = { .max_seq_len = 8, .vocab_size = 10, .padded_vocab_size = 16, .num_layers = 2,
                                 .num_heads = 2, .channels = 8 };

/* Every float of every tensor distinct and exact (so any misplaced float shows),
 * the padding rows of wte zero as Nebula keeps them. */
static void fill_distinct(gpt2 *m)
{
    for (int i = 0; i < m->pt.count; i++)
        for (size_t k = 0; k < m->pt.entries[i].count; k++)
            m->pb.params[m->pt.entries[i].offset + k] = (float)(i + 1) + (float)k / 4096.0f;
    size_t C = (size_t)m->cfg.channels;
    memset(m->pb.params + (size_t)m->cfg.vocab_size * C, 0,
           (size_t)(m->cfg.padded_vocab_size - m->cfg.vocab_size) * C * sizeof(float));
}

static const float *nb(const gpt2 *m, const char *fmt, int l)
{
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    return m->pb.params + m->pt.entries[param_find(&m->pt, name)].offset;
}

/* llm.c's flat layout, written out from train_gpt2.c's fill_in_parameter_sizes
 * rather than from llmc.c's table: wte, wpe, ln1w, ln1b, qkvw (L, 3C, C), qkvb,
 * attprojw (L, C, C), attprojb, ln2w, ln2b, fcw (L, 4C, C), fcb, fcprojw
 * (L, C, 4C), fcprojb, lnfw, lnfb. Matrices are (out, in): element [o][i] of
 * llm.c's is element [i][o] of Nebula's (HF Conv1D). */
static void test_layout(test_ctx *t, const gpt2 *a, const llmc_model *lm)
{
    size_t Vp = 16, T = 8, L = 2, C = 8, sizes[16] = { Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                                                       L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                                                       L * C * 4 * C, L * C, C, C };
    size_t off[17] = { 0 };
    for (int k = 0; k < 16; k++) off[k + 1] = off[k] + sizes[k];
    check(t, lm->num_params == off[16] && off[16] == 1952, "llm.c parameter count %zu (fill_in_parameter_sizes: %zu)",
          lm->num_params, off[16]);
    const float *p = lm->params;
    int bad = 0;
    for (size_t k = 0; k < Vp * C; k++) bad += p[off[0] + k] != nb(a, "wte.weight", 0)[k];
    for (size_t k = 0; k < T * C; k++) bad += p[off[1] + k] != nb(a, "wpe.weight", 0)[k];
    check(t, bad == 0, "wte and wpe are copied as they are: %d wrong", bad);
    static const struct { int slot; const char *name; size_t n; } vec[] = {
        { 2, "h.%d.ln_1.weight", 8 }, { 3, "h.%d.ln_1.bias", 8 }, { 5, "h.%d.attn.c_attn.bias", 24 },
        { 7, "h.%d.attn.c_proj.bias", 8 }, { 8, "h.%d.ln_2.weight", 8 }, { 9, "h.%d.ln_2.bias", 8 },
        { 11, "h.%d.mlp.c_fc.bias", 32 }, { 13, "h.%d.mlp.c_proj.bias", 8 },
    };
    bad = 0;
    for (size_t v = 0; v < sizeof vec / sizeof vec[0]; v++)
        for (int l = 0; l < 2; l++)
            for (size_t k = 0; k < vec[v].n; k++)
                bad += p[off[vec[v].slot] + (size_t)l * vec[v].n + k] != nb(a, vec[v].name, l)[k];
    for (size_t k = 0; k < C; k++)
        bad += p[off[14] + k] != nb(a, "ln_f.weight", 0)[k] || p[off[15] + k] != nb(a, "ln_f.bias", 0)[k];
    check(t, bad == 0, "norms and biases: layer after layer in llm.c's order: %d wrong", bad);
    static const struct { int slot; const char *name; size_t in, out; } mat[] = {
        { 4, "h.%d.attn.c_attn.weight", 8, 24 }, { 6, "h.%d.attn.c_proj.weight", 8, 8 },
        { 10, "h.%d.mlp.c_fc.weight", 8, 32 }, { 12, "h.%d.mlp.c_proj.weight", 32, 8 },
    };
    bad = 0;
    for (size_t m = 0; m < sizeof mat / sizeof mat[0]; m++)
        for (int l = 0; l < 2; l++)
            for (size_t o = 0; o < mat[m].out; o++)
                for (size_t i = 0; i < mat[m].in; i++)
                    bad += p[off[mat[m].slot] + (size_t)l * mat[m].in * mat[m].out + o * mat[m].in + i] !=
                           nb(a, mat[m].name, l)[i * mat[m].out + o];
    check(t, bad == 0, "qkvw, attprojw, fcw, fcprojw are Nebula's Conv1D (in, out) transposed to (out, in): %d wrong",
          bad);
}

/* Nebula -> llm.c fp32 file -> Nebula: the header, the size, and every bit. */
static void test_round_trip(test_ctx *t, gpt2 *a, const llmc_model *lm)
{
    char path[128];
    snprintf(path, sizeof path, "%s/model_f32.bin", t->dir);
    check(t, llmc_write(lm, path, LLMC_VERSION_FP32) == STATUS_OK, "llmc_write fp32");
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    int32_t h[8];
    memcpy(h, bytes, sizeof h);
    check(t, n == 1024 + 1952 * 4 && h[0] == 20240326 && h[1] == 3 && h[2] == 8 && h[3] == 10 && h[4] == 2 &&
             h[5] == 2 && h[6] == 8 && h[7] == 16, "file: %zu bytes, header 20240326 3 8 10 2 2 8 16", n);
    bool tail_zero = true;
    for (size_t k = 32; k < 1024; k++) tail_zero &= bytes[k] == 0;
    check(t, tail_zero && !memcmp(bytes + 1024, lm->params, 1952 * 4), "header ints 8..255 are 0, data is fp32 as is");
    free(bytes);

    llmc_model back;
    status st = llmc_read(&back, path);
    check(t, st == STATUS_OK && back.version == LLMC_VERSION_FP32 && back.num_params == 1952 &&
             !memcmp(&back.cfg, &CFG, sizeof CFG), "llmc_read: version 3, the config and 1952 parameters");
    gpt2 b;
    if (st != STATUS_OK || gpt2_init(&b, &CFG, 1, 1, 99, false) != STATUS_OK) { check(t, false, "setup"); return; }
    memset(b.pb.params, 0, b.pt.total * sizeof(float));
    st = llmc_to_table(&back, &b.pt, b.pb.params);
    check(t, st == STATUS_OK && !memcmp(a->pb.params, b.pb.params, a->pt.total * sizeof(float)),
          "Nebula -> llm.c fp32 -> Nebula: all %zu floats bit-exact (padding included)", a->pt.total);
    gpt2_free(&b);
    llmc_free(&back);
}

/* Rows V..Vp-1 of wte are written as zeros even when the model holds something there. */
static void test_padding_rows(test_ctx *t, gpt2 *a)
{
    size_t C = 8, V = 10, Vp = 16;
    for (size_t k = V * C; k < Vp * C; k++) a->pb.params[k] = 7.0f;
    llmc_model lm;
    char path[128];
    snprintf(path, sizeof path, "%s/model_pad.bin", t->dir);
    bool ok = llmc_from_table(&lm, &CFG, &a->pt, a->pb.params) == STATUS_OK &&
              llmc_write(&lm, path, LLMC_VERSION_FP32) == STATUS_OK;
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    float row[64];
    memcpy(row, bytes + 1024 + V * C * 4, sizeof row);
    int nonzero = 0;
    for (size_t k = 0; k < (Vp - V) * C; k++) nonzero += row[k] != 0.0f;
    check(t, ok && nonzero == 0 && !memcmp(bytes + 1024, a->pb.params, V * C * 4),
          "padded vocabulary rows are written as zeros (%d nonzero), real rows as they are", nonzero);
    free(bytes);
    llmc_free(&lm);
    memset(a->pb.params + V * C, 0, (Vp - V) * C * sizeof(float));
}

/* bf16: round to nearest, ties to even, as torch; specials survive; size halves. */
static void test_bf16(test_ctx *t, const llmc_model *lm)
{
    static const struct { float in; uint16_t want; const char *what; } cases[] = {
        { 1.0f, 0x3f80, "1" },
        { 1.0f + 0x1p-8f, 0x3f80, "1 + 2^-8: tie, to even (down)" },
        { 1.0f + 0x1p-7f + 0x1p-8f, 0x3f82, "1 + 2^-7 + 2^-8: tie, to even (up)" },
        { 1.0f + 0x1p-8f + 0x1p-20f, 0x3f81, "just above a tie: up" },
        { -0.0f, 0x8000, "-0" },
        { INFINITY, 0x7f80, "inf" },
        { FLT_MAX, 0x7f80, "FLT_MAX overflows to inf" },
        { -1e-40f, 0x8001, "a float subnormal rounds to a bf16 subnormal" },
    };
    size_t nc = sizeof cases / sizeof cases[0];
    llmc_model m = *lm;
    m.params = malloc(lm->num_params * sizeof *m.params);
    memcpy(m.params, lm->params, lm->num_params * sizeof *m.params);
    for (size_t i = 0; i < nc; i++) m.params[i] = cases[i].in;
    m.params[nc] = NAN;
    char path[128];
    snprintf(path, sizeof path, "%s/model_bf16.bin", t->dir);
    llmc_model back;
    bool ok = llmc_write(&m, path, LLMC_VERSION_BF16) == STATUS_OK && llmc_read(&back, path) == STATUS_OK;
    struct stat sb;
    check(t, ok && stat(path, &sb) == 0 && sb.st_size == 1024 + 1952 * 2 && back.version == LLMC_VERSION_BF16,
          "bf16 file: version 5 and 1024 + 2 bytes per parameter");
    if (!ok) { free(m.params); return; }
    for (size_t i = 0; i < nc; i++) {
        uint32_t bits;
        memcpy(&bits, &back.params[i], sizeof bits);
        check(t, bits == (uint32_t)cases[i].want << 16, "bf16 %s: 0x%04x (got 0x%08x)", cases[i].what,
              cases[i].want, bits);
    }
    check(t, isnan(back.params[nc]), "bf16 NaN stays NaN");
    int far = 0;
    for (size_t k = nc + 1; k < m.num_params; k++)
        far += fabsf(back.params[k] - m.params[k]) > 0x1p-8f * fabsf(m.params[k]);
    check(t, far == 0, "every other parameter within half a bf16 ulp (2^-8 relative): %d beyond", far);
    llmc_free(&back);
    free(m.params);
}

/* Tables that are not this GPT-2 are refused, naming the tensor that differs. */
static void test_mismatch(test_ctx *t, const llmc_model *lm)
{
    gpt2_config deeper = CFG, wider = CFG;
    deeper.num_layers = 3;
    wider.channels = 16;
    gpt2 d, w;
    if (gpt2_init(&d, &deeper, 1, 1, 1, false) != STATUS_OK || gpt2_init(&w, &wider, 1, 1, 1, false) != STATUS_OK) {
        check(t, false, "setup of mismatching models");
        return;
    }
    capture_begin(t);
    status st = llmc_to_table(lm, &d.pt, d.pb.params);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "40 tensors") && strstr(msg, "has 28"),
          "a 2-layer llm.c model into a 3-layer table: STATUS_INPUT, tensor counts named");
    capture_begin(t);
    st = llmc_to_table(lm, &w.pt, w.pb.params);
    msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "wte.weight") && strstr(msg, "(16, 8)"),
          "a channels-8 model into a channels-16 table: STATUS_INPUT naming wte.weight and its shape");
    llmc_model x;
    capture_begin(t);
    st = llmc_from_table(&x, &CFG, &w.pt, w.pb.params);
    msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && x.params == NULL && strstr(msg, "wte.weight"),
          "llmc_from_table with a table of other shapes: STATUS_INPUT, nothing allocated");
    gpt2_free(&d);
    gpt2_free(&w);
}

/* llmc_read of path must be STATUS_INPUT with a message naming it and holding expect. */
static void expect_refused(test_ctx *t, const char *path, const char *what, const char *expect)
{
    llmc_model m;
    capture_begin(t);
    status st = llmc_read(&m, path);
    const char *msg = capture_end(t, true);
    bool ok = st == STATUS_INPUT && strstr(msg, path) && strstr(msg, expect) && m.params == NULL;
    check(t, ok, "refused: %s -> %s%s%s", what, status_str(st), ok ? "" : "; message: ", ok ? "" : msg);
    if (st == STATUS_OK) llmc_free(&m);
}

static void test_hostile(test_ctx *t)
{
    static const struct { const char *what; int i1; int32_t v1; int i2; int32_t v2; const char *expect; } cases[] = {
        { "magic 0", 0, 0, -1, 0, "magic 0 is not 20240326" },
        { "an llm.c token file", 0, 20240520, -1, 0, "token data file" },
        { "an llm.c tokenizer file", 0, 20240328, -1, 0, "tokenizer file" },
        { "version 1 (before padding)", 1, 1, -1, 0, "version 1" },
        { "version 2", 1, 2, -1, 0, "version 2" },
        { "version 4", 1, 4, -1, 0, "3 (fp32) or 5 (bf16)" },
        { "version -3", 1, -3, -1, 0, "version -3" },
        { "max_seq_len 0", 2, 0, -1, 0, "header[2] max_seq_len = 0" },
        { "vocab_size -1", 3, -1, -1, 0, "header[3] vocab_size = -1" },
        { "num_layers 0", 4, 0, -1, 0, "header[4] num_layers = 0" },
        { "num_heads INT_MIN", 5, INT32_MIN, -1, 0, "header[5] num_heads = -2147483648" },
        { "channels 0", 6, 0, -1, 0, "header[6] channels = 0" },
        { "padded_vocab_size 0", 7, 0, -1, 0, "header[7] padded_vocab_size = 0" },
        { "3 heads for 8 channels", 5, 3, -1, 0, "num_heads = 3 does not divide channels = 8" },
        { "vocab 17 over padded 16", 3, 17, -1, 0, "padded_vocab_size = 16 is smaller than vocab_size = 17" },
        { "padded vocab 32: the data is short", 7, 32, -1, 0, "truncated" },
        { "max_seq_len 4: the data is long", 2, 4, -1, 0, "bytes too long" },
        { "num_layers INT_MAX", 4, INT32_MAX, -1, 0, "truncated" },
        { "channels INT_MAX, 1 head: sizes beyond 2^64", 6, INT32_MAX, 5, 1, "more than 2^64" },
        { "fp32 data labelled bf16", 1, 5, -1, 0, "bytes too long" },
    };
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/model_f32.bin", t->dir);
    snprintf(bad, sizeof bad, "%s/hostile.bin", t->dir);
    size_t n;
    unsigned char *bytes = read_file(good, &n);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t h[256];
        memcpy(h, bytes, sizeof h);
        h[cases[c].i1] = cases[c].v1;
        if (cases[c].i2 >= 0) h[cases[c].i2] = cases[c].v2;
        unsigned char *copy = malloc(n);
        memcpy(copy, bytes, n);
        memcpy(copy, h, sizeof h);
        write_bytes(bad, copy, n);
        free(copy);
        expect_refused(t, bad, cases[c].what, cases[c].expect);
    }
    unsigned char *longer = malloc(n + 1);
    memcpy(longer, bytes, n);
    longer[n] = 0;
    write_bytes(bad, longer, n + 1);
    free(longer);
    expect_refused(t, bad, "one byte appended", "1 bytes too long");

    char b16[128];
    snprintf(b16, sizeof b16, "%s/model_bf16.bin", t->dir);
    size_t n16;
    unsigned char *half = read_file(b16, &n16);
    int32_t v3 = 3;
    memcpy(half + 4, &v3, 4);
    write_bytes(bad, half, n16);
    free(half);
    expect_refused(t, bad, "bf16 data labelled fp32", "truncated");

    int accepted = 0, silent = 0;
    for (size_t len = 0; len < n; len++) {
        write_bytes(bad, bytes, len);
        llmc_model m;
        capture_begin(t);
        status st = llmc_read(&m, bad);
        const char *msg = capture_end(t, false);
        if (st == STATUS_OK) { accepted++; llmc_free(&m); }
        else if (st != STATUS_INPUT || !strstr(msg, bad)) silent++;
    }
    check(t, accepted == 0 && silent == 0,
          "truncated at each of %zu lengths: all refused with STATUS_INPUT and a message (%d accepted, %d without)",
          n, accepted, silent);
    free(bytes);
    expect_refused(t, "/nonexistent/gpt2_124M.bin", "missing file", "cannot be opened");
    expect_refused(t, t->dir, "a directory", "not a regular file");
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "llmc");
    gpt2 a;
    llmc_model lm;
    if (gpt2_init(&a, &CFG, 1, 1, 7, false) != STATUS_OK) { printf("FAIL - gpt2_init\n"); return 1; }
    fill_distinct(&a);
    check(&t, llmc_from_table(&lm, &CFG, &a.pt, a.pb.params) == STATUS_OK, "llmc_from_table of a 2-layer GPT-2");

    test_layout(&t, &a, &lm);
    test_round_trip(&t, &a, &lm);
    test_padding_rows(&t, &a);
    test_bf16(&t, &lm);
    test_mismatch(&t, &lm);
    test_hostile(&t);

    llmc_free(&lm);
    gpt2_free(&a);
    scratch_free(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
