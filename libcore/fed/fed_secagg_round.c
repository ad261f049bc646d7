/* fed_secagg_round — the server's side of secure aggregation in a round (fed/secagg.h
 * does the cryptography; this file routes its messages between the ranks), and the
 * server's buffers. After the round messages, the clients answered with
 * advertisements; then:
 *   roster  -> every rank with an advertised client; back: share ciphertexts (U2: those
 *              whose ciphertexts came back whole)
 *   shares  -> each rank the ciphertexts addressed to its clients; back: masked vectors
 *              (U3: those of U2 that came back)
 *   request -> every rank with a client in U3; back: reveals
 * and the server unmasks the sum over U3 from at least t reveals. A round with fewer
 * than t clients at any stage aggregates nothing (logged) and the run goes on.
 *
 * The one design decision: what the server sums is the clients' fixed-point vectors of
 * (w x update, w, clip bit, w x loss), so the weights, the clip count and the mean loss
 * come out of the same unmasking as the update: the server learns sums only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed_impl.h"

status fed_srv_init(fed_run *f, fed_srv *s)
{
    memset(s, 0, sizeof *s);
    int W = f->world;
    s->nworld = W;
    s->out = calloc((size_t)W, sizeof *s->out);
    s->in = calloc((size_t)W, sizeof *s->in);
    s->out_len = calloc((size_t)W, sizeof *s->out_len);
    s->cap = calloc((size_t)W, sizeof *s->cap);
    s->in_len = calloc((size_t)W, sizeof *s->in_len);
    s->ptrs = calloc((size_t)W, sizeof *s->ptrs);
    s->expect = calloc((size_t)W, sizeof *s->expect);
    s->sel = calloc((size_t)f->nclients, sizeof *s->sel);
    s->got = calloc((size_t)f->nclients, sizeof *s->got);
    s->upd = calloc((size_t)f->nclients, sizeof *s->upd);
    s->w = calloc((size_t)f->nclients, sizeof *s->w);
    s->scratch = calloc((size_t)f->nclients, sizeof *s->scratch);
    if (!s->out || !s->in || !s->out_len || !s->cap || !s->in_len || !s->ptrs || !s->expect || !s->sel || !s->got ||
        !s->upd || !s->w || !s->scratch)
        return STATUS_NOMEM;
    for (int r = 0; r < W; r++) {
        if (W > 1 && r == 0) continue;
        s->cap[r] = f->msg_cap;
        s->out[r] = malloc(f->msg_cap + 1);
        s->in[r] = malloc(f->msg_cap + 1);
        if (!s->out[r] || !s->in[r]) return STATUS_NOMEM;
    }
    if (W > 1) {  /* rank 0 keeps only a header's room (the stop message goes to the others) */
        s->out[0] = malloc(64), s->in[0] = malloc(64);
        if (!s->out[0] || !s->in[0]) return STATUS_NOMEM;
    }
    if (f->secagg) {
        size_t n = (size_t)f->nclients, e = f->d + FED_SA_EXTRA;
        s->sa_cap = fed_secagg_roster_bytes(n) + n * fed_secagg_masked_bytes(e) + n * fed_secagg_reveal_bytes(n) +
                    fed_secagg_request_bytes(n, n);
        s->sa_buf = malloc(s->sa_cap);
        s->sa_sum = malloc(e * sizeof *s->sa_sum);
        s->sa_dec = malloc(e * sizeof *s->sa_dec);
        if (!s->sa_buf || !s->sa_sum || !s->sa_dec) return STATUS_NOMEM;
    }
    if (!f->agg) {
        f->agg = calloc(f->d + FED_SA_EXTRA, sizeof *f->agg);
        if (!f->agg) return STATUS_NOMEM;
    }
    return STATUS_OK;
}

void fed_srv_free(fed_srv *s)
{
    for (int r = 0; s->out && r < s->nworld; r++) free(s->out[r]), free(s->in[r]);
    free(s->out), free(s->in), free(s->out_len), free(s->cap), free(s->in_len), free(s->ptrs), free(s->expect);
    free(s->sel), free(s->got), free(s->upd), free(s->w), free(s->scratch);
    free(s->sa_buf), free(s->sa_sum), free(s->sa_dec);
    memset(s, 0, sizeof *s);
}

int fed_sel_index(const fed_srv *s, int32_t client)
{
    int lo = 0, hi = s->nsel - 1;
    while (lo <= hi) {  /* sel is ascending */
        int mid = (lo + hi) / 2;
        if (s->sel[mid] == client) return mid;
        if (s->sel[mid] < client) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The messages of one kind to the ranks: out[r] = header + body(r) built by the caller. */
static void fed_sa_head(fed_srv *s, int r, uint32_t kind, int64_t round)
{
    fed_msg_head h = { FED_MAGIC, kind, round, 0, 0 };
    memcpy(s->out[r], &h, sizeof h);
    s->out_len[r] = sizeof h;
}

static int fed_host(const fed_run *f, uint32_t client)
{
    return fed_client_rank(f, (int)client);
}

/* The frames of every rank's reply of one kind and round, rank by rank: zero-initialise
 * `it`, then each call gives the next frame (its rank in it->r); false after the last. */
typedef struct fed_sa_frames {
    int r;                     /* the rank whose reply is being read */
    size_t at;                 /* the next frame's offset in it */
    bool open;                 /* r's reply passed fed_reply_ok */
} fed_sa_frames;

static bool fed_sa_frames_next(const fed_run *f, const fed_srv *s, uint32_t kind, int64_t round, fed_sa_frames *it,
                               uint32_t *id, const uint8_t **p, size_t *len)
{
    for (;;) {
        if (it->open && fed_frame_next(s->in[it->r], (size_t)s->in_len[it->r], &it->at, id, p, len)) return true;
        if (it->open) it->r++, it->open = false;
        fed_msg_head h;
        while (!it->open && it->r < f->world) {
            it->open = fed_reply_ok(s, it->r, kind, round, &h);
            if (!it->open) it->r++;
        }
        if (!it->open) return false;
        it->at = sizeof h;
    }
}

/* The advertisements: validated one by one, then the roster (sorted by secagg id). */
static size_t fed_sa_roster(fed_run *f, fed_srv *s, int64_t round, uint8_t *roster)
{
    size_t an = fed_secagg_advertise_bytes(), n = 0;
    uint8_t *adv = s->sa_buf;  /* the advertisements, then the roster's copy */
    fed_sa_frames it = { 0 };
    uint32_t id;
    const uint8_t *p;
    size_t len;
    while (fed_sa_frames_next(f, s, FED_MSG_SA_ADVERTISE, round, &it, &id, &p, &len)) {
        int i = fed_sel_index(s, (int32_t)id);
        uint8_t one[256];
        uint32_t sid = 0;
        if (len == an) memcpy(&sid, p + 4, 4);
        if (i < 0 || s->got[i] || fed_host(f, id) != it.r || len != an || sid != id + 1 ||
            fed_secagg_server_roster((uint64_t)round, p, len, one, an) != STATUS_OK) {
            log_warn("fed: round %lld: rank %d's advertisement for client %u refused", (long long)round, it.r, id);
            continue;
        }
        s->got[i] = true;
        memcpy(adv + n * an, p, an);
        n++;
    }
    if (n && fed_secagg_server_roster((uint64_t)round, adv, n * an, roster, n * an) != STATUS_OK) return 0;
    return n;
}

status fed_secagg_round(fed_run *f, fed_srv *s, int64_t round, int t, fed_round_stats *rs)
{
    size_t an = fed_secagg_advertise_bytes(), sb = fed_secagg_share_bytes(), e = f->d + FED_SA_EXTRA;
    size_t mb = fed_secagg_masked_bytes(e);
    uint8_t *roster = malloc(fed_secagg_roster_bytes((size_t)f->nclients));
    uint32_t *u2 = calloc((size_t)f->nclients + 1, sizeof *u2), *u3 = calloc((size_t)f->nclients + 1, sizeof *u3);
    uint32_t *drop = calloc((size_t)f->nclients + 1, sizeof *drop);
    bool *in_u2 = calloc((size_t)f->nclients, sizeof *in_u2);
    status st = STATUS_OK;
    size_t n2 = 0, n3 = 0, nd = 0, nrev = 0;
    if (!roster || !u2 || !u3 || !drop || !in_u2) {
        st = STATUS_NOMEM;
        goto free_lists;
    }
    size_t n1 = fed_sa_roster(f, s, round, roster);
    for (int i = 0; i < s->nsel; i++) rs->dropped += !s->got[i];  /* trained nothing they could advertise */
    if (n1 < (size_t)t) {
        log_warn("fed: round %lld: %zu of %d sampled clients advertised, fewer than the threshold %d: nothing is "
                 "aggregated", (long long)round, n1, s->nsel, t);
        goto free_lists;
    }
    /* the roster to every rank hosting a member; the shares back */
    for (int r = 0; r < f->world; r++) {
        s->out_len[r] = 0;
        if (f->world > 1 && r == 0) continue;
        bool any = false;
        for (size_t k = 0; k < n1 && !any; k++) {
            uint32_t sid;
            memcpy(&sid, roster + k * an + 4, 4);
            any = fed_host(f, sid - 1) == r;
        }
        if (!any) continue;
        fed_sa_head(s, r, FED_MSG_SA_ROSTER, round);
        memcpy(s->out[r] + s->out_len[r], roster, n1 * an);
        s->out_len[r] += n1 * an;
    }
    TRY(fed_exchange(f, s));
    for (int r = 0; r < f->world; r++) s->out_len[r] = 0;
    fed_sa_frames it = { 0 };
    uint32_t id;
    const uint8_t *p;
    size_t len;
    while (fed_sa_frames_next(f, s, FED_MSG_SA_SHARES, round, &it, &id, &p, &len)) {  /* route each ciphertext */
        int i = fed_sel_index(s, (int32_t)id);
        if (i < 0 || fed_host(f, id) != it.r || in_u2[id] || len != (n1 - 1) * sb) continue;
        bool whole = true;
        for (size_t k = 0; k < n1 - 1 && whole; k++) {
            uint32_t from, to;
            whole = fed_secagg_share_route(p + k * sb, sb, &from, &to) == STATUS_OK && from == id + 1 && to >= 1 &&
                    (int)to <= f->nclients && fed_sel_index(s, (int32_t)to - 1) >= 0;
        }
        if (!whole) {
            log_warn("fed: round %lld: client %u's shares are malformed; it is left out", (long long)round, id);
            continue;
        }
        for (size_t k = 0; k < n1 - 1; k++) {
            uint32_t from, to;
            fed_secagg_share_route(p + k * sb, sb, &from, &to);
            int dr = fed_host(f, to - 1);
            if (!s->out_len[dr]) fed_sa_head(s, dr, FED_MSG_SA_SHARES, round);
            size_t o = s->out_len[dr];
            CHECK(o + 8 + sb <= s->cap[dr], "the routed shares fit");
            uint32_t fh[2] = { to - 1, (uint32_t)sb };
            memcpy(s->out[dr] + o, fh, 8);
            memcpy(s->out[dr] + o + 8, p + k * sb, sb);
            s->out_len[dr] = o + 8 + sb;
        }
        in_u2[id] = true;
        u2[n2++] = id + 1;
    }
    if (n2 < (size_t)t) {
        log_warn("fed: round %lld: %zu clients shared their keys, fewer than the threshold %d: nothing is aggregated",
                 (long long)round, n2, t);
        rs->dropped += (int64_t)(n1 - n2);
        goto free_lists;
    }
    /* a rank whose clients receive nothing still masks: it gets an empty share message */
    for (int r = 0; r < f->world; r++)
        if (!s->out_len[r] && !(f->world > 1 && r == 0)) {
            for (size_t k = 0; k < n2; k++)
                if (fed_host(f, u2[k] - 1) == r) {
                    fed_sa_head(s, r, FED_MSG_SA_SHARES, round);
                    break;
                }
        }
    TRY(fed_exchange(f, s));
    uint8_t *masked = s->sa_buf;
    it = (fed_sa_frames){ 0 };
    while (fed_sa_frames_next(f, s, FED_MSG_SA_MASKED, round, &it, &id, &p, &len)) {
        if ((int)id >= f->nclients || !in_u2[id] || fed_host(f, id) != it.r || len != mb) continue;
        bool twice = false;
        for (size_t k = 0; k < n3; k++) twice = twice || u3[k] == id + 1;
        if (twice) continue;
        memcpy(masked + n3 * mb, p, mb);
        u3[n3++] = id + 1;
    }
    for (size_t k = 0; k < n2; k++) {
        bool in = false;
        for (size_t j = 0; j < n3 && !in; j++) in = u3[j] == u2[k];
        if (!in) drop[nd++] = u2[k];
    }
    rs->dropped += (int64_t)(n1 - n2) + (int64_t)nd;
    if (n3 < (size_t)t) {
        log_warn("fed: round %lld: %zu masked vectors arrived, fewer than the threshold %d: nothing is aggregated",
                 (long long)round, n3, t);
        goto free_lists;
    }
    /* the unmask request to every rank hosting a survivor; the reveals back */
    uint8_t *request = masked + n3 * mb;
    size_t rqb = fed_secagg_request_bytes(n3, nd);
    TRY(fed_secagg_server_request((uint64_t)round, u3, n3, drop, nd, request, rqb));
    for (int r = 0; r < f->world; r++) {
        s->out_len[r] = 0;
        if (f->world > 1 && r == 0) continue;
        for (size_t k = 0; k < n3; k++)
            if (fed_host(f, u3[k] - 1) == r) {
                fed_sa_head(s, r, FED_MSG_SA_REQUEST, round);
                memcpy(s->out[r] + s->out_len[r], request, rqb);
                s->out_len[r] += rqb;
                break;
            }
    }
    TRY(fed_exchange(f, s));
    uint8_t *reveals = request + rqb;
    size_t rb = fed_secagg_reveal_bytes(n3 + nd);
    it = (fed_sa_frames){ 0 };
    while (fed_sa_frames_next(f, s, FED_MSG_SA_REVEALS, round, &it, &id, &p, &len))
        if (len == rb && fed_host(f, id) == it.r && (size_t)(reveals + (nrev + 1) * rb - s->sa_buf) <= s->sa_cap)
            memcpy(reveals + nrev++ * rb, p, rb);
    fed_secagg_unmask_in ui = { .round = (uint64_t)round, .t = (uint32_t)t, .d = e, .roster = roster,
                                .roster_len = n1 * an, .request = request, .request_len = rqb, .masked = masked,
                                .masked_len = n3 * mb, .reveals = reveals, .reveals_len = nrev * rb };
    if (fed_secagg_server_unmask(&ui, s->sa_sum) != STATUS_OK) {
        log_warn("fed: round %lld: the sum could not be unmasked (%zu reveals, threshold %d): nothing is aggregated",
                 (long long)round, nrev, t);
        goto free_lists;
    }
    fed_secagg_decode(s->sa_dec, s->sa_sum, e, f->frac_bits);
    double W = s->sa_dec[f->d];
    rs->aggregated = (int64_t)n3;
    rs->bits = s->sa_dec[f->d + 1];
    rs->loss = s->sa_dec[f->d + 2], rs->wsum = W;
    /* DP: the sum is divided by the expected count in fed_dp_finish; otherwise the weighted mean */
    for (size_t i = 0; i < f->d; i++) f->agg[i] = (float)(f->dp ? s->sa_dec[i] : s->sa_dec[i] / W);
free_lists:
    free(roster), free(u2), free(u3), free(drop), free(in_u2);
    return st;
}
