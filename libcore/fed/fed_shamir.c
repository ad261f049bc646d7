/* fed_shamir — the arithmetic of secure aggregation: Shamir's secret sharing of 32-byte
 * secrets over GF(2^61 - 1) and the server's reconstruction from reveal messages
 * (secagg_impl.h), and the arithmetic modulo 2^64: the masks' keystream and the
 * fixed-point encoding of updates (secagg.h).
 *
 * The one design decision: the field is the Mersenne prime p = 2^61 - 1, so a product
 * (< 2^122) reduces with two shifts and adds (2^61 = 1 mod p) and never needs a division;
 * a 32-byte secret fits in 5 limbs below 2^56, and the unused top bits of each limb are
 * the range check that catches a bad reconstruction. Arithmetic on secrets has no
 * secret-dependent branches apart from the final conditional subtractions. */
#include "secagg.h"
#include "secagg_impl.h"

#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define P FED_SHAMIR_P

/* Bytes of each limb: 7, 7, 7, 7, 4 (5 x 7 = 35 >= 32). */
static size_t limb_len(int l)
{
    return l < FED_SHAMIR_LIMBS - 1 ? 7 : 32 - 7 * (FED_SHAMIR_LIMBS - 1);
}

/* a < 2^62 -> a mod p */
static uint64_t gf_fold(uint64_t a)
{
    a = (a & P) + (a >> 61);
    return a >= P ? a - P : a;
}

static uint64_t gf_add(uint64_t a, uint64_t b)
{
    uint64_t r = a + b;  /* < 2^62 */
    return r >= P ? r - P : r;
}

static uint64_t gf_sub(uint64_t a, uint64_t b)
{
    return a >= b ? a - b : a + P - b;
}

/* a, b < p: the product (< 2^122) is hi * 2^61 + lo = hi + lo (mod p). */
static uint64_t gf_mul(uint64_t a, uint64_t b)
{
    __extension__ typedef unsigned __int128 u128;
    u128 m = (u128)a * b;
    return gf_fold(((uint64_t)m & P) + (uint64_t)(m >> 61));
}

/* a^(p-2) = a^-1 for a != 0 (Fermat). */
static uint64_t gf_inv(uint64_t a)
{
    uint64_t r = 1, e = P - 2;
    for (; e; e >>= 1) {
        if (e & 1) r = gf_mul(r, a);
        a = gf_mul(a, a);
    }
    return r;
}

/* A 128-bit little-endian word mod p: lo + hi 2^64, and 2^64 = 8 (mod p). */
static uint64_t gf_from128(const uint8_t w[16])
{
    uint64_t lo = gf_fold((secagg_get64(w) & P) + (secagg_get64(w) >> 61));
    uint64_t hi = gf_fold((secagg_get64(w + 8) & P) + (secagg_get64(w + 8) >> 61));
    return gf_add(lo, gf_mul(hi, 8));
}

void fed_shamir_share(const uint8_t secret[32], const uint8_t coef_seed[32], uint32_t t, uint32_t x,
                      uint64_t y[FED_SHAMIR_LIMBS])
{
    CHECK(t >= 1 && x >= 1, "Shamir shares need t >= 1 and x >= 1");
    static const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = {0};
    uint8_t block[64];          /* keystream block `have`: four 128-bit coefficients */
    uint64_t have = UINT64_MAX;
    uint64_t idx = 0;           /* coefficient index l (t - 1) + k - 1 */
    for (int l = 0; l < FED_SHAMIR_LIMBS; l++) {
        uint64_t acc = 0;
        for (size_t b = limb_len(l); b-- > 0;) acc = acc << 8 | secret[7 * l + b];
        uint64_t xp = 1;        /* x^k */
        for (uint32_t k = 1; k < t; k++, idx++) {
            if (idx / 4 != have) {
                have = idx / 4;
                memset(block, 0, sizeof block);
                crypto_stream_chacha20_xor_ic(block, block, sizeof block, nonce, have, coef_seed);
            }
            xp = gf_mul(xp, x);
            acc = gf_add(acc, gf_mul(gf_from128(block + 16 * (idx % 4)), xp));
        }
        y[l] = acc;
    }
    sodium_memzero(block, sizeof block);
}

status fed_shamir_lagrange0(const uint32_t *x, size_t k, uint64_t *lambda)
{
    for (size_t j = 0; j < k; j++) {
        if (x[j] == 0) {
            log_error("secure aggregation: a share at x = 0 (ids start at 1)");
            return STATUS_CORRUPT;
        }
        uint64_t num = 1, den = 1;
        for (size_t m = 0; m < k; m++) {
            if (m == j) continue;
            if (x[m] == x[j]) {
                log_error("secure aggregation: two shares at x = %u", x[j]);
                return STATUS_CORRUPT;
            }
            num = gf_mul(num, x[m]);
            den = gf_mul(den, gf_sub(x[m], x[j]));
        }
        lambda[j] = gf_mul(num, gf_inv(den));
    }
    return STATUS_OK;
}

status fed_shamir_combine(const uint64_t *lambda, const uint64_t (*y)[FED_SHAMIR_LIMBS], size_t k,
                          uint8_t secret[32])
{
    bool ok = true;
    for (int l = 0; l < FED_SHAMIR_LIMBS; l++) {
        uint64_t acc = 0;
        for (size_t j = 0; j < k; j++) acc = gf_add(acc, gf_mul(lambda[j], y[j][l]));
        ok &= (acc >> (8 * limb_len(l))) == 0;
        for (size_t b = 0; b < limb_len(l); b++) secret[7 * l + b] = (uint8_t)(acc >> (8 * b));
    }
    if (!ok) sodium_memzero(secret, 32);
    return ok ? STATUS_OK : STATUS_CORRUPT;
}

void fed_shamir_pack(uint8_t out[FED_SHAMIR_BYTES], const uint64_t y[FED_SHAMIR_LIMBS])
{
    for (int l = 0; l < FED_SHAMIR_LIMBS; l++) secagg_put64(out + 8 * l, y[l]);
}

status fed_shamir_unpack(uint64_t y[FED_SHAMIR_LIMBS], const uint8_t in[FED_SHAMIR_BYTES])
{
    bool ok = true;
    for (int l = 0; l < FED_SHAMIR_LIMBS; l++) {
        y[l] = secagg_get64(in + 8 * l);
        ok &= y[l] < P;
    }
    return ok ? STATUS_OK : STATUS_CORRUPT;
}

/* Checks one reveal message p against the request (ids, n3 survivors, n2 in all); *who
 * gets its sender's position in U3. */
static status check_reveal(const uint8_t *p, uint64_t round, const uint8_t *ids, size_t n3, size_t n2, size_t *who)
{
    TRY(secagg_check_header(p, MSG_REVEAL, round, "a reveal"));
    uint32_t from = secagg_get32(p + 4);
    *who = secagg_find_id(ids, n3, from);
    if (*who == SIZE_MAX || secagg_get32(p + HDR) != n2) {
        log_error("secure aggregation: a reveal from client %u %s", from,
                  *who == SIZE_MAX ? "(not a survivor)" : "with another count of shares than the request's");
        return STATUS_CORRUPT;
    }
    uint64_t y[FED_SHAMIR_LIMBS];
    for (size_t j = 0; j < n2; j++) {
        const uint8_t *e = p + REVEAL_HDR + REVEAL_ENTRY * j;
        if (secagg_get32(e) != secagg_get32(ids + 4 * j) || fed_shamir_unpack(y, e + 4) != STATUS_OK) {
            log_error("secure aggregation: the reveal of client %u has a bad entry %zu (id %u, request's %u, or a "
                      "value >= 2^61 - 1)", from, j, secagg_get32(e), secagg_get32(ids + 4 * j));
            return STATUS_CORRUPT;
        }
    }
    return STATUS_OK;
}

/* Checks every reveal; x (t) gets the senders of the first t. */
static status check_reveals(const uint8_t *reveals, size_t k, size_t rb, uint64_t round, const uint8_t *ids,
                            size_t n3, size_t n2, uint32_t t, uint32_t *x)
{
    uint8_t *seen = calloc(n3 ? n3 : 1, 1);
    if (!seen) return STATUS_NOMEM;
    status st = STATUS_OK;
    for (size_t r = 0; r < k && st == STATUS_OK; r++) {
        size_t who;
        st = check_reveal(reveals + r * rb, round, ids, n3, n2, &who);
        if (st == STATUS_OK && seen[who]++) {
            log_error("secure aggregation: two reveals from client %u", secagg_get32(ids + 4 * who));
            st = STATUS_CORRUPT;
        }
        if (st == STATUS_OK && r < t) x[r] = secagg_get32(ids + 4 * who);
    }
    free(seen);
    return st;
}

status fed_shamir_reveals(const uint8_t *reveals, size_t len, uint64_t round, uint32_t t, const uint8_t *ids,
                          size_t n3, size_t n2, uint8_t *secrets)
{
    size_t rb = REVEAL_HDR + REVEAL_ENTRY * n2;  /* one reveal */
    size_t k = len / rb;
    if (len % rb != 0) {
        log_error("secure aggregation: %zu bytes of reveals, not a multiple of one reveal's %zu", len, rb);
        return STATUS_CORRUPT;
    }
    if (k < t) {
        log_error("secure aggregation: %zu reveals, fewer than t = %u: the sum stays masked", k, t);
        return STATUS_INPUT;
    }
    uint32_t *x = malloc(t * sizeof *x);
    uint64_t *lambda = malloc(t * sizeof *lambda);
    uint64_t (*y)[FED_SHAMIR_LIMBS] = malloc(t * sizeof *y);
    status st = x && lambda && y ? STATUS_OK : STATUS_NOMEM;
    if (st == STATUS_OK) st = check_reveals(reveals, k, rb, round, ids, n3, n2, t, x);
    if (st == STATUS_OK) st = fed_shamir_lagrange0(x, t, lambda);
    for (size_t j = 0; j < n2 && st == STATUS_OK; j++) {
        for (size_t r = 0; r < t; r++)
            fed_shamir_unpack(y[r], reveals + r * rb + REVEAL_HDR + REVEAL_ENTRY * j + 4);
        if (fed_shamir_combine(lambda, (const uint64_t (*)[FED_SHAMIR_LIMBS])y, t, secrets + 32 * j) != STATUS_OK) {
            log_error("secure aggregation: the shares of client %u's %s do not reconstruct it (a wrong share among "
                      "the first %u reveals)", secagg_get32(ids + 4 * j), j < n3 ? "self-mask seed b" : "key s_sk", t);
            st = STATUS_CORRUPT;
        }
    }
    if (y) sodium_memzero(y, t * sizeof *y);
    free(y);
    free(lambda);
    free(x);
    return st;
}

/* ---- masks and fixed point, modulo 2^64 ---------------------------------------------- */

#define PRG_CHUNK 512  /* elements per keystream call (4 KiB on the stack) */

void secagg_prg_add(uint64_t *acc, size_t n, uint64_t first, const uint8_t key[32], uint64_t which, bool negate)
{
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
    uint8_t ks[8 * PRG_CHUNK];
    CHECK(first % 8 == 0, "a mask starts at a keystream block");
    secagg_put64(nonce, which);
    for (size_t off = 0; off < n; off += PRG_CHUNK) {
        size_t m = n - off < PRG_CHUNK ? n - off : PRG_CHUNK;
        memset(ks, 0, 8 * m);
        crypto_stream_chacha20_xor_ic(ks, ks, 8 * m, nonce, (first + off) / 8, key);
        if (negate)
            for (size_t i = 0; i < m; i++) acc[off + i] -= secagg_get64(ks + 8 * i);
        else
            for (size_t i = 0; i < m; i++) acc[off + i] += secagg_get64(ks + 8 * i);
    }
    sodium_memzero(ks, sizeof ks);
}



status fed_secagg_encode(uint64_t *out, const float *x, size_t d, int frac_bits, uint32_t n_max)
{
    if (frac_bits < 0 || frac_bits > FED_SECAGG_MAX_FRAC || n_max < 1) {
        log_error("secure aggregation: encoding with %d fractional bits for %u summands (0..%d bits, >= 1 summand)",
                  frac_bits, n_max, FED_SECAGG_MAX_FRAC);
        return STATUS_INPUT;
    }
    /* The sum of n_max values of magnitude <= limit stays <= 2^63 - 1: no int64 wrap. */
    const uint64_t limit = (uint64_t)INT64_MAX / n_max;
    for (size_t i = 0; i < d; i++) {
        double r = round(ldexp((double)x[i], frac_bits));  /* exact: a float times a power of two */
        double a = fabs(r);
        if (!isfinite(r) || a >= 0x1p63 || (uint64_t)a > limit) {
            log_error("secure aggregation: element %zu is %g: %s", i, (double)x[i],
                      isfinite(r) ? "|x| 2^frac_bits times the number of summands reaches 2^63 (fewer fractional "
                                    "bits, or clip the update)" : "not finite");
            return STATUS_INPUT;
        }
        out[i] = r < 0 ? 0 - (uint64_t)a : (uint64_t)a;
    }
    return STATUS_OK;
}

void fed_secagg_decode(double *out, const uint64_t *sum, size_t d, int frac_bits)
{
    CHECK(frac_bits >= 0 && frac_bits <= FED_SECAGG_MAX_FRAC, "0 <= frac_bits <= FED_SECAGG_MAX_FRAC");
    for (size_t i = 0; i < d; i++) {
        /* two's complement without the implementation-defined uint64 -> int64 cast */
        int64_t v = sum[i] <= (uint64_t)INT64_MAX ? (int64_t)sum[i] : -(int64_t)~sum[i] - 1;
        out[i] = ldexp((double)v, -frac_bits);
    }
}
