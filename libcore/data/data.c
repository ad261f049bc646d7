/* data — see data.h. This file: format detection, the sample order, token streams
 * and the loader's state; images live in data_image.c, text preparation in
 * data_prepare.c.
 *
 * The sample order is a permutation computed per index instead of stored: a
 * balanced Feistel network on [0, 4^h) (4^h >= samples) whose round function is a
 * Philox stream keyed by (seed, epoch, round), with cycle walking back into
 * [0, samples) (Black & Rogaway, "Ciphers with arbitrary finite domains", CT-RSA
 * 2002). A Feistel network is a bijection whatever its round function, so this is
 * a permutation for every (seed, epoch); it needs no memory (a token file of 10^11
 * tokens has 10^8 windows: a stored order would take 800 MB per rank) and any
 * position is O(1): cycle walking averages under 4 passes since 4^h < 4 samples. */
#include "data_impl.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rng.h"

static const char *const format_name[] = {
    [DATA_FORMAT_NEBULA_TOKENS] = "Nebula tokens",
    [DATA_FORMAT_LLMC_TOKENS] = "llm.c tokens",
    [DATA_FORMAT_HDF5_IMAGES] = "HDF5 images",
    [DATA_FORMAT_CIFAR10] = "CIFAR-10 binary",
    [DATA_FORMAT_SYNTHETIC] = "synthetic",
};

status data_fail(const data_loader *d, status st, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error("%s: %s", d->path, msg);
    return st;
}

status data_open_file(data_loader *d, size_t window)
{
    struct stat sb;
    char why[256];
    if (path_open_regular(d->path, &d->fd, &sb, 0, why, sizeof why) != 0) {
        d->fd = -1;
        return data_fail(d, STATUS_INPUT, "%s", why);
    }
    d->file_bytes = (uint64_t)sb.st_size;
    d->window_bytes = window;
    d->window = malloc(window ? window : 1);
    if (!d->window) {
        log_error("out of memory opening %s", d->path);
        return STATUS_NOMEM;
    }
    return STATUS_OK;
}

void data_close_file(data_loader *d)
{
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    free(d->window);
    d->window = NULL;
}

status data_read_at(const data_loader *d, void *buf, size_t n, uint64_t at, const char *what)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(d->fd, (char *)buf + got, n - got, (off_t)(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return data_fail(d, STATUS_IO, "cannot read %s (%zu bytes at offset %" PRIu64 "): %s", what, n, at,
                             log_errno_str());
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got == n) return STATUS_OK;
    struct stat sb;
    long long now = fstat(d->fd, &sb) == 0 ? (long long)sb.st_size : -1;
    return data_fail(d, STATUS_IO, "the file changed while the run reads it: %s (%zu bytes at offset %" PRIu64 ") "
                     "ends after %zu bytes; the file has %lld bytes now and had %" PRIu64 " when the run opened it "
                     "(truncated or rewritten in place). Restore the file, then resume from the last checkpoint",
                     what, n, at, got, now, d->file_bytes);
}

/* ---- format detection ---------------------------------------------------- */

/* The first bytes as hex and as text, for "found ..." in errors. */
static void describe_bytes(const uint8_t *b, int n, char *buf, size_t len)
{
    size_t off = 0;
    for (int i = 0; i < n && off + 4 < len; i++) off += (size_t)snprintf(buf + off, len - off, "%02x ", b[i]);
    if (off + 3 < len) off += (size_t)snprintf(buf + off, len - off, "(\"");
    for (int i = 0; i < n && off + 4 < len; i++) buf[off++] = b[i] >= 32 && b[i] < 127 ? (char)b[i] : '.';
    snprintf(buf + off, len - off, "\")");
}

static status data_detect(data_loader *d)
{
    if (!strcmp(d->path, "synthetic")) {
        d->format = DATA_FORMAT_SYNTHETIC;
        return STATUS_OK;
    }
    /* The first open of the path, for every format (HDF5 opens it again itself): a
     * FIFO or a device is refused here, never waited on or read without end. */
    int fd;
    struct stat sb;
    char why[256];
    if (path_open_regular(d->path, &fd, &sb, 0, why, sizeof why) != 0)
        return data_fail(d, STATUS_INPUT, "%s", why);
    uint8_t head[8] = { 0 };
    ssize_t n = pread(fd, head, sizeof head, 0);
    int err = errno;
    close(fd);
    if (n < 0) return data_fail(d, STATUS_INPUT, "cannot read: %s", strerror(err));
    int32_t magic;
    memcpy(&magic, head, 4);
    const char *want = d->cfg.images ? "an HDF5 image set or a CIFAR-10 binary file" : "a Nebula or llm.c token file";
    if (n == 8 && !memcmp(head, DATA_NEBULA_MAGIC, 8)) d->format = DATA_FORMAT_NEBULA_TOKENS;
    else if (n >= 4 && magic == DATA_LLMC_MAGIC) d->format = DATA_FORMAT_LLMC_TOKENS;
    else if (n == 8 && !memcmp(head, "\211HDF\r\n\032\n", 8)) d->format = DATA_FORMAT_HDF5_IMAGES;
    else if (d->cfg.images) d->format = DATA_FORMAT_CIFAR10;  /* no magic: its size is checked */
    else {
        char found[64];
        describe_bytes(head, (int)n, found, sizeof found);
        return data_fail(d, STATUS_INPUT, "not a token file: the first bytes are %s; expected the magic \"%s\" "
                         "(Nebula) or the int32 %d (llm.c)", n > 0 ? found : "(empty file)",
                         DATA_NEBULA_MAGIC, DATA_LLMC_MAGIC);
    }
    bool is_image = d->format == DATA_FORMAT_HDF5_IMAGES || d->format == DATA_FORMAT_CIFAR10;
    if (is_image != d->cfg.images)
        return data_fail(d, STATUS_INPUT, "is %s file, but the model takes %s and needs %s",
                         d->format == DATA_FORMAT_HDF5_IMAGES ? "an HDF5" : "a token",
                         d->cfg.images ? "images" : "tokens", want);
    return STATUS_OK;
}

/* ---- token streams ------------------------------------------------------- */

/* Token i of p, a run of tokens `width` bytes each (little endian). */
static inline uint32_t token_at(const uint8_t *p, int width, uint64_t i)
{
    p += i * (uint64_t)width;
    if (width == 1) return p[0];
    if (width == 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Parses the header into ntokens / token_bytes / file_vocab and checks the length. */
static status tokens_header(data_loader *d)
{
    uint64_t count, header;
    uint8_t head[DATA_LLMC_HEADER_BYTES];
    if (d->format == DATA_FORMAT_NEBULA_TOKENS) {
        header = DATA_NEBULA_HEADER_BYTES;
        if (d->file_bytes < header)
            return data_fail(d, STATUS_INPUT, "truncated Nebula token header: the file has %" PRIu64 " bytes, the "
                             "header needs %" PRIu64, d->file_bytes, header);
        TRY(data_read_at(d, head, header, 0, "the header"));
        uint32_t version, vocab, width, reserved;
        memcpy(&version, head + 8, 4);
        memcpy(&vocab, head + 12, 4);
        memcpy(&count, head + 16, 8);
        memcpy(&width, head + 24, 4);
        memcpy(&reserved, head + 28, 4);
        if (version != DATA_NEBULA_VERSION)
            return data_fail(d, STATUS_INPUT, "Nebula token file version %u is not supported (expected %u)",
                             version, DATA_NEBULA_VERSION);
        if (width != 1 && width != 2 && width != 4)
            return data_fail(d, STATUS_INPUT, "bad header: %u bytes per token (expected 1, 2 or 4)", width);
        if (reserved != 0)
            return data_fail(d, STATUS_INPUT, "bad header: reserved field is %u (expected 0)", reserved);
        if (vocab == 0 || (width < 4 && vocab > (1u << (8 * width))))
            return data_fail(d, STATUS_INPUT, "bad header: vocabulary %u with %u bytes per token", vocab, width);
        if (vocab > (uint32_t)d->cfg.vocab_size)
            return data_fail(d, STATUS_INPUT, "vocabulary %u (file header) is larger than the model's vocab_size %d",
                             vocab, d->cfg.vocab_size);
        d->token_bytes = (int)width;
        d->file_vocab = vocab;
        d->version = version;
    } else {
        header = DATA_LLMC_HEADER_BYTES;
        if (d->file_bytes < header)
            return data_fail(d, STATUS_INPUT, "truncated llm.c token header: the file has %" PRIu64 " bytes, the "
                             "header needs %" PRIu64, d->file_bytes, header);
        TRY(data_read_at(d, head, header, 0, "the header"));
        int32_t h[3];
        memcpy(h, head, sizeof h);
        if (h[1] != DATA_LLMC_VERSION)
            return data_fail(d, STATUS_INPUT, "llm.c token file version %d is not supported (expected %d: uint16 "
                             "GPT-2 tokens)", h[1], DATA_LLMC_VERSION);
        if (h[2] < 0) return data_fail(d, STATUS_INPUT, "bad header: token count %d", h[2]);
        count = (uint64_t)h[2];
        d->token_bytes = 2;
        d->version = (uint32_t)h[1];
    }
    if (count > (UINT64_MAX - header) / (uint64_t)d->token_bytes)
        return data_fail(d, STATUS_INPUT, "bad header: token count %" PRIu64 " is impossible", count);
    uint64_t expect = header + count * (uint64_t)d->token_bytes;
    if (d->file_bytes != expect)
        return data_fail(d, STATUS_INPUT, "%s: the header promises %" PRIu64 " tokens of %d bytes = %" PRIu64
                         " bytes, but the file has %" PRIu64 " bytes", d->file_bytes < expect ? "truncated"
                         : "trailing bytes", count, d->token_bytes, expect, d->file_bytes);
    d->tokens_at = header;
    d->ntokens = count;
    return STATUS_OK;
}

#define SCAN_TOKENS (UINT64_C(1) << 22)  /* tokens per read of the scan: 4M (4 to 16 MiB) */

/* The largest id of tokens [first, first + n) (read into buf) and where it first is. */
static status scan_piece(const data_loader *d, uint8_t *buf, uint64_t first, uint64_t n, uint32_t *max,
                         uint64_t *at)
{
    const int w = d->token_bytes;
    TRY(data_read_at(d, buf, n * (uint64_t)w, d->tokens_at + first * (uint64_t)w, "the tokens"));
    uint32_t mx = 0;
    const int64_t m = (int64_t)n;
#pragma omp parallel for reduction(max : mx) schedule(static) if (m > (INT64_C(1) << 20))
    for (int64_t i = 0; i < m; i++) {
        uint32_t t = token_at(buf, w, (uint64_t)i);
        mx = t > mx ? t : mx;
    }
    uint64_t i = 0;
    while (i < n && token_at(buf, w, i) != mx) i++;
    *max = mx;
    *at = first + i;
    return STATUS_OK;
}

/* One pass over every token, read in pieces (OpenMP inside a piece of over 1M
 * tokens): the largest id must lie inside the header's vocabulary (Nebula) and the
 * model's (both formats), so no id out of range can reach an embedding later. About
 * 1 s per GB of tokens from the page cache. */
static status tokens_scan(data_loader *d)
{
    uint64_t n = d->ntokens, piece = n < SCAN_TOKENS ? n : SCAN_TOKENS, at = 0;
    uint8_t *buf = malloc(piece ? piece * (uint64_t)d->token_bytes : 1);
    if (!buf) {
        log_error("out of memory reading %s", d->path);
        return STATUS_NOMEM;
    }
    uint32_t mx = 0;
    status st = STATUS_OK;
    for (uint64_t first = 0; first < n && st == STATUS_OK; first += piece) {
        uint32_t m;
        uint64_t where;
        st = scan_piece(d, buf, first, n - first < piece ? n - first : piece, &m, &where);
        if (st == STATUS_OK && (first == 0 || m > mx)) mx = m, at = where;  /* the first place of the largest */
    }
    free(buf);
    TRY(st);
    uint32_t limit = d->format == DATA_FORMAT_NEBULA_TOKENS ? d->file_vocab : (uint32_t)d->cfg.vocab_size;
    if (n > 0 && mx >= limit) {
        if (d->format == DATA_FORMAT_NEBULA_TOKENS)
            return data_fail(d, STATUS_INPUT, "token id %u (first at token %" PRIu64 ") is outside the header's "
                             "vocabulary of %u: the file is corrupt", mx, at, limit);
        return data_fail(d, STATUS_INPUT, "the largest token id is %u (first at token %" PRIu64 "), outside the "
                         "model's vocab_size %d", mx, at, d->cfg.vocab_size);
    }
    if (d->format == DATA_FORMAT_LLMC_TOKENS) d->file_vocab = n > 0 ? mx + 1 : 0;
    return STATUS_OK;
}

static status data_open_tokens(data_loader *d)
{
    if (d->format == DATA_FORMAT_SYNTHETIC) {
        d->file_vocab = (uint32_t)d->cfg.vocab_size;
        d->samples = DATA_SYNTHETIC_SAMPLES > d->global_batch ? DATA_SYNTHETIC_SAMPLES : d->global_batch;
        return STATUS_OK;
    }
    TRY(data_open_file(d, ((size_t)d->cfg.T + 1) * 4));  /* a window of T+1 tokens of at most 4 bytes */
    TRY(tokens_header(d));
    TRY(tokens_scan(d));
    d->samples = d->ntokens > 0 ? (d->ntokens - 1) / (uint64_t)d->cfg.T : 0;
    return STATUS_OK;
}

/* Synthetic window of sample s: T+1 uniform ids from stream (seed, s, SYNTHETIC, 0). */
static void synthetic_tokens(const data_loader *d, uint64_t s, int32_t *in, int32_t *tg)
{
    rng r;
    rng_init(&r, d->cfg.seed, (uint32_t)s, RNG_PURPOSE_SYNTHETIC, 0);
    uint32_t V = (uint32_t)d->cfg.vocab_size, prev = rng_below(&r, V);
    for (int t = 0; t < d->cfg.T; t++) {
        uint32_t next = rng_below(&r, V);
        in[t] = (int32_t)prev;
        if (tg) tg[t] = (int32_t)next;
        prev = next;
    }
}

/* ---- the sample order ----------------------------------------------------- */

uint64_t data_sample_index(const data_loader *d, uint64_t epoch, uint64_t pos)
{
    CHECK(pos < d->samples, "a position inside the epoch: pos < data_samples()");
    if (!d->cfg.shuffle) return pos;
    const int h = d->perm_half_bits;
    const uint64_t mask = (UINT64_C(1) << h) - 1;
    uint64_t v = pos;
    do {  /* cycle walking: v stays on pos's cycle, which returns into [0, samples) */
        uint64_t L = v >> h, R = v & mask;
        for (uint32_t k = 0; k < DATA_PERM_ROUNDS; k++) {
            rng r;  /* round function F_k(R): output R of stream (seed, round k, DATA, epoch) */
            rng_init(&r, d->cfg.seed, k, RNG_PURPOSE_DATA, epoch);
            rng_skip(&r, R);
            uint64_t F = rng_u32(&r) & mask;
            uint64_t next = L ^ F;
            L = R;
            R = next;
        }
        v = L << h | R;
    } while (v >= d->samples);
    return v;
}

/* Position (within the epoch) of the first sample of micro-batch a of this rank. */
static uint64_t micro_batch_first(const data_loader *d, int a)
{
    CHECK(a >= 0 && a < data_micro_batches(d), "the micro-step a lies in [0, data_micro_batches)");
    return d->state.cursor + d->share_first + (uint64_t)a * (uint64_t)d->cfg.micro_batch;
}

void data_set_share(data_loader *d, uint64_t first, uint64_t count)
{
    CHECK(first + count <= d->global_batch, "a share lies inside the global batch");
    d->share_first = first;
    d->share_count = count;
}

int data_micro_batches(const data_loader *d)
{
    uint64_t b = (uint64_t)d->cfg.micro_batch;
    return (int)((d->share_count + b - 1) / b);
}

int data_micro_batch_size(const data_loader *d, int a)
{
    uint64_t b = (uint64_t)d->cfg.micro_batch, at = (uint64_t)a * b;
    CHECK(a >= 0 && at < d->share_count, "the micro-step a lies in [0, data_micro_batches)");
    return (int)(d->share_count - at < b ? d->share_count - at : b);
}

void data_batch_samples(const data_loader *d, int a, uint64_t *samples)
{
    uint64_t first = micro_batch_first(d, a);
    for (int i = 0; i < data_micro_batch_size(d, a); i++)
        samples[i] = data_sample_index(d, d->state.epoch, first + (uint64_t)i);
}

/* ---- open / free ------------------------------------------------------------ */

static void check_config(const data_config *c)
{
    CHECK(c->path && c->path[0], "data_config.path is set (a file or \"synthetic\")");
    CHECK(c->micro_batch >= 1 && c->accum >= 1, "micro_batch and accum are at least 1");
    CHECK(c->dp_size >= 1 && c->dp_rank >= 0 && c->dp_rank < c->dp_size, "0 <= dp_rank < dp_size");
    if (c->images) {
        CHECK(c->H >= 1 && c->W >= 1 && c->num_classes >= 1, "images need H, W and num_classes >= 1");
        CHECK(c->pad_crop >= 0 && c->pad_crop <= 4096, "0 <= pad_crop <= 4096");
    } else {
        CHECK(c->T >= 1 && c->vocab_size >= 1, "tokens need T and vocab_size >= 1");
    }
}

status data_open(data_loader **out, const data_config *cfg)
{
    check_config(cfg);
    *out = NULL;
    data_loader *d = calloc(1, sizeof *d);
    char *path = strdup(cfg->path);
    if (!d || !path) {
        free(d);
        free(path);
        log_error("out of memory opening %s", cfg->path);
        return STATUS_NOMEM;
    }
    d->cfg = *cfg;
    d->path = path;
    d->cfg.path = path;
    d->h5_file = d->h5_images = d->h5_fspace = d->h5_mspace = H5I_INVALID_HID;
    d->fd = -1;
    d->global_batch = (uint64_t)cfg->micro_batch * (uint64_t)cfg->accum * (uint64_t)cfg->dp_size;
    d->share_count = (uint64_t)cfg->micro_batch * (uint64_t)cfg->accum;
    d->share_first = (uint64_t)cfg->dp_rank * d->share_count;

    status st = data_detect(d);
    if (st == STATUS_OK) st = cfg->images ? data_open_images(d) : data_open_tokens(d);
    if (st == STATUS_OK && d->samples < d->global_batch) {
        char what[160];
        if (cfg->images)
            snprintf(what, sizeof what, "%" PRIu64 " images", d->samples);
        else
            snprintf(what, sizeof what, "%" PRIu64 " tokens make %" PRIu64 " samples of T+1 = %d tokens",
                     d->ntokens, d->samples, cfg->T + 1);
        st = data_fail(d, STATUS_INPUT, "%s, fewer than one global batch of %" PRIu64 " (micro-batch %d x "
                       "accumulation %d x %d ranks)", what, d->global_batch, cfg->micro_batch, cfg->accum,
                       cfg->dp_size);
    }
    if (st == STATUS_OK && d->samples >= (UINT64_C(1) << 62))
        st = data_fail(d, STATUS_INPUT, "%" PRIu64 " samples: more than 2^62 are not supported", d->samples);
    if (st != STATUS_OK) {
        data_free(d);
        return st;
    }
    int bits = 2;
    while ((UINT64_C(1) << bits) < d->samples) bits += 2;
    d->perm_half_bits = bits / 2;
    *out = d;
    return STATUS_OK;
}

void data_free(data_loader *d)
{
    if (!d) return;
    data_close_images(d);
    data_close_file(d);
    free(d->path);
    free(d);
}

/* ---- queries, steps, state ------------------------------------------------ */

uint64_t data_samples(const data_loader *d) { return d->samples; }
uint64_t data_steps_per_epoch(const data_loader *d) { return d->samples / d->global_batch; }
data_format data_get_format(const data_loader *d) { return d->format; }

void data_describe(const data_loader *d, char *buf, size_t len)
{
    const data_config *c = &d->cfg;
    int n = snprintf(buf, len, "%s: %s", d->path, format_name[d->format]);
    if (n < 0 || (size_t)n >= len) return;
    buf += n;
    len -= (size_t)n;
    uint64_t steps = data_steps_per_epoch(d);
    if (!c->images && d->format == DATA_FORMAT_SYNTHETIC)
        snprintf(buf, len, ", vocab %d, %" PRIu64 " samples of T+1 = %d, %" PRIu64 " steps per epoch",
                 c->vocab_size, d->samples, c->T + 1, steps);
    else if (!c->images)
        snprintf(buf, len, " v%u, %d byte%s per token, vocab %u%s, %" PRIu64 " tokens = %" PRIu64
                 " samples of T+1 = %d, %" PRIu64 " steps per epoch", d->version, d->token_bytes,
                 d->token_bytes > 1 ? "s" : "", d->file_vocab,
                 d->format == DATA_FORMAT_LLMC_TOKENS ? " (largest id + 1)" : "", d->ntokens, d->samples,
                 c->T + 1, steps);
    else
        snprintf(buf, len, ", %" PRIu64 " images %dx%dx%d%s, %d classes, mean %.4g %.4g %.4g, std %.4g %.4g "
                 "%.4g (%s), crop pad %d, flip %s, %" PRIu64 " steps per epoch", d->samples, c->H, c->W,
                 d->C, d->C == 1 ? " (replicated to 3)" : "", c->num_classes, d->mean[0], d->mean[1],
                 d->mean[2], d->std[0], d->std[1], d->std[2], d->stats_from_file ? "file" : "config",
                 c->pad_crop, c->flip ? "yes" : "no", steps);
}

status data_next_tokens(data_loader *d, int a, int32_t *inputs, int32_t *targets)
{
    CHECK(!d->cfg.images, "data_next_tokens is called on a token loader (images: data_next_images)");
    const int T = d->cfg.T;
    const uint64_t first = micro_batch_first(d, a);
    for (int i = 0, n = data_micro_batch_size(d, a); i < n; i++) {
        uint64_t s = data_sample_index(d, d->state.epoch, first + (uint64_t)i);
        int32_t *in = inputs + (size_t)i * (size_t)T, *tg = targets ? targets + (size_t)i * (size_t)T : NULL;
        if (d->format == DATA_FORMAT_SYNTHETIC) {
            synthetic_tokens(d, s, in, tg);
            continue;
        }
        const int w = d->token_bytes;  /* window [t0, t0 + T] */
        const uint64_t t0 = s * (uint64_t)T;
        char what[64];
        snprintf(what, sizeof what, "the window of sample %" PRIu64, s);
        TRY(data_read_at(d, d->window, ((size_t)T + 1) * (size_t)w, d->tokens_at + t0 * (uint64_t)w, what));
        for (int t = 0; t < T; t++) in[t] = (int32_t)token_at(d->window, w, (uint64_t)t);
        if (tg)
            for (int t = 0; t < T; t++) tg[t] = (int32_t)token_at(d->window, w, (uint64_t)t + 1);
    }
    return STATUS_OK;
}

status data_next_images(data_loader *d, int a, float *images, int32_t *labels)
{
    CHECK(d->cfg.images, "data_next_images is called on an image loader (tokens: data_next_tokens)");
    const size_t per = 3 * (size_t)d->cfg.H * (size_t)d->cfg.W;
    const uint64_t first = micro_batch_first(d, a);
    for (int i = 0, n = data_micro_batch_size(d, a); i < n; i++) {
        uint64_t s = data_sample_index(d, d->state.epoch, first + (uint64_t)i);
        int32_t label;
        TRY(data_image_emit(d, s, images + (size_t)i * per, &label));
        if (labels) labels[i] = label;
    }
    return STATUS_OK;
}

void data_advance(data_loader *d)
{
    d->state.cursor += d->global_batch;
    if (d->state.cursor + d->global_batch > d->samples) {  /* drop_last: a new epoch, a new order */
        d->state.epoch++;
        d->state.cursor = 0;
        CHECK(d->state.epoch < RNG_STEP_LIMIT, "fewer than 2^48 epochs (the epoch keys an rng step)");
    }
}

data_state data_get_state(const data_loader *d) { return d->state; }

status data_set_state(data_loader *d, const data_state *st)
{
    if (st->cursor > d->samples || st->epoch >= RNG_STEP_LIMIT - 1) {
        return data_fail(d, STATUS_CORRUPT, "the saved loader position (epoch %" PRIu64 ", cursor %" PRIu64 ") "
                         "is impossible for %" PRIu64 " samples per epoch: the checkpoint is corrupt or belongs "
                         "to other data", st->epoch, st->cursor, d->samples);
    }
    d->state = *st;
    if (d->state.cursor + d->global_batch > d->samples) {  /* the global batch changed: as data_advance would */
        d->state.epoch++;
        d->state.cursor = 0;
    }
    return STATUS_OK;
}
