/* test_tfevent — the TensorBoard event writer (libcore/record/tfevent.h): CRC-32C known
 * answers (RFC 3720 B.4 and the "123456789" check value), TFRecord's mask, protobuf
 * varints, TensorFlow's default buckets and the bucket search, and a written file read
 * back here with a decoder of its own: framing and both CRCs of every record, the
 * file_version record, a scalar's tag, step and float value, a histogram's fields with
 * its empty runs merged, and enough records to pass through several buffer flushes.
 * TensorBoard's own reader checks the trainer's files (validation/cli/test_tensorboard.sh).
 * One line per check, exit 1 on any failure. */
#include "record/tfevent.h"

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct tally {
    int passed;  /* checks that held */
    int failed;  /* checks that did not */
} tally;

__attribute__((format(printf, 3, 4)))
static bool check(tally *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) t->passed++;
    else t->failed++;
    return ok;
}

static void test_crc(tally *t)
{
    uint8_t zeros[32] = { 0 }, ascending[32];
    for (int i = 0; i < 32; i++) ascending[i] = (uint8_t)i;
    check(t, tfevent_crc32c("123456789", 9) == 0xE3069283u, "CRC-32C(\"123456789\") = 0xE3069283 (got 0x%08X)",
          tfevent_crc32c("123456789", 9));
    check(t, tfevent_crc32c(zeros, 32) == 0x8A9136AAu, "CRC-32C of 32 zero bytes = 0x8A9136AA (RFC 3720 B.4)");
    check(t, tfevent_crc32c(ascending, 32) == 0x46DD794Eu, "CRC-32C of bytes 0..31 = 0x46DD794E (RFC 3720 B.4)");
    check(t, tfevent_crc32c("", 0) == 0, "CRC-32C of nothing = 0");
    /* ((c >> 15) | (c << 17)) + 0xa282ead8 by hand for c = 0xE3069283 */
    check(t, tfevent_mask_crc(0xE3069283u) == 0xC78AB0E5u, "masked CRC of 0xE3069283 = 0xC78AB0E5 (got 0x%08X)",
          tfevent_mask_crc(0xE3069283u));
    check(t, tfevent_mask_crc(tfevent_crc32c(zeros, 8)) == 0x07980329u,
          "masked CRC of a zero length field (an empty record's header) = 0x07980329");
}

static void test_varint(tally *t)
{
    static const struct { uint64_t v; size_t n; uint8_t b[10]; } cases[] = {
        { 0, 1, { 0x00 } },
        { 1, 1, { 0x01 } },
        { 127, 1, { 0x7f } },
        { 128, 2, { 0x80, 0x01 } },
        { 300, 2, { 0xac, 0x02 } },
        { 16384, 3, { 0x80, 0x80, 0x01 } },
        { UINT64_MAX, 10, { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t out[10];
        size_t n = tfevent_varint(out, cases[i].v);
        check(t, n == cases[i].n && memcmp(out, cases[i].b, n) == 0, "varint of %llu: %zu bytes as protobuf writes it",
              (unsigned long long)cases[i].v, cases[i].n);
    }
}

static void test_buckets(tally *t)
{
    static double lim[TFEVENT_DEFAULT_BUCKETS];
    int n = tfevent_default_limits(lim), mid = n / 2;
    bool ascending = true;
    for (int i = 1; i < n; i++) ascending &= lim[i - 1] < lim[i];
    check(t, n == 1551 && lim[0] == -DBL_MAX && lim[n - 1] == DBL_MAX && lim[mid] == 0 && lim[mid + 1] == 1e-12 &&
          lim[mid - 1] == -1e-12 && ascending,
          "default buckets: 1551 ascending edges -DBL_MAX .. -1e-12, 0, 1e-12 .. DBL_MAX");
    check(t, lim[n - 2] < 1e20 && lim[n - 2] * 1.1 >= 1e20 && fabs(lim[mid + 2] / lim[mid + 1] - 1.1) < 1e-12,
          "default buckets: steps of 1.1 up to the last edge below 1e20 (%.6g)", lim[n - 2]);
    /* the bucket k of v: limit[k-1] <= v < limit[k], from any guess */
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  /* xorshift64 */
        double v = (i % 2 ? -1 : 1) * pow(10.0, (double)(x % 4000) / 100.0 - 15.0);
        if (i % 7 == 0) v = lim[x % (uint64_t)n];  /* exactly on an edge: the bucket above it */
        int k = tfevent_bucket(lim, n, v, (int)(x >> 40) % n);
        if (!((k == 0 || lim[k - 1] <= v) && (v < lim[k] || k == n - 1))) bad++;
    }
    check(t, bad == 0, "bucket search: limit[k-1] <= v < limit[k] for 20000 values from random guesses (%d wrong)", bad);
    check(t, tfevent_bucket(lim, n, 0.0, 0) == mid + 1 && tfevent_bucket(lim, n, NAN, 3) == n - 1 &&
          tfevent_bucket(lim, n, INFINITY, 0) == n - 1 && tfevent_bucket(lim, n, -INFINITY, n - 1) == 0,
          "bucket search: 0 in [0, 1e-12), NaN and +inf in the last bucket, -inf in the first");
}

/* ---- a decoder of our own for reading the file back ---- */

typedef struct rd {
    const uint8_t *p, *end;
    bool bad;
} rd;

static uint64_t rd_varint(rd *r)
{
    uint64_t v = 0;
    for (int s = 0; s < 70; s += 7) {
        if (r->p >= r->end) break;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    r->bad = true;
    return 0;
}

static uint64_t rd_le(rd *r, int bytes)
{
    uint64_t v = 0;
    if (r->end - r->p < bytes) {
        r->bad = true;
        return 0;
    }
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    return v;
}

static double rd_double(rd *r)
{
    uint64_t u = rd_le(r, 8);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* The next field: its number and wire type, and for length-delimited fields a reader of it. */
static bool rd_field(rd *r, int *field, int *wire, rd *sub)
{
    if (r->p >= r->end || r->bad) return false;
    uint64_t key = rd_varint(r);
    *field = (int)(key >> 3), *wire = (int)(key & 7);
    if (*wire == 2) {
        uint64_t n = rd_varint(r);
        if ((uint64_t)(r->end - r->p) < n) return r->bad = true, false;
        *sub = (rd){ r->p, r->p + n, false };
        r->p += n;
    }
    return !r->bad;
}

typedef struct decoded {
    double wall_time;
    int64_t step;
    char file_version[64], tag[300];
    float simple_value;
    bool has_histo;
    double min, max, num, sum, sum_squares;
    int nlimit, ncount;
    double limit[8], count[8];
} decoded;

static void decode_histo(rd h, decoded *d)
{
    int f, w;
    rd sub;
    d->has_histo = true;
    while (rd_field(&h, &f, &w, &sub)) {
        if (f >= 1 && f <= 5 && w == 1) {
            double v = rd_double(&h);
            double *dst[] = { &d->min, &d->max, &d->num, &d->sum, &d->sum_squares };
            *dst[f - 1] = v;
        } else if ((f == 6 || f == 7) && w == 2) {
            while (sub.p < sub.end) {
                double v = rd_double(&sub);
                if (f == 6 && d->nlimit < 8) d->limit[d->nlimit++] = v;
                if (f == 7 && d->ncount < 8) d->count[d->ncount++] = v;
            }
        } else {
            h.bad = true;
        }
    }
}

static bool decode_event(rd e, decoded *d)
{
    memset(d, 0, sizeof *d);
    int f, w;
    rd sub;
    while (rd_field(&e, &f, &w, &sub)) {
        if (f == 1 && w == 1) d->wall_time = rd_double(&e);
        else if (f == 2 && w == 0) d->step = (int64_t)rd_varint(&e);
        else if (f == 3 && w == 2)
            snprintf(d->file_version, sizeof d->file_version, "%.*s", (int)(sub.end - sub.p), sub.p);
        else if (f == 5 && w == 2) {
            int vf, vw;
            rd value, x;
            if (!rd_field(&sub, &vf, &vw, &value) || vf != 1 || vw != 2) return false;  /* one Value */
            while (rd_field(&value, &vf, &vw, &x)) {
                if (vf == 1 && vw == 2) snprintf(d->tag, sizeof d->tag, "%.*s", (int)(x.end - x.p), x.p);
                else if (vf == 2 && vw == 5) {
                    uint32_t u = (uint32_t)rd_le(&value, 4);
                    memcpy(&d->simple_value, &u, sizeof u);
                } else if (vf == 5 && vw == 2) decode_histo(x, d);
                else return false;
            }
            if (value.bad) return false;
        } else return false;
    }
    return !e.bad;
}

/* Reads every record of path (checking the framing and both CRCs); returns how many, -1 when one is bad. */
static int read_records(const char *path, decoded *out, int cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static uint8_t buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    rd r = { buf, buf + n, false };
    int k = 0;
    decoded scratch;
    while (r.p < r.end) {
        const uint8_t *hdr = r.p;
        uint64_t len = rd_le(&r, 8);
        uint32_t hcrc = (uint32_t)rd_le(&r, 4);
        if (r.bad || hcrc != tfevent_mask_crc(tfevent_crc32c(hdr, 8)) || (uint64_t)(r.end - r.p) < len + 4) return -1;
        const uint8_t *data = r.p;
        r.p += len;
        uint32_t dcrc = (uint32_t)rd_le(&r, 4);
        if (dcrc != tfevent_mask_crc(tfevent_crc32c(data, len))) return -1;
        if (!decode_event((rd){ data, data + len, false }, k < cap ? &out[k] : &scratch)) return -1;
        k++;
    }
    return k;
}

/* The one event file the writer made in dir. */
static bool only_file(const char *dir, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) found++, snprintf(path, cap, "%s/%s", dir, e->d_name);
    if (d) closedir(d);
    return found == 1;
}

static void test_round_trip(tally *t)
{
    const char *tmp = getenv("TMPDIR");
    char dir[256], sub[320], path[640];
    snprintf(dir, sizeof dir, "%s/test_tfevent.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!check(t, mkdtemp(dir) != NULL, "a temporary directory")) return;
    snprintf(sub, sizeof sub, "%s/tb/run", dir);
    tfevent *w;
    if (!check(t, tfevent_open(&w, sub) == STATUS_OK, "open creates %s and an event file", "tb/run")) return;
    const double lim[6] = { 1, 2, 3, 4, 5, 6 }, cnt[6] = { 0, 0, 3, 0, 0, 1 };
    tfevent_histo h = { .min = 2.5, .max = 5.5, .num = 4, .sum = 13, .sum_squares = 49,
                        .n = 6, .limit = lim, .count = cnt };
    bool ok = tfevent_scalar(w, 7, "train/loss", 2.5) == STATUS_OK &&
              tfevent_histogram(w, 8, "grad/h.0", &h) == STATUS_OK &&
              tfevent_scalar(w, -3, "x", 0.1) == STATUS_OK;
    check(t, ok && tfevent_scalar(w, 1, "", 1) == STATUS_INPUT, "records accepted; an empty tag is refused");
    check(t, tfevent_close(w) == STATUS_OK, "close flushes and closes");
    const char *base = only_file(sub, path, sizeof path) ? strrchr(path, '/') + 1 : "";
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char want[400];
    snprintf(want, sizeof want, ".%s.%ld.0", host, (long)getpid());
    check(t, strlen(base) > 31 && strspn(base + 20, "0123456789") == 10 && strstr(base, want) != NULL,
          "one file named events.out.tfevents.<10-digit seconds>.<host>.<pid>.0 (%s)", base);
    decoded d[4];
    int n = read_records(path, d, 4);
    check(t, n == 4, "4 records, every length and data CRC-32C right (%d)", n);
    if (n != 4) return;
    check(t, !strcmp(d[0].file_version, "brain.Event:2") && d[0].wall_time > 1.6e9,
          "first record: file_version brain.Event:2 with a wall time");
    check(t, d[1].step == 7 && !strcmp(d[1].tag, "train/loss") && d[1].simple_value == 2.5f && !d[1].has_histo,
          "scalar: step 7, tag train/loss, simple_value 2.5 (float)");
    const double want_lim[4] = { 2, 3, 5, 6 }, want_cnt[4] = { 0, 3, 0, 1 };
    check(t, d[2].has_histo && d[2].step == 8 && !strcmp(d[2].tag, "grad/h.0") && d[2].min == 2.5 && d[2].max == 5.5 &&
          d[2].num == 4 && d[2].sum == 13 && d[2].sum_squares == 49,
          "histogram: step, tag, min, max, num, sum, sum_squares");
    check(t, d[2].nlimit == 4 && d[2].ncount == 4 && !memcmp(d[2].limit, want_lim, sizeof want_lim) &&
          !memcmp(d[2].count, want_cnt, sizeof want_cnt),
          "histogram: packed edges and counts, each run of empty buckets merged into one (as TensorFlow writes them)");
    check(t, d[3].step == -3 && d[3].simple_value == 0.1f, "a negative step and a float32-rounded value read back");
    /* many large records: the buffer goes to the file several times */
    static double dl[TFEVENT_DEFAULT_BUCKETS], dc[TFEVENT_DEFAULT_BUCKETS];
    int nb = tfevent_default_limits(dl);
    for (int i = 0; i < nb; i++) dc[i] = 1;
    tfevent_histo full = { .min = -1, .max = 1, .num = nb, .n = nb, .limit = dl, .count = dc };
    snprintf(sub, sizeof sub, "%s/tb2", dir);
    ok = tfevent_open(&w, sub) == STATUS_OK;
    for (int s = 0; ok && s < 60; s++) ok = tfevent_histogram(w, s, "weight/all", &full) == STATUS_OK;
    ok = ok && tfevent_close(w) == STATUS_OK;
    n = ok && only_file(sub, path, sizeof path) ? read_records(path, NULL, 0) : -1;
    check(t, n == 61, "60 histograms of 1551 buckets (1.5 MB, several buffer flushes) read back whole (%d records)", n);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
}

int main(void)
{
    tally t = { 0, 0 };
    test_crc(&t);
    test_varint(&t);
    test_buckets(&t);
    test_round_trip(&t);
    printf("%d passed, %d failed\n", t.passed, t.failed);
    return t.failed ? 1 : 0;
}
