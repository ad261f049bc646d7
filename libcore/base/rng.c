/* rng — Philox4x32-10 streams keyed by seed, addressed by (rank, purpose, step,
 * position). See rng.h for the counter layout; this file only implements it.
 * No file-scope mutable state: an rng is all the state there is. */
#include "rng.h"

#include <math.h>
#include <stddef.h>

#define PHILOX_M0 UINT32_C(0xD2511F53)  /* round multipliers (Salmon et al. 2011, Table 2) */
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)  /* Weyl key increments: golden ratio, sqrt(3) - 1 */
#define PHILOX_W1 UINT32_C(0xBB67AE85)
#define PHILOX_ROUNDS 10

#define RNG_BLOCK_NONE UINT64_MAX       /* buf_block when buf holds nothing */

_Static_assert(sizeof(rng_state) == 32, "rng_state is stored as raw bytes in checkpoints");
_Static_assert(RNG_STREAM_LEN / 4 == (UINT64_C(1) << 40), "40 block bits in the counter");

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int i = 0; i < PHILOX_ROUNDS; i++) {
        /* One round: two 32x32->64 products, then a Feistel-like swap with the key. */
        uint64_t p0 = (uint64_t)PHILOX_M0 * x0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
        uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x1 = (uint32_t)p1;
        x3 = (uint32_t)p0;
        x0 = y0;
        x2 = y2;
        k0 += PHILOX_W0;  /* the bump after the last round is unused */
        k1 += PHILOX_W1;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

/* Philox output for one block of r's stream (the layout documented in rng.h). */
static void rng_block(const rng *r, uint64_t block, uint32_t out[4])
{
    const uint32_t key[2] = { (uint32_t)r->seed, (uint32_t)(r->seed >> 32) };
    const uint32_t ctr[4] = {
        (uint32_t)block,
        r->rank,
        (uint32_t)r->step,
        (uint32_t)(r->step >> 32) | (uint32_t)(block >> 32) << 16 | r->purpose << 24,
    };
    philox4x32_10(ctr, key, out);
}

void rng_init(rng *r, uint64_t seed, uint32_t rank, uint32_t purpose, uint64_t step)
{
    CHECK(purpose < RNG_PURPOSE_LIMIT, "rng purposes have 8 bits in the counter (see rng.h)");
    CHECK(step < RNG_STEP_LIMIT, "rng steps have 48 bits in the counter (see rng.h)");
    r->seed = seed;
    r->step = step;
    r->pos = 0;
    r->buf_block = RNG_BLOCK_NONE;
    r->rank = rank;
    r->purpose = purpose;
    for (int i = 0; i < 4; i++) r->buf[i] = 0;
}

uint32_t rng_u32(rng *r)
{
    uint64_t block = r->pos >> 2;
    if (block != r->buf_block) {
        CHECK(r->pos < RNG_STREAM_LEN,
              "stream exhausted (2^42 outputs); draw from a new step or purpose instead");
        rng_block(r, block, r->buf);
        r->buf_block = block;
    }
    return r->buf[r->pos++ & 3];
}

uint64_t rng_u64(rng *r)
{
    uint64_t lo = rng_u32(r);
    uint64_t hi = rng_u32(r);
    return lo | hi << 32;
}

float rng_uniform(rng *r)
{
    return rng_u32_to_float(rng_u32(r));
}

double rng_uniform_double(rng *r)
{
    return rng_u64_to_double(rng_u64(r));
}

void rng_normal2(rng *r, float *z0, float *z1)
{
    /* u1 in (0, 1] so the log is finite; theta in [0, 2 pi). */
    double u1 = ((double)rng_u32(r) + 1.0) * 0x1p-32;
    double theta = 6.283185307179586476925 * ((double)rng_u32(r) * 0x1p-32);
    double radius = sqrt(-2.0 * log(u1));
    *z0 = (float)(radius * cos(theta));
    if (z1 != NULL) *z1 = (float)(radius * sin(theta));
}

float rng_normal(rng *r)
{
    float z0;
    rng_normal2(r, &z0, NULL);
    return z0;
}

uint32_t rng_below(rng *r, uint32_t n)
{
    CHECK(n > 0, "rng_below needs a non-empty range [0, n)");
    /* Lemire: the high word of x * n is uniform on [0, n) once the low words
     * below 2^32 mod n (the bias-causing ones) are rejected. The modulo is only
     * computed in the rare case the low word is below n. */
    uint64_t m = (uint64_t)rng_u32(r) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)-n % n;  /* 2^32 mod n */
        while (low < threshold) {
            m = (uint64_t)rng_u32(r) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void rng_skip(rng *r, uint64_t n)
{
    CHECK(n <= RNG_STREAM_LEN - r->pos,
          "rng_skip past the end of the stream (2^42 outputs); use a new step or purpose");
    r->pos += n;  /* the buffer refills lazily when pos leaves buf_block */
}

rng_state rng_save(const rng *r)
{
    return (rng_state){
        .seed = r->seed, .step = r->step, .pos = r->pos, .rank = r->rank, .purpose = r->purpose,
    };
}

status rng_restore(rng *r, const rng_state *st)
{
    if (st->purpose >= RNG_PURPOSE_LIMIT || st->step >= RNG_STEP_LIMIT ||
        st->pos > RNG_STREAM_LEN) {
        log_error("rng state is invalid (purpose %u, step %llu, position %llu): "
                  "the checkpoint holding it is corrupt",
                  (unsigned)st->purpose, (unsigned long long)st->step,
                  (unsigned long long)st->pos);
        return STATUS_CORRUPT;
    }
    rng_init(r, st->seed, st->rank, st->purpose, st->step);
    rng_skip(r, st->pos);
    return STATUS_OK;
}
