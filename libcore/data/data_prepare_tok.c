/* data_prepare_tok — text files into token files through a tokenizer, in parallel
 * over MPI ranks (nebula-train prepare --tokenizer; tokenizer.h, data.h).
 *
 * Each input is one document: its first (1 - val_fraction) goes to the training file,
 * cut at a line end, the rest to the held-out file; each part starts with
 * <|endoftext|> when the tokenizer has it (as llm.c's data scripts do). The parts laid
 * end to end are divided into equal byte ranges, one per rank; a rank encodes its
 * range, the ranks exchange their token counts, and each writes its tokens at its own
 * offset of the one temporary file rank 0 created. The tokenizer's files are staged in
 * OUT_DIR/.prepare.PID (every rank reads the tokenizer from there, so what encodes is
 * what is saved); when every rank has fsync'd, rank 0 renames the token files, then
 * the tokenizer's files, into place (docs/design.md#durable-writes). A failure removes
 * the temporaries and the stage and leaves OUT_DIR as it was.
 *
 * The one design decision: ranges and encoding chunks end only at a "safe" point,
 * where GPT-2's pre-tokenisation (and BERT's) splits anyway: after a line end that
 * is the only white space between two other characters, or in the middle of a run of
 * exactly two ASCII white-space characters between two others (CRLF line ends). The
 * tokens are then those of each part encoded whole, so the files are the same bytes
 * at any number of ranks. A tokenizer for which even that is not true (one that adds
 * a prefix space per call, or has a special token holding or absorbing white space)
 * encodes each part in one piece. A stretch without a safe point is encoded in one
 * piece too, whatever its length. */
#include "data.h"
#include "tokenizer_impl.h"
#include "base/path.h"
#include "comm/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK ((uint64_t)8 << 20)  /* bytes encoded per call when safe points allow */

typedef struct part {
    int file;                      /* input index */
    bool val;                      /* the held-out part */
    uint64_t from, to;             /* byte range in the file */
    uint64_t at;                   /* offset of the part in the concatenation */
} part;

typedef struct tokbuf {
    int32_t *ids;
    size_t n, cap;
} tokbuf;

typedef struct prep {
    const data_prepare_opts *o;
    comm_ctl ctl;                  /* every collective: deadline o->timeout_s */
    int rank, size;
    part *parts;                   /* (2 ninputs) training and held-out part of each input */
    int *fds;                      /* (ninputs) */
    uint64_t total;                /* bytes of all parts */
    bool chunkable;                /* tok_chunkable: safe points may split the text */
    char stage[4200];              /* OUT_DIR/.prepare.PID (rank 0's PID): the tokenizer's files */
    char tmp[2][4200];             /* the token files' temporaries ("" when none) */
    tokbuf tb[2];                  /* this rank's tokens: training, held-out */
    char *text;                    /* the encoding buffer (text_cap bytes) */
    size_t text_cap;
} prep;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The same status on every rank: the worst. */
static status agree(prep *p, status st)
{
    int mine = (int)st, worst = 0;
    if (comm_ctl_allreduce(p->ctl, &mine, &worst, 1, MPI_INT, MPI_MAX) != STATUS_OK) return STATUS_PEER;
    return (status)worst;
}

/* ---- safe points ------------------------------------------------------------------ */

/* Whether the code point starting at b[i] (forward) or ending at b[i - 1] (backward)
 * exists inside b[0..n) and is not white space. */
static bool nonws_at(const uint8_t *b, size_t n, size_t i)
{
    uint32_t c;
    int l = i < n ? tok_utf8_get(b + i, n - i, &c) : 0;
    return l > 0 && !tok_is_ws(c);
}

static bool nonws_before(const uint8_t *b, size_t i)
{
    size_t s = i;
    while (s > 0 && i - s < 4 && (b[s - 1] & 0xC0) == 0x80) s--;
    if (s == 0 || i - s >= 4) return false;
    s--;
    uint32_t c;
    return tok_utf8_get(b + s, i - s, &c) == (int)(i - s) && !tok_is_ws(c);
}

static bool ascii_ws(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Whether a split right before b[i] leaves the pre-tokens unchanged (the top). */
static bool safe_at(const uint8_t *b, size_t n, size_t i)
{
    if (i < 2 || i >= n) return false;
    if ((b[i - 1] == '\n' || b[i - 1] == '\r' || b[i - 1] == '\t') && nonws_before(b, i - 1) && nonws_at(b, n, i))
        return true;
    return ascii_ws(b[i - 1]) && ascii_ws(b[i]) && nonws_before(b, i - 1) && nonws_at(b, n, i + 1);
}

/* The first safe point at or after pos in (lo, hi) of file fd, hi when none. The
 * window reaches 8 bytes either side of a candidate, never outside [lo, hi). */
static uint64_t snap(const prep *p, int fd, uint64_t pos, uint64_t lo, uint64_t hi)
{
    if (pos <= lo) return lo;
    if (!p->chunkable) return hi;
    enum { WIN = 1 << 16, PAD = 8 };
    uint8_t buf[WIN];
    for (uint64_t at = pos; at < hi;) {
        uint64_t base = at >= lo + PAD ? at - PAD : lo;
        uint64_t n = hi - base < WIN ? hi - base : WIN;
        if (path_read_all_at(fd, buf, (size_t)n, base) != 0) return hi;
        size_t last = n == hi - base ? (size_t)n : (size_t)n - PAD;  /* candidates with their context inside */
        for (size_t i = (size_t)(at - base); i < last; i++)
            if (safe_at(buf, (size_t)n, i)) return base + i;
        if (last <= (size_t)(at - base)) break;
        at = base + last;
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

/* ---- encoding -------------------------------------------------------------------- */

static status push_id(tokbuf *b, int32_t id)
{
    if (b->n + 1 > b->cap) {
        size_t c = b->cap * 2 + 1024;
        int32_t *q = realloc(b->ids, c * sizeof *q);
        if (!q) return STATUS_NOMEM;
        b->ids = q;
        b->cap = c;
    }
    b->ids[b->n++] = id;
    return STATUS_OK;
}

/* Encodes [from, to) of part pt (a range the snap rule drew) into out. */
static status encode_range(prep *p, tok *t, const part *pt, uint64_t from, uint64_t to, tokbuf *out, uint64_t *done,
                           double t0, uint64_t mine)
{
    const char *name = p->o->inputs[pt->file];
    int fd = p->fds[pt->file];
    int32_t eot = tok_token_id(t, "<|endoftext|>");
    if (from == pt->from && eot >= 0 && from < to) TRY(push_id(out, eot));
    bool progress = p->o->progress && p->rank == 0 && isatty(2);
    for (uint64_t at = from; at < to;) {
        uint64_t end = at + CHUNK >= to ? to : snap(p, fd, at + CHUNK, at, to);
        size_t n = (size_t)(end - at);
        if (n > p->text_cap) {
            char *q = realloc(p->text, n);
            if (!q) {
                log_error("%s: out of memory for %zu bytes without a place to split them", name, n);
                return STATUS_NOMEM;
            }
            p->text = q;
            p->text_cap = n;
        }
        if (path_read_all_at(fd, p->text, n, at) != 0) {
            log_error("cannot read %s: %s", name, log_errno_str());
            return STATUS_IO;
        }
        status st = tok_encode(t, p->text, n, &out->ids, &out->n, &out->cap);
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

/* This rank's share of every part. */
static status encode_mine(prep *p, tok *t, double t0)
{
    uint64_t lo = p->total * (uint64_t)p->rank / (uint64_t)p->size;
    uint64_t hi = p->total * (uint64_t)(p->rank + 1) / (uint64_t)p->size, done = 0;
    status st = STATUS_OK;
    for (int k = 0; k < 2 * p->o->ninputs && st == STATUS_OK; k++) {
        const part *pt = &p->parts[k];
        uint64_t a = pt->at, b = pt->at + (pt->to - pt->from);
        if (b <= lo || a >= hi || a == b) continue;  /* not this rank's, or empty */
        int fd = p->fds[pt->file];
        uint64_t from = lo > a ? snap(p, fd, pt->from + (lo - a), pt->from, pt->to) : pt->from;
        uint64_t to = hi < b ? snap(p, fd, pt->from + (hi - a), pt->from, pt->to) : pt->to;
        if (from < to) st = encode_range(p, t, pt, from, to, &p->tb[pt->val], &done, t0, hi - lo);
    }
    if (p->o->progress && p->rank == 0 && isatty(2)) fprintf(stderr, "\n");
    return st;
}

/* ---- the files ---------------------------------------------------------------------- */

/* The header of a token file of `count` tokens: llm.c's (uint16 tokens, an int32
 * count) when both fit, else Nebula's (2 or 4 bytes per token, a 64-bit count). */
static size_t header_of(uint8_t *h, int V, uint64_t count, int *width)
{
    if (V <= 65536 && count <= INT32_MAX) {
        int32_t hd[256] = { DATA_LLMC_MAGIC, DATA_LLMC_VERSION, (int32_t)count };
        memcpy(h, hd, sizeof hd);
        *width = 2;
        return DATA_LLMC_HEADER_BYTES;
    }
    const uint32_t version = DATA_NEBULA_VERSION, vocab = (uint32_t)V, w = V <= 65536 ? 2 : 4, reserved = 0;
    memcpy(h, DATA_NEBULA_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &vocab, 4);
    memcpy(h + 16, &count, 8);
    memcpy(h + 24, &w, 4);
    memcpy(h + 28, &reserved, 4);
    *width = (int)w;
    return DATA_NEBULA_HEADER_BYTES;
}

/* Rank 0: the temporary file with its header, its full length, fsync'd. */
static status create_tmp(const char *path, char *tmp, size_t tmplen, int V, uint64_t count)
{
    snprintf(tmp, tmplen, "%s.tmp.%d", path, (int)getpid());
    unlink(tmp);
    int fd;
    char why[256];
    if (path_create_regular(tmp, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_error("%s %s", tmp, why);
        tmp[0] = '\0';
        return STATUS_IO;
    }
    uint8_t h[DATA_LLMC_HEADER_BYTES] = { 0 };
    int width;
    size_t hb = header_of(h, V, count, &width);
    bool ok = path_write_all(fd, h, hb) == 0 && ftruncate(fd, (off_t)(hb + count * (uint64_t)width)) == 0 &&
              fsync(fd) == 0;
    if (close(fd) != 0) ok = false;
    if (!ok) log_error("cannot write %s: %s", tmp, log_errno_str());
    return ok ? STATUS_OK : STATUS_IO;
}

/* Writes this rank's tokens at token offset `first` of the temporary, fsync'd. */
static status write_mine(const char *tmp, int V, uint64_t count, uint64_t first, const tokbuf *b)
{
    if (!b->n) return STATUS_OK;
    uint8_t h[DATA_LLMC_HEADER_BYTES];
    int width;
    size_t header = header_of(h, V, count, &width);
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

static status fsync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd) != 0) {
        log_error("cannot fsync the directory %s: %s", dir, log_errno_str());
        if (dfd >= 0) close(dfd);
        return STATUS_IO;
    }
    close(dfd);
    return STATUS_OK;
}

/* The tokenizer file names Nebula reads (tok_load): the ones of a stage replace all. */
static const char *const tok_names[] = { "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt",
                                         "tokenizer_config.json" };
enum { NTOK_NAMES = 5 };

static void stage_remove(const char *stage)
{
    char f[4400];
    for (int i = 0; i < NTOK_NAMES; i++) {
        snprintf(f, sizeof f, "%s/%s", stage, tok_names[i]);
        unlink(f);
    }
    rmdir(stage);
}

/* Rank 0, once every rank's tokens are in the temporaries: the token files, then the
 * tokenizer's files (every name of a tokenizer replaced: a stale tokenizer.json would
 * win over a new vocab.json), a held-out file that no longer has a part removed. */
static status commit(prep *p)
{
    const char *outs[2] = { p->o->train_out, p->o->val_out };
    for (int s = 0; s < 2; s++) {
        if (!outs[s]) continue;
        if (rename(p->tmp[s], outs[s]) != 0) {
            log_error("cannot rename %s to %s: %s", p->tmp[s], outs[s], log_errno_str());
            return STATUS_IO;
        }
        p->tmp[s][0] = '\0';
    }
    char a[4400], b[4400];
    for (int i = 0; i < NTOK_NAMES; i++) {
        snprintf(a, sizeof a, "%s/%s", p->stage, tok_names[i]);
        snprintf(b, sizeof b, "%s/%s", p->o->out_dir, tok_names[i]);
        if (access(a, F_OK) == 0) {
            if (rename(a, b) != 0) {
                log_error("cannot rename %s to %s: %s", a, b, log_errno_str());
                return STATUS_IO;
            }
        } else if (unlink(b) == 0) {
            log_info0("prepare: removed %s, which belonged to an earlier tokenizer", b);
        }
    }
    if (!p->o->val_out && p->o->val_stale && unlink(p->o->val_stale) == 0)
        log_info0("prepare: removed %s: --val-fraction 0 leaves no held-out part", p->o->val_stale);
    rmdir(p->stage);
    p->stage[0] = '\0';
    return fsync_dir(p->o->out_dir);
}

/* ---- the tokenizer ------------------------------------------------------------------ */

/* Trained on the training parts by rank 0, or the one given; saved into the stage by
 * rank 0 and read back from there by every rank. */
static status stage_tokenizer(prep *p, tok **t, data_prepare_result *res)
{
    const data_prepare_opts *o = p->o;
    status st = STATUS_OK;
    if (p->rank == 0) {
        snprintf(p->stage, sizeof p->stage, "%s/.prepare.%d", o->out_dir, (int)getpid());
        stage_remove(p->stage);
        if (mkdir(p->stage, 0755) != 0) {
            log_error("cannot create %s: %s", p->stage, strerror(errno));
            p->stage[0] = '\0';
            st = STATUS_IO;
        }
    }
    if (st == STATUS_OK && o->bpe_vocab_size > 0 && p->rank == 0) {
        double t0 = now();
        uint64_t *limits = malloc((size_t)o->ninputs * sizeof *limits);
        CHECK(limits, "out of memory preparing token files");
        for (int i = 0; i < o->ninputs; i++) limits[i] = p->parts[2 * i].to;
        const char *specials[] = { "<|endoftext|>" };
        tok *trained = NULL;
        st = tok_train_bpe(&trained, o->inputs, limits, o->ninputs, o->bpe_vocab_size, specials, 1);
        free(limits);
        if (st == STATUS_OK) st = tok_save(trained, p->stage);
        tok_free(trained);
        res->train_seconds = now() - t0;
    } else if (st == STATUS_OK && p->rank == 0) {
        st = tok_save(*t, p->stage);
    }
    st = agree(p, st);
    if (st == STATUS_OK && comm_ctl_bcast_bytes(p->ctl, p->stage, sizeof p->stage, 0) != STATUS_OK) st = STATUS_PEER;
    if (st == STATUS_OK && (o->bpe_vocab_size > 0 || tok_get_kind(*t) != TOK_KIND_BYTES)) {
        tok_free(*t);
        *t = NULL;
        st = agree(p, tok_load(t, p->stage));
    }
    return st;
}

/* ---- the whole ------------------------------------------------------------------------ */

static status open_inputs(prep *p)
{
    status st = STATUS_OK;
    for (int i = 0; i < p->o->ninputs; i++) {
        struct stat sb;
        char why[256];
        p->fds[i] = -1;
        if (st == STATUS_OK && path_open_regular(p->o->inputs[i], &p->fds[i], &sb, 0, why, sizeof why) != 0) {
            log_error0("%s %s", p->o->inputs[i], why);
            st = STATUS_INPUT;
        }
        if (st != STATUS_OK) continue;
        uint64_t sz = (uint64_t)sb.st_size, cut = cut_of(p->fds[i], sz, p->o->val_fraction);
        p->parts[2 * i] = (part){ i, false, 0, cut, p->total };
        p->parts[2 * i + 1] = (part){ i, true, cut, sz, p->total + cut };
        p->total += sz;
    }
    return agree(p, st);
}

/* Token counts of every rank: each rank's offsets and the totals; the temporaries. */
static status write_files(prep *p, int V, uint64_t count[2])
{
    uint64_t mine[2] = { p->tb[0].n, p->tb[1].n }, *all = calloc(2 * (size_t)p->size, sizeof *all), first[2] = { 0, 0 };
    CHECK(all, "out of memory preparing token files");
    status st = comm_ctl_allgather(p->ctl, mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T) == STATUS_OK ? STATUS_OK
                                                                                                  : STATUS_PEER;
    count[0] = count[1] = 0;
    for (int r = 0; r < p->size; r++)
        for (int s = 0; s < 2; s++) {
            if (r < p->rank) first[s] += all[2 * r + s];
            count[s] += all[2 * r + s];
        }
    free(all);
    if (st == STATUS_OK && p->rank == 0 && (count[0] == 0 || (p->o->val_out && count[1] == 0))) {
        log_error0("prepare: the %s would hold no tokens%s", count[0] == 0 ? "training file" : "held-out file",
                   count[0] == 0 ? ": the inputs are empty" : "\nHINT: more text, a larger --val-fraction, or --val-fraction 0");
        st = STATUS_INPUT;
    }
    st = agree(p, st);
    const char *outs[2] = { p->o->train_out, p->o->val_out };
    for (int s = 0; s < 2 && st == STATUS_OK; s++) {
        if (!outs[s]) continue;
        st = agree(p, p->rank == 0 ? create_tmp(outs[s], p->tmp[s], sizeof p->tmp[s], V, count[s]) : STATUS_OK);
        if (st == STATUS_OK && comm_ctl_bcast_bytes(p->ctl, p->tmp[s], sizeof p->tmp[s], 0) != STATUS_OK)
            st = STATUS_PEER;
        if (st == STATUS_OK) st = agree(p, write_mine(p->tmp[s], V, count[s], first[s], &p->tb[s]));
    }
    return st;
}

status data_prepare_tokens(const data_prepare_opts *o, tok **tp, MPI_Comm comm, data_prepare_result *res)
{
    prep p = { .o = o, .ctl = comm_ctl_named(comm, o->timeout_s, "prepare") };
    MPI_Comm_rank(comm, &p.rank);
    MPI_Comm_size(comm, &p.size);
    memset(res, 0, sizeof *res);
    double t0 = now();
    p.parts = calloc(2 * (size_t)o->ninputs, sizeof *p.parts);
    p.fds = malloc((size_t)o->ninputs * sizeof *p.fds);
    CHECK(p.parts && p.fds, "out of memory preparing token files");
    status st = open_inputs(&p);
    if (st == STATUS_OK) st = stage_tokenizer(&p, tp, res);
    if (st == STATUS_OK) {
        p.chunkable = tok_chunkable(*tp);
        st = agree(&p, encode_mine(&p, *tp, t0));
    }
    uint64_t count[2] = { 0, 0 };
    if (st == STATUS_OK) st = write_files(&p, tok_vocab_size(*tp), count);
    if (p.rank == 0) {
        if (st == STATUS_OK) st = commit(&p);
        for (int s = 0; s < 2; s++)
            if (p.tmp[s][0]) unlink(p.tmp[s]);
        if (p.stage[0]) stage_remove(p.stage);
    }
    st = agree(&p, st);
    res->bytes = p.total;
    res->tokens[0] = count[0];
    res->tokens[1] = count[1];
    res->seconds = now() - t0;
    for (int i = 0; i < o->ninputs; i++)
        if (p.fds[i] >= 0) close(p.fds[i]);
    free(p.tb[0].ids);
    free(p.tb[1].ids);
    free(p.text);
    free(p.parts);
    free(p.fds);
    return st;
}
