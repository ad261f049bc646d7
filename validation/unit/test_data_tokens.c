/* test_data_tokens — unit test of libcore/data on token streams: both file formats
 * (every token width), exact windows and targets, the per-epoch permutation, the
 * global-batch -> (rank, micro-step) mapping, state save / restore (also at another
 * world size), synthetic tokens, every corruption case with its message, and
 * data_prepare_text on license texts every Debian system has.
 *
 * Token i of the test files is i itself (mod the vocabulary), so a window names its
 * own start and every check is exact. Runs without mpirun: ranks are simulated by
 * opening one loader per dp_rank in one process. */
#include "data/data.h"  /* before check.h: expect_open_error */
#include "../check.h"

#include <stdint.h>

#define SEED 1234

/* A Nebula file of `count` tokens (token i = (i + off) mod vocab) with the given header
 * fields; `cut` bytes are removed from the end (truncation), negative adds bytes. */
static void write_nebula(const char *path, uint32_t version, uint32_t vocab, uint64_t count, uint32_t width,
                         uint32_t reserved, uint32_t off, long cut)
{
    size_t n = DATA_NEBULA_HEADER_BYTES + count * width;
    uint8_t *buf = calloc(n + 64, 1);
    memcpy(buf, DATA_NEBULA_MAGIC, 8);
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 12, &vocab, 4);
    memcpy(buf + 16, &count, 8);
    memcpy(buf + 24, &width, 4);
    memcpy(buf + 28, &reserved, 4);
    for (uint64_t i = 0; i < count; i++) {
        uint32_t v = (uint32_t)((i + off) % vocab);
        memcpy(buf + DATA_NEBULA_HEADER_BYTES + i * width, &v, width);  /* little endian: low bytes first */
    }
    write_bytes(path, buf, (size_t)((long)n - cut));
    free(buf);
}

/* An llm.c file: header [magic, version, count], token i = i mod 65536 (bump at `bad_at`). */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count, long cut, int64_t bad_at,
                       uint16_t bad)
{
    size_t n = DATA_LLMC_HEADER_BYTES + (size_t)count * 2;
    uint8_t *buf = calloc(n + 64, 1);
    int32_t h[3] = { magic, version, count };
    memcpy(buf, h, sizeof h);
    for (int32_t i = 0; i < count; i++) {
        uint16_t v = i == bad_at ? bad : (uint16_t)i;
        memcpy(buf + DATA_LLMC_HEADER_BYTES + 2 * (size_t)i, &v, 2);
    }
    write_bytes(path, buf, (size_t)((long)n - cut));
    free(buf);
}

static data_config token_cfg(const char *path, int vocab, int T, int b, int A, int rank, int size)
{
    return (data_config){ .path = path, .vocab_size = vocab, .T = T, .micro_batch = b, .accum = A,
                          .dp_rank = rank, .dp_size = size, .seed = SEED, .shuffle = true };
}

static data_loader *open_ok(test_ctx *t, const data_config *cfg, const char *what)
{
    data_loader *d = NULL;
    status st = data_open(&d, cfg);
    if (st != STATUS_OK) {  /* success is implied by the checks that use the loader */
        check(t, false, "%s: data_open -> %s; cannot continue", what, status_str(st));
        exit(1);
    }
    return d;
}

/* Every row of micro-batch a: inputs = window of its sample, targets shifted by one. */
static bool windows_exact(data_loader *d, int a, int T, int b, uint32_t vocab, uint32_t off)
{
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(b * T)), *tg = malloc(sizeof(int32_t) * (size_t)(b * T));
    uint64_t *s = malloc(sizeof(uint64_t) * (size_t)b);
    bool ok = data_next_tokens(d, a, in, tg) == STATUS_OK;
    data_batch_samples(d, a, s);
    for (int i = 0; i < b && ok; i++)
        for (int t = 0; t < T; t++) {
            uint64_t p = s[i] * (uint64_t)T + (uint64_t)t;
            ok &= in[i * T + t] == (int32_t)((p + off) % vocab) && tg[i * T + t] == (int32_t)((p + 1 + off) % vocab);
        }
    free(in);
    free(tg);
    free(s);
    return ok;
}

static void test_formats(test_ctx *t)
{
    char path[256];
    struct { const char *name; uint32_t width, vocab, off; int model_vocab; } f[] = {
        { "nebula u8", 1, 256, 0, 256 },
        { "nebula u16", 2, 50257, 0, 50304 },
        { "nebula u32", 4, 100000, 70000, 100000 },
    };
    for (int k = 0; k < 3; k++) {
        write_nebula(scratch_path(t, "tok.bin", path, sizeof path), 1, f[k].vocab, 1001, f[k].width, 0, f[k].off, 0);
        data_config cfg = token_cfg(path, f[k].model_vocab, 10, 4, 2, 0, 1);
        data_loader *d = open_ok(t, &cfg, f[k].name);
        check(t, data_samples(d) == 100 && data_steps_per_epoch(d) == 12, "%s: 1001 tokens, T=10 -> 100 samples, "
              "12 steps of 8", f[k].name);
        check(t, data_get_format(d) == DATA_FORMAT_NEBULA_TOKENS, "%s: detected as Nebula", f[k].name);
        bool ok = true;
        for (int step = 0; step < 15; step++, data_advance(d))
            for (int a = 0; a < 2; a++) ok &= windows_exact(d, a, 10, 4, f[k].vocab, f[k].off);
        check(t, ok, "%s: inputs and targets of 15 steps x 2 micro-batches are the exact windows", f[k].name);
        data_free(d);
    }
    write_llmc(scratch_path(t, "llmc.bin", path, sizeof path), DATA_LLMC_MAGIC, 1, 3000, 0, -1, 0);
    data_config cfg = token_cfg(path, 50257, 64, 3, 1, 0, 1);
    data_loader *d = open_ok(t, &cfg, "llm.c");
    check(t, data_get_format(d) == DATA_FORMAT_LLMC_TOKENS && data_samples(d) == 46, "llm.c: detected, 3000 tokens, "
          "T=64 -> 46 samples");
    bool ok = true;
    for (int step = 0; step < 20; step++, data_advance(d)) ok &= windows_exact(d, 0, 64, 3, 65536, 0);
    check(t, ok, "llm.c: 20 steps of exact windows");
    char line[512];
    data_describe(d, line, sizeof line);
    check(t, strstr(line, "llm.c tokens") && strstr(line, "3000 tokens"), "describe: %s", line);
    cfg.shuffle = false;
    data_free(d);
    d = open_ok(t, &cfg, "llm.c unshuffled");
    ok = true;
    for (uint64_t p = 0; p < 46; p++) ok &= data_sample_index(d, 3, p) == p;
    check(t, ok, "shuffle off: the file's order in every epoch");
    data_free(d);
}

/* The order tests' file of n windows (T = 1), written when `write`. */
static data_loader *open_n(test_ctx *t, uint64_t n, uint64_t seed, bool write)
{
    char path[256];
    scratch_path(t, "n.bin", path, sizeof path);
    if (write) write_nebula(path, 1, 256, n + 1, 1, 0, 0, 0);
    data_config cfg = token_cfg(path, 256, 1, 1, 1, 0, 1);
    cfg.seed = seed;
    return open_ok(t, &cfg, "order file");
}

static void test_permutation(test_ctx *t)
{
    const uint64_t sizes[] = { 1, 2, 3, 7, 100, 1000, 4097 };
    for (int k = 0; k < 7; k++) {
        uint64_t n = sizes[k];
        data_loader *d = open_n(t, n, SEED, true), *e = open_n(t, n, SEED, false), *f = open_n(t, n, SEED + 1, false);
        bool perm = true, same = true, differs_epoch = false, differs_seed = false;
        uint8_t *seen = calloc(n, 1);
        for (uint64_t ep = 0; ep < 3; ep++) {
            memset(seen, 0, n);
            for (uint64_t p = 0; p < n; p++) {
                uint64_t s = data_sample_index(d, ep, p);
                perm &= s < n && !seen[s];
                if (s < n) seen[s] = 1;
                same &= s == data_sample_index(e, ep, p);
                differs_seed |= s != data_sample_index(f, ep, p);
                if (ep > 0) differs_epoch |= s != data_sample_index(d, 0, p);
            }
        }
        check(t, perm, "n=%llu: every epoch's order is a permutation of [0, n)", (unsigned long long)n);
        check(t, same, "n=%llu: the same (seed, epoch) gives the same order", (unsigned long long)n);
        if (n >= 7) {
            check(t, differs_epoch, "n=%llu: epochs 1 and 2 differ from epoch 0", (unsigned long long)n);
            check(t, differs_seed, "n=%llu: another seed gives another order", (unsigned long long)n);
        }
        free(seen);
        data_free(d);
        data_free(e);
        data_free(f);
    }
    /* Uniformity: over 2000 seeds, position 0 of n=10 lands on each sample ~200 times
     * (binomial sd 13.4; the bounds are 5 sd). */
    data_loader *d = open_n(t, 10, 0, true);
    int count[10] = { 0 };
    for (uint64_t seed = 0; seed < 2000; seed++) {
        data_loader *e = open_n(t, 10, seed, false);
        count[data_sample_index(e, 0, 0)]++;
        data_free(e);
    }
    int lo = 2000, hi = 0;
    for (int i = 0; i < 10; i++) {
        lo = count[i] < lo ? count[i] : lo;
        hi = count[i] > hi ? count[i] : hi;
    }
    check(t, lo >= 133 && hi <= 267, "first sample over 2000 seeds is uniform on 10 (min %d, max %d of ~200)", lo, hi);
    data_free(d);
}

/* Samples of one step as seen by `size` ranks with A micro-steps of b, in (rank, a, i) order. */
static void step_samples(data_loader **ranks, int size, int A, int b, uint64_t *out)
{
    for (int r = 0; r < size; r++)
        for (int a = 0; a < A; a++) data_batch_samples(ranks[r], a, out + ((size_t)r * A + (size_t)a) * (size_t)b);
}

/* The tokens of one step across ranks in (rank, a, row) order. */
static bool step_tokens(data_loader **ranks, int size, int A, int b, int T, int32_t *in, int32_t *tg)
{
    bool ok = true;
    for (int r = 0; r < size; r++)
        for (int a = 0; a < A; a++) {
            size_t o = ((size_t)r * A + (size_t)a) * (size_t)b * (size_t)T;
            ok &= data_next_tokens(ranks[r], a, in + o, tg + o) == STATUS_OK;
        }
    return ok;
}

static void test_mapping(test_ctx *t)
{
    char path[256];
    write_nebula(scratch_path(t, "map.bin", path, sizeof path), 1, 50000, 20001, 2, 0, 0, 0);  /* 1000 windows of 20 */
    const int T = 20, GB = 24;
    struct { int size, A, b; } lay[] = { { 1, 1, 24 }, { 2, 1, 12 }, { 3, 2, 4 }, { 4, 3, 2 }, { 6, 2, 2 }, { 24, 1, 1 } };
    data_config c1 = token_cfg(path, 50000, T, GB, 1, 0, 1);
    data_loader *ref = open_ok(t, &c1, "1 rank x 24");
    uint64_t *want = malloc(GB * sizeof *want), *got = malloc(GB * sizeof *got);
    int32_t *win = malloc(sizeof(int32_t) * GB * T), *wtg = malloc(sizeof(int32_t) * GB * T);
    int32_t *gin = malloc(sizeof(int32_t) * GB * T), *gtg = malloc(sizeof(int32_t) * GB * T);
    for (int k = 1; k < 6; k++) {
        data_loader *ranks[24];
        for (int r = 0; r < lay[k].size; r++) {
            data_config c = token_cfg(path, 50000, T, lay[k].b, lay[k].A, r, lay[k].size);
            ranks[r] = open_ok(t, &c, "rank loader");
        }
        data_state st0 = { 0, 0 };
        data_set_state(ref, &st0);
        bool same = true, disjoint = true, toks = true, state = true;
        for (int step = 0; step < 95; step++) {  /* 41 steps per epoch: crosses two epoch ends */
            data_batch_samples(ref, 0, want);
            step_samples(ranks, lay[k].size, lay[k].A, lay[k].b, got);
            for (int i = 0; i < GB; i++) {
                same &= got[i] == want[i];
                for (int j = 0; j < i; j++) disjoint &= got[i] != got[j];
            }
            toks &= step_tokens(&ref, 1, 1, GB, T, win, wtg);
            toks &= step_tokens(ranks, lay[k].size, lay[k].A, lay[k].b, T, gin, gtg);
            toks &= !memcmp(win, gin, sizeof(int32_t) * GB * T) && !memcmp(wtg, gtg, sizeof(int32_t) * GB * T);
            data_advance(ref);
            for (int r = 0; r < lay[k].size; r++) {
                data_advance(ranks[r]);
                data_state a = data_get_state(ranks[r]), b = data_get_state(ref);
                state &= a.epoch == b.epoch && a.cursor == b.cursor;
            }
        }
        check(t, same && disjoint, "%d ranks x %d micro-steps x b=%d: each step's samples are disjoint and, in "
              "(rank, micro-step) order, exactly 1 rank x 24's (95 steps, 3 epochs)", lay[k].size, lay[k].A, lay[k].b);
        check(t, toks, "%d ranks x %d x %d: the same inputs and targets as 1 rank x 24", lay[k].size, lay[k].A,
              lay[k].b);
        check(t, state, "%d ranks x %d x %d: every rank's state equals the 1-rank state", lay[k].size, lay[k].A,
              lay[k].b);
        for (int r = 0; r < lay[k].size; r++) data_free(ranks[r]);
    }
    free(want);
    free(got);
    free(win);
    free(wtg);
    free(gin);
    free(gtg);
    data_free(ref);
}

static void test_state(test_ctx *t)
{
    char path[256];
    write_nebula(scratch_path(t, "state.bin", path, sizeof path), 1, 50000, 20001, 2, 0, 0, 0);
    const int T = 20;
    /* Uninterrupted: 2 ranks x A=2 x b=3 (GB 12, 83 steps per epoch). */
    data_loader *run[2], *resumed[2], *wide[4];
    for (int r = 0; r < 2; r++) {
        data_config c = token_cfg(path, 50000, T, 3, 2, r, 2);
        run[r] = open_ok(t, &c, "run");
        resumed[r] = open_ok(t, &c, "resumed");
    }
    for (int r = 0; r < 4; r++) {  /* 4 ranks x A=3 x b=1: the same global batch */
        data_config c = token_cfg(path, 50000, T, 1, 3, r, 4);
        wide[r] = open_ok(t, &c, "4 ranks");
    }
    for (int s = 0; s < 80; s++)
        for (int r = 0; r < 2; r++) data_advance(run[r]);
    data_state saved = data_get_state(run[0]);
    check(t, saved.epoch == 0 && saved.cursor == 960, "after 80 steps: epoch 0, cursor 960 (80 x 12)");
    bool ok = true;
    for (int r = 0; r < 2; r++) ok &= data_set_state(resumed[r], &saved) == STATUS_OK;
    for (int r = 0; r < 4; r++) ok &= data_set_state(wide[r], &saved) == STATUS_OK;
    check(t, ok, "set_state accepts the saved state at 2 and 4 ranks");
    uint64_t a[12], b[12], c[12];
    int32_t ia[12 * 20], ta[12 * 20], ib[12 * 20], tb[12 * 20];
    bool same = true, same_wide = true;
    for (int s = 0; s < 10; s++) {  /* crosses the end of epoch 0 (83 steps) */
        step_samples(run, 2, 2, 3, a);
        step_samples(resumed, 2, 2, 3, b);
        step_samples(wide, 4, 3, 1, c);
        same &= !memcmp(a, b, sizeof a);
        same_wide &= !memcmp(a, c, sizeof a);
        same &= step_tokens(run, 2, 2, 3, T, ia, ta) && step_tokens(resumed, 2, 2, 3, T, ib, tb) &&
                !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta);
        for (int r = 0; r < 2; r++) {
            data_advance(run[r]);
            data_advance(resumed[r]);
        }
        for (int r = 0; r < 4; r++) data_advance(wide[r]);
    }
    check(t, same, "a restored loader resumes at the exact sample (10 steps, across an epoch end)");
    check(t, same_wide, "4 ranks x 3 x 1 restored from 2 ranks x 2 x 3 read the same samples");
    data_state now = data_get_state(run[0]);
    check(t, now.epoch == 1 && now.cursor == 7 * 12, "epoch 1 after 83 steps, cursor 84 (7 steps in)");

    capture_begin(t);
    data_state bad = { 0, 1001 };
    status st = data_set_state(resumed[0], &bad);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_CORRUPT && strstr(msg, "cursor 1001") && strstr(msg, "1000 samples"),
          "a cursor past the end is STATUS_CORRUPT naming it");
    capture_begin(t);
    data_state bad_epoch = { UINT64_C(1) << 50, 0 };
    st = data_set_state(resumed[0], &bad_epoch);
    capture_end(t, true);
    check(t, st == STATUS_CORRUPT, "an epoch beyond 2^48 is STATUS_CORRUPT");
    data_state tail = { 4, 995 };  /* less than one global batch of 12 left: as if the batch changed */
    st = data_set_state(resumed[0], &tail);
    now = data_get_state(resumed[0]);
    check(t, st == STATUS_OK && now.epoch == 5 && now.cursor == 0, "a cursor in the dropped tail starts the next epoch");
    for (int r = 0; r < 2; r++) {
        data_free(run[r]);
        data_free(resumed[r]);
    }
    for (int r = 0; r < 4; r++) data_free(wide[r]);
}

static void test_synthetic(test_ctx *t)
{
    data_config cfg = token_cfg("synthetic", 1000, 16, 4, 2, 1, 2);
    data_loader *d = open_ok(t, &cfg, "synthetic"), *e = open_ok(t, &cfg, "synthetic again");
    cfg.seed = SEED + 1;
    data_loader *f = open_ok(t, &cfg, "synthetic, other seed");
    check(t, data_samples(d) == DATA_SYNTHETIC_SAMPLES && data_get_format(d) == DATA_FORMAT_SYNTHETIC,
          "synthetic: 2^20 samples");
    int32_t in[64], tg[64], in2[64], tg2[64], in3[64], tg3[64];
    bool same = true, range = true, shift = true, differ = false;
    for (int s = 0; s < 5; s++) {
        for (int a = 0; a < 2; a++) {
            data_next_tokens(d, a, in, tg);
            data_next_tokens(e, a, in2, tg2);
            data_next_tokens(f, a, in3, tg3);
            same &= !memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg);
            differ |= memcmp(in, in3, sizeof in) != 0;
            for (int i = 0; i < 64; i++) range &= in[i] >= 0 && in[i] < 1000 && tg[i] >= 0 && tg[i] < 1000;
            for (int i = 0; i < 4; i++)
                for (int k = 0; k + 1 < 16; k++) shift &= in[i * 16 + k + 1] == tg[i * 16 + k];
        }
        data_advance(d);
        data_advance(e);
        data_advance(f);
    }
    check(t, same && differ, "synthetic tokens are a function of the seed");
    check(t, range && shift, "synthetic tokens lie in [0, V) and targets are the inputs shifted by one");
    data_free(d);
    data_free(e);
    data_free(f);
}

static void test_corrupt(test_ctx *t)
{
    char p[256];
    data_config cfg = token_cfg(scratch_path(t, "bad.bin", p, sizeof p), 50257, 8, 2, 1, 0, 1);
    write_bytes(p, "GPT2TOKENS000000000000000000000000", 34);
    expect_open_error(t, &cfg, STATUS_INPUT, "bad magic", "not a token file", "47 50 54 32", "NEBTOK01", "20240520",
                      NULL);
    write_nebula(p, 2, 256, 100, 2, 0, 0, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "Nebula version 2", "version 2 is not supported", "expected 1", NULL);
    write_nebula(p, 1, 256, 100, 3, 0, 0, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "3 bytes per token", "3 bytes per token", "expected 1, 2 or 4", NULL);
    write_nebula(p, 1, 256, 100, 2, 7, 0, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "reserved field", "reserved field is 7", NULL);
    write_nebula(p, 1, 50304, 100, 2, 0, 0, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "header vocabulary above the model's",
                      "vocabulary 50304 (file header) is larger than the model's vocab_size 50257", NULL);
    write_nebula(p, 1, 300, 1000, 2, 0, 0, 0);  /* ids up to 299 */
    data_config small = cfg;
    small.vocab_size = 256;
    expect_open_error(t, &small, STATUS_INPUT, "vocabulary 300 > 256", "vocabulary 300 (file header)", "256", NULL);
    write_nebula(p, 1, 300, 1000, 2, 0, 0, 0);
    uint32_t lie = 200;  /* the header claims 200 but ids reach 299, first at token 299 */
    FILE *f = fopen(p, "r+b");
    fseek(f, 12, SEEK_SET);
    fwrite(&lie, 4, 1, f);
    fclose(f);
    expect_open_error(t, &cfg, STATUS_INPUT, "token beyond the header's vocabulary",
                      "token id 299 (first at token 299) is outside the header's vocabulary of 200", NULL);
    write_nebula(p, 1, 256, 1000, 2, 0, 0, 10);
    expect_open_error(t, &cfg, STATUS_INPUT, "truncated Nebula file", "truncated", "1000 tokens of 2 bytes = 2032 bytes",
                      "the file has 2022 bytes", NULL);
    write_nebula(p, 1, 256, 1000, 2, 0, 0, -3);
    expect_open_error(t, &cfg, STATUS_INPUT, "trailing bytes", "trailing bytes", "2035", NULL);
    write_bytes(p, DATA_NEBULA_MAGIC "\1\0\0\0", 12);
    expect_open_error(t, &cfg, STATUS_INPUT, "truncated header", "truncated Nebula token header", "12 bytes",
                      "needs 32", NULL);
    write_bytes(p, "", 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "empty file", "not a token file", "empty file", NULL);
    write_llmc(p, DATA_LLMC_MAGIC, 2, 100, 0, -1, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "llm.c version 2", "llm.c token file version 2", "expected 1", NULL);
    write_llmc(p, DATA_LLMC_MAGIC, 1, 100, 0, 5, 60000);
    expect_open_error(t, &cfg, STATUS_INPUT, "llm.c token beyond the model",
                      "largest token id is 60000 (first at token 5), outside the model's vocab_size 50257", NULL);
    write_llmc(p, DATA_LLMC_MAGIC, 1, 100, 1, -1, 0);
    expect_open_error(t, &cfg, STATUS_INPUT, "truncated llm.c file", "truncated", "100 tokens of 2 bytes = 1224 bytes",
                      "1223 bytes", NULL);
    write_llmc(p, DATA_LLMC_MAGIC, 1, 16, 0, -1, 0);  /* 1 sample of T+1 = 9 */
    cfg.micro_batch = 2;
    expect_open_error(t, &cfg, STATUS_INPUT, "too few samples", "16 tokens make 1 samples of T+1 = 9 tokens",
                      "fewer than one global batch of 2", NULL);
    data_config img = cfg;
    img.images = true;
    img.H = img.W = 32;
    img.num_classes = 10;
    img.std[0] = img.std[1] = img.std[2] = 1;
    expect_open_error(t, &img, STATUS_INPUT, "token file for an image model", "is a token file",
                      "the model takes images", NULL);
    cfg.path = scratch_path(t, "missing.bin", p, sizeof p);
    expect_open_error(t, &cfg, STATUS_INPUT, "missing file", "cannot be opened", "No such file", NULL);
}

/* File contents, or NULL. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void test_prepare(test_ctx *t)
{
    const char *inputs[] = { "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
                             "/usr/share/common-licenses/BSD" };
    char train[256], val[256];
    scratch_path(t, "train.bin", train, sizeof train);
    scratch_path(t, "val.bin", val, sizeof val);
    const double frac = 0.1;
    status st = data_prepare_text(inputs, 3, train, val, frac);
    check(t, st == STATUS_OK, "prepare 3 license files, val_fraction 0.1 -> %s", status_str(st));
    size_t tl = 0, vl = 0, il[3];
    uint8_t *tb = slurp(train, &tl), *vb = slurp(val, &vl), *in[3];
    size_t want_t = 0, want_v = 0;
    for (int i = 0; i < 3; i++) {
        in[i] = slurp(inputs[i], &il[i]);
        size_t nv = (size_t)((double)il[i] * frac);
        want_v += nv;
        want_t += il[i] - nv;
    }
    bool bytes = tb && vb && tl == 32 + want_t && vl == 32 + want_v;
    size_t ot = 32, ov = 32;
    for (int i = 0; i < 3 && bytes; i++) {
        size_t nv = (size_t)((double)il[i] * frac);
        bytes &= !memcmp(tb + ot, in[i], il[i] - nv) && !memcmp(vb + ov, in[i] + il[i] - nv, nv);
        ot += il[i] - nv;
        ov += nv;
    }
    check(t, bytes, "train = the first 90%% of each file, val = the last 10%% (%zu + %zu bytes), byte for byte",
          want_t, want_v);
    uint64_t count;
    uint32_t vocab, width;
    bool header = tb && !memcmp(tb, DATA_NEBULA_MAGIC, 8);
    if (header) {
        memcpy(&vocab, tb + 12, 4);
        memcpy(&count, tb + 16, 8);
        memcpy(&width, tb + 24, 4);
        header = vocab == 256 && count == want_t && width == 1;
        memcpy(&count, vb + 16, 8);
        header &= count == want_v;
    }
    check(t, header, "headers: vocab 256, 1 byte per token, counts %zu and %zu", want_t, want_v);
    data_config cfg = token_cfg(train, 256, 64, 2, 1, 0, 1);
    data_loader *d = open_ok(t, &cfg, "prepared train file");
    int32_t ids[128], tg[128];
    uint64_t s[2];
    data_next_tokens(d, 0, ids, tg);
    data_batch_samples(d, 0, s);
    bool text = true;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 64; k++) text &= ids[i * 64 + k] == tb[32 + s[i] * 64 + (uint64_t)k];
    check(t, text, "the prepared file loads and its tokens are the text's bytes");
    data_free(d);
    free(tb);
    free(vb);
    for (int i = 0; i < 3; i++) free(in[i]);

    st = data_prepare_text(inputs, 1, train, NULL, 0.0);
    tb = slurp(train, &tl);
    in[0] = slurp(inputs[0], &il[0]);
    check(t, st == STATUS_OK && tb && tl == 32 + il[0] && !memcmp(tb + 32, in[0], il[0]),
          "val_fraction 0 without a val file: train is the whole file");
    free(tb);
    free(in[0]);

    /* Failures: the earlier train output stays as it is and no temporary is left. */
    char tmpname[300];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%d", train, (int)getpid());
    const char *missing[] = { inputs[0], "/nonexistent/input.txt" };
    capture_begin(t);
    st = data_prepare_text(missing, 2, train, val, 0.1);
    const char *msg = capture_end(t, true);
    size_t after;
    free(slurp(train, &after));
    check(t, st == STATUS_INPUT && strstr(msg, "/nonexistent/input.txt") && after == tl && access(tmpname, F_OK) != 0,
          "a missing input: STATUS_INPUT naming it, the earlier output untouched, no temporary left");
    capture_begin(t);
    st = data_prepare_text(inputs, 1, train, "/nonexistent/dir/val.bin", 0.1);
    msg = capture_end(t, true);
    free(slurp(train, &after));
    check(t, st == STATUS_IO && strstr(msg, "/nonexistent/dir/val.bin") && after == tl && access(tmpname, F_OK) != 0,
          "an unwritable val output: STATUS_IO naming it, train untouched, its temporary removed");
    capture_begin(t);
    st = data_prepare_text(inputs, 1, train, val, 1.0);
    msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "val_fraction = 1"), "val_fraction 1 is refused");
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "data-tokens");
    test_formats(&t);
    test_permutation(&t);
    test_mapping(&t);
    test_state(&t);
    test_synthetic(&t);
    test_corrupt(&t);
    test_prepare(&t);
    scratch_free(&t);
    printf("%s: %d failure(s)\n", t.failures ? "FAILED" : "passed", t.failures);
    return t.failures ? 1 : 0;
}
