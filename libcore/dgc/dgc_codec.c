/* dgc_codec — the messages of DGC-Pro's sparse exchange (dgc.h).
 *
 * Layout (little-endian):
 *   0   u8  kind: 0 dense, 1 sparse
 *   1   u8  values: 0 fp32, 1 fp16 (sparse entries only; dense values are fp32)
 *   2   u8  width: bits per index gap, 0..32
 *   3   u8  0
 *   4   u32 count: sparse entries (dense: 0)
 *   8   u64 ndense: fp32 values that follow the header (dense: every element of the
 *           range; sparse: the elements of the tensors sent dense, in order)
 *   16  ndense fp32 values
 *       sparse: count gaps packed at `width` bits (gap_0 = idx_0, gap_j = idx_j -
 *       idx_{j-1} - 1), ceil(count * width / 8) bytes, then count values.
 * A gap of width w costs w bits where a plain index costs 32: at 0.1% density the
 * gaps average ~1000, 10-11 bits. */
#include "dgc.h"

#include <string.h>

enum { KIND_DENSE = 0, KIND_SPARSE = 1 };

static unsigned bits_for(uint32_t x)
{
    return x ? 32u - (unsigned)__builtin_clz(x) : 0u;
}

static uint32_t gap_width(const uint32_t *idx, size_t count)
{
    uint32_t worst = 0, prev = 0;
    for (size_t j = 0; j < count; j++) {
        uint32_t gap = j ? idx[j] - prev - 1 : idx[0];
        if (gap > worst) worst = gap;
        prev = idx[j];
    }
    return bits_for(worst);
}

static size_t value_bytes(dgc_values vk)
{
    return vk == DGC_VALUES_FP16 ? 2 : 4;
}

size_t dgc_sparse_msg_bytes(size_t ndense, const uint32_t *idx, size_t count, dgc_values vk)
{
    size_t w = gap_width(idx, count);
    return DGC_MSG_HEADER + ndense * 4 + (count * w + 7) / 8 + count * value_bytes(vk);
}

float dgc_round_value(float v, dgc_values vk)
{
    return vk == DGC_VALUES_FP16 ? (float)(_Float16)v : v;
}

static void put_header(uint8_t *out, int kind, dgc_values vk, uint32_t width, uint32_t count, uint64_t ndense)
{
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)vk;
    out[2] = (uint8_t)width;
    out[3] = 0;
    memcpy(out + 4, &count, 4);
    memcpy(out + 8, &ndense, 8);
}

size_t dgc_encode_dense(uint8_t *out, const float *vals, size_t n)
{
    put_header(out, KIND_DENSE, DGC_VALUES_FP32, 0, 0, n);
    memcpy(out + DGC_MSG_HEADER, vals, n * 4);
    return DGC_MSG_HEADER + n * 4;
}

size_t dgc_encode_sparse(uint8_t *out, const float *dense_vals, size_t ndense, const uint32_t *idx,
                         const float *val, size_t count, dgc_values vk)
{
    uint32_t w = gap_width(idx, count);
    put_header(out, KIND_SPARSE, vk, w, (uint32_t)count, ndense);
    uint8_t *p = out + DGC_MSG_HEADER;
    if (ndense) memcpy(p, dense_vals, ndense * 4);
    p += ndense * 4;
    /* Gaps, LSB first, through a 64-bit accumulator. */
    uint64_t acc = 0;
    unsigned have = 0;
    uint32_t prev = 0;
    for (size_t j = 0; j < count && w; j++) {
        uint64_t gap = j ? idx[j] - prev - 1 : idx[0];
        prev = idx[j];
        acc |= gap << have;
        have += w;
        while (have >= 8) {
            *p++ = (uint8_t)acc;
            acc >>= 8;
            have -= 8;
        }
    }
    if (have) *p++ = (uint8_t)acc;
    if (vk == DGC_VALUES_FP16) {
        for (size_t j = 0; j < count; j++) {
            _Float16 h = (_Float16)val[j];
            memcpy(p + 2 * j, &h, 2);
        }
        p += 2 * count;
    } else {
        memcpy(p, val, count * 4);
        p += 4 * count;
    }
    return (size_t)(p - out);
}

status dgc_decode_add(const uint8_t *msg, size_t len, float *acc, size_t n, const size_t *runs, int nruns,
                      uint64_t *touched)
{
    if (len < DGC_MSG_HEADER) return STATUS_CORRUPT;
    uint32_t count;
    uint64_t ndense;
    memcpy(&count, msg + 4, 4);
    memcpy(&ndense, msg + 8, 8);
    const uint8_t *p = msg + DGC_MSG_HEADER;
    if (msg[0] == KIND_DENSE) {
        if (ndense != n || len != DGC_MSG_HEADER + n * 4) return STATUS_CORRUPT;
        for (size_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, p + 4 * i, 4);
            acc[i] += v;
        }
        return STATUS_OK;
    }
    unsigned w = msg[2];
    if (msg[0] != KIND_SPARSE || msg[1] > DGC_VALUES_FP16 || w > 32) return STATUS_CORRUPT;
    size_t vb = msg[1] == DGC_VALUES_FP16 ? 2 : 4;
    size_t want_dense = 0;
    for (int r = 0; r < nruns; r++) want_dense += runs[2 * r + 1] - runs[2 * r];
    size_t packed = ((size_t)count * w + 7) / 8;
    if (ndense != want_dense || len != DGC_MSG_HEADER + ndense * 4 + packed + (size_t)count * vb)
        return STATUS_CORRUPT;
    for (int r = 0; r < nruns; r++)
        for (size_t i = runs[2 * r]; i < runs[2 * r + 1]; i++) {
            float v;
            memcpy(&v, p, 4);
            p += 4;
            acc[i] += v;
        }
    const uint8_t *vals = p + packed;
    uint64_t bits = 0;
    unsigned have = 0;
    uint64_t at = 0;
    const uint64_t mask = w == 32 ? 0xffffffffu : ((uint64_t)1 << w) - 1;
    for (uint32_t j = 0; j < count; j++) {
        uint64_t gap = 0;
        if (w) {
            while (have < w) {
                bits |= (uint64_t)*p++ << have;
                have += 8;
            }
            gap = bits & mask;
            bits >>= w;
            have -= w;
        }
        at += gap + (j ? 1 : 0);
        if (at >= n) return STATUS_CORRUPT;
        float v;
        if (vb == 2) {
            _Float16 h;
            memcpy(&h, vals + 2 * j, 2);
            v = (float)h;
        } else {
            memcpy(&v, vals + 4 * j, 4);
        }
        acc[at] += v;
        if (touched) touched[at >> 6] |= (uint64_t)1 << (at & 63);
    }
    return STATUS_OK;
}
