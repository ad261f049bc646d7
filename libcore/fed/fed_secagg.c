/* fed_secagg — secure aggregation after Bonawitz et al., CCS 2017 (secagg.h): the
 * client's four rounds, the server's roster, request and unmask, and the fixed point.
 *
 * The one design decision: masks are added and removed in chunks of CHUNK elements
 * straight from the ChaCha20 keystream (secagg_prg_add: the 64-bit-counter variant, so a
 * vector of any length is one stream and element i sits at block i / 8), so neither
 * side holds a d-element mask in memory: the client writes y chunk by chunk into its
 * message, and the server subtracts each reconstructed mask from the running sum in
 * place. The arithmetic (Shamir, the keystream, fixed point) is in fed_shamir.c. Every
 * temporary that held a secret or a mask (DH outputs, keys, keystream, shares) is wiped
 * with sodium_memzero before return. */
#include "secagg.h"
#include "secagg_impl.h"

#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define KB            FED_SECAGG_KEY_BYTES
#define ADV_BYTES     (HDR + 3 * KB)                      /* 112 */
#define PLAIN_BYTES   (2 * FED_SHAMIR_BYTES)              /* shares of s_sk and b: 80 */
#define SHARE_AD      (HDR + 4)                           /* the clear part: header | to */
#define SHARE_BYTES   (SHARE_AD + PLAIN_BYTES + crypto_aead_chacha20poly1305_ietf_ABYTES)  /* 116 */
#define MASKED_HDR    (HDR + 8 + KB)                      /* header | n2 | 0 | digest: 56 */
#define REQ_HDR       (HDR + 8)                           /* header | n3 | ndrop: 24 */
#define CHUNK         512                                 /* elements masked per pass (4 KiB of acc) */
#define NONCE_SELF    0                                   /* PRG nonce of the self mask */
#define NONCE_PAIR    1                                   /* PRG nonce of the pairwise masks */

/* The client's protocol position; each function accepts one or two. */
enum { PHASE_INIT, PHASE_ROSTER, PHASE_SHARED, PHASE_MASKED, PHASE_DONE };

#define LABEL_SHARE  "nebula/fed/secagg/share-key/v1"
#define LABEL_PAIR   "nebula/fed/secagg/pair-seed/v1"
#define LABEL_COMMIT "nebula/fed/secagg/commit-b/v1"
#define LABEL_U2     "nebula/fed/secagg/u2-set/v1"

_Static_assert(ADV_BYTES == 112 && SHARE_BYTES == 116 && MASKED_HDR == 56, "the layouts of secagg.h");
_Static_assert(FED_SHAMIR_BYTES == FED_SECAGG_SHARE_SECRET, "a packed share");

/* A roster member as one client sees it. */
typedef struct secagg_peer {
    uint32_t id;                          /* >= 1; the peers are sorted by it */
    bool has_share;                       /* its shares arrived (so it is in this client's U2) */
    uint8_t c_pk[KB];                     /* its encryption key */
    uint8_t s_pk[KB];                     /* its mask-agreement key */
    uint64_t s_share[FED_SHAMIR_LIMBS];   /* its share of s_sk at x = this client's id (secret) */
    uint64_t b_share[FED_SHAMIR_LIMBS];   /* its share of b at x = this client's id (secret) */
} secagg_peer;

struct fed_secagg_client {
    uint64_t round;           /* the round this state is for */
    uint32_t id;              /* this client's id, >= 1 */
    uint32_t t;               /* threshold, >= 2 */
    int phase;                /* PHASE_* */
    uint8_t c_sk[KB], c_pk[KB];   /* encryption key pair */
    uint8_t s_sk[KB], s_pk[KB];   /* mask-agreement key pair */
    uint8_t b[KB];            /* self-mask seed */
    uint8_t commit[KB];       /* commit(b), advertised */
    uint8_t coef[2][KB];      /* polynomial seeds of the sharings of s_sk [0] and b [1] */
    size_t n;                 /* roster members, this client included */
    size_t self;              /* this client's index in peers */
    secagg_peer *peers;       /* (n) the roster, sorted by id */
};

/* ---- primitives --------------------------------------------------------------------- */

static status sodium_ready(void)
{
    if (sodium_init() < 0) {
        log_error("secure aggregation: libsodium could not start (sodium_init failed)");
        return STATUS_IO;
    }
    return STATUS_OK;
}

static void put_header(uint8_t *p, uint32_t kind, uint32_t sender, uint64_t round)
{
    secagg_put32(p, kind);
    secagg_put32(p + 4, sender);
    secagg_put64(p + 8, round);
}

status secagg_check_header(const uint8_t *p, uint32_t kind, uint64_t round, const char *what)
{
    if (secagg_get32(p) == kind && secagg_get64(p + 8) == round) return STATUS_OK;
    log_error("secure aggregation: %s from %u has kind 0x%08x and round %" PRIu64 ", not 0x%08x and %" PRIu64, what,
              secagg_get32(p + 4), secagg_get32(p), secagg_get64(p + 8), kind, round);
    return STATUS_CORRUPT;
}

static void hash_begin(crypto_generichash_state *st, const char *label)
{
    crypto_generichash_init(st, (const uint8_t *)label, strlen(label), KB);
}

/* Hashes v as `bytes` (4 or 8) little-endian bytes. */
static void hash_le(crypto_generichash_state *st, uint64_t v, int bytes)
{
    uint8_t b[8];
    secagg_put64(b, v);
    crypto_generichash_update(st, b, (size_t)bytes);
}

/* The key agreed by X25519(own_sk, peer_pk) between clients id1 and id2: BLAKE2b keyed with
 * label over the DH output, pk1, pk2, the round, id1 and id2, the pairs swapped first when
 * `ascending` and id2 < id1 (so both sides of a pair seed agree; an AEAD key keeps its
 * direction from -> to). */
static status agree(uint8_t out[KB], const char *label, const uint8_t own_sk[KB], const uint8_t peer_pk[KB],
                    uint64_t round, uint32_t id1, const uint8_t pk1[KB], uint32_t id2, const uint8_t pk2[KB],
                    bool ascending)
{
    uint8_t dh[crypto_scalarmult_BYTES];
    if (crypto_scalarmult(dh, own_sk, peer_pk) != 0) {
        log_error("secure aggregation: no key agreement between clients %u and %u (a low-order public key)", id1, id2);
        return STATUS_CORRUPT;
    }
    bool swap = ascending && id2 < id1;
    crypto_generichash_state st;
    hash_begin(&st, label);
    crypto_generichash_update(&st, dh, sizeof dh);
    crypto_generichash_update(&st, swap ? pk2 : pk1, KB);
    crypto_generichash_update(&st, swap ? pk1 : pk2, KB);
    hash_le(&st, round, 8);
    hash_le(&st, swap ? id2 : id1, 4);
    hash_le(&st, swap ? id1 : id2, 4);
    crypto_generichash_final(&st, out, KB);
    sodium_memzero(dh, sizeof dh);
    sodium_memzero(&st, sizeof st);
    return STATUS_OK;
}

static void share_nonce(uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], uint64_t round,
                        uint32_t from, uint32_t to)
{
    secagg_put32(nonce, from);
    secagg_put32(nonce + 4, to);
    secagg_put32(nonce + 8, (uint32_t)round);
}

static void commit_b(uint8_t out[KB], const uint8_t b[KB], uint64_t round, uint32_t id)
{
    crypto_generichash_state st;
    hash_begin(&st, LABEL_COMMIT);
    crypto_generichash_update(&st, b, KB);
    hash_le(&st, round, 8);
    hash_le(&st, id, 4);
    crypto_generichash_final(&st, out, KB);
    sodium_memzero(&st, sizeof st);
}

/* digest(U2) of the ids (n2, strictly ascending). */
static void u2_digest(uint8_t out[KB], uint64_t round, const uint32_t *ids, size_t n2)
{
    crypto_generichash_state st;
    hash_begin(&st, LABEL_U2);
    hash_le(&st, round, 8);
    for (size_t i = 0; i < n2; i++) hash_le(&st, ids[i], 4);
    crypto_generichash_final(&st, out, KB);
}

/* ---- sizes -------------------------------------------------------------------------- */

size_t fed_secagg_advertise_bytes(void) { return ADV_BYTES; }
size_t fed_secagg_share_bytes(void) { return SHARE_BYTES; }

/* Counts and lengths are capped (secagg.h), so no size overflows. */
size_t fed_secagg_roster_bytes(size_t n)
{
    CHECK(n <= FED_SECAGG_MAX_CLIENTS, "a roster holds at most FED_SECAGG_MAX_CLIENTS members");
    return n * ADV_BYTES;
}

size_t fed_secagg_masked_bytes(size_t d)
{
    CHECK(d <= FED_SECAGG_MAX_D, "a vector holds at most FED_SECAGG_MAX_D elements");
    return MASKED_HDR + 8 * d;
}

size_t fed_secagg_request_bytes(size_t n3, size_t ndrop)
{
    CHECK(n3 + ndrop <= 2 * (size_t)FED_SECAGG_MAX_CLIENTS, "a request names at most a roster");
    return REQ_HDR + 4 * (n3 + ndrop);
}

size_t fed_secagg_reveal_bytes(size_t n2)
{
    CHECK(n2 <= 2 * (size_t)FED_SECAGG_MAX_CLIENTS, "a reveal names at most a roster");
    return REVEAL_HDR + REVEAL_ENTRY * n2;
}

static status want_len(size_t got, size_t want, const char *what)
{
    if (got == want) return STATUS_OK;
    log_error("secure aggregation: %s buffer is %zu bytes, not %zu", what, got, want);
    return STATUS_INPUT;
}

/* ---- client: rounds 0 and 1 --------------------------------------------------------- */

static status client_new(fed_secagg_client **out, uint64_t round, uint32_t id, uint32_t t, const uint8_t *seed)
{
    CHECK(out != NULL, "pass where to put the client");
    *out = NULL;
    TRY(sodium_ready());
    if (id == 0 || t < 2 || t > FED_SECAGG_MAX_CLIENTS) {
        log_error("secure aggregation: client id %u with threshold %u (ids start at 1, 2 <= t <= %u)", id, t,
                  FED_SECAGG_MAX_CLIENTS);
        return STATUS_INPUT;
    }
    fed_secagg_client *c = calloc(1, sizeof *c);
    if (!c) return STATUS_NOMEM;
    uint8_t rnd[5 * KB];  /* c_sk | s_sk | b | the two polynomial seeds */
    if (seed) randombytes_buf_deterministic(rnd, sizeof rnd, seed);
    else randombytes_buf(rnd, sizeof rnd);
    memcpy(c->c_sk, rnd, KB);
    memcpy(c->s_sk, rnd + KB, KB);
    memcpy(c->b, rnd + 2 * KB, KB);
    memcpy(c->coef[0], rnd + 3 * KB, KB);
    memcpy(c->coef[1], rnd + 4 * KB, KB);
    sodium_memzero(rnd, sizeof rnd);
    crypto_scalarmult_base(c->c_pk, c->c_sk);
    crypto_scalarmult_base(c->s_pk, c->s_sk);
    c->round = round;
    c->id = id;
    c->t = t;
    c->phase = PHASE_INIT;
    commit_b(c->commit, c->b, round, id);
    *out = c;
    return STATUS_OK;
}

status fed_secagg_client_init(fed_secagg_client **c, uint64_t round, uint32_t id, uint32_t t)
{
    return client_new(c, round, id, t, NULL);
}

status fed_secagg_client_init_seeded(fed_secagg_client **c, uint64_t round, uint32_t id, uint32_t t,
                                     const uint8_t seed[FED_SECAGG_KEY_BYTES])
{
    CHECK(seed != NULL, "the seeded init needs a seed");
    return client_new(c, round, id, t, seed);
}

void fed_secagg_client_free(fed_secagg_client *c)
{
    if (!c) return;
    if (c->peers) sodium_memzero(c->peers, c->n * sizeof *c->peers);
    free(c->peers);
    sodium_memzero(c, sizeof *c);
    free(c);
}

status fed_secagg_client_advertise(const fed_secagg_client *c, uint8_t *out, size_t out_len)
{
    TRY(want_len(out_len, ADV_BYTES, "advertisement"));
    put_header(out, MSG_ADVERTISE, c->id, c->round);
    memcpy(out + HDR, c->c_pk, KB);
    memcpy(out + HDR + KB, c->s_pk, KB);
    memcpy(out + HDR + 2 * KB, c->commit, KB);
    return STATUS_OK;
}

/* The roster entry of id, or NULL (the roster is checked: n entries, ids ascending). */
static const uint8_t *roster_find(const uint8_t *roster, size_t n, uint32_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (secagg_get32(roster + mid * ADV_BYTES + 4) < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && secagg_get32(roster + lo * ADV_BYTES + 4) == id ? roster + lo * ADV_BYTES : NULL;
}

/* A roster: 1 to FED_SECAGG_MAX_CLIENTS advertisements of `round`, ids strictly ascending. */
static status check_roster(const uint8_t *roster, size_t len, uint64_t round, size_t *n)
{
    *n = len / ADV_BYTES;
    if (len % ADV_BYTES != 0 || *n == 0 || *n > FED_SECAGG_MAX_CLIENTS) {
        log_error("secure aggregation: a roster of %zu bytes (not 1 to %u entries of %d)", len, FED_SECAGG_MAX_CLIENTS,
                  ADV_BYTES);
        return STATUS_CORRUPT;
    }
    for (size_t i = 0; i < *n; i++) {
        const uint8_t *p = roster + i * ADV_BYTES;
        TRY(secagg_check_header(p, MSG_ADVERTISE, round, "a roster entry"));
        if (secagg_get32(p + 4) == 0 || (i > 0 && secagg_get32(p + 4) <= secagg_get32(p + 4 - ADV_BYTES))) {
            log_error("secure aggregation: roster entry %zu is not in strictly ascending id order", i);
            return STATUS_CORRUPT;
        }
    }
    return STATUS_OK;
}

static status client_phase(const fed_secagg_client *c, int lo, int hi, const char *what)
{
    if (c->phase >= lo && c->phase <= hi) return STATUS_OK;
    log_error("secure aggregation, client %u: %s out of protocol order (at step %d, needs %d..%d)", c->id, what,
              c->phase, lo, hi);
    return STATUS_INPUT;
}

/* The index of the peer `id`, or SIZE_MAX. */
static size_t find_peer(const fed_secagg_client *c, uint32_t id)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->peers[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->n && c->peers[lo].id == id ? lo : SIZE_MAX;
}

status fed_secagg_client_roster(fed_secagg_client *c, const uint8_t *roster, size_t len)
{
    TRY(client_phase(c, PHASE_INIT, PHASE_INIT, "taking the roster"));
    size_t n;
    TRY(check_roster(roster, len, c->round, &n));
    if (n < c->t) {
        log_error("secure aggregation, client %u: the roster has %zu members, fewer than t = %u", c->id, n, c->t);
        return STATUS_INPUT;
    }
    uint8_t own[ADV_BYTES];
    fed_secagg_client_advertise(c, own, sizeof own);
    const uint8_t *mine = roster_find(roster, n, c->id);
    if (!mine || sodium_memcmp(mine, own, ADV_BYTES) != 0) {
        log_error("secure aggregation, client %u: the roster of %zu members %s", c->id, n,
                  mine ? "holds another advertisement for this client" : "lacks this client");
        return STATUS_PEER;
    }
    secagg_peer *peers = calloc(n, sizeof *peers);
    if (!peers) return STATUS_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = roster + i * ADV_BYTES;
        peers[i].id = secagg_get32(p + 4);
        memcpy(peers[i].c_pk, p + HDR, KB);
        memcpy(peers[i].s_pk, p + HDR + KB, KB);
    }
    c->peers = peers;
    c->n = n;
    c->self = (size_t)(mine - roster) / ADV_BYTES;
    c->phase = PHASE_ROSTER;
    return STATUS_OK;
}

/* Encrypts this client's shares for peer v into the share message m. */
static status seal_share(const fed_secagg_client *c, const secagg_peer *v, uint8_t *m)
{
    uint64_t y[2][FED_SHAMIR_LIMBS];  /* shares of s_sk and b at x = v */
    uint8_t plain[PLAIN_BYTES], key[KB], nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    status st = agree(key, LABEL_SHARE, c->c_sk, v->c_pk, c->round, c->id, c->c_pk, v->id, v->c_pk, false);
    if (st == STATUS_OK) {
        fed_shamir_share(c->s_sk, c->coef[0], c->t, v->id, y[0]);
        fed_shamir_share(c->b, c->coef[1], c->t, v->id, y[1]);
        fed_shamir_pack(plain, y[0]);
        fed_shamir_pack(plain + FED_SHAMIR_BYTES, y[1]);
        put_header(m, MSG_SHARE, c->id, c->round);
        secagg_put32(m + HDR, v->id);
        share_nonce(nonce, c->round, c->id, v->id);
        crypto_aead_chacha20poly1305_ietf_encrypt(m + SHARE_AD, NULL, plain, PLAIN_BYTES, m, SHARE_AD, NULL, nonce,
                                                  key);
    }
    sodium_memzero(y, sizeof y);
    sodium_memzero(plain, sizeof plain);
    sodium_memzero(key, sizeof key);
    return st;
}

status fed_secagg_client_share(fed_secagg_client *c, uint8_t *out, size_t out_len)
{
    TRY(client_phase(c, PHASE_ROSTER, PHASE_ROSTER, "sharing"));
    TRY(want_len(out_len, (c->n - 1) * SHARE_BYTES, "share"));
    for (size_t i = 0, k = 0; i < c->n; i++) {
        if (i == c->self) continue;
        TRY(seal_share(c, &c->peers[i], out + SHARE_BYTES * k++));
    }
    secagg_peer *me = &c->peers[c->self];
    fed_shamir_share(c->s_sk, c->coef[0], c->t, c->id, me->s_share);
    fed_shamir_share(c->b, c->coef[1], c->t, c->id, me->b_share);
    me->has_share = true;
    c->phase = PHASE_SHARED;
    return STATUS_OK;
}

status fed_secagg_share_route(const uint8_t *msg, size_t len, uint32_t *from, uint32_t *to)
{
    if (len != SHARE_BYTES || secagg_get32(msg) != MSG_SHARE) {
        log_error("secure aggregation: a share message of %zu bytes (kind 0x%08x; want %d bytes, 0x%08x)", len,
                  len >= 4 ? secagg_get32(msg) : 0, SHARE_BYTES, MSG_SHARE);
        return STATUS_CORRUPT;
    }
    *from = secagg_get32(msg + 4);
    *to = secagg_get32(msg + HDR);
    if (*from == 0 || *to == 0 || *from == *to) {
        log_error("secure aggregation: a share message from %u to %u", *from, *to);
        return STATUS_CORRUPT;
    }
    return STATUS_OK;
}

status fed_secagg_client_receive_share(fed_secagg_client *c, const uint8_t *msg, size_t len)
{
    TRY(client_phase(c, PHASE_ROSTER, PHASE_SHARED, "receiving a share"));
    if (len != SHARE_BYTES) {
        log_error("secure aggregation, client %u: a share message of %zu bytes, not %d", c->id, len, SHARE_BYTES);
        return STATUS_CORRUPT;
    }
    TRY(secagg_check_header(msg, MSG_SHARE, c->round, "a share message"));
    uint32_t from = secagg_get32(msg + 4), to = secagg_get32(msg + HDR);
    size_t i = find_peer(c, from);
    if (to != c->id || i == SIZE_MAX || i == c->self || c->peers[i].has_share) {
        log_error("secure aggregation, client %u: refused a share from %u to %u (%s)", c->id, from, to,
                  to != c->id ? "not addressed to this client" : i == SIZE_MAX || i == c->self
                  ? "sender not a peer in the roster" : "a second share from this sender");
        return STATUS_CORRUPT;
    }
    secagg_peer *v = &c->peers[i];
    uint8_t plain[PLAIN_BYTES], key[KB], nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    TRY(agree(key, LABEL_SHARE, c->c_sk, v->c_pk, c->round, from, v->c_pk, c->id, c->c_pk, false));
    share_nonce(nonce, c->round, from, c->id);
    status st = STATUS_OK;
    if (crypto_aead_chacha20poly1305_ietf_decrypt(plain, NULL, NULL, msg + SHARE_AD, len - SHARE_AD, msg, SHARE_AD,
                                                  nonce, key) != 0) {
        log_error("secure aggregation, client %u: the share from client %u fails authentication (tampered or "
                  "not encrypted for this client)", c->id, from);
        st = STATUS_CORRUPT;
    } else if (fed_shamir_unpack(v->s_share, plain) != STATUS_OK ||
               fed_shamir_unpack(v->b_share, plain + FED_SHAMIR_BYTES) != STATUS_OK) {
        log_error("secure aggregation, client %u: the share from client %u holds a value >= 2^61 - 1", c->id, from);
        st = STATUS_CORRUPT;
    }
    v->has_share = st == STATUS_OK;
    sodium_memzero(plain, sizeof plain);
    sodium_memzero(key, sizeof key);
    return st;
}

/* ---- client: rounds 2 and 3 --------------------------------------------------------- */

/* The ids of this client's U2 (n2, ascending) and the pairwise seeds with each (n2 KB;
 * this client's own slot left zero). Both malloc'ed; the caller wipes and frees seeds. */
static status client_u2(const fed_secagg_client *c, uint32_t **ids, uint8_t **seeds, size_t *n2)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) k += c->peers[i].has_share;
    if (k < c->t) {
        log_error("secure aggregation, client %u: shares from only %zu clients (itself included), fewer than "
                  "t = %u: no masked input", c->id, k, c->t);
        return STATUS_INPUT;
    }
    *ids = malloc(k * sizeof **ids);
    *seeds = calloc(k, KB);
    status st = *ids && *seeds ? STATUS_OK : STATUS_NOMEM;
    for (size_t i = 0, j = 0; i < c->n && st == STATUS_OK; i++) {
        const secagg_peer *v = &c->peers[i];
        if (!v->has_share) continue;
        if (i != c->self)
            st = agree(*seeds + KB * j, LABEL_PAIR, c->s_sk, v->s_pk, c->round, c->id, c->s_pk, v->id, v->s_pk, true);
        (*ids)[j++] = v->id;
    }
    *n2 = k;
    if (st != STATUS_OK) {
        if (*seeds) sodium_memzero(*seeds, k * KB);
        free(*seeds);
        free(*ids);
    }
    return st;
}

status fed_secagg_client_mask(fed_secagg_client *c, const uint64_t *x, size_t d, uint8_t *out, size_t out_len)
{
    TRY(client_phase(c, PHASE_SHARED, PHASE_SHARED, "masking"));
    if (d > FED_SECAGG_MAX_D) {
        log_error("secure aggregation, client %u: a vector of %zu elements (at most 2^40)", c->id, d);
        return STATUS_INPUT;
    }
    TRY(want_len(out_len, fed_secagg_masked_bytes(d), "masked-input"));
    uint32_t *ids;
    uint8_t *seeds;
    size_t n2;
    TRY(client_u2(c, &ids, &seeds, &n2));
    put_header(out, MSG_MASKED, c->id, c->round);
    secagg_put32(out + HDR, (uint32_t)n2);
    secagg_put32(out + HDR + 4, 0);
    u2_digest(out + HDR + 8, c->round, ids, n2);
    uint64_t acc[CHUNK];
    for (size_t off = 0; off < d; off += CHUNK) {
        size_t m = d - off < CHUNK ? d - off : CHUNK;
        memcpy(acc, x + off, m * sizeof *acc);
        secagg_prg_add(acc, m, off, c->b, NONCE_SELF, false);
        for (size_t j = 0; j < n2; j++)  /* + s_uv for u < v, - for u > v */
            if (ids[j] != c->id) secagg_prg_add(acc, m, off, seeds + KB * j, NONCE_PAIR, c->id > ids[j]);
        for (size_t i = 0; i < m; i++) secagg_put64(out + MASKED_HDR + 8 * (off + i), acc[i]);
    }
    sodium_memzero(acc, sizeof acc);
    sodium_memzero(seeds, n2 * KB);
    free(seeds);
    free(ids);
    c->phase = PHASE_MASKED;
    return STATUS_OK;
}

/* Parses an unmask request: its lists, each strictly ascending and every id >= 1. */
static status parse_request(const uint8_t *req, size_t len, uint64_t round, const uint8_t **u3, size_t *n3,
                            const uint8_t **drop, size_t *nd)
{
    if (len < REQ_HDR) {
        log_error("secure aggregation: an unmask request of %zu bytes", len);
        return STATUS_CORRUPT;
    }
    TRY(secagg_check_header(req, MSG_REQUEST, round, "an unmask request"));
    *n3 = secagg_get32(req + HDR);
    *nd = secagg_get32(req + HDR + 4);
    if ((uint64_t)len != REQ_HDR + 4 * ((uint64_t)*n3 + *nd)) {
        log_error("secure aggregation: an unmask request of %zu bytes naming %zu + %zu clients", len, *n3, *nd);
        return STATUS_CORRUPT;
    }
    *u3 = req + REQ_HDR;
    *drop = req + REQ_HDR + 4 * *n3;
    for (int l = 0; l < 2; l++) {
        const uint8_t *p = l ? *drop : *u3;
        for (size_t i = 0, k = l ? *nd : *n3; i < k; i++)
            if (secagg_get32(p + 4 * i) == 0 || (i > 0 && secagg_get32(p + 4 * i) <= secagg_get32(p + 4 * i - 4))) {
                log_error("secure aggregation: the unmask request's %s list is not strictly ascending ids >= 1 "
                          "(entry %zu)", l ? "dropped" : "survivor", i);
                return STATUS_CORRUPT;
            }
    }
    return STATUS_OK;
}

/* Merges a request's two strictly ascending lists into u2 (ascending); returns an id
 * that is in both (the merge is then incomplete), or 0. */
static uint32_t merge_lists(const uint8_t *u3, size_t n3, const uint8_t *drop, size_t nd, uint32_t *u2)
{
    size_t a = 0, b = 0, k = 0;
    uint32_t both = 0;
    while (a < n3 || b < nd) {  /* UINT64_MAX: past the end (every id is below it) */
        uint64_t va = a < n3 ? secagg_get32(u3 + 4 * a) : UINT64_MAX;
        uint64_t vb = b < nd ? secagg_get32(drop + 4 * b) : UINT64_MAX;
        if (va == vb && !both) both = (uint32_t)va;
        u2[k++] = (uint32_t)(va < vb ? va : vb);
        a += va <= vb;
        b += vb <= va;
    }
    return both;
}

/* The request partitions this client's U2 into U3 and dropped, without itself dropped. */
static status check_partition(const fed_secagg_client *c, const uint8_t *u3, size_t n3, const uint8_t *drop,
                              size_t nd)
{
    uint32_t *u2 = malloc((n3 + nd + 1) * sizeof *u2);
    if (!u2) return STATUS_NOMEM;
    uint32_t both = merge_lists(u3, n3, drop, nd, u2);
    size_t i = 0, j = 0;  /* walk this client's U2 (peers with shares) beside the merge */
    for (; i < c->n && !both; i++)
        if (c->peers[i].has_share && (j >= n3 + nd || u2[j++] != c->peers[i].id)) break;
    bool same = !both && i == c->n && j == n3 + nd;
    free(u2);
    if (both || !same || secagg_find_id(drop, nd, c->id) != SIZE_MAX) {
        log_error("secure aggregation, client %u: refused the unmask request: %s %u", c->id,
                  both ? "it would reveal both secrets of client" : !same ? "it is not a partition of the U2 of"
                  : "it lists as dropped", both ? both : c->id);
        return STATUS_PEER;
    }
    return STATUS_OK;
}

status fed_secagg_client_reveal(fed_secagg_client *c, const uint8_t *request, size_t request_len, uint8_t *out,
                                size_t out_len)
{
    if (c->phase == PHASE_DONE) {
        log_error("secure aggregation, client %u: a second unmask request in round %" PRIu64 ": refused", c->id,
                  c->round);
        return STATUS_PEER;
    }
    TRY(client_phase(c, PHASE_MASKED, PHASE_MASKED, "revealing"));
    const uint8_t *u3, *drop;
    size_t n3, nd;
    TRY(parse_request(request, request_len, c->round, &u3, &n3, &drop, &nd));
    TRY(check_partition(c, u3, n3, drop, nd));
    if (n3 < c->t) {
        log_error("secure aggregation, client %u: only %zu survivors, fewer than t = %u: nothing revealed", c->id, n3,
                  c->t);
        return STATUS_INPUT;
    }
    TRY(want_len(out_len, fed_secagg_reveal_bytes(n3 + nd), "reveal"));
    put_header(out, MSG_REVEAL, c->id, c->round);
    secagg_put32(out + HDR, (uint32_t)(n3 + nd));
    secagg_put32(out + HDR + 4, 0);
    for (size_t j = 0; j < n3 + nd; j++) {
        uint32_t v = secagg_get32(j < n3 ? u3 + 4 * j : drop + 4 * (j - n3));
        const secagg_peer *p = &c->peers[find_peer(c, v)];
        uint8_t *e = out + REVEAL_HDR + REVEAL_ENTRY * j;
        secagg_put32(e, v);
        fed_shamir_pack(e + 4, j < n3 ? p->b_share : p->s_share);  /* b for survivors, s_sk for the dropped */
    }
    c->phase = PHASE_DONE;
    return STATUS_OK;
}

/* ---- server -------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* (id << 32 | position) sorts by id and remembers where each came from. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

status fed_secagg_server_roster(uint64_t round, const uint8_t *adverts, size_t len, uint8_t *roster,
                                size_t roster_len)
{
    size_t n = len / ADV_BYTES;
    if (len % ADV_BYTES != 0 || n == 0 || n > FED_SECAGG_MAX_CLIENTS) {
        log_error("secure aggregation: %zu bytes of advertisements (not 1 to %u of %d bytes)", len,
                  FED_SECAGG_MAX_CLIENTS, ADV_BYTES);
        return STATUS_CORRUPT;
    }
    TRY(want_len(roster_len, len, "roster"));
    uint64_t *order = malloc(n * sizeof *order);
    if (!order) return STATUS_NOMEM;
    status st = STATUS_OK;
    for (size_t i = 0; i < n && st == STATUS_OK; i++) {
        const uint8_t *p = adverts + i * ADV_BYTES;
        st = secagg_check_header(p, MSG_ADVERTISE, round, "an advertisement");
        order[i] = (uint64_t)secagg_get32(p + 4) << 32 | i;
        if (st == STATUS_OK && secagg_get32(p + 4) == 0) {
            log_error("secure aggregation: advertisement %zu has id 0 (ids start at 1)", i);
            st = STATUS_CORRUPT;
        }
    }
    if (st == STATUS_OK) qsort(order, n, sizeof *order, cmp_u64);
    for (size_t i = 1; i < n && st == STATUS_OK; i++)
        if (order[i] >> 32 == order[i - 1] >> 32) {
            log_error("secure aggregation: two advertisements from client %u", (uint32_t)(order[i] >> 32));
            st = STATUS_CORRUPT;
        }
    for (size_t i = 0; i < n && st == STATUS_OK; i++)
        memcpy(roster + i * ADV_BYTES, adverts + (order[i] & UINT32_MAX) * ADV_BYTES, ADV_BYTES);
    free(order);
    return st;
}

status fed_secagg_server_request(uint64_t round, const uint32_t *u3, size_t n3, const uint32_t *drop, size_t ndrop,
                                 uint8_t *out, size_t out_len)
{
    if (n3 > FED_SECAGG_MAX_CLIENTS || ndrop > FED_SECAGG_MAX_CLIENTS) {
        log_error("secure aggregation: a request naming %zu + %zu clients", n3, ndrop);
        return STATUS_INPUT;
    }
    TRY(want_len(out_len, fed_secagg_request_bytes(n3, ndrop), "request"));
    uint32_t *all = malloc((n3 + ndrop + 1) * sizeof *all);
    if (!all) return STATUS_NOMEM;
    memcpy(all, u3, n3 * sizeof *all);
    memcpy(all + n3, drop, ndrop * sizeof *all);
    qsort(all, n3, sizeof *all, cmp_u32);
    qsort(all + n3, ndrop, sizeof *all, cmp_u32);
    put_header(out, MSG_REQUEST, 0, round);
    secagg_put32(out + HDR, (uint32_t)n3);
    secagg_put32(out + HDR + 4, (uint32_t)ndrop);
    for (size_t i = 0; i < n3 + ndrop; i++) secagg_put32(out + REQ_HDR + 4 * i, all[i]);
    /* the checks a client makes: ids >= 1, each list strictly ascending, the two disjoint */
    const uint8_t *l3, *ld;
    size_t k3, kd;
    uint32_t both = 0;
    status st = parse_request(out, out_len, round, &l3, &k3, &ld, &kd);
    if (st == STATUS_OK && (both = merge_lists(l3, k3, ld, kd, all)) != 0)
        log_error("secure aggregation: the request would name client %u as both survivor and dropped", both);
    free(all);
    return st == STATUS_OK && !both ? STATUS_OK : STATUS_INPUT;
}

/* ---- server: unmask ------------------------------------------------------------------ */

/* The request's lists (every id in the roster, U3 and dropped disjoint) and digest(U2). */
static status server_view(const fed_secagg_unmask_in *in, size_t n, const uint8_t **ids, size_t *n3, size_t *n2,
                          uint8_t digest[KB])
{
    const uint8_t *drop;
    size_t nd;
    TRY(parse_request(in->request, in->request_len, in->round, ids, n3, &drop, &nd));
    *n2 = *n3 + nd;
    uint32_t *u2 = malloc((*n2 + 1) * sizeof *u2);
    if (!u2) return STATUS_NOMEM;
    uint32_t bad = merge_lists(*ids, *n3, drop, nd, u2);
    for (size_t k = 0; k < *n2 && !bad; k++)
        if (!roster_find(in->roster, n, u2[k])) bad = u2[k];
    if (bad) log_error("secure aggregation: the request names client %u twice or outside the roster", bad);
    else u2_digest(digest, in->round, u2, *n2);
    free(u2);
    return bad ? STATUS_CORRUPT : STATUS_OK;
}

/* sum = the sum of U3's masked vectors, each present once and masked over the same U2. */
static status sum_masked(const fed_secagg_unmask_in *in, const uint8_t *u3, size_t n3, size_t n2,
                         const uint8_t digest[KB], uint64_t *sum)
{
    size_t mb = fed_secagg_masked_bytes(in->d);
    if (in->masked_len != n3 * mb) {
        log_error("secure aggregation: %zu bytes of masked vectors, not %zu survivors x %zu", in->masked_len, n3, mb);
        return STATUS_CORRUPT;
    }
    uint8_t *seen = calloc(n3 ? n3 : 1, 1);
    if (!seen) return STATUS_NOMEM;
    status st = STATUS_OK;
    for (size_t r = 0; r < n3 && st == STATUS_OK; r++) {
        const uint8_t *p = in->masked + r * mb;
        uint32_t from = secagg_get32(p + 4);
        size_t who = secagg_find_id(u3, n3, from);
        st = secagg_check_header(p, MSG_MASKED, in->round, "a masked vector");
        if (st == STATUS_OK && (who == SIZE_MAX || seen[who]++)) {
            log_error("secure aggregation: a masked vector from client %u, %s", from,
                      who == SIZE_MAX ? "not a survivor" : "the second from it");
            st = STATUS_PEER;
        }
        if (st == STATUS_OK && (secagg_get32(p + HDR) != n2 || sodium_memcmp(p + HDR + 8, digest, KB) != 0)) {
            log_error("secure aggregation: client %u masked over another U2 (%u clients) than the request's %zu",
                      from, secagg_get32(p + HDR), n2);
            st = STATUS_PEER;
        }
        for (size_t i = 0; i < in->d && st == STATUS_OK; i++) sum[i] += secagg_get64(p + MASKED_HDR + 8 * i);
    }
    free(seen);
    return st;
}

/* Removes the masks with the reconstructed secrets (n2 x 32: b_v of the survivors, then
 * s_sk_v of the dropped), each checked against the roster first. */
static status remove_masks(const fed_secagg_unmask_in *in, size_t n, const uint8_t *ids, size_t n3, size_t n2,
                           const uint8_t *secrets, uint64_t *sum)
{
    uint8_t check[KB], seed[KB];
    status st = STATUS_OK;
    for (size_t j = 0; j < n2 && st == STATUS_OK; j++) {
        uint32_t v = secagg_get32(ids + 4 * j);
        const uint8_t *ev = roster_find(in->roster, n, v), *secret = secrets + KB * j;
        if (j < n3) commit_b(check, secret, in->round, v);
        else crypto_scalarmult_base(check, secret);
        if (sodium_memcmp(check, ev + HDR + (j < n3 ? 2 * KB : KB), KB) != 0) {
            log_error("secure aggregation: the reconstructed %s of client %u does not match its %s: a wrong or "
                      "tampered share among the reveals", j < n3 ? "seed b" : "key s_sk", v,
                      j < n3 ? "commitment" : "public key");
            st = STATUS_CORRUPT;
            break;
        }
        if (j < n3) {
            secagg_prg_add(sum, in->d, 0, secret, NONCE_SELF, true);
            continue;
        }
        for (size_t i = 0; i < n3 && st == STATUS_OK; i++) {  /* survivor u added +s_uv for u < v */
            uint32_t u = secagg_get32(ids + 4 * i);
            const uint8_t *eu = roster_find(in->roster, n, u);
            st = agree(seed, LABEL_PAIR, secret, eu + HDR + KB, in->round, v, ev + HDR + KB, u, eu + HDR + KB, true);
            if (st == STATUS_OK) secagg_prg_add(sum, in->d, 0, seed, NONCE_PAIR, u < v);
        }
    }
    sodium_memzero(seed, sizeof seed);
    return st;
}

status fed_secagg_server_unmask(const fed_secagg_unmask_in *in, uint64_t *sum)
{
    TRY(sodium_ready());
    if (in->d > FED_SECAGG_MAX_D || in->t < 2) {
        log_error("secure aggregation: unmasking %zu elements with t = %u (at most 2^40, t >= 2)", in->d, in->t);
        return STATUS_INPUT;
    }
    memset(sum, 0, in->d * sizeof *sum);
    const uint8_t *ids;
    size_t n, n3, n2;
    uint8_t digest[KB];
    TRY(check_roster(in->roster, in->roster_len, in->round, &n));
    TRY(server_view(in, n, &ids, &n3, &n2, digest));
    status st = sum_masked(in, ids, n3, n2, digest, sum);
    uint8_t *secrets = NULL;
    if (st == STATUS_OK) {
        secrets = malloc((n2 ? n2 : 1) * KB);
        st = secrets ? fed_shamir_reveals(in->reveals, in->reveals_len, in->round, in->t, ids, n3, n2, secrets)
                     : STATUS_NOMEM;
    }
    if (st == STATUS_OK) st = remove_masks(in, n, ids, n3, n2, secrets, sum);
    if (secrets) sodium_memzero(secrets, n2 * KB);
    free(secrets);
    if (st != STATUS_OK) memset(sum, 0, in->d * sizeof *sum);
    return st;
}
