/* tfevent — TensorBoard event files (tfevent.h): TFRecord framing with ISA-L's CRC-32C
 * and a protobuf encoder for the few messages a scalar or a histogram needs.
 *
 * Every nested message is written length-first, so its size must be known before its
 * bytes: each encoder runs twice over a pb_out, once counting (p == NULL) and once
 * writing, and a record is encoded straight into the output buffer after its header. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <isa-l/crc.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "tfevent.h"

/* The output buffer: several records of the largest kind (a histogram of
 * TFEVENT_HISTO_MAX buckets is 16 bytes a bucket plus ~300 of tag and fields). */
#define TFEVENT_BUFFER_BYTES (4u * (16u * TFEVENT_HISTO_MAX + 1024u))
#define TFEVENT_HEADER 12  /* length + its masked CRC */
#define TFEVENT_FOOTER 4   /* the data's masked CRC */

struct tfevent {
    int fd;                    /* the event file, O_WRONLY */
    uint8_t *buf;              /* [TFEVENT_BUFFER_BYTES] records not yet written */
    size_t used;               /* bytes of buf in use */
    long pending;              /* records in buf */
    off_t size;                /* the file's length after the last good write */
    long lost;                 /* records dropped by failed writes */
    int err;                   /* errno of the last failed write; 0 once one goes through */
    char path[4352];
};

/* ---- framing ---- */

uint32_t tfevent_crc32c(const void *p, size_t n)
{
    /* ISA-L's crc32_iscsi neither presets nor inverts: the standard CRC-32C starts
     * from ~0 and inverts the result */
    uint32_t c = 0xFFFFFFFFu;
    const unsigned char *s = p;
    while (n > 0) {  /* the length argument is an int */
        int k = n > (1u << 30) ? 1 << 30 : (int)n;
        c = crc32_iscsi((unsigned char *)s, k, c);
        s += k, n -= (size_t)k;
    }
    return ~c;
}

uint32_t tfevent_mask_crc(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

size_t tfevent_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static void put_le(uint8_t *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* ---- protobuf encoding ---- */

/* Where an encoder writes: p NULL counts the bytes only. */
typedef struct pb_out {
    uint8_t *p;
    size_t n;
} pb_out;

enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_BYTES = 2, PB_FIXED32 = 5 };

static void pb_raw(pb_out *b, const void *src, size_t len)
{
    if (b->p) memcpy(b->p + b->n, src, len);
    b->n += len;
}

static void pb_varint(pb_out *b, uint64_t v)
{
    uint8_t t[10];
    pb_raw(b, t, tfevent_varint(t, v));
}

static void pb_key(pb_out *b, int field, int wire)
{
    pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void pb_fixed64(pb_out *b, double v)
{
    uint64_t u;
    uint8_t t[8];
    memcpy(&u, &v, sizeof u);
    put_le(t, u, 8);
    pb_raw(b, t, 8);
}

static void pb_double(pb_out *b, int field, double v)
{
    pb_key(b, field, PB_FIXED64);
    pb_fixed64(b, v);
}

static void pb_float(pb_out *b, int field, float v)
{
    uint32_t u;
    uint8_t t[4];
    memcpy(&u, &v, sizeof u);
    put_le(t, u, 4);
    pb_key(b, field, PB_FIXED32);
    pb_raw(b, t, 4);
}

static void pb_string(pb_out *b, int field, const char *s, size_t len)
{
    pb_key(b, field, PB_BYTES);
    pb_varint(b, len);
    pb_raw(b, s, len);
}

/* What a record holds: the file_version, a scalar or a histogram. */
typedef struct tf_record {
    double wall_time;
    int64_t step;
    const char *file_version;  /* non-NULL: the first record; no summary */
    const char *tag;
    size_t tag_len;
    float value;               /* h NULL: a scalar */
    const tfevent_histo *h;
} tf_record;

typedef void (*pb_encoder)(pb_out *b, const tf_record *r);

/* Field `field` holding the message enc writes: sized first, then written. */
static void pb_message(pb_out *b, int field, pb_encoder enc, const tf_record *r)
{
    pb_out size = { NULL, 0 };
    enc(&size, r);
    pb_key(b, field, PB_BYTES);
    pb_varint(b, size.n);
    enc(b, r);
}

/* TensorFlow's EncodeToProto without preserve_zero_buckets: a run of empty buckets
 * becomes one (its last edge, count 0). Calls emit per bucket kept; returns how many. */
static int histo_buckets(const tfevent_histo *h, pb_out *b, bool limits)
{
    int kept = 0;
    for (int i = 0; i < h->n;) {
        double end = h->limit[i], count = h->count[i];
        i++;
        if (count <= 0)
            while (i < h->n && h->count[i] <= 0) end = h->limit[i], count = h->count[i], i++;
        if (b) pb_fixed64(b, limits ? end : count);
        kept++;
    }
    return kept;
}

static void enc_histo(pb_out *b, const tf_record *r)
{
    const tfevent_histo *h = r->h;
    pb_double(b, 1, h->min);
    pb_double(b, 2, h->max);
    pb_double(b, 3, h->num);
    pb_double(b, 4, h->sum);
    pb_double(b, 5, h->sum_squares);
    size_t kept = (size_t)histo_buckets(h, NULL, true);
    for (int field = 6; field <= 7; field++) {  /* packed: one length, then the doubles */
        pb_key(b, field, PB_BYTES);
        pb_varint(b, 8 * kept);
        histo_buckets(h, b, field == 6);
    }
}

static void enc_value(pb_out *b, const tf_record *r)
{
    pb_string(b, 1, r->tag, r->tag_len);
    if (r->h) pb_message(b, 5, enc_histo, r);
    else pb_float(b, 2, r->value);
}

static void enc_summary(pb_out *b, const tf_record *r)
{
    pb_message(b, 1, enc_value, r);
}

static void enc_event(pb_out *b, const tf_record *r)
{
    pb_double(b, 1, r->wall_time);
    pb_key(b, 2, PB_VARINT);
    pb_varint(b, (uint64_t)r->step);  /* int64: two's complement, 10 bytes when negative */
    if (r->file_version) pb_string(b, 3, r->file_version, strlen(r->file_version));
    else pb_message(b, 5, enc_summary, r);
}

/* ---- the file ---- */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

status tfevent_flush(tfevent *w)
{
    if (!w || w->used == 0) return STATUS_OK;
    if (path_write_all(w->fd, w->buf, w->used) == 0) {
        if (w->err)
            log_warn("tensorboard: writing %s again; %ld record(s) were lost before", w->path, w->lost);
        w->size += (off_t)w->used;
        w->used = 0;
        w->pending = 0;
        w->err = 0;
        return STATUS_OK;
    }
    int err = errno ? errno : ENOSPC;
    /* cut what a short write left, so the next record starts where a reader expects one */
    if (ftruncate(w->fd, w->size) != 0 || lseek(w->fd, w->size, SEEK_SET) != w->size)
        log_warn("tensorboard: cannot cut a torn record off %s: %s", w->path, strerror(errno));
    if (!w->err)
        log_warn("tensorboard: cannot write %s: %s; its records are dropped, training goes on", w->path,
                 strerror(err));
    w->err = err;
    w->used = 0;
    w->lost += w->pending;
    w->pending = 0;
    return STATUS_IO;
}

/* Frames and buffers one record (flushing first when it does not fit). */
static status tfevent_append(tfevent *w, const tf_record *r)
{
    pb_out size = { NULL, 0 };
    enc_event(&size, r);
    size_t need = TFEVENT_HEADER + size.n + TFEVENT_FOOTER;
    CHECK(need <= TFEVENT_BUFFER_BYTES, "tags and histograms are bounded by TFEVENT_TAG_MAX and TFEVENT_HISTO_MAX");
    status st = STATUS_OK;
    if (w->used + need > TFEVENT_BUFFER_BYTES) st = tfevent_flush(w);
    uint8_t *at = w->buf + w->used;
    put_le(at, size.n, 8);
    put_le(at + 8, tfevent_mask_crc(tfevent_crc32c(at, 8)), 4);
    pb_out data = { at + TFEVENT_HEADER, 0 };
    enc_event(&data, r);
    CHECK(data.n == size.n, "the sizing pass and the writing pass encode the same bytes");
    put_le(at + TFEVENT_HEADER + data.n, tfevent_mask_crc(tfevent_crc32c(data.p, data.n)), 4);
    w->used += need;
    w->pending++;
    return st;
}

/* Creates the file under the first free name; 0 or -1 with errno and why. */
static int tfevent_create(tfevent *w, const char *dir, char *why, size_t len)
{
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[strcspn(host, "/")] = '\0';  /* a name, never a path */
    long long now = (long long)time(NULL);
    for (int n = 0; n < 1000; n++) {
        snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, now, host,
                 (long)getpid(), n);
        if (path_create_regular(w->path, O_WRONLY | O_EXCL, 0644, &w->fd, why, len) == 0) return 0;
        if (errno != EEXIST) return -1;
    }
    snprintf(why, len, "1000 files of this second, host and process exist already");
    errno = EEXIST;
    return -1;
}

status tfevent_open(tfevent **out, const char *dir)
{
    *out = NULL;
    TRY(path_mkdirs(dir, "TensorBoard directory"));
    tfevent *w = calloc(1, sizeof *w);
    uint8_t *buf = malloc(TFEVENT_BUFFER_BYTES);
    if (!w || !buf) {
        free(w), free(buf);
        log_error("tensorboard: cannot allocate the writer's %u-byte buffer", TFEVENT_BUFFER_BYTES);
        return STATUS_NOMEM;
    }
    w->buf = buf;
    char why[256];
    if (tfevent_create(w, dir, why, sizeof why) != 0) {
        log_error("tensorboard: cannot create an event file in %s: %s", dir, why);
        free(w->buf), free(w);
        return STATUS_IO;
    }
    tf_record r = { .wall_time = wall_now(), .step = 0, .file_version = "brain.Event:2" };
    status st = tfevent_append(w, &r);
    if (st == STATUS_OK) st = tfevent_flush(w);
    if (st != STATUS_OK) {
        (void)tfevent_close(w);
        return st;
    }
    *out = w;
    return STATUS_OK;
}

const char *tfevent_path(const tfevent *w)
{
    return w->path;
}

static status tfevent_tag_check(const char *tag, size_t *len)
{
    *len = strlen(tag);
    if (*len > 0 && *len <= TFEVENT_TAG_MAX) return STATUS_OK;
    log_warn("tensorboard: tag '%.40s%s' is %s", tag, *len > 40 ? "..." : "",
             *len ? "longer than 255 bytes (TFEVENT_TAG_MAX)" : "empty");
    return STATUS_INPUT;
}

status tfevent_scalar(tfevent *w, int64_t step, const char *tag, double value)
{
    tf_record r = { .wall_time = wall_now(), .step = step, .tag = tag, .value = (float)value };
    TRY(tfevent_tag_check(tag, &r.tag_len));
    return tfevent_append(w, &r);
}

status tfevent_histogram(tfevent *w, int64_t step, const char *tag, const tfevent_histo *h)
{
    tf_record r = { .wall_time = wall_now(), .step = step, .tag = tag, .h = h };
    TRY(tfevent_tag_check(tag, &r.tag_len));
    if (h->n < 1 || h->n > TFEVENT_HISTO_MAX) {
        log_warn("tensorboard: histogram '%s' has %d buckets (1 to %d)", tag, h->n, TFEVENT_HISTO_MAX);
        return STATUS_INPUT;
    }
    return tfevent_append(w, &r);
}

status tfevent_close(tfevent *w)
{
    if (!w) return STATUS_OK;
    status st = tfevent_flush(w);
    if (close(w->fd) != 0 && st == STATUS_OK) {  /* NFS reports a failed write-back here */
        log_warn("tensorboard: closing %s failed: %s", w->path, strerror(errno));
        st = STATUS_IO;
    }
    free(w->buf);
    free(w);
    return st;
}

/* ---- TensorFlow's default buckets ---- */

int tfevent_default_limits(double *limit)
{
    double pos[TFEVENT_DEFAULT_BUCKETS / 2];
    int n = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1) pos[n++] = v;  /* 774 edges, each the product rounded */
    pos[n++] = DBL_MAX;
    int k = 0;
    for (int i = n - 1; i >= 0; i--) limit[k++] = -pos[i];
    limit[k++] = 0.0;
    for (int i = 0; i < n; i++) limit[k++] = pos[i];
    CHECK(k == TFEVENT_DEFAULT_BUCKETS, "TensorFlow's default histogram has 1551 buckets");
    return k;
}

int tfevent_bucket(const double *limit, int n, double v, int guess)
{
    if (isnan(v)) return n - 1;
    int k = guess < 0 ? 0 : guess >= n ? n - 1 : guess;
    for (int walk = 0; walk < 4; walk++) {  /* near the guess: a few comparisons */
        if (k > 0 && v < limit[k - 1]) k--;
        else if (k < n - 1 && v >= limit[k]) k++;
        else return k;
    }
    int lo = 0, hi = n - 1;  /* else the first edge above v (upper_bound), the last bucket at most */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (v < limit[mid]) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}
