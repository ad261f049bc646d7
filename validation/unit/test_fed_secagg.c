/* test_fed_secagg — secure aggregation (fed/secagg.h, after Bonawitz et al., CCS 2017):
 * whole rounds between simulated clients and the server, driven message by message as
 * the round engine does, and the refusals of hostile bytes.
 *
 * Checks: Shamir alone (any t of n shares reconstruct, no t-1 do); the unmasked sum equals
 * the plain fixed-point sum bit for bit with 0, 1, t-1 and n-t clients dropped after
 * sharing, with clients dropped before sharing and silent in the unmask round; fewer than
 * t reveals or survivors are refused; a tampered share in a reveal is detected (the
 * guarantee: a wrong share among the t used never yields a sum; it is refused with
 * STATUS_CORRUPT by the commitment of b or the public key of s_sk); masked vectors of two
 * different updates pass chi-square tests of uniformity and of homogeneity against each
 * other while the unmasked ones fail them; tampered, misaddressed, repeated and
 * wrong-size messages and inconsistent unmask requests are refused; the encoder refuses
 * NaN, infinities and sums that could overflow.
 *
 * Clients are seeded (fed_secagg_client_init_seeded), so every statistic is the same on
 * every run; one round uses the system's randomness (exactness holds for any keys). One
 * line per check; exit 1 on any failure. */
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/secagg.h"
#include "fed/secagg_impl.h"
#include "../check.h"

#define SEED    UINT64_C(20260214)
#define NMAX    16          /* clients in a simulated round, at most */
#define FRAC    16          /* fixed-point fractional bits */
#define ROUND   UINT64_C(7)

/* ---- a simulated round ------------------------------------------------------------ */

typedef struct sim_cfg {
    size_t n;               /* clients that advertise (U1) */
    uint32_t t;             /* threshold */
    size_t d;               /* elements per update */
    uint32_t drop_before;   /* bit i: client i drops before sharing (not in U2) */
    uint32_t drop_after;    /* bit i: client i shares, then drops before masking (U2 \ U3) */
    uint32_t silent;        /* bit i: client i masks but sends no reveal */
    bool system_random;     /* fed_secagg_client_init instead of the seeded init */
} sim_cfg;

typedef struct sim {
    sim_cfg cfg;
    uint32_t ids[NMAX];           /* client ids, ascending, the last UINT32_MAX */
    fed_secagg_client *c[NMAX];
    float *xf[NMAX];              /* (d) updates */
    uint64_t *x[NMAX];            /* (d) their encodings */
    uint8_t *roster;              /* U1 */
    uint8_t *shares[NMAX];        /* (n - 1) ciphertexts each client sent */
    uint8_t *masked;              /* U3's masked vectors, concatenated */
    uint8_t *request;             /* the unmask request */
    uint8_t *reveals;             /* the reveals, concatenated */
    size_t roster_len, masked_len, request_len, reveals_len, reveal_len, n3, nd, nrev;
    uint64_t *want;               /* (d) the plain sum over U3 */
    fed_secagg_unmask_in in;      /* what the server unmasks from */
} sim;

static bool in_u2(const sim *s, size_t i) { return !(s->cfg.drop_before >> i & 1); }
static bool in_u3(const sim *s, size_t i) { return in_u2(s, i) && !(s->cfg.drop_after >> i & 1); }

static size_t index_of(const sim *s, uint32_t id)
{
    for (size_t i = 0; i < s->cfg.n; i++)
        if (s->ids[i] == id) return i;
    return SIZE_MAX;
}

/* Round 0: clients, updates, the roster (adverts arrive in reverse order). */
static status sim_setup(sim *s, const sim_cfg *cfg, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    size_t n = cfg->n, ab = fed_secagg_advertise_bytes();
    uint8_t *adverts = malloc(n * ab);
    rng r;
    rng_init(&r, seed, 0, RNG_PURPOSE_TEST, 0);
    for (size_t i = 0; i < n; i++) {
        s->ids[i] = i + 1 == n ? UINT32_MAX : (uint32_t)(3 + 17 * i + i * i);
        uint8_t cs[32] = {0};
        secagg_put64(cs, seed);
        secagg_put32(cs + 8, s->ids[i]);
        status st = cfg->system_random ? fed_secagg_client_init(&s->c[i], ROUND, s->ids[i], cfg->t)
                                       : fed_secagg_client_init_seeded(&s->c[i], ROUND, s->ids[i], cfg->t, cs);
        if (st != STATUS_OK) return st;
        s->xf[i] = malloc(cfg->d * sizeof(float));
        s->x[i] = malloc(cfg->d * sizeof(uint64_t));
        for (size_t j = 0; j < cfg->d; j++) s->xf[i][j] = 2 * rng_uniform(&r) - 1;
        if ((st = fed_secagg_encode(s->x[i], s->xf[i], cfg->d, FRAC, (uint32_t)n)) != STATUS_OK) return st;
        fed_secagg_client_advertise(s->c[i], adverts + (n - 1 - i) * ab, ab);
    }
    s->roster_len = fed_secagg_roster_bytes(n);
    s->roster = malloc(s->roster_len);
    status st = fed_secagg_server_roster(ROUND, adverts, n * ab, s->roster, s->roster_len);
    free(adverts);
    for (size_t i = 0; i < n && st == STATUS_OK; i++) st = fed_secagg_client_roster(s->c[i], s->roster, s->roster_len);
    return st;
}

/* Round 1: U2 share; the server routes every ciphertext to its recipient in U2. */
static status sim_share(sim *s)
{
    size_t n = s->cfg.n, sb = fed_secagg_share_bytes();
    for (size_t i = 0; i < n; i++) {
        if (!in_u2(s, i)) continue;
        s->shares[i] = malloc((n - 1) * sb);
        TRY(fed_secagg_client_share(s->c[i], s->shares[i], (n - 1) * sb));
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; in_u2(s, i) && k < n - 1; k++) {
            uint32_t from, to;
            TRY(fed_secagg_share_route(s->shares[i] + k * sb, sb, &from, &to));
            size_t j = index_of(s, to);
            if (j == SIZE_MAX || from != s->ids[i]) return STATUS_CORRUPT;
            if (in_u2(s, j)) TRY(fed_secagg_client_receive_share(s->c[j], s->shares[i] + k * sb, sb));
        }
    return STATUS_OK;
}

/* Round 2: U3 mask; the plain sum the server should find. */
static status sim_mask(sim *s)
{
    size_t d = s->cfg.d, mb = fed_secagg_masked_bytes(d);
    s->want = calloc(d, sizeof(uint64_t));
    s->masked = malloc(s->cfg.n * mb);
    s->n3 = 0;
    for (size_t i = 0; i < s->cfg.n; i++) {
        if (!in_u3(s, i)) continue;
        TRY(fed_secagg_client_mask(s->c[i], s->x[i], d, s->masked + s->n3++ * mb, mb));
        for (size_t j = 0; j < d; j++) s->want[j] += s->x[i][j];
    }
    s->masked_len = s->n3 * mb;
    return STATUS_OK;
}

/* Round 3: the request (survivors in reverse order: the server sorts) and the reveals of
 * the survivors that are not silent. */
static status sim_reveal(sim *s)
{
    uint32_t u3[NMAX], drop[NMAX];
    size_t nd = 0, k3 = 0;
    for (size_t i = s->cfg.n; i-- > 0;) {
        if (in_u3(s, i)) u3[k3++] = s->ids[i];
        else if (in_u2(s, i)) drop[nd++] = s->ids[i];
    }
    s->nd = nd;
    s->request_len = fed_secagg_request_bytes(k3, nd);
    s->request = malloc(s->request_len);
    TRY(fed_secagg_server_request(ROUND, u3, k3, drop, nd, s->request, s->request_len));
    s->reveal_len = fed_secagg_reveal_bytes(k3 + nd);
    s->reveals = malloc(s->cfg.n * s->reveal_len);
    s->nrev = 0;
    for (size_t i = 0; i < s->cfg.n; i++) {
        if (!in_u3(s, i) || s->cfg.silent >> i & 1) continue;
        TRY(fed_secagg_client_reveal(s->c[i], s->request, s->request_len, s->reveals + s->nrev * s->reveal_len,
                                     s->reveal_len));
        s->nrev++;
    }
    s->reveals_len = s->nrev * s->reveal_len;
    s->in = (fed_secagg_unmask_in){ .round = ROUND, .t = s->cfg.t, .d = s->cfg.d, .roster = s->roster,
        .roster_len = s->roster_len, .request = s->request, .request_len = s->request_len, .masked = s->masked,
        .masked_len = s->masked_len, .reveals = s->reveals, .reveals_len = s->reveals_len };
    return STATUS_OK;
}

static status sim_run(sim *s, const sim_cfg *cfg, uint64_t seed)
{
    TRY(sim_setup(s, cfg, seed));
    TRY(sim_share(s));
    TRY(sim_mask(s));
    return sim_reveal(s);
}

static void sim_free(sim *s)
{
    for (size_t i = 0; i < s->cfg.n; i++) {
        fed_secagg_client_free(s->c[i]);
        free(s->xf[i]);
        free(s->x[i]);
        free(s->shares[i]);
    }
    free(s->roster);
    free(s->masked);
    free(s->request);
    free(s->reveals);
    free(s->want);
}

/* ---- Shamir alone ----------------------------------------------------------------- */

/* Reconstructs from the shares of the subset `mask` of n; 1 when it gives the secret. */
static bool shamir_subset(const uint32_t *x, const uint64_t (*y)[FED_SHAMIR_LIMBS], size_t n, uint32_t mask,
                          const uint8_t *secret, int *refused)
{
    uint32_t xs[NMAX];
    uint64_t ys[NMAX][FED_SHAMIR_LIMBS], lambda[NMAX];
    uint8_t got[32];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (mask >> i & 1) {
            xs[k] = x[i];
            memcpy(ys[k++], y[i], sizeof ys[0]);
        }
    if (fed_shamir_lagrange0(xs, k, lambda) != STATUS_OK) return false;
    status st = fed_shamir_combine(lambda, (const uint64_t (*)[FED_SHAMIR_LIMBS])ys, k, got);
    *refused += st != STATUS_OK;
    return st == STATUS_OK && memcmp(got, secret, 32) == 0;
}

static void test_shamir(test_ctx *t)
{
    enum { N = 10, T = 6, SECRETS = 8 };
    uint32_t x[N] = {1, 2, 3, 1000, 77777, 123456789, 4000000000u, UINT32_MAX, 5, 99};
    uint8_t seed[32] = "shamir test seed", rnd[64 * SECRETS];
    randombytes_buf_deterministic(rnd, sizeof rnd, seed);
    long good_t = 0, subsets_t = 0, good_t1 = 0, subsets_t1 = 0, all_n = 0;
    int refused = 0;
    for (int s = 0; s < SECRETS; s++) {
        const uint8_t *secret = rnd + 64 * s, *coef = secret + 32;
        uint64_t y[N][FED_SHAMIR_LIMBS];
        for (int i = 0; i < N; i++) fed_shamir_share(secret, coef, T, x[i], y[i]);
        const uint64_t (*yc)[FED_SHAMIR_LIMBS] = (const uint64_t (*)[FED_SHAMIR_LIMBS])y;
        for (uint32_t m = 0; m < 1u << N; m++) {
            int k = __builtin_popcount(m);
            if (k == T) subsets_t++, good_t += shamir_subset(x, yc, N, m, secret, &refused);
            if (k == T - 1) subsets_t1++, good_t1 += shamir_subset(x, yc, N, m, secret, &refused);
        }
        int none = 0;
        all_n += shamir_subset(x, yc, N, (1u << N) - 1, secret, &none);
    }
    check(t, good_t == subsets_t && subsets_t == 210 * SECRETS && all_n == SECRETS,
          "shamir: every %d of %d shares reconstruct (%ld of %ld subsets, and all %d shares, over %d random secrets)",
          T, N, good_t, subsets_t, N, SECRETS);
    check(t, good_t1 == 0 && subsets_t1 == 252 * SECRETS,
          "shamir: no %d of %d shares give the secret (%ld of %ld subsets; %d refused by the limb range check)", T - 1,
          N, good_t1, subsets_t1, refused);
    uint8_t packed[FED_SHAMIR_BYTES];
    uint64_t y[FED_SHAMIR_LIMBS] = {1, 2, 3, 4, 5};
    fed_shamir_pack(packed, y);
    secagg_put64(packed + 16, FED_SHAMIR_P);
    check(t, fed_shamir_unpack(y, packed) == STATUS_CORRUPT, "shamir: a share element >= 2^61 - 1 is refused");
}

/* ---- whole rounds ----------------------------------------------------------------- */

/* One round of cfg: unmasks and compares with the plain sum bit for bit. */
static void check_round(test_ctx *t, const sim_cfg *cfg, uint64_t seed, const char *what)
{
    sim s;
    status st = sim_run(&s, cfg, seed);
    uint64_t *sum = malloc(cfg->d * sizeof *sum);
    if (st == STATUS_OK) st = fed_secagg_server_unmask(&s.in, sum);
    bool same = st == STATUS_OK && memcmp(sum, s.want, cfg->d * sizeof *sum) == 0;
    check(t, same, "sum exact: %s (n=%zu t=%u d=%zu; |U3|=%zu, %zu dropped after sharing, %zu reveals): %s", what,
          cfg->n, cfg->t, cfg->d, s.n3, s.nd, s.nrev, status_str(st));
    free(sum);
    sim_free(&s);
}

static void test_sums(test_ctx *t)
{
    const size_t n = 10, d = 3000;
    const uint32_t th = 5;  /* t - 1 = 4 drops leave 6 >= t; n - t = 5 leave exactly t */
    check_round(t, &(sim_cfg){ .n = n, .t = th, .d = d }, SEED, "no client dropped");
    check_round(t, &(sim_cfg){ .n = n, .t = th, .d = d, .drop_after = 1u << 3 }, SEED + 1, "1 dropped");
    check_round(t, &(sim_cfg){ .n = n, .t = th, .d = d, .drop_after = 0x0f0 }, SEED + 2, "t-1 dropped");
    check_round(t, &(sim_cfg){ .n = n, .t = th, .d = d, .drop_after = 0x295 }, SEED + 3,
                "n-t dropped (the last one has id 2^32-1)");
    check_round(t, &(sim_cfg){ .n = n, .t = th, .d = d, .drop_before = 0x011, .drop_after = 1u << 6, .silent = 1u << 2,
                               .system_random = true },
                SEED + 4, "2 dropped before sharing, 1 after, 1 silent in the unmask round, system randomness");
    check_round(t, &(sim_cfg){ .n = 3, .t = 2, .d = 1 }, SEED + 5, "the smallest round");
    check_round(t, &(sim_cfg){ .n = 4, .t = 3, .d = 1029 }, SEED + 6, "d not a multiple of the chunk");

    /* the decoded sum of fixed-point values is their exact sum */
    sim s;
    status st = sim_run(&s, &(sim_cfg){ .n = n, .t = th, .d = d }, SEED + 7);
    uint64_t *sum = malloc(d * sizeof *sum);
    double *dec = malloc(d * sizeof *dec);
    if (st == STATUS_OK) st = fed_secagg_server_unmask(&s.in, sum);
    fed_secagg_decode(dec, sum, d, FRAC);
    size_t wrong = 0;
    for (size_t j = 0; j < d; j++) {
        double want = 0;  /* integers below 2^53: exact in double */
        for (size_t i = 0; i < n; i++) want += (double)(int64_t)s.x[i][j];
        wrong += dec[j] != ldexp(want, -FRAC);
    }
    check(t, st == STATUS_OK && wrong == 0, "decode: the decoded sum is the exact sum of the fixed-point updates "
          "(%zu of %zu differ)", wrong, d);
    free(sum);
    free(dec);
    sim_free(&s);
}

/* ---- too few, and tampered shares ------------------------------------------------- */

/* Unmasks with stderr captured; the status, and whether the message names `word`. */
static status unmask_quiet(test_ctx *t, const fed_secagg_unmask_in *in, uint64_t *sum, const char *word, bool *named)
{
    capture_begin(t);
    status st = fed_secagg_server_unmask(in, sum);
    const char *msg = capture_end(t, false);
    *named = word == NULL || strstr(msg, word) != NULL;
    return st;
}

static bool all_zero(const uint64_t *v, size_t d)
{
    for (size_t j = 0; j < d; j++)
        if (v[j]) return false;
    return true;
}

/* Adds 1 (mod p) to limb 0 of entry j of reveal r: a share that is well-formed but wrong. */
static void tamper_reveal(sim *s, size_t r, size_t j)
{
    uint8_t *e = s->reveals + r * s->reveal_len + REVEAL_HDR + REVEAL_ENTRY * j + 4;
    secagg_put64(e, (secagg_get64(e) + 1) % FED_SHAMIR_P);
}

static void test_threshold(test_ctx *t)
{
    const sim_cfg base = { .n = 10, .t = 5, .d = 700 };
    char word[32];
    bool named = false;
    sim s;
    uint64_t *sum = malloc(base.d * sizeof *sum);

    sim_cfg cfg = base;
    cfg.silent = 0x3f0;  /* 4 = t-1 reveals */
    status st = sim_run(&s, &cfg, SEED + 10);
    memset(sum, 0xab, base.d * sizeof *sum);
    st = st == STATUS_OK ? unmask_quiet(t, &s.in, sum, "fewer than t", &named) : st;
    check(t, st == STATUS_INPUT && named && all_zero(sum, base.d), "refused: t-1 reveals cannot unmask (%s, sum "
          "zeroed)", status_str(st));
    sim_free(&s);

    cfg = base;
    cfg.drop_after = 0x3f;  /* 6 = n-t+1 dropped: 4 survivors */
    capture_begin(t);
    st = sim_run(&s, &cfg, SEED + 11);
    const char *msg = capture_end(t, false);
    check(t, st == STATUS_INPUT && s.nrev == 0 && strstr(msg, "fewer than t"),
          "refused: no client reveals when fewer than t survive (%s)", status_str(st));
    sim_free(&s);

    /* A wrong share among the t used: b of a survivor, then s_sk of a dropped client. */
    cfg = base;
    cfg.drop_after = 1u << 4;
    for (int kind = 0; kind < 2; kind++) {
        sim_run(&s, &cfg, SEED + 12);
        size_t j = kind == 0 ? 2 : s.n3;  /* entry: the third survivor, or the dropped client */
        uint32_t v = secagg_get32(s.reveals + REVEAL_HDR + REVEAL_ENTRY * j);
        tamper_reveal(&s, 1, j);
        s.in.reveals_len = cfg.t * s.reveal_len;  /* exactly t reveals */
        snprintf(word, sizeof word, "client %u", v);
        memset(sum, 0xab, base.d * sizeof *sum);
        st = unmask_quiet(t, &s.in, sum, word, &named);
        check(t, st == STATUS_CORRUPT && named && all_zero(sum, base.d), "detected: t reveals with one tampered share "
              "of %s of client %u are refused (%s), no sum", kind == 0 ? "b" : "s_sk", v, status_str(st));
        sim_free(&s);
    }

    /* A tampered share outside the first t is never used: the sum is still exact. */
    sim_run(&s, &base, SEED + 13);
    tamper_reveal(&s, s.nrev - 1, 0);
    st = unmask_quiet(t, &s.in, sum, NULL, &named);
    check(t, st == STATUS_OK && memcmp(sum, s.want, base.d * sizeof *sum) == 0,
          "a tampered share beyond the first t reveals is not used (%s, sum exact)", status_str(st));
    sim_free(&s);
    free(sum);
}

/* ---- statistics of masked vectors --------------------------------------------------- */

static void byte_hist(const uint8_t *p, size_t n, double h[256])
{
    memset(h, 0, 256 * sizeof *h);
    for (size_t i = 0; i < n; i++) h[p[i]]++;
}

/* Pearson's chi-square of h against uniform, 255 degrees of freedom. */
static double chi2_uniform(const double h[256], size_t n)
{
    double e = (double)n / 256, x = 0;
    for (int b = 0; b < 256; b++) x += (h[b] - e) * (h[b] - e) / e;
    return x;
}

/* Chi-square of homogeneity of two histograms of equal totals (2 x 256 table, 255 dof). */
static double chi2_two(const double a[256], const double b[256])
{
    double x = 0;
    for (int k = 0; k < 256; k++)
        if (a[k] + b[k] > 0) x += (a[k] - b[k]) * (a[k] - b[k]) / (a[k] + b[k]);
    return x;
}

static void test_indistinguishable(test_ctx *t)
{
    const sim_cfg cfg = { .n = 10, .t = 5, .d = 4096 };
    /* chi-square(255) quantile at 1 - 0.001 (Wilson-Hilferty; 330.5, as tables give) */
    const double k = 255, z = 3.0902, crit = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    sim s;
    status st = sim_setup(&s, &cfg, SEED + 20);
    for (size_t j = 0; j < cfg.d; j++) {  /* two different updates: small noise, and a constant */
        s.xf[0][j] = 0.01f * (s.xf[0][j]);
        s.xf[1][j] = 0.75f;
    }
    fed_secagg_encode(s.x[0], s.xf[0], cfg.d, FRAC, cfg.n);
    fed_secagg_encode(s.x[1], s.xf[1], cfg.d, FRAC, cfg.n);
    if (st == STATUS_OK) st = sim_share(&s);
    if (st == STATUS_OK) st = sim_mask(&s);
    size_t nb = 8 * cfg.d, mb = fed_secagg_masked_bytes(cfg.d);
    double ha[256], hb[256], ua[256], ub[256];
    byte_hist(s.masked + 56, nb, ha);          /* client 0's y, past the 56-byte head */
    byte_hist(s.masked + mb + 56, nb, hb);     /* client 1's */
    uint8_t *ea = malloc(nb), *eb = malloc(nb);
    for (size_t j = 0; j < cfg.d; j++) {
        secagg_put64(ea + 8 * j, s.x[0][j]);
        secagg_put64(eb + 8 * j, s.x[1][j]);
    }
    byte_hist(ea, nb, ua);
    byte_hist(eb, nb, ub);
    double ma = chi2_uniform(ha, nb), mbs = chi2_uniform(hb, nb), m2 = chi2_two(ha, hb);
    double pa = chi2_uniform(ua, nb), pb = chi2_uniform(ub, nb), p2 = chi2_two(ua, ub);
    check(t, st == STATUS_OK && ma < crit && mbs < crit && m2 < crit,
          "masked updates look uniform and alike: chi2 vs uniform %.1f, %.1f, two-sample %.1f (< %.1f, alpha 0.001, "
          "%zu bytes each)", ma, mbs, m2, crit, nb);
    check(t, pa > 10 * crit && pb > 10 * crit && p2 > 10 * crit,
          "unmasked updates are trivially told apart: chi2 vs uniform %.3g, %.3g, two-sample %.3g (> 10 x %.1f)", pa,
          pb, p2, crit);
    free(ea);
    free(eb);
    sim_free(&s);
}

/* ---- hostile messages ------------------------------------------------------------- */

/* Runs call with stderr captured; true when it returned want and its message holds word. */
#define REFUSED(t, want, word, call) \
    (capture_begin(t), refused_end((t), (call), (want), (word)))

static bool refused_end(test_ctx *t, status got, status want, const char *word)
{
    const char *msg = capture_end(t, false);
    bool ok = got == want && (!word || strstr(msg, word));
    if (!ok) printf("    got %s, want %s; message: %s", status_str(got), status_str(want), msg);
    return ok;
}

static void test_share_messages(test_ctx *t)
{
    sim s;
    status st = sim_setup(&s, &(sim_cfg){ .n = 5, .t = 3, .d = 16 }, SEED + 30);
    size_t sb = fed_secagg_share_bytes();
    uint8_t *out = malloc(4 * sb), bad[200];
    if (st == STATUS_OK) st = fed_secagg_client_share(s.c[0], out, 4 * sb);  /* out[0]: to client 1 */
    check(t, st == STATUS_OK, "client 0 shares (%s)", status_str(st));
    check(t, REFUSED(t, STATUS_INPUT, "out of protocol order", fed_secagg_client_mask(s.c[1], s.x[1], 16, bad, 0)),
          "refused: masking before sharing");
    memcpy(bad, out, sb);
    bad[sb - 30] ^= 0x04;
    check(t, REFUSED(t, STATUS_CORRUPT, "fails authentication", fed_secagg_client_receive_share(s.c[1], bad, sb)),
          "refused: a ciphertext with one flipped byte (STATUS_CORRUPT, named)");
    memcpy(bad, out, sb);
    bad[9] ^= 0x01;  /* the round */
    check(t, REFUSED(t, STATUS_CORRUPT, "round", fed_secagg_client_receive_share(s.c[1], bad, sb)),
          "refused: a share of another round");
    check(t, REFUSED(t, STATUS_CORRUPT, "bytes", fed_secagg_client_receive_share(s.c[1], out, sb - 1)) &&
          REFUSED(t, STATUS_CORRUPT, "bytes", fed_secagg_client_receive_share(s.c[1], out, sb + 1)),
          "refused: a share message one byte short or long");
    uint32_t from, to;
    check(t, REFUSED(t, STATUS_CORRUPT, NULL, fed_secagg_share_route(out, sb - 1, &from, &to)),
          "refused: routing a wrong-size share");
    check(t, REFUSED(t, STATUS_CORRUPT, "not addressed", fed_secagg_client_receive_share(s.c[2], out, sb)),
          "refused: a share addressed to another client");
    memcpy(bad, out, sb);
    secagg_put32(bad + HDR, s.ids[2]);  /* readdressed: the AEAD binds the recipient */
    check(t, REFUSED(t, STATUS_CORRUPT, "fails authentication", fed_secagg_client_receive_share(s.c[2], bad, sb)),
          "refused: a share readdressed to another client");
    st = fed_secagg_client_receive_share(s.c[1], out, sb);
    check(t, st == STATUS_OK, "the genuine share is accepted after the refused ones (%s)", status_str(st));
    check(t, REFUSED(t, STATUS_CORRUPT, "second share", fed_secagg_client_receive_share(s.c[1], out, sb)),
          "refused: the same share twice");
    free(out);
    sim_free(&s);
}

static void test_roster_messages(test_ctx *t)
{
    sim s;
    sim_setup(&s, &(sim_cfg){ .n = 5, .t = 3, .d = 16 }, SEED + 31);
    size_t ab = fed_secagg_advertise_bytes(), len = s.roster_len;
    fed_secagg_client *c;
    uint8_t *r = malloc(len + 1);
    fed_secagg_client_init(&c, ROUND, 1000, 3);  /* not in the roster */
    check(t, REFUSED(t, STATUS_PEER, "lacks this client", fed_secagg_client_roster(c, s.roster, len)),
          "refused: a roster without this client");
    fed_secagg_client_free(c);
    fed_secagg_client_init(&c, ROUND, s.ids[2], 3);  /* same id, other keys */
    check(t, REFUSED(t, STATUS_PEER, "another advertisement", fed_secagg_client_roster(c, s.roster, len)),
          "refused: a roster whose entry for this client holds other keys");
    fed_secagg_client_free(c);
    fed_secagg_client_init_seeded(&c, ROUND, s.ids[2], 3, (const uint8_t[32]){0});
    memcpy(r, s.roster, len);
    memcpy(r, s.roster + ab, ab);  /* entry 0 := entry 1: an id twice */
    check(t, REFUSED(t, STATUS_CORRUPT, "ascending", fed_secagg_client_roster(c, r, len)),
          "refused: a roster with an id twice");
    check(t, REFUSED(t, STATUS_CORRUPT, "bytes", fed_secagg_client_roster(c, s.roster, len + 1)) &&
          REFUSED(t, STATUS_CORRUPT, "bytes", fed_secagg_client_roster(c, s.roster, 0)),
          "refused: a roster of a wrong size");
    fed_secagg_client_free(c);
    uint8_t *adv = malloc(2 * ab);
    memcpy(adv, s.roster, ab);
    memcpy(adv + ab, s.roster, ab);
    check(t, REFUSED(t, STATUS_CORRUPT, "two advertisements", fed_secagg_server_roster(ROUND, adv, 2 * ab, r, 2 * ab)),
          "refused: the server gets two advertisements from one id");
    free(adv);
    free(r);
    sim_free(&s);
}

/* An unmask request written by hand (the layout of secagg.h), so it can break the rules. */
static size_t make_request(uint8_t *out, const uint32_t *u3, size_t n3, const uint32_t *drop, size_t nd)
{
    secagg_put32(out, MSG_REQUEST);
    secagg_put32(out + 4, 0);
    secagg_put64(out + 8, ROUND);
    secagg_put32(out + HDR, (uint32_t)n3);
    secagg_put32(out + HDR + 4, (uint32_t)nd);
    for (size_t i = 0; i < n3 + nd; i++) secagg_put32(out + 24 + 4 * i, i < n3 ? u3[i] : drop[i - n3]);
    return 24 + 4 * (n3 + nd);
}

static void test_request_messages(test_ctx *t)
{
    /* U2 = clients 0-5 and 7 (id 2^32-1); 6 dropped before sharing, 7 after. */
    const sim_cfg cfg = { .n = 8, .t = 3, .d = 64, .drop_before = 1u << 6, .drop_after = 1u << 7 };
    sim s;
    status st = sim_setup(&s, &cfg, SEED + 40);
    if (st == STATUS_OK) st = sim_share(&s);
    if (st == STATUS_OK) st = sim_mask(&s);
    check(t, st == STATUS_OK, "a round up to masking (%s)", status_str(st));
    const uint32_t *id = s.ids;
    uint32_t u3[6] = {id[0], id[1], id[2], id[3], id[4], id[5]}, rev[6] = {id[5], id[4], id[3], id[2], id[1], id[0]};
    uint8_t req[128], out[1024];
    size_t rl = fed_secagg_reveal_bytes(7), r8 = fed_secagg_reveal_bytes(8), r6 = fed_secagg_reveal_bytes(6), len;
    fed_secagg_client *c = s.c[0];
    len = make_request(req, u3, 6, (uint32_t[]){id[3], id[7]}, 2);
    check(t, REFUSED(t, STATUS_PEER, "both secrets", fed_secagg_client_reveal(c, req, len, out, r8)),
          "refused: a request naming a client both survivor and dropped");
    len = make_request(req, u3, 6, (uint32_t[]){id[6], id[7]}, 2);
    check(t, REFUSED(t, STATUS_PEER, "partition", fed_secagg_client_reveal(c, req, len, out, r8)),
          "refused: a dropped list naming a client not in U2");
    len = make_request(req, u3, 6, NULL, 0);
    check(t, REFUSED(t, STATUS_PEER, "partition", fed_secagg_client_reveal(c, req, len, out, r6)),
          "refused: a request that omits a dropped member of U2");
    len = make_request(req, u3 + 1, 5, (uint32_t[]){id[0], id[7]}, 2);
    check(t, REFUSED(t, STATUS_PEER, "as dropped", fed_secagg_client_reveal(c, req, len, out, rl)),
          "refused: a request that lists the client itself as dropped");
    len = make_request(req, u3, 2, (uint32_t[]){id[2], id[3], id[4], id[5], id[7]}, 5);
    check(t, REFUSED(t, STATUS_INPUT, "fewer than t", fed_secagg_client_reveal(c, req, len, out, rl)),
          "refused: a request naming fewer than t survivors");
    len = make_request(req, rev, 6, (uint32_t[]){id[7]}, 1);
    check(t, REFUSED(t, STATUS_CORRUPT, "ascending", fed_secagg_client_reveal(c, req, len, out, rl)) &&
          REFUSED(t, STATUS_CORRUPT, "bytes", fed_secagg_client_reveal(c, req, len - 1, out, rl)),
          "refused: an unsorted request, and one a byte short");
    size_t q = fed_secagg_request_bytes(6, 1);
    check(t, REFUSED(t, STATUS_INPUT, "both survivor and dropped",
                     fed_secagg_server_request(ROUND, u3, 6, (uint32_t[]){id[2]}, 1, req, q)),
          "refused: the server builds no request naming a client in both lists");
    len = make_request(req, u3, 6, (uint32_t[]){id[7]}, 1);
    st = fed_secagg_client_reveal(c, req, len, out, rl);
    check(t, st == STATUS_OK && REFUSED(t, STATUS_PEER, "second", fed_secagg_client_reveal(c, req, len, out, rl)),
          "a valid request is answered (%s), a second one refused", status_str(st));
    sim_free(&s);
}

/* The server refuses hostile unmask inputs; each check changes one thing in a copy. */
static void test_unmask_messages(test_ctx *t)
{
    const sim_cfg cfg = { .n = 8, .t = 3, .d = 64, .drop_after = 1u << 7 };
    sim s;
    status st = sim_run(&s, &cfg, SEED + 41);
    size_t mb = fed_secagg_masked_bytes(cfg.d);
    uint64_t sum[64];
    uint8_t *masked = malloc(s.masked_len), *reveals = malloc(s.reveals_len);
    fed_secagg_unmask_in in = s.in;
    in.masked_len -= 8;
    check(t, st == STATUS_OK && REFUSED(t, STATUS_CORRUPT, "masked vectors", fed_secagg_server_unmask(&in, sum)),
          "refused: masked vectors of a wrong size");
    in = s.in;
    in.reveals_len -= 1;
    check(t, REFUSED(t, STATUS_CORRUPT, "reveals", fed_secagg_server_unmask(&in, sum)),
          "refused: reveals of a wrong size");
    in = s.in;
    in.masked = masked;
    memcpy(masked, s.masked, s.masked_len);
    memcpy(masked + mb, masked, mb);
    check(t, REFUSED(t, STATUS_PEER, "the second", fed_secagg_server_unmask(&in, sum)),
          "refused: one survivor's masked vector twice, another's missing");
    memcpy(masked, s.masked, s.masked_len);
    masked[HDR + 8] ^= 1;
    check(t, REFUSED(t, STATUS_PEER, "another U2", fed_secagg_server_unmask(&in, sum)),
          "refused: a masked vector over another U2");
    in = s.in;
    in.reveals = reveals;
    memcpy(reveals, s.reveals, s.reveals_len);
    memcpy(reveals + s.reveal_len, reveals, s.reveal_len);
    check(t, REFUSED(t, STATUS_CORRUPT, "two reveals", fed_secagg_server_unmask(&in, sum)),
          "refused: two reveals from one client");
    in = s.in;
    in.round = ROUND + 1;
    check(t, REFUSED(t, STATUS_CORRUPT, "round", fed_secagg_server_unmask(&in, sum)),
          "refused: unmasking another round's messages");
    st = fed_secagg_server_unmask(&s.in, sum);
    check(t, st == STATUS_OK && memcmp(sum, s.want, sizeof sum) == 0, "the untouched messages unmask (%s)",
          status_str(st));
    free(masked);
    free(reveals);
    sim_free(&s);
}

/* ---- fixed point ------------------------------------------------------------------ */

static void test_encode(test_ctx *t)
{
    uint64_t out[4];
    float nan_at_2[4] = {1, 2, NAN, 4}, inf_at_0[1] = {INFINITY};
    check(t, REFUSED(t, STATUS_INPUT, "element 2 is nan", fed_secagg_encode(out, nan_at_2, 4, 16, 10)) &&
          REFUSED(t, STATUS_INPUT, "not finite", fed_secagg_encode(out, inf_at_0, 1, 16, 10)),
          "refused: encoding NaN and infinity (element and value named)");
    /* f = 20, n = 1000: |x| must stay below (2^63 - 1) / 1000 / 2^20 ~ 8.8e9 */
    float big[2] = {8e9f, -9e9f};
    check(t, REFUSED(t, STATUS_INPUT, "element 1 is -9e+09", fed_secagg_encode(out, big, 2, 20, 1000)),
          "refused: a value whose sum over n clients could reach 2^63");
    /* The largest float a sum of 3 may hold at f = 0 passes; the next one up is refused. */
    const uint64_t limit = (uint64_t)INT64_MAX / 3;
    float top = (float)limit;
    if ((uint64_t)top > limit) top = nextafterf(top, 0);
    float edge[2] = {top, -top}, over[1] = {nextafterf(top, INFINITY)};
    status st = fed_secagg_encode(out, edge, 2, 0, 3);
    uint64_t s3 = 3 * out[0], n3 = 3 * out[1];  /* the sum of 3 such encodings, mod 2^64 */
    double dec[2];
    fed_secagg_decode(dec, (uint64_t[]){s3, n3}, 2, 0);
    check(t, st == STATUS_OK && (int64_t)s3 == 3 * (int64_t)top && dec[0] == 3.0 * top && dec[1] == -3.0 * top &&
          REFUSED(t, STATUS_INPUT, "reaches 2^63", fed_secagg_encode(out, over, 1, 0, 3)),
          "encode: |x| = %.6g sums 3 times without wrapping; the next float up is refused", (double)top);
    float frac[3] = {0.5f, -0.25f, 1.0f / 3};
    st = fed_secagg_encode(out, frac, 3, 8, 2);
    fed_secagg_decode(dec, out, 2, 8);
    check(t, st == STATUS_OK && dec[0] == 0.5 && dec[1] == -0.25 && out[2] == 85,
          "encode: round(x 2^f), two's complement, decoded back (1/3 -> 85 / 256)");
}

int main(void)
{
    test_ctx t = {0};
    test_shamir(&t);
    test_sums(&t);
    test_threshold(&t);
    test_indistinguishable(&t);
    test_share_messages(&t);
    test_roster_messages(&t);
    test_request_messages(&t);
    test_unmask_messages(&t);
    test_encode(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
