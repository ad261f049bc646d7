/* fed/secagg_impl — what fed_secagg.c and fed_shamir.c share: the message kinds and the
 * parts of the layouts both read (secagg.h), little-endian byte access, the masks'
 * keystream, and Shamir's secret sharing of 32-byte secrets over GF(2^61 - 1) (Shamir,
 * "How to Share a Secret", CACM 1979) with the server's reconstruction from reveal
 * messages.
 *
 * The one design decision: a 32-byte secret is 5 limbs of 7, 7, 7, 7 and 4 bytes
 * (little-endian), each below 2^56 < p, each shared with its own polynomial; so a
 * reconstruction from fewer than t or from wrong shares is caught with overwhelming
 * probability by the range check of the limbs (a uniform value of GF(p) lands in range
 * with probability 2^-5 per 7-byte limb and 2^-29 for the last: 2^-49 for all five),
 * and the protocol adds a cryptographic check on top (secagg.h). The sharing is a pure
 * function of (secret, coefficient seed, t, x): the random coefficients come from a
 * ChaCha20 keystream under a seed the caller draws, so the client evaluates the same
 * polynomial at every x without storing it. */
#ifndef NEBULA_FED_SECAGG_IMPL_H
#define NEBULA_FED_SECAGG_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#define FED_SHAMIR_P      ((UINT64_C(1) << 61) - 1)  /* the Mersenne prime 2^61 - 1 */
#define FED_SHAMIR_LIMBS  5                          /* limbs of a 32-byte secret */
#define FED_SHAMIR_BYTES  40                         /* a packed share: 5 x 8 bytes LE */

#define HDR           16                          /* every message: kind | sender | round */
#define REVEAL_HDR    (HDR + 8)                   /* header | count | 0: 24 */
#define REVEAL_ENTRY  (4 + FED_SHAMIR_BYTES)      /* id | share: 44 */

/* Message kinds: "SA" and a number, little-endian. */
enum { MSG_ADVERTISE = 0x53410001, MSG_SHARE, MSG_MASKED, MSG_REQUEST, MSG_REVEAL };

/* The header of a message `what` has this kind and round: STATUS_CORRUPT, logged,
 * otherwise (fed_secagg.c). */
status secagg_check_header(const uint8_t *p, uint32_t kind, uint64_t round, const char *what);

static inline void secagg_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void secagg_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t secagg_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t secagg_get64(const uint8_t *p)
{
    return (uint64_t)secagg_get32(p) | (uint64_t)secagg_get32(p + 4) << 32;
}

/* The position of id in a list of n strictly ascending LE32 ids, or SIZE_MAX. */
static inline size_t secagg_find_id(const uint8_t *list, size_t n, uint32_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (secagg_get32(list + 4 * mid) < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && secagg_get32(list + 4 * lo) == id ? lo : SIZE_MAX;
}

/* The share at x (1 <= x < p; the holder's id) of the 32-byte secret under threshold t
 * (>= 1): y[l] = secret limb l + sum_{k=1}^{t-1} a_{l,k} x^k (mod p), where a_{l,k} is
 * the 128-bit little-endian word l (t - 1) + k - 1 of the ChaCha20 keystream (nonce 0)
 * under coef_seed, reduced mod p (statistical distance from uniform < 2^-66 each).
 * Keep coef_seed secret and use it for one secret only. */
void fed_shamir_share(const uint8_t secret[32], const uint8_t coef_seed[32], uint32_t t, uint32_t x,
                      uint64_t y[FED_SHAMIR_LIMBS]);

/* The Lagrange weights at 0 of the k points x (distinct, non-zero):
 * lambda[j] = prod_{m != j} x_m / (x_m - x_j) mod p. STATUS_CORRUPT, logged, for a
 * repeated or zero x. */
status fed_shamir_lagrange0(const uint32_t *x, size_t k, uint64_t *lambda);

/* The secret from k shares y (k x FED_SHAMIR_LIMBS) with the weights of their x:
 * limb l = sum_j lambda[j] y[j][l] (mod p). STATUS_CORRUPT (not logged: the caller names
 * whose secret) when a limb is out of its range, which fewer than t or wrong shares give
 * with probability 1 - 2^-49; secret is then zeroed. */
status fed_shamir_combine(const uint64_t *lambda, const uint64_t (*y)[FED_SHAMIR_LIMBS], size_t k,
                          uint8_t secret[32]);

/* A share to and from its 40 wire bytes; unpack refuses an element >= p (STATUS_CORRUPT,
 * not logged). */
void fed_shamir_pack(uint8_t out[FED_SHAMIR_BYTES], const uint64_t y[FED_SHAMIR_LIMBS]);
status fed_shamir_unpack(uint64_t y[FED_SHAMIR_LIMBS], const uint8_t in[FED_SHAMIR_BYTES]);

/* acc[i] +-= PRG(key)[first + i] for i < n, mod 2^64 (negate: -=), PRG = the ChaCha20
 * keystream under key with the 64-bit nonce `which` (LE), read as LE uint64; first is a
 * multiple of 8 (a 64-byte keystream block holds 8 elements). Wipes its keystream. */
void secagg_prg_add(uint64_t *acc, size_t n, uint64_t first, const uint8_t key[32], uint64_t which, bool negate);

/* The server's reconstruction (fed_shamir.c): the n2 secrets a request names (ids: its
 * lists as sent, n3 survivors then the dropped, LE32 each), secrets (n2 x 32 bytes) =
 * b_v for the survivors, s_sk_v for the dropped. Checks every reveal message (size, kind,
 * round, a sender in U3 and once, the count, each entry's id in the request's order,
 * elements < p) and uses the first t of them. STATUS_INPUT for fewer than t reveals;
 * STATUS_CORRUPT, naming the client, for a malformed reveal or a secret that does not
 * reconstruct. The caller checks each secret cryptographically. */
status fed_shamir_reveals(const uint8_t *reveals, size_t len, uint64_t round, uint32_t t, const uint8_t *ids,
                          size_t n3, size_t n2, uint8_t *secrets);

#endif
