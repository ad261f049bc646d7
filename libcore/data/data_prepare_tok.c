/* data_prepare_tok — text files into token files through a tokenizer, in parallel
 * over MPI ranks (nebula-train prepare --tokenizer; tokenizer.h, data.h).
 *
 * Each input is one document: its first (1 - val_fraction) goes to the training file,
 * cut at a line end, the rest to the held-out file; each part starts with
 * <|endoftext|> when the tokenizer has it (as llm.c's data scripts do). The parts laid
 * end to end are divided into equal byte ranges, one per rank; a rank encodes its
 * range, the ranks exchange their token counts, and each writes its tokens at its own
 * offset of the one temporary file rank 0 created, which is renamed when every rank
 * has fsync'd (docs/design.md#durable-writes).
 *
 * The one design decision: ranges and encoding chunks end only at a "safe" point —
 * a line end between two printable ASCII characters that are not spaces — where
 * GPT-2's pre-tokenisation (and BERT's) splits anyway. The tokens are then those of
 * each part encoded whole, so the files are the same bytes at any number of ranks. */
#include "data.h"
#include "tokenizer.h"
#include "base/path.h"
#include "comm/ctl.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK ((uint64_t)8 << 20)  /* bytes encoded per call: bounds the text buffer */

typedef struct part {
    int file;                      /* input index */
    bool val;                      /* the held-out part */
    uint64_t from, to;             /* byte range in the file */
    uint64_t at;                   /* offset of the part in the concatenation */
} part;

static bool printable(uint8_t c) { return c > ' ' && c < 0x7F; }

/* The first safe point at or after pos in [lo, hi) of file fd (hi when none). */
static uint64_t snap(int fd, uint64_t pos, uint64_t lo, uint64_t hi)
{
    if (pos <= lo) return lo;
    uint8_t buf[65536 + 2];
    for (uint64_t at = pos < lo + 2 ? lo + 2 : pos; at < hi;) {
        uint64_t base = at - 2, n = hi - base < sizeof buf ? hi - base : sizeof buf;
        if (path_read_all_at(fd, buf, (size_t)n, base) != 0) return hi;
        for (uint64_t i = 2; i < n; i++)
            if (buf[i - 1] == '\n' && printable(buf[i - 2]) && printable(buf[i])) return base + i;
        at = base + n;
    }
    return hi;
}

/* The cut of a file of `size` bytes: the end of the line that holds byte size * (1 - f). */
static uint64_t cut_of(int fd, uint64_t size, double f)
{
    if (f <= 0) return size;
    uint64_t pos = (uint64_t)((double)size * (1.0 - f));
    uint8_t buf[65536];
    for (uint64_t at = pos; at < size;) {
        uint64_t n = size - at < sizeof buf ? size - at : sizeof buf;
        if (path_read_all_at(fd, buf, (size_t)n, at) != 0) return size;
        uint8_t *nl = memchr(buf, '\n', (size_t)n);
        if (nl) return at + (uint64_t)(nl - buf) + 1;
        at += n;
    }
    return size;
}

typedef struct tokbuf {
    int32_t *ids;
    size_t n, cap;
} tokbuf;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Encodes [from, to) of part p (a range the snap rule drew) into out. */
static status encode_range(tok *t, const char *name, int fd, const part *p, uint64_t from, uint64_t to, tokbuf *out,
                           char *text, uint64_t *done, double t0, bool progress, uint64_t mine)
{
    int32_t eot = tok_token_id(t, "<|endoftext|>");
    if (from == p->from && eot >= 0 && from < to) {
        if (out->n + 1 > out->cap) {
            size_t c = out->cap * 2 + 1024;
            int32_t *q = realloc(out->ids, c * sizeof *q);
            if (!q) return STATUS_NOMEM;
            out->ids = q;
            out->cap = c;
        }
        out->ids[out->n++] = eot;
    }
    for (uint64_t at = from; at < to;) {
        uint64_t end = at + CHUNK >= to ? to : snap(fd, at + CHUNK, at, to);
        size_t n = (size_t)(end - at);
        if (path_read_all_at(fd, text, n, at) != 0) {
            log_error("cannot read %s: %s", name, log_errno_str());
            return STATUS_IO;
        }
        status st = tok_encode(t, text, n, &out->ids, &out->n, &out->cap);
        if (st == STATUS_INPUT) log_error("%s: the bytes from offset %" PRIu64 " do not encode (above)", name, at);
        if (st != STATUS_OK) return st;
        *done += n;
        at = end;
        if (progress) {
            double dt = now() - t0;
            fprintf(stderr, "\rprepare: %5.1f%% of this rank's %.1f MB, %.2f MB/s   ", 100.0 * (double)*done / (double)mine,
                    (double)mine / 1e6, (double)*done / 1e6 / (dt > 0 ? dt : 1e-9));
        }
    }
    return STATUS_OK;
}

/* The header of a token file: llm.c's for vocabularies up to 65536 (uint16 tokens),
 * Nebula's with 4-byte tokens beyond. */
static size_t header_of(uint8_t *h, int V, uint64_t count, int *width)
{
    if (V <= 65536) {
        int32_t hd[256] = { DATA_LLMC_MAGIC, DATA_LLMC_VERSION, (int32_t)count };
        memcpy(h, hd, sizeof hd);
        *width = 2;
        return DATA_LLMC_HEADER_BYTES;
    }
    const uint32_t version = DATA_NEBULA_VERSION, vocab = (uint32_t)V, w = 4, reserved = 0;
    memcpy(h, DATA_NEBULA_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &vocab, 4);
    memcpy(h + 16, &count, 8);
    memcpy(h + 24, &w, 4);
    memcpy(h + 28, &reserved, 4);
    *width = 4;
    return DATA_NEBULA_HEADER_BYTES;
}

/* Writes this rank's tokens at token offset `first` of the temporary file tmp. */
static status write_mine(const char *tmp, size_t header, int width, uint64_t first, const tokbuf *b)
{
    if (!b->n) return STATUS_OK;
    int fd = open(tmp, O_WRONLY | O_NOFOLLOW);
    if (fd < 0) {
        log_error("cannot open %s: %s (is it on a file system every rank sees?)", tmp, log_errno_str());
        return STATUS_IO;
    }
    status st = STATUS_OK;
    enum { BLOCK = 1 << 20 };
    uint8_t *out = malloc((size_t)BLOCK * (size_t)width);
    for (size_t i = 0; out && i < b->n && st == STATUS_OK; i += BLOCK) {
        size_t n = b->n - i < BLOCK ? b->n - i : BLOCK;
        for (size_t k = 0; k < n; k++) {
            uint32_t v = (uint32_t)b->ids[i + k];
            if (width == 2) memcpy(out + 2 * k, &(uint16_t){ (uint16_t)v }, 2);
            else memcpy(out + 4 * k, &v, 4);
        }
        off_t off = (off_t)(header + (first + i) * (uint64_t)width);
        if (lseek(fd, off, SEEK_SET) != off || path_write_all(fd, out, n * (size_t)width) != 0) st = STATUS_IO;
    }
    if (!out) st = STATUS_NOMEM;
    if (st == STATUS_OK && fsync(fd) != 0) st = STATUS_IO;
    if (close(fd) != 0 && st == STATUS_OK) st = STATUS_IO;
    if (st == STATUS_IO) log_error("cannot write %s: %s", tmp, log_errno_str());
    free(out);
    return st;
}

/* Rank 0 creates the temporary file (header, full length); every rank then writes. */
static status create_tmp(const char *path, char *tmp, size_t tmplen, int V, uint64_t count)
{
    snprintf(tmp, tmplen, "%s.tmp.%d", path, (int)getpid());
    unlink(tmp);
    int fd;
    char why[256];
    if (path_create_regular(tmp, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_error("%s %s", tmp, why);
        return STATUS_IO;
    }
    uint8_t h[DATA_LLMC_HEADER_BYTES] = { 0 };
    int width;
    size_t hb = header_of(h, V, count, &width);
    status st = path_write_all(fd, h, hb) == 0 && ftruncate(fd, (off_t)(hb + count * (uint64_t)width)) == 0 ? STATUS_OK : STATUS_IO;
    if (st != STATUS_OK) log_error("cannot write %s: %s", tmp, log_errno_str());
    close(fd);
    return st;
}

static void rename_durable(const char *tmp, const char *path, status *st)
{
    if (*st != STATUS_OK) return;
    if (rename(tmp, path) != 0) {
        log_error("cannot rename %s to %s: %s", tmp, path, log_errno_str());
        *st = STATUS_IO;
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

/* The same status on every rank: the worst. */
static status agree(MPI_Comm comm, status st)
{
    int mine = (int)st, worst = 0;
    if (comm_ctl_allreduce(comm_ctl_make(comm, 0), &mine, &worst, 1, MPI_INT, MPI_MAX) != STATUS_OK) return STATUS_PEER;
    return (status)worst;
}

/* The tokenizer: trained on the training parts by rank 0 and read back by every rank,
 * or the one given; its files written into out_dir either way. */
static status prepare_tokenizer(const data_prepare_opts *o, tok **t, MPI_Comm comm, int rank, const part *parts,
                                data_prepare_result *res)
{
    status st = STATUS_OK;
    if (o->bpe_vocab_size > 0) {
        if (rank == 0) {
            double t0 = now();
            uint64_t *limits = malloc((size_t)o->ninputs * sizeof *limits);
            CHECK(limits, "out of memory preparing token files");
            for (int i = 0; i < o->ninputs; i++) limits[i] = parts[2 * i].to;
            const char *specials[] = { "<|endoftext|>" };
            tok *trained = NULL;
            st = tok_train_bpe(&trained, o->inputs, limits, o->ninputs, o->bpe_vocab_size, specials, 1);
            free(limits);
            if (st == STATUS_OK) st = tok_save(trained, o->out_dir);
            tok_free(trained);
            res->train_seconds = now() - t0;
        }
        st = agree(comm, st);
        if (st == STATUS_OK) st = agree(comm, tok_load(t, o->out_dir));
        return st;
    }
    return agree(comm, rank == 0 ? tok_save(*t, o->out_dir) : STATUS_OK);
}

status data_prepare_tokens(const data_prepare_opts *o, tok **tp, MPI_Comm comm, data_prepare_result *res)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    memset(res, 0, sizeof *res);
    double t0 = now();
    int nparts = 2 * o->ninputs;
    part *parts = calloc((size_t)nparts, sizeof *parts);
    int *fds = malloc((size_t)o->ninputs * sizeof *fds);
    CHECK(parts && fds, "out of memory preparing token files");
    status st = STATUS_OK;
    uint64_t total = 0;
    for (int i = 0; i < o->ninputs; i++) {
        struct stat sb;
        char why[256];
        fds[i] = -1;
        if (st == STATUS_OK && path_open_regular(o->inputs[i], &fds[i], &sb, 0, why, sizeof why) != 0) {
            log_error0("%s %s", o->inputs[i], why);
            st = STATUS_INPUT;
        }
        if (st != STATUS_OK) continue;
        uint64_t sz = (uint64_t)sb.st_size, cut = cut_of(fds[i], sz, o->val_fraction);
        parts[2 * i] = (part){ i, false, 0, cut, total };
        parts[2 * i + 1] = (part){ i, true, cut, sz, total + cut };
        total += sz;
    }
    st = agree(comm, st);
    if (st == STATUS_OK) st = prepare_tokenizer(o, tp, comm, rank, parts, res);
    tok *t = *tp;
    uint64_t lo = total * (uint64_t)rank / (uint64_t)size, hi = total * (uint64_t)(rank + 1) / (uint64_t)size;
    tokbuf tb[2] = { { 0 }, { 0 } };
    char *text = malloc(CHUNK);
    CHECK(text, "out of memory preparing token files");
    uint64_t done = 0;
    bool progress = o->progress && rank == 0 && isatty(2);
    for (int k = 0; k < nparts && st == STATUS_OK; k++) {
        const part *p = &parts[k];
        uint64_t a = p->at, b = p->at + (p->to - p->from);
        if (b <= lo || a >= hi || a == b) continue;  /* not this rank's, or empty */
        int fd = fds[p->file];
        uint64_t from = lo > a ? snap(fd, p->from + (lo - a), p->from, p->to) : p->from;
        uint64_t to = hi < b ? snap(fd, p->from + (hi - a), p->from, p->to) : p->to;
        if (from < to)
            st = encode_range(t, o->inputs[p->file], fd, p, from, to, &tb[p->val], text, &done, t0, progress, hi - lo);
    }
    if (progress) fprintf(stderr, "\n");
    free(text);
    for (int i = 0; i < o->ninputs; i++)
        if (fds[i] >= 0) close(fds[i]);
    st = agree(comm, st);

    /* every rank's counts, then the offsets of its tokens in the two files */
    uint64_t mine[2] = { tb[0].n, tb[1].n }, *all = calloc(2 * (size_t)size, sizeof *all);
    CHECK(all, "out of memory preparing token files");
    if (st == STATUS_OK &&
        comm_ctl_allgather(comm_ctl_make(comm, 0), mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T) != STATUS_OK)
        st = STATUS_PEER;
    uint64_t count[2] = { 0, 0 }, first[2] = { 0, 0 };
    for (int r = 0; r < size; r++)
        for (int s = 0; s < 2; s++) {
            if (r < rank) first[s] += all[2 * r + s];
            count[s] += all[2 * r + s];
        }
    if (st == STATUS_OK && rank == 0 && (count[0] == 0 || (o->val_out && count[1] == 0))) {
        log_error0("prepare: the %s would hold no tokens%s", count[0] == 0 ? "training file" : "held-out file",
                   count[0] == 0 ? ": the inputs are empty" : "\nHINT: more text, a larger --val-fraction, or --val-fraction 0");
        st = STATUS_INPUT;
    }
    st = agree(comm, st);
    const char *outs[2] = { o->train_out, o->val_out };
    char tmp[2][4200] = { "", "" };
    int V = t ? tok_vocab_size(t) : 256, width = V <= 65536 ? 2 : 4;
    size_t header = V <= 65536 ? DATA_LLMC_HEADER_BYTES : DATA_NEBULA_HEADER_BYTES;
    for (int s = 0; s < 2 && st == STATUS_OK; s++) {
        if (!outs[s]) continue;
        status cs = rank == 0 ? create_tmp(outs[s], tmp[s], sizeof tmp[s], V, count[s]) : STATUS_OK;
        st = agree(comm, cs);
        if (st == STATUS_OK && comm_ctl_bcast_bytes(comm_ctl_make(comm, 0), tmp[s], sizeof tmp[s], 0) != STATUS_OK)
            st = STATUS_PEER;
        if (st == STATUS_OK) st = agree(comm, write_mine(tmp[s], header, width, first[s], &tb[s]));
    }
    if (rank == 0) {
        for (int s = 0; s < 2; s++)
            if (outs[s] && tmp[s][0]) rename_durable(tmp[s], outs[s], &st);
        for (int s = 0; s < 2 && st != STATUS_OK; s++)
            if (tmp[s][0]) unlink(tmp[s]);
    }
    st = agree(comm, st);
    res->bytes = total;
    res->tokens[0] = count[0];
    res->tokens[1] = count[1];
    res->seconds = now() - t0;
    free(all);
    free(tb[0].ids);
    free(tb[1].ids);
    free(parts);
    free(fds);
    return st;
}
