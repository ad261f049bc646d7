/* data_prepare — text files into byte-level Nebula token files (data.h,
 * data_prepare_text; nebula-train prepare).
 *
 * Byte-level tokens (vocabulary 256) need no tokenizer and keep every file
 * readable as text after the 32-byte header. The inputs are streamed through one
 * 1 MiB buffer, so files of any size work; sizes are taken first so each header is
 * written once, and an input that changes size while being read is an error. Both
 * outputs go to temporary names and are renamed only when both are complete and
 * fsync'd (docs/design.md#durable-writes): a failure leaves any earlier outputs as
 * they were. */
#include "data.h"
#include "base/path.h"

#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREPARE_BUF (1u << 20)   /* bytes per read */

typedef struct prep_out {
    const char *path;            /* final name; NULL when this output is not written */
    char tmp[4096];              /* temporary name: path.tmp.PID */
    int fd;                      /* -1 when closed */
    uint64_t count;              /* tokens (bytes) it receives */
} prep_out;

/* The 32-byte Nebula header of a byte-level file of `count` tokens (data.h). */
static void byte_header(uint8_t h[DATA_NEBULA_HEADER_BYTES], uint64_t count)
{
    const uint32_t version = DATA_NEBULA_VERSION, vocab = 256, width = 1, reserved = 0;
    memcpy(h, DATA_NEBULA_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &vocab, 4);
    memcpy(h + 16, &count, 8);
    memcpy(h + 24, &width, 4);
    memcpy(h + 28, &reserved, 4);
}

static status out_create(prep_out *o)
{
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", o->path, (int)getpid());
    unlink(o->tmp);  /* a stale or planted one: never written through (O_EXCL|O_NOFOLLOW) */
    char why[256];
    if (path_create_regular(o->tmp, O_EXCL, 0644, &o->fd, why, sizeof why) != 0) {
        log_error("%s %s", o->tmp, why);
        return STATUS_IO;
    }
    uint8_t h[DATA_NEBULA_HEADER_BYTES];
    byte_header(h, o->count);
    if (path_write_all(o->fd, h, sizeof h) != 0) {
        log_error("cannot write %s: %s", o->tmp, log_errno_str());
        return STATUS_IO;
    }
    return STATUS_OK;
}

/* fsync and close; the rename comes later, once every output got here. */
static status out_finish(prep_out *o)
{
    int rc = fsync(o->fd);
    if (close(o->fd) != 0) rc = -1;
    o->fd = -1;
    if (rc != 0) {
        log_error("cannot write %s: %s", o->tmp, log_errno_str());
        return STATUS_IO;
    }
    return STATUS_OK;
}

static status out_commit(prep_out *o)
{
    if (rename(o->tmp, o->path) != 0) {
        log_error("cannot rename %s to %s: %s", o->tmp, o->path, log_errno_str());
        return STATUS_IO;
    }
    o->tmp[0] = '\0';
    char dir[4096];  /* make the rename itself durable */
    snprintf(dir, sizeof dir, "%s", o->path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return STATUS_OK;
}

static void out_discard(prep_out *o)
{
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = '\0';
}

/* Bytes of input i that go to the held-out file. */
static uint64_t val_bytes(uint64_t size, double val_fraction)
{
    return (uint64_t)((double)size * val_fraction);
}

/* Copies `n` bytes of fd (named `name`) to out. */
static status copy_bytes(int fd, const char *name, uint64_t n, prep_out *out, uint8_t *buf)
{
    while (n > 0) {
        size_t want = n < PREPARE_BUF ? (size_t)n : PREPARE_BUF;
        ssize_t got = read(fd, buf, want);
        if (got <= 0) {
            log_error("%s: %s while reading (did it change during preparation?)",
                      name, got < 0 ? log_errno_str() : "unexpected end of file");
            return STATUS_IO;
        }
        if (path_write_all(out->fd, buf, (size_t)got) != 0) {
            log_error("cannot write %s: %s", out->tmp, log_errno_str());
            return STATUS_IO;
        }
        n -= (uint64_t)got;
    }
    return STATUS_OK;
}

static status prepare_copy(const char *const *inputs, const uint64_t *sizes, int ninputs, double val_fraction,
                           prep_out *train, prep_out *val, uint8_t *buf)
{
    for (int i = 0; i < ninputs; i++) {
        int fd;
        struct stat sb;
        char why[256];
        if (path_open_regular(inputs[i], &fd, &sb, 0, why, sizeof why) != 0) {
            log_error("%s %s", inputs[i], why);
            return STATUS_INPUT;
        }
        uint64_t nv = val_bytes(sizes[i], val_fraction);
        status st = copy_bytes(fd, inputs[i], sizes[i] - nv, train, buf);
        if (st == STATUS_OK && nv > 0) st = copy_bytes(fd, inputs[i], nv, val, buf);
        uint8_t extra;
        if (st == STATUS_OK && read(fd, &extra, 1) != 0) {
            log_error("%s: grew while being read (its size was %" PRIu64 " bytes)", inputs[i], sizes[i]);
            st = STATUS_IO;
        }
        close(fd);
        if (st != STATUS_OK) return st;
    }
    return STATUS_OK;
}

/* An output without tokens is no data set (every reader refuses it later, far from
 * the cause): refused here, naming the inputs. */
static status prepare_check_counts(const char *const *inputs, int ninputs, uint64_t train_count, const prep_out *val)
{
    if (train_count > 0 && (!val || val->count > 0)) return STATUS_OK;
    char names[512] = "";
    size_t off = 0;
    for (int i = 0; i < ninputs && off < sizeof names; i++)
        off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "", inputs[i]);
    if (train_count == 0)
        log_error("prepare: nothing to prepare: the input%s %s %s empty", ninputs > 1 ? "s" : "", names,
                  ninputs > 1 ? "are all" : "is");
    else
        log_error("prepare: the held-out output %s would have no tokens: %" PRIu64 " bytes of input (%s) are too "
                  "few for a held-out fraction of them\nHINT: more text, a larger --val-fraction, or --val-fraction 0",
                  val->path, train_count, names);
    return STATUS_INPUT;
}

status data_prepare_text(const char *const *inputs, int ninputs, const char *train_out, const char *val_out,
                         double val_fraction)
{
    if (ninputs < 1) {
        log_error("prepare: no input files");
        return STATUS_INPUT;
    }
    if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
        log_error("prepare: val_fraction = %g must lie in [0, 1)", val_fraction);
        return STATUS_INPUT;
    }
    if (val_fraction > 0.0 && !val_out) {
        log_error("prepare: val_fraction = %g needs a held-out output file", val_fraction);
        return STATUS_INPUT;
    }
    uint64_t *sizes = calloc((size_t)ninputs, sizeof *sizes);
    uint8_t *buf = malloc(PREPARE_BUF);
    prep_out train = { .path = train_out, .fd = -1 }, val = { .path = val_out, .fd = -1 };
    status st = STATUS_OK;
    if (!sizes || !buf) {
        log_error("prepare: out of memory");
        st = STATUS_NOMEM;
    }
    for (int i = 0; i < ninputs && st == STATUS_OK; i++) {
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) {
            log_error("cannot open %s: %s", inputs[i], log_errno_str());
            st = STATUS_INPUT;
        } else if (!S_ISREG(sb.st_mode)) {
            log_error("%s is %s, not a regular file", inputs[i], path_kind(sb.st_mode));
            st = STATUS_INPUT;
        } else {
            sizes[i] = (uint64_t)sb.st_size;
            uint64_t nv = val_bytes(sizes[i], val_fraction);
            train.count += sizes[i] - nv;
            val.count += nv;
        }
    }
    if (st == STATUS_OK) st = prepare_check_counts(inputs, ninputs, train.count,
                                                         val.path && val_fraction > 0 ? &val : NULL);
    if (st == STATUS_OK) st = out_create(&train);
    if (st == STATUS_OK && val.path) st = out_create(&val);
    if (st == STATUS_OK) st = prepare_copy(inputs, sizes, ninputs, val_fraction, &train, &val, buf);
    if (st == STATUS_OK) st = out_finish(&train);
    if (st == STATUS_OK && val.path) st = out_finish(&val);
    if (st == STATUS_OK) st = out_commit(&train);
    if (st == STATUS_OK && val.path) st = out_commit(&val);
    out_discard(&train);
    if (val.path) out_discard(&val);
    free(sizes);
    free(buf);
    return st;
}
