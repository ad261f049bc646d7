/* fed/secagg — secure aggregation of federated updates: the server learns the sum of the
 * clients' fixed-point updates and nothing else, and the sum survives clients that drop
 * out mid-round (Bonawitz, Ivanov, Kreuter, Marcedone, McMahan, Patel, Ramage, Segal,
 * Seth, "Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017,
 * figure 4, the honest-but-curious variant). libsodium supplies X25519, BLAKE2b,
 * ChaCha20 and ChaCha20-Poly1305.
 *
 * The one design decision: this module turns inputs into byte messages and messages back
 * into state, and does nothing else. No MPI, no I/O, no clocks: the round engine (fed/)
 * routes the bytes, decides who dropped (whose message did not arrive) and calls these
 * functions; every message has a fixed layout and a size the engine computes in advance
 * (fed_secagg_*_bytes). Every function that parses a message treats it as hostile: sizes,
 * kinds, rounds, ids and counts are checked against what the receiver knows, never
 * trusted.
 *
 * One round r, threshold t (2 <= t <= n), client ids u >= 1, distinct:
 *   0 advertise   client: fed_secagg_client_init, _advertise -> (c_pk, s_pk, commit(b))
 *                 server: fed_secagg_server_roster(adverts) -> roster U1, sorted by id,
 *                 sent to every client of U1; client: fed_secagg_client_roster
 *   1 share       client: fed_secagg_client_share -> one AEAD ciphertext per other member
 *                 of U1, in roster order, holding its shares of s_sk and b; the server
 *                 routes each to its recipient (fed_secagg_share_route);
 *                 client: fed_secagg_client_receive_share, once per ciphertext.
 *                 U2 = the clients whose ciphertexts the server routed.
 *   2 mask        client: fed_secagg_encode, then fed_secagg_client_mask ->
 *                 y_u = x_u + PRG(b_u) + sum_{v in U2, v != u} sign(u, v) PRG(s_uv)
 *                 (mod 2^64), sign +1 for u < v, -1 for u > v. The client's U2 is the set
 *                 of senders whose shares it received, and itself; the message carries a
 *                 digest of it. U3 = the clients whose masked vectors arrived.
 *   3 unmask      server: fed_secagg_server_request(U3, U2 \ U3) -> one request, sent to
 *                 every client of U3; client: fed_secagg_client_reveal -> its share of b_v
 *                 for each v in U3 and of s_sk_v for each v in U2 \ U3 (once per round,
 *                 never both for one v); server: fed_secagg_server_unmask(>= t reveals)
 *                 -> sum over U3 of x_u (mod 2^64); fed_secagg_decode.
 *
 * Keys and seeds: c (X25519) encrypts the shares, s (X25519) agrees the pairwise seeds,
 * b (32 bytes) seeds the self mask; all fresh per round. With (a, b) = the pair of ids in
 * ascending order:
 *   AEAD key(u -> v) = BLAKE2b-256[key "nebula/fed/secagg/share-key/v1"](X25519(c_sk_u,
 *                      c_pk_v) | c_pk_u | c_pk_v | round | u | v), one key per direction;
 *                      nonce = u | v | round mod 2^32 (LE32 each; the key binds the full
 *                      round, so a (key, nonce) pair is never reused);
 *                      additional data = the message's clear header (kind, u, round, v)
 *   s_uv             = BLAKE2b-256[key "nebula/fed/secagg/pair-seed/v1"](X25519(s_sk_u,
 *                      s_pk_v) | s_pk_a | s_pk_b | round | a | b): the same for u and v
 *   PRG(k)           = ChaCha20 (64-bit nonce: 0 for b, 1 for s_uv) keystream under key k,
 *                      read as little-endian uint64, element i from bytes 8i..8i+7
 *   commit(b_u)      = BLAKE2b-256[key "nebula/fed/secagg/commit-b/v1"](b_u | round | u)
 *   digest(U2)       = BLAKE2b-256[key "nebula/fed/secagg/u2-set/v1"](round | U2's ids,
 *                      ascending)
 * The commitment is Nebula's addition to the paper: the server checks every reconstructed
 * b_v against commit(b_v) and every reconstructed s_sk_v against s_pk_v, so a wrong share
 * (a tampered reveal, a lying client) is refused with STATUS_CORRUPT, never turned into a
 * wrong sum. b has 256 bits of entropy, so the commitment hides it.
 *
 * Shamir sharing (fed_shamir.c): over GF(p), p = 2^61 - 1; a 32-byte secret is 5 limbs
 * of 7, 7, 7, 7 and 4 bytes (little-endian), each shared with its own random polynomial
 * of degree t - 1 evaluated at x = the holder's id; a share is 5 field elements, 8 bytes
 * LE each (40 bytes). A limb that reconstructs out of its range (>= 2^56, or >= 2^32 for
 * the last) is refused: fewer than t or wrong shares give one with overwhelming
 * probability.
 *
 * Threat model, as in the paper's section 6.1 for the honest-but-curious server: the
 * engine's channels are authenticated (MPI between ranks of one job). An actively lying
 * server is out of scope: the roster is not signed, and nothing stops it from sending
 * different survivors different unmask requests (the paper's malicious-server variant
 * adds a signed consistency round for that; it is not implemented). What holds against
 * hostile bytes: a client refuses a roster without its own entry, a share
 * not addressed to it or failing authentication, a second share from one sender, and an
 * unmask request that is not a partition of its U2 into U3 and dropped, lists itself as
 * dropped, names fewer than t survivors, or comes after one it already answered (so no
 * v ever has both b_v and s_sk_v revealed by it).
 *
 * Wire layouts (all integers little-endian; every message starts with the 16-byte header
 * kind u32 | sender u32 (0: the server) | round u64):
 *   advertise   header | c_pk 32 | s_pk 32 | commit 32                       112 bytes
 *   roster      n advertise messages, ids strictly ascending                   112 n
 *   share       header | to u32 | ChaCha20-Poly1305-IETF(share of s_sk 40 | share of
 *               b 40) 96 (ciphertext and tag)                                116 bytes
 *   masked      header | n2 u32 | 0 u32 | digest(U2) 32 | y (d) u64         56 + 8 d
 *   request     header | n3 u32 | ndrop u32 | U3 ids (n3) | dropped ids (ndrop), each
 *               list strictly ascending                           24 + 4 (n3 + ndrop)
 *   reveal      header | count u32 | 0 u32 | count x (id u32 | share 40), in the
 *               request's order (U3, then dropped)                      24 + 44 count
 *
 * Status codes: STATUS_CORRUPT for bytes that fail a format or authenticity check (size,
 * kind, round, an id not in the roster, a field element >= p, AEAD failure, a
 * reconstruction that fails its commitment); STATUS_PEER for well-formed messages that
 * disagree with the receiver's view of the round (a roster without this client's own
 * advertisement, digest(U2) differs, a masked vector missing or twice, a request that
 * reveals both secrets of one client or is not a partition of U2, a second request);
 * STATUS_INPUT for fewer than t of something, a call out of protocol order, and the
 * caller's own arguments (output size, ids, values to encode); STATUS_NOMEM; STATUS_IO
 * when libsodium cannot start. Each refusal is logged once, naming the message and id.
 * NULL pointers with a non-zero size are bugs (die). */
#ifndef NEBULA_FED_SECAGG_H
#define NEBULA_FED_SECAGG_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#define FED_SECAGG_KEY_BYTES    32          /* X25519 keys, seeds, digests */
#define FED_SECAGG_SHARE_SECRET 40          /* one Shamir share of a 32-byte secret */
#define FED_SECAGG_MAX_CLIENTS  (1u << 20)  /* most members of a roster (bounds allocations) */
#define FED_SECAGG_MAX_D        (UINT64_C(1) << 40)  /* most elements of a vector (sizes fit) */
#define FED_SECAGG_MAX_FRAC     62          /* most fractional bits of the fixed point */

/* One client's state for one round: keys, seeds, the roster it saw, the shares it holds.
 * Opaque: it holds secrets; fed_secagg_client_free wipes them. */
typedef struct fed_secagg_client fed_secagg_client;

/* ---- message sizes (bytes; fixed by the layouts above) ---------------------------- */

size_t fed_secagg_advertise_bytes(void);
/* The roster of n members (n advertise messages). */
size_t fed_secagg_roster_bytes(size_t n);
/* One share ciphertext; a client of an n-member roster sends n - 1 of them. */
size_t fed_secagg_share_bytes(void);
/* A masked vector of d elements (d <= FED_SECAGG_MAX_D). */
size_t fed_secagg_masked_bytes(size_t d);
/* The unmask request naming n3 survivors and ndrop dropped clients. */
size_t fed_secagg_request_bytes(size_t n3, size_t ndrop);
/* One client's reveal for a request naming n2 = n3 + ndrop clients. */
size_t fed_secagg_reveal_bytes(size_t n2);

/* ---- client ---------------------------------------------------------------------- */

/* A new client `id` (>= 1) for `round` with threshold t (>= 2): fresh keys and b from
 * the system's randomness (randombytes_buf). Calls sodium_init (idempotent). */
status fed_secagg_client_init(fed_secagg_client **c, uint64_t round, uint32_t id, uint32_t t);
/* The same with every random byte (keys, b, the sharing polynomials) drawn from `seed`
 * (32 bytes, randombytes_buf_deterministic): for tests and reproducible simulations
 * only; whoever knows the seed knows the client's update. */
status fed_secagg_client_init_seeded(fed_secagg_client **c, uint64_t round, uint32_t id, uint32_t t,
                                     const uint8_t seed[FED_SECAGG_KEY_BYTES]);
/* Wipes every secret (sodium_memzero) and frees; NULL is a no-op. */
void fed_secagg_client_free(fed_secagg_client *c);

/* Round 0: writes the advertisement (out_len = fed_secagg_advertise_bytes()). */
status fed_secagg_client_advertise(const fed_secagg_client *c, uint8_t *out, size_t out_len);
/* Round 0: takes the roster U1 the server forwarded. Refused: a size that is not a
 * multiple of an advertisement, more than FED_SECAGG_MAX_CLIENTS, ids not strictly
 * ascending or 0, another round, no entry equal to this client's own advertisement,
 * fewer than t members. */
status fed_secagg_client_roster(fed_secagg_client *c, const uint8_t *roster, size_t len);
/* Round 1: the ciphertexts of this client's shares for every other roster member, in
 * roster order (out_len = (n - 1) * fed_secagg_share_bytes()); keeps its own share. */
status fed_secagg_client_share(fed_secagg_client *c, uint8_t *out, size_t out_len);
/* Round 1: takes one ciphertext addressed to this client; authenticates and decrypts it
 * and keeps the two shares. Refused: wrong size, kind or round, a sender not in the
 * roster or this client itself, another recipient, a second share from one sender,
 * AEAD failure (STATUS_CORRUPT), a share after this client masked. */
status fed_secagg_client_receive_share(fed_secagg_client *c, const uint8_t *msg, size_t len);
/* Round 2: masks the encoded update x (d elements mod 2^64, fed_secagg_encode) over
 * U2 = this client and every sender of a share it received (at least t);
 * out_len = fed_secagg_masked_bytes(d). After this, U2 is frozen. */
status fed_secagg_client_mask(fed_secagg_client *c, const uint64_t *x, size_t d, uint8_t *out, size_t out_len);
/* Round 3: answers the server's unmask request (see the refusals above) with the shares
 * it holds; out_len = fed_secagg_reveal_bytes(n3 + ndrop). Answers once per round. */
status fed_secagg_client_reveal(fed_secagg_client *c, const uint8_t *request, size_t request_len,
                                uint8_t *out, size_t out_len);

/* ---- server ---------------------------------------------------------------------- */

/* Round 0: the roster from n advertisements concatenated in any order (len = n *
 * fed_secagg_advertise_bytes(), the same as roster_len): checked (kind, round, id >= 1,
 * no id twice), sorted by id, written to roster. */
status fed_secagg_server_roster(uint64_t round, const uint8_t *adverts, size_t len, uint8_t *roster,
                                size_t roster_len);
/* Round 1: who sends a share ciphertext to whom (for routing); checks the size, kind and
 * that sender and recipient differ, not the ciphertext. */
status fed_secagg_share_route(const uint8_t *msg, size_t len, uint32_t *from, uint32_t *to);
/* Round 3: the request naming the survivors u3 (n3, those whose masked vectors arrived)
 * and the dropped clients drop (ndrop, in U2 but not U3), in any order; written sorted.
 * Refused: an id 0, an id twice in one list or in both. */
status fed_secagg_server_request(uint64_t round, const uint32_t *u3, size_t n3, const uint32_t *drop,
                                 size_t ndrop, uint8_t *out, size_t out_len);

/* What the server unmasks from. */
typedef struct fed_secagg_unmask_in {
    uint64_t round;           /* the round being unmasked */
    uint32_t t;               /* the threshold the clients were given */
    size_t d;                 /* elements per vector */
    const uint8_t *roster;    /* U1 as sent to the clients (fed_secagg_server_roster) */
    size_t roster_len;        /* bytes */
    const uint8_t *request;   /* the unmask request sent to U3 (fed_secagg_server_request) */
    size_t request_len;       /* bytes */
    const uint8_t *masked;    /* one masked vector from each member of U3, concatenated, any order */
    size_t masked_len;        /* bytes: n3 * fed_secagg_masked_bytes(d) */
    const uint8_t *reveals;   /* the reveal messages that arrived, concatenated, any order */
    size_t reveals_len;       /* bytes: k * fed_secagg_reveal_bytes(n3 + ndrop), k >= t */
} fed_secagg_unmask_in;

/* Round 3: sum (d) = the sum over U3 of the clients' encoded inputs, mod 2^64. Secrets
 * are reconstructed from the first t reveals in the order given; each is checked (b_v
 * against its commitment, s_sk_v against s_pk_v) before use. Refused: fewer than t
 * reveals (STATUS_INPUT), a masked vector missing, twice or over another U2
 * (STATUS_PEER), any malformed message or failed check (STATUS_CORRUPT). On a refusal
 * sum holds zeros (untouched when d or t itself is out of range). */
status fed_secagg_server_unmask(const fed_secagg_unmask_in *in, uint64_t *sum);

/* ---- fixed point ----------------------------------------------------------------- */

/* out[i] = (uint64)(int64)round(x[i] * 2^frac_bits) (two's complement; round half away
 * from zero), for a sum of at most n_max (>= 1) such vectors: refused (STATUS_INPUT,
 * naming the element and value) when x[i] is not finite or |round(x[i] 2^f)| * n_max
 * >= 2^63, so the sum of n_max encodings never wraps. 0 <= frac_bits <= 62. */
status fed_secagg_encode(uint64_t *out, const float *x, size_t d, int frac_bits, uint32_t n_max);
/* out[i] = (int64)sum[i] / 2^frac_bits: exact while |(int64)sum[i]| <= 2^53, so the
 * decoded sum of fixed-point values is their exact sum. */
void fed_secagg_decode(double *out, const uint64_t *sum, size_t d, int frac_bits);

#endif
