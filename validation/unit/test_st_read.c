/* test_st_read — the safetensors reader: bit-exact round trips through st_write,
 * exact F16/BF16 widening of every 16-bit pattern, the dtypes it parses, and a
 * table of hostile files built here (truncations at every length, lying or
 * overlapping offsets, absurd shapes, bad JSON and UTF-8, duplicate names, ...).
 *
 * Every hostile file must be refused with STATUS_INPUT and one message that names
 * the file and says what is wrong; none may crash (validation/fuzz replays the
 * fuzzers' finds under the sanitizers). Runs without mpirun. One line per check,
 * exit 1 on any failure. */
#include "ckpt/tool/safetensors.h"
#include "../check.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A safetensors file from its parts: the 8-byte length field (`len`, normally the
 * header's own length), the header bytes, then `data_len` bytes 0, 1, 2, ... */
static void write_st(const char *path, uint64_t len, const char *header, size_t header_len, size_t data_len)
{
    size_t n = 8 + header_len + data_len;
    unsigned char *buf = malloc(n);
    if (!buf) { perror("malloc"); exit(1); }
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(len >> (8 * b));
    memcpy(buf + 8, header, header_len);
    for (size_t i = 0; i < data_len; i++) buf[8 + header_len + i] = (unsigned char)i;
    write_bytes(path, buf, n);
    free(buf);
}

/* st_open of path must fail with STATUS_INPUT and a message naming the path and
 * holding `expect`. */
static void expect_refused(test_ctx *t, const char *path, const char *what, const char *expect)
{
    st_file f;
    capture_begin(t);
    status st = st_open(&f, path);
    const char *msg = capture_end(t, true);
    bool ok = st == STATUS_INPUT && strstr(msg, path) && strstr(msg, expect) && f.fd == -1 && !f.tensors;
    check(t, ok, "refused: %s -> %s%s%s", what, status_str(st), ok ? "" : "; message: ", ok ? "" : msg);
    if (st == STATUS_OK) st_close(&f);
}

static bool same_bits(const float *a, const float *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

/* st_write -> st_open: names, shapes, metadata and every bit of every value
 * (NaN payloads, -0, infinities, subnormals) come back; a scalar and an empty
 * tensor included; lookups by name, including a miss. */
static void test_round_trip(test_ctx *t)
{
    char path[128];
    snprintf(path, sizeof path, "%s/round.safetensors", t->dir);
    float a[6] = { 1.5f, -0.0f, INFINITY, -INFINITY, 1e-45f, 3.0f };
    uint32_t nan_bits = 0x7fc01234u;
    memcpy(&a[5], &nan_bits, sizeof nan_bits);
    float b[60], s = 42.0f;
    for (int i = 0; i < 60; i++) b[i] = (float)i * 0.25f - 7.0f;
    st_tensor ts[] = {
        { "layer.b", 3, { 3, 4, 5 }, b },
        { "a", 2, { 2, 3 }, a },
        { "scalar", 0, { 0 }, &s },
        { "empty", 2, { 0, 7 }, b },
    };
    status st = st_write(path, ts, 4, "{\"format\":\"pt\",\"step\":\"12\"}");
    check(t, st == STATUS_OK, "st_write of 4 tensors with metadata");
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    check(t, access(tmp, F_OK) != 0, "no temporary file is left behind");

    st_file f;
    if (!check(t, st_open(&f, path) == STATUS_OK, "st_open of st_write's file")) return;
    check(t, f.count == 4 && f.meta_count == 2, "4 tensors and 2 metadata pairs (got %d, %d)", f.count, f.meta_count);
    check(t, st_meta_get(&f, "format") && !strcmp(st_meta_get(&f, "format"), "pt") &&
             !strcmp(st_meta_get(&f, "step"), "12") && !st_meta_get(&f, "missing"), "metadata values by key");
    for (int i = 0; i < 4; i++) {
        const st_info *in = st_find(&f, ts[i].name);
        bool ok = in && !strcmp(in->name, ts[i].name) && in->dtype == ST_DTYPE_F32 && in->ndim == ts[i].ndim;
        uint64_t numel = 1;
        for (int d = 0; ok && d < ts[i].ndim; d++) {
            ok = in->shape[d] == ts[i].shape[d];
            numel *= (uint64_t)ts[i].shape[d];
        }
        ok = ok && in->numel == numel && in->bytes == numel * 4;
        float got[60];
        memset(got, 0xa5, sizeof got);
        ok = ok && st_read_f32(&f, in, got, (size_t)numel) == STATUS_OK && same_bits(got, ts[i].data, (size_t)numel);
        check(t, ok, "tensor '%s': dtype, shape and %llu values bit-exact", ts[i].name, (unsigned long long)numel);
    }
    check(t, st_find(&f, "nope") == NULL && st_find(&f, "") == NULL, "st_find of absent names is NULL");
    bool ordered = true;
    for (int i = 1; i < f.count; i++) ordered &= f.tensors[i - 1].offset <= f.tensors[i].offset;
    check(t, ordered && f.tensors[0].offset == f.data_start, "tensors are listed in data order from data_start");

    float small[6];
    capture_begin(t);
    st = st_read_f32(&f, st_find(&f, "layer.b"), small, 6);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "layer.b") && strstr(msg, "60 elements"),
          "st_read_f32 with the wrong element count is STATUS_INPUT naming the tensor");
    st_close(&f);
    check(t, f.fd == -1 && f.tensors == NULL && f.count == 0, "st_close leaves an empty handle");

    capture_begin(t);
    st = st_write("/nonexistent-dir/x.safetensors", ts, 1, NULL);
    msg = capture_end(t, true);
    check(t, st == STATUS_IO && strstr(msg, "/nonexistent-dir/x.safetensors"),
          "st_write into a missing directory is STATUS_IO naming the path");
}

/* A Nebula parameter table through st_add_table, read back into a second flat
 * buffer by name: bit-exact, and the padding between tensors is not written. */
static void test_table_round_trip(test_ctx *t)
{
    param_table pt;
    param_table_init(&pt);
    st_name name;
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "block.%d.weight", i);
        param_add(&pt, name, i, true, 2, (size_t)(i % 5 + 1), (size_t)(i % 3 + 2), 0, 0);
    }
    float *src = calloc(pt.total, sizeof *src), *dst = calloc(pt.total, sizeof *dst);
    for (int i = 0; i < pt.count; i++)
        for (size_t k = 0; k < pt.entries[i].count; k++) src[pt.entries[i].offset + k] = (float)(i * 1000 + (int)k);
    st_tensor ts[40];
    st_name names[40];
    int n = st_add_table(ts, 0, names, &pt, "model.", src);
    char path[128];
    snprintf(path, sizeof path, "%s/table.safetensors", t->dir);
    st_file f;
    bool ok = st_write(path, ts, n, NULL) == STATUS_OK && st_open(&f, path) == STATUS_OK;
    for (int i = 0; ok && i < pt.count; i++) {
        snprintf(name, sizeof name, "model.%s", pt.entries[i].name);
        const st_info *in = st_find(&f, name);
        ok = in && st_read_f32(&f, in, dst + pt.entries[i].offset, pt.entries[i].count) == STATUS_OK;
    }
    check(t, ok && same_bits(src, dst, pt.total) && f.count == 40,
          "40-tensor table -> safetensors -> table is bit-exact (found by name)");
    if (ok) st_close(&f);
    free(src);
    free(dst);
    param_table_free(&pt);
}

/* Independent reference: the IEEE binary16 value of h in double. */
static double f16_value(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(1024 + man, exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Every F16 and BF16 pattern, widened by st_read_f32, against the definition. */
static void test_half_widening(test_ctx *t)
{
    char path[128], header[256];
    snprintf(path, sizeof path, "%s/halves.safetensors", t->dir);
    int hl = snprintf(header, sizeof header,
                      "{\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[256,256],\"data_offsets\":[131072,262144]}}");
    uint16_t *data = malloc(2 * 65536 * sizeof *data);
    for (int i = 0; i < 65536; i++) data[i] = data[65536 + i] = (uint16_t)i;
    unsigned char *buf = malloc(8 + (size_t)hl + 262144);
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(buf + 8, header, (size_t)hl);
    memcpy(buf + 8 + hl, data, 262144);
    write_bytes(path, buf, 8 + (size_t)hl + 262144);
    free(buf);
    free(data);

    st_file f;
    if (!check(t, st_open(&f, path) == STATUS_OK, "st_open of an F16 + BF16 file")) return;
    float *got = malloc(65536 * sizeof *got);
    const st_info *h = st_find(&f, "h"), *b = st_find(&f, "b");
    int bad = 0;
    if (st_read_f32(&f, h, got, 65536) != STATUS_OK) bad = -1;
    for (int i = 0; i < 65536 && bad >= 0; i++) {
        double want = f16_value((uint16_t)i);
        uint32_t bits;
        memcpy(&bits, &got[i], sizeof bits);
        if (isnan(want)) bad += !isnan(got[i]) || (bits & 0x7fffffu) != (uint32_t)(i & 0x3ff) << 13 ||
                               (bits >> 31) != (uint32_t)(i >> 15);
        else bad += (double)got[i] != want || !signbit(got[i]) != !signbit(want);
    }
    check(t, bad == 0, "F16: all 65536 patterns widen exactly (NaN payload and sign kept): %d wrong", bad);
    bad = 0;
    if (st_read_f32(&f, b, got, 65536) != STATUS_OK) bad = -1;
    for (int i = 0; i < 65536 && bad >= 0; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], sizeof bits);
        bad += bits != (uint32_t)i << 16;
    }
    check(t, bad == 0 && b->ndim == 2 && b->numel == 65536, "BF16: all 65536 patterns are the top half: %d wrong", bad);
    free(got);
    st_close(&f);
}

/* Every dtype of the spec parses with its element size; the non-float ones are
 * refused by st_read_f32 with a message, not read as floats. */
static void test_dtypes(test_ctx *t)
{
    static const struct { const char *name; size_t size; } dt[] = {
        { "BOOL", 1 }, { "U8", 1 }, { "I8", 1 }, { "F8_E5M2", 1 }, { "F8_E4M3", 1 }, { "I16", 2 }, { "U16", 2 },
        { "F16", 2 }, { "BF16", 2 }, { "I32", 4 }, { "U32", 4 }, { "F32", 4 }, { "F64", 8 }, { "I64", 8 },
        { "U64", 8 },
    };
    char path[128], header[2048];
    snprintf(path, sizeof path, "%s/dtypes.safetensors", t->dir);
    size_t n = (size_t)snprintf(header, sizeof header, "{"), off = 0;
    for (size_t i = 0; i < sizeof dt / sizeof dt[0]; i++) {
        n += (size_t)snprintf(header + n, sizeof header - n, "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[3],"
                              "\"data_offsets\":[%zu,%zu]}", i ? "," : "", dt[i].name, dt[i].name, off,
                              off + 3 * dt[i].size);
        off += 3 * dt[i].size;
    }
    n += (size_t)snprintf(header + n, sizeof header - n, "}");
    write_st(path, n, header, n, off);
    st_file f;
    if (!check(t, st_open(&f, path) == STATUS_OK, "st_open of a file holding every dtype")) return;
    bool ok = f.count == (int)(sizeof dt / sizeof dt[0]);
    for (size_t i = 0; ok && i < sizeof dt / sizeof dt[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "t_%s", dt[i].name);
        const st_info *in = st_find(&f, name);
        ok = in && !strcmp(st_dtype_name(in->dtype), dt[i].name) && st_dtype_size(in->dtype) == dt[i].size &&
             in->bytes == 3 * dt[i].size;
    }
    check(t, ok, "each of the 15 dtypes parses with its name and element size");
    float got[3];
    capture_begin(t);
    status st = st_read_f32(&f, st_find(&f, "t_U64"), got, 3);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "t_U64") && strstr(msg, "U64") && strstr(msg, path),
          "st_read_f32 of a U64 tensor is STATUS_INPUT naming file, tensor and dtype");
    st_close(&f);
}

/* I64 and I32 tensors (torchvision's num_batches_tracked) read as float32 while
 * float32 holds them exactly, |v| <= 2^24; a larger one is refused, naming it. */
static void test_integers(test_ctx *t)
{
    char path[128];
    snprintf(path, sizeof path, "%s/ints.safetensors", t->dir);
    const char header[] = "{\"a\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
                          "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
    const int64_t a[3] = { 0, 1234567, -(1 << 24) };
    const int32_t b[2] = { 5, (1 << 24) + 1 };
    size_t hl = sizeof header - 1;
    unsigned char buf[8 + sizeof header + 32];
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, a, sizeof a);
    memcpy(buf + 8 + hl + sizeof a, b, sizeof b);
    write_bytes(path, buf, 8 + hl + 32);
    st_file f;
    if (!check(t, st_open(&f, path) == STATUS_OK, "st_open of I64 and I32 tensors")) return;
    float got[3] = { -1, -1, -1 };
    status st = st_read_f32(&f, st_find(&f, "a"), got, 3);
    check(t, st == STATUS_OK && got[0] == 0.0f && got[1] == 1234567.0f && got[2] == -16777216.0f,
          "I64 values up to 2^24 read as float32 exactly: %g %g %g", got[0], got[1], got[2]);
    capture_begin(t);
    st = st_read_f32(&f, st_find(&f, "b"), got, 2);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(msg, "'b'") && strstr(msg, "16777217") && strstr(msg, "element 1"),
          "an I32 value above 2^24 is refused naming tensor, value and element: %s", msg);
    st_close(&f);
}

/* Files the spec allows that a careless reader might refuse. */
static void test_accepted(test_ctx *t)
{
    static const struct { const char *what, *header; size_t data; int count; } ok_cases[] = {
        { "empty header {} and no data", "{}", 0, 0 },
        { "header padded with spaces", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}     ", 2, 1 },
        { "tensors listed out of data order",
          "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
          "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 4, 2 },
        { "empty tensors at the start and the end",
          "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
          "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
          "\"y\":{\"dtype\":\"F64\",\"shape\":[4,0],\"data_offsets\":[2,2]}}", 2, 3 },
        { "a key the spec does not name is ignored",
          "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"note\":1}}", 1, 1 },
        { "a UTF-8 name and an empty __metadata__",
          "{\"__metadata__\":{},\"caf\\u00e9.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 1 },
    };
    char path[128];
    snprintf(path, sizeof path, "%s/ok.safetensors", t->dir);
    for (size_t i = 0; i < sizeof ok_cases / sizeof ok_cases[0]; i++) {
        size_t hl = strlen(ok_cases[i].header);
        write_st(path, hl, ok_cases[i].header, hl, ok_cases[i].data);
        st_file f;
        status st = st_open(&f, path);
        check(t, st == STATUS_OK && f.count == ok_cases[i].count, "accepted: %s (%d tensors)", ok_cases[i].what,
              st == STATUS_OK ? f.count : -1);
        if (st == STATUS_OK) st_close(&f);
    }
}

#define T1(dt, shape, offs) "{\"t\":{\"dtype\":" dt ",\"shape\":" shape ",\"data_offsets\":" offs "}}"

typedef struct hostile {
    const char *what;    /* the lie */
    const char *header;  /* header bytes */
    size_t header_len;   /* 0: strlen(header) */
    size_t data;         /* bytes after the header */
    const char *expect;  /* text the message must hold */
} hostile;

static const hostile hostiles[] = {
    { "header not starting with '{'", "[1,2]", 0, 0, "begins with byte 0x5b" },
    { "leading space before '{'", " {}", 0, 0, "begins with byte 0x20" },
    { "truncated JSON", "{\"t\":{\"dtype\":", 0, 0, "not valid JSON" },
    { "trailing garbage after the object", "{} x", 0, 0, "not valid JSON" },
    { "NUL padding instead of spaces", "{}\0\0\0\0\0\0", 8, 0, "not valid JSON" },
    { "invalid UTF-8 in a name", "{\"\xff\xfe\":{}}", 0, 0, "not valid JSON" },
    { "overlong UTF-8 encoding of '/'", "{\"a\xc0\xaf\":{}}", 0, 0, "not valid JSON" },
    { "UTF-16 surrogate half in a name", "{\"\xed\xa0\x80\":{}}", 0, 0, "not valid JSON" },
    { "escaped NUL in a name", "{\"a\\u0000b\":{}}", 0, 0, "not valid JSON" },
    { "raw NUL byte in a name", "{\"a\0b\":{}}", 10, 0, "not valid JSON" },
    { "duplicate tensor names",
      "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 0, 2, "duplicate" },
    { "integer beyond 64 bits", T1("\"U8\"", "[1]", "[0,99999999999999999999]"), 0, 1, "not valid JSON" },
    { "__metadata__ an array", "{\"__metadata__\":[]}", 0, 0, "__metadata__ is an array" },
    { "__metadata__ value a number", "{\"__metadata__\":{\"k\":1}}", 0, 0, "key 'k' holds an integer" },
    { "__metadata__ nested object", "{\"__metadata__\":{\"k\":{}}}", 0, 0, "metadata values must be strings" },
    { "empty tensor name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, "empty name" },
    { "control character in a name", "{\"a\\nb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1,
      "control character 0x0a at byte 1" },
    { "tensor described by a string", "{\"t\":\"F32\"}", 0, 0, "described by a string" },
    { "missing dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, "dtype is missing" },
    { "unknown dtype", T1("\"F33\"", "[1]", "[0,4]"), 0, 4, "dtype is a string 'F33'" },
    { "lower-case dtype", T1("\"f32\"", "[1]", "[0,4]"), 0, 4, "it must be one of BOOL" },
    { "dtype a number", T1("4", "[1]", "[0,4]"), 0, 4, "dtype is an integer" },
    { "missing shape", "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 0, 1, "shape is missing" },
    { "shape an integer", T1("\"U8\"", "1", "[0,1]"), 0, 1, "shape is an integer" },
    { "shape of 9 dimensions", T1("\"U8\"", "[1,1,1,1,1,1,1,1,1]", "[0,1]"), 0, 1, "at most 8" },
    { "negative dimension", T1("\"U8\"", "[2,-1]", "[0,1]"), 0, 1, "shape[1] is a negative integer" },
    { "real dimension", T1("\"U8\"", "[2.0]", "[0,2]"), 0, 2, "shape[0] is a real number" },
    { "string dimension", T1("\"U8\"", "[\"2\"]", "[0,2]"), 0, 2, "shape[0] is a string" },
    { "shape product beyond 2^63", T1("\"U8\"", "[4294967296,4294967296]", "[0,1]"), 0, 1, "past 2^63 at shape[1]" },
    { "shape product beyond 2^63 after a zero", T1("\"U8\"", "[0,3037000500,3037000500]", "[0,0]"), 0, 0,
      "past 2^63 at shape[2]" },
    { "bytes beyond 2^64 (2^62 F32)", T1("\"F32\"", "[4611686018427387904]", "[0,4]"), 0, 4, "more than 2^64" },
    { "missing data_offsets", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, 1, "data_offsets is missing" },
    { "data_offsets of 3 values", T1("\"U8\"", "[1]", "[0,1,2]"), 0, 2, "[begin, end]" },
    { "data_offsets an object", T1("\"U8\"", "[1]", "{}"), 0, 1, "data_offsets is an object" },
    { "negative offset", T1("\"U8\"", "[1]", "[-1,0]"), 0, 1, "non-negative byte offsets" },
    { "real offset", T1("\"U8\"", "[1]", "[0.0,1]"), 0, 1, "two non-negative" },
    { "offsets end before they begin", T1("\"U8\"", "[0]", "[4,2]"), 0, 4, "end before they begin" },
    { "offsets beyond the data section", T1("\"U8\"", "[8]", "[0,8]"), 0, 4, "beyond the data section" },
    { "offsets near 2^63", T1("\"U8\"", "[1]", "[9223372036854775806,9223372036854775807]"), 0, 4,
      "beyond the data section" },
    { "offsets span fewer bytes than the shape", T1("\"F32\"", "[2]", "[0,4]"), 0, 4, "hold 4 bytes" },
    { "F16 data sized as F32", T1("\"F16\"", "[2]", "[0,8]"), 0, 8, "needs 4 (2 elements x 2 bytes)" },
    { "overlapping tensors",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 0, 12, "overlaps tensor 'a'" },
    { "two tensors on the same bytes",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 0, 4, "overlaps" },
    { "empty tensor inside another",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
      "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,3]}}", 0, 8, "overlaps" },
    { "hole between tensors",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 0, 12, "data bytes [4, 8) belong to no" },
    { "hole at the start", T1("\"U8\"", "[4]", "[4,8]"), 0, 8, "data bytes [0, 4) belong to no tensor" },
    { "bytes after the last tensor", T1("\"U8\"", "[4]", "[0,4]"), 0, 12, "last 8 bytes" },
    { "data but no tensors", "{}", 0, 3, "last 3 bytes" },
};

/* Deep nesting must be refused by the parser's depth limit, not overflow a stack. */
static void test_deep_nesting(test_ctx *t)
{
    size_t depth = 100000, n = 0;
    char *h = malloc(2 * depth + 64), path[128];
    n += (size_t)sprintf(h, "{\"__metadata__\":");
    for (size_t i = 0; i < depth; i++) h[n++] = '[';
    for (size_t i = 0; i < depth; i++) h[n++] = ']';
    h[n++] = '}';
    snprintf(path, sizeof path, "%s/deep.safetensors", t->dir);
    write_st(path, n, h, n, 0);
    free(h);
    expect_refused(t, path, "100000 nested arrays", "not valid JSON");
}

static void test_hostile(test_ctx *t)
{
    char path[128];
    snprintf(path, sizeof path, "%s/hostile.safetensors", t->dir);
    for (size_t i = 0; i < sizeof hostiles / sizeof hostiles[0]; i++) {
        const hostile *c = &hostiles[i];
        size_t hl = c->header_len ? c->header_len : strlen(c->header);
        write_st(path, hl, c->header, hl, c->data);
        expect_refused(t, path, c->what, c->expect);
    }
    /* The length field itself. */
    write_bytes(path, "", 0);
    expect_refused(t, path, "empty file", "too short");
    write_bytes(path, "\x02\0\0\0\0\0\0", 7);
    expect_refused(t, path, "7-byte file", "too short");
    write_st(path, 0, "", 0, 0);
    expect_refused(t, path, "header length 0", "header length is 0");
    write_st(path, 3, "{}", 2, 0);
    expect_refused(t, path, "header length 1 byte past the end", "beyond the rest of the file");
    write_st(path, UINT64_MAX, "{}", 2, 0);
    expect_refused(t, path, "header length 2^64-1", "beyond the reader's limit");
    write_st(path, ST_HEADER_MAX + 1ull, "{}", 2, 0);
    expect_refused(t, path, "header length 1 past the 100 MB limit", "beyond the reader's limit");
    write_st(path, 1, "{}", 2, 0);
    expect_refused(t, path, "header length cutting the JSON short", "not valid JSON");

    expect_refused(t, "/nonexistent/model.safetensors", "missing file", "cannot be opened");
    expect_refused(t, t->dir, "a directory", "not a regular file");
    test_deep_nesting(t);
}

/* A valid file cut at every length from 0 to one byte short is refused each time. */
static void test_truncations(test_ctx *t)
{
    char full[128], cut[128];
    snprintf(full, sizeof full, "%s/full.safetensors", t->dir);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", t->dir);
    float a[12], b[5];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (int i = 0; i < 5; i++) b[i] = -(float)i;
    st_tensor ts[] = { { "a", 2, { 3, 4 }, a }, { "b", 1, { 5 }, b } };
    if (st_write(full, ts, 2, "{\"k\":\"v\"}") != STATUS_OK) { check(t, false, "st_write for truncations"); return; }
    FILE *f = fopen(full, "rb");
    unsigned char bytes[1024];
    size_t size = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    int accepted = 0, silent = 0;
    for (size_t len = 0; len < size; len++) {
        write_bytes(cut, bytes, len);
        st_file sf;
        capture_begin(t);
        status st = st_open(&sf, cut);
        const char *msg = capture_end(t, false);
        if (st == STATUS_OK) { accepted++; st_close(&sf); }
        else if (st != STATUS_INPUT || !strstr(msg, cut)) silent++;
    }
    check(t, accepted == 0 && silent == 0,
          "truncated at each of %zu lengths: all refused with STATUS_INPUT and a message (%d accepted, %d without)",
          size, accepted, silent);
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "st-read");

    test_round_trip(&t);
    test_table_round_trip(&t);
    test_half_widening(&t);
    test_dtypes(&t);
    test_integers(&t);
    test_accepted(&t);
    test_hostile(&t);
    test_truncations(&t);

    scratch_free(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
