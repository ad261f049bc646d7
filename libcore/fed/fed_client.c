/* fed_client — a rank's clients: each round message names the clients of this rank the
 * server sampled; each one starts from the global model, takes fed.local_steps steps of
 * the model's optimizer on batches of its own shard (the trainer's one-batch step,
 * train_step_batch, or DP-SGD's step, fed_dpsgd.c), and answers with its update (local -
 * global: parameters, then the model's state such as batch-norm statistics), clipped
 * and, under distributed DP, noised. Under secure aggregation the answers are the protocol's messages
 * (fed/secagg.h) over four exchanges instead of the update itself.
 *
 * The one design decision: a client's batches are a counter-based function of (seed,
 * client, round) — its shard shuffled by the stream (seed, client, RNG_PURPOSE_FED,
 * round), cycled for E x B samples — and its optimizer state starts afresh every round
 * (FedAvg's clients keep nothing between rounds), so a client's update depends only on
 * the global model and the round: what makes a resumed run bit-identical. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed_impl.h"

/* Secure aggregation: this rank's clients of one round, between the exchanges. */
typedef struct fed_sa_local {
    int n;                     /* clients of this rank in the round */
    int64_t round;
    int32_t *ids;              /* (n) */
    bool *ok;                  /* (n) trained, encoded and advertised */
    bool *masked;              /* (n) sent a masked vector */
    fed_secagg_client **cl;    /* (n) */
    uint64_t *x;               /* (n, e) encoded vectors, e = d + FED_SA_EXTRA */
} fed_sa_local;

/* Frames inside a message: id u32 | len u32 | bytes. */
static bool fed_frame_put(uint8_t *buf, size_t cap, size_t *at, uint32_t id, const void *data, size_t len)
{
    if (*at + 8 + len > cap || len > UINT32_MAX) return false;
    uint32_t h[2] = { id, (uint32_t)len };
    memcpy(buf + *at, h, 8);
    if (len) memcpy(buf + *at + 8, data, len);
    *at += 8 + len;
    return true;
}

/* The next frame of buf[0..len) at *at: false at the end or for a frame that overruns. */
bool fed_frame_next(const uint8_t *buf, size_t len, size_t *at, uint32_t *id, const uint8_t **data, size_t *n)
{
    if (*at + 8 > len) return false;
    uint32_t h[2];
    memcpy(h, buf + *at, 8);
    if (h[1] > len - *at - 8) return false;
    *id = h[0], *n = h[1], *data = buf + *at + 8;
    *at += 8 + (size_t)h[1];
    return true;
}

/* The client's shard in the order of this round. */
static int64_t fed_client_order(fed_run *f, int client, int64_t round)
{
    int64_t first = f->shard_start[client], k = f->shard_start[client + 1] - first;
    for (int64_t i = 0; i < k; i++) f->perm[i] = f->shard[first + i];
    rng r;
    rng_init(&r, f->seed, (uint32_t)client, RNG_PURPOSE_FED, (uint64_t)round);
    for (int64_t i = k - 1; i > 0; i--) {  /* Fisher-Yates */
        int64_t j = (int64_t)(rng_u64(&r) % (uint64_t)(i + 1));
        int64_t t = f->perm[i];
        f->perm[i] = f->perm[j], f->perm[j] = t;
    }
    return k;
}

static void fed_fill_batch(fed_run *f, int64_t k, int step)
{
    const fed_data *d = &f->train;
    int B = f->local_batch;
    for (int j = 0; j < B; j++) fed_batch_put(&f->batch, j, d, f->perm[((int64_t)step * B + j) % k]);
}

/* Local training of `client` from f->global; the update (d floats) into f->upd. */
static status fed_local_train(fed_run *f, int client, int64_t round, double lr, double *loss)
{
    param_buffers *pb = model_buffers(&f->m);
    memcpy(pb->params, f->global, f->np * sizeof(float));
    if (f->ns) memcpy(model_state(&f->m), f->global + f->np, f->ns * sizeof(float));
    if (pb->m) memset(pb->m, 0, f->np * sizeof(float));
    if (pb->v) memset(pb->v, 0, f->np * sizeof(float));
    double sum = 0;
    if (f->dpsgd_clip > 0) {  /* sample-level DP-SGD: Poisson batches, per-example clipping, noise */
        int n = 0;
        for (int s = 0; s < f->local_steps; s++) {
            double l;
            TRY(fed_dpsgd_step(f, client, round, s, lr, &l));
            if (isfinite(l)) sum += l, n++;
        }
        *loss = n ? sum / n : NAN;
        goto update;
    }
    int64_t k = fed_client_order(f, client, round);
    for (int s = 0; s < f->local_steps; s++) {
        fed_fill_batch(f, k, s);
        train_step_stats ss;
        TRY(train_step_batch(&f->m, &f->opt, &f->batch, lr, s + 1, &ss));
        sum += ss.loss;
    }
    *loss = sum / f->local_steps;
update:
    for (size_t i = 0; i < f->np; i++) f->upd[i] = pb->params[i] - f->global[i];
    const float *st = model_state(&f->m);
    for (size_t i = 0; i < f->ns; i++) f->upd[f->np + i] = st[i] - f->global[f->np + i];
    return STATUS_OK;
}

/* One client's round: train, clip, noise (distributed DP), the planted faults. */
static status fed_client_update(fed_run *f, const fed_msg_round *rm, int client, fed_msg_client *mc)
{
    int64_t round = rm->h.round;
    memset(mc, 0, sizeof *mc);
    mc->id = client, mc->round = round, mc->n = f->d;
    if (fed_planted(f, FED_PLANT_FAIL, client, round)) {
        log_warn("fed: client %d fails in round %lld (fed.plant)", client, (long long)round);
        return STATUS_OK;  /* ok = 0: no update */
    }
    status st = fed_local_train(f, client, round, rm->lr, &mc->loss);
    if (st != STATUS_OK) {
        log_warn("fed: client %d failed in round %lld (its local training: %s); it sends no update", client,
                 (long long)round, status_str(st));
        return STATUS_OK;
    }
    mc->ok = 1;
    mc->weight = rm->clip > 0 ? 1 : (double)(f->shard_start[client + 1] - f->shard_start[client]);
    mc->norm = fed_l2norm(f->upd, f->d);
    if (rm->clip > 0) {
        mc->bit = fed_clip_bit(mc->norm, rm->clip);
        fed_clip(f->upd, f->d, rm->clip);
    }
    if (rm->noise_std > 0) fed_noise_add(f->upd, f->d, rm->noise_std, f->seed, (uint32_t)client, (uint64_t)round);
    if (fed_planted(f, FED_PLANT_SCALE, client, round))
        for (size_t i = 0; i < f->d; i++) f->upd[i] *= -100.0f;
    if (fed_planted(f, FED_PLANT_NORM, client, round))
        for (size_t i = 0; i < f->d; i++) f->upd[i] *= 1e4f;
    if (fed_planted(f, FED_PLANT_NAN, client, round)) f->upd[f->d / 2] = NAN;
    if (fed_planted(f, FED_PLANT_SIZE, client, round)) mc->n = f->d - 1;
    if (fed_planted(f, FED_PLANT_STALE, client, round)) mc->round = round - 1;
    return STATUS_OK;
}

static void fed_sa_free(fed_run *f)
{
    fed_sa_local *s = f->sa;
    if (!s) return;
    for (int i = 0; i < s->n; i++) fed_secagg_client_free(s->cl[i]);
    free(s->ids), free(s->ok), free(s->masked), free(s->cl), free(s->x), free(s);
    f->sa = NULL;
}

static status fed_sa_start(fed_run *f, const fed_msg_round *rm, const int32_t *ids)
{
    fed_sa_free(f);
    fed_sa_local *s = calloc(1, sizeof *s);
    if (!s) return STATUS_NOMEM;
    f->sa = s;
    int n = rm->h.count;
    size_t e = f->d + FED_SA_EXTRA;
    s->n = n, s->round = rm->h.round;
    s->ids = calloc((size_t)n + 1, sizeof *s->ids);
    s->ok = calloc((size_t)n + 1, sizeof *s->ok);
    s->masked = calloc((size_t)n + 1, sizeof *s->masked);
    s->cl = calloc((size_t)n + 1, sizeof *s->cl);
    s->x = malloc(((size_t)n + 1) * e * sizeof *s->x);
    if (!s->ids || !s->ok || !s->masked || !s->cl || !s->x) return STATUS_NOMEM;
    memcpy(s->ids, ids, (size_t)n * sizeof *ids);
    return STATUS_OK;
}

/* The ROUND message: train every named client and answer with the updates (plain) or
 * the advertisements (secure aggregation). */
static status fed_client_on_round(fed_run *f, const uint8_t *in, size_t in_len, size_t *out_len)
{
    fed_msg_round rm;
    memcpy(&rm, in, sizeof rm);
    size_t need = sizeof rm + 4 * (size_t)rm.h.count + 4 * f->d;
    if (rm.h.count < 0 || rm.h.count > f->nclients || rm.d != f->d || in_len != need) {
        log_error("fed: a round message of %zu bytes for %d clients and %llu floats; expected %zu bytes, %zu floats",
                  in_len, rm.h.count, (unsigned long long)rm.d, need, f->d);
        return STATUS_CORRUPT;
    }
    const int32_t *ids = (const int32_t *)(in + sizeof rm);
    memcpy(f->global, in + sizeof rm + 4 * (size_t)rm.h.count, f->d * sizeof(float));
    if (fed_planted(f, FED_PLANT_KILL, f->rank, rm.h.round)) {
        log_warn("fed: rank %d ends its process in round %lld (fed.plant kill)", f->rank, (long long)rm.h.round);
        fflush(stdout), fflush(stderr);
        raise(SIGKILL);
    }
    fed_msg_head h = { FED_MAGIC, rm.secagg ? FED_MSG_SA_ADVERTISE : FED_MSG_UPDATES, rm.h.round, 0, 0 };
    size_t at = sizeof h;
    if (rm.secagg) TRY(fed_sa_start(f, &rm, ids));
    size_t e = f->d + FED_SA_EXTRA;
    for (int i = 0; i < rm.h.count; i++) {
        int c = ids[i];
        if (c < 0 || c >= f->nclients || fed_client_rank(f, c) != f->rank) {
            log_error("fed: the round message names client %d, which rank %d does not host", c, f->rank);
            return STATUS_CORRUPT;
        }
        fed_msg_client mc;
        TRY(fed_client_update(f, &rm, c, &mc));
        if (!rm.secagg) {
            size_t bytes = mc.ok ? mc.n * sizeof(float) : 0;
            CHECK(at + sizeof mc + bytes <= f->msg_cap, "the update message fits its buffer");
            memcpy(f->msg + at, &mc, sizeof mc);
            if (bytes) memcpy(f->msg + at + sizeof mc, f->upd, bytes);
            at += sizeof mc + bytes;
            h.count++;
            continue;
        }
        fed_sa_local *s = f->sa;
        if (!mc.ok) continue;
        /* the vector summed: w x update, w, the clip bit, w x loss; the bit's noise share
         * (distributed DP with adaptive clipping) from the client's own stream */
        float *v = f->upd;
        for (size_t j = 0; j < f->d; j++) v[j] = (float)(v[j] * mc.weight);
        v[f->d] = (float)mc.weight;
        v[f->d + 1] = (float)mc.bit;
        if (rm.bit_noise_std > 0)
            fed_noise_add(v + f->d + 1, 1, rm.bit_noise_std, f->seed, (uint32_t)c, (uint64_t)rm.h.round | (1ull << 44));
        v[f->d + 2] = (float)(mc.loss * mc.weight);
        if (fed_secagg_encode(s->x + (size_t)i * e, v, e, rm.frac_bits, (uint32_t)rm.secagg_n) != STATUS_OK) {
            log_warn("fed: client %d's update does not fit the fixed point (secagg.frac_bits = %d); it drops out of "
                     "round %lld", c, rm.frac_bits, (long long)rm.h.round);
            continue;
        }
        TRY(fed_secagg_client_init(&s->cl[i], (uint64_t)rm.h.round, (uint32_t)c + 1, (uint32_t)rm.secagg_t));
        uint8_t adv[256];
        size_t an = fed_secagg_advertise_bytes();
        TRY(fed_secagg_client_advertise(s->cl[i], adv, an));
        CHECK(fed_frame_put(f->msg, f->msg_cap, &at, (uint32_t)c, adv, an), "the advertisements fit");
        s->ok[i] = true;
        h.count++;
    }
    memcpy(f->msg, &h, sizeof h);
    *out_len = at;
    return STATUS_OK;
}

static int fed_sa_index(const fed_sa_local *s, uint32_t client)
{
    for (int i = 0; i < s->n; i++)
        if ((uint32_t)s->ids[i] == client) return i;
    return -1;
}

/* ROSTER: each advertised client checks the roster and writes its share ciphertexts. */
static status fed_client_on_roster(fed_run *f, const uint8_t *body, size_t len, fed_msg_head *h, size_t *at)
{
    fed_sa_local *s = f->sa;
    size_t n = len / fed_secagg_advertise_bytes();
    size_t bytes = n > 0 ? (n - 1) * fed_secagg_share_bytes() : 0;
    for (int i = 0; i < s->n; i++) {
        if (!s->ok[i]) continue;
        if (fed_secagg_client_roster(s->cl[i], body, len) != STATUS_OK) {
            s->ok[i] = false;  /* refused (logged): this client stops here */
            continue;
        }
        CHECK(*at + 8 + bytes <= f->msg_cap, "the shares fit");
        if (fed_secagg_client_share(s->cl[i], f->msg + *at + 8, bytes) != STATUS_OK) {
            s->ok[i] = false;
            continue;
        }
        uint32_t fh[2] = { (uint32_t)s->ids[i], (uint32_t)bytes };
        memcpy(f->msg + *at, fh, 8);
        *at += 8 + bytes;
        h->count++;
    }
    return STATUS_OK;
}

/* SHARES: the ciphertexts addressed to this rank's clients; then the masked vectors. */
static status fed_client_on_shares(fed_run *f, const uint8_t *body, size_t len, fed_msg_head *h, size_t *at)
{
    fed_sa_local *s = f->sa;
    size_t off = 0, n;
    uint32_t to;
    const uint8_t *ct;
    while (fed_frame_next(body, len, &off, &to, &ct, &n)) {
        int i = fed_sa_index(s, to);
        if (i < 0 || !s->ok[i]) continue;
        if (fed_secagg_client_receive_share(s->cl[i], ct, n) != STATUS_OK) continue;  /* refused, logged */
    }
    size_t e = f->d + FED_SA_EXTRA, bytes = fed_secagg_masked_bytes(e);
    for (int i = 0; i < s->n; i++) {
        if (!s->ok[i]) continue;
        if (fed_planted(f, FED_PLANT_DROP, s->ids[i], s->round)) {
            log_warn("fed: client %d drops out of round %lld after sharing (fed.plant)", s->ids[i], (long long)s->round);
            continue;
        }
        CHECK(*at + 8 + bytes <= f->msg_cap, "the masked vectors fit");
        if (fed_secagg_client_mask(s->cl[i], s->x + (size_t)i * e, e, f->msg + *at + 8, bytes) != STATUS_OK) continue;
        uint32_t fh[2] = { (uint32_t)s->ids[i], (uint32_t)bytes };
        memcpy(f->msg + *at, fh, 8);
        *at += 8 + bytes;
        s->masked[i] = true;
        h->count++;
    }
    return STATUS_OK;
}

/* REQUEST: the clients that masked reveal their shares. */
static status fed_client_on_request(fed_run *f, const uint8_t *body, size_t len, fed_msg_head *h, size_t *at)
{
    fed_sa_local *s = f->sa;
    if (len < 24) return STATUS_CORRUPT;
    uint32_t counts[2];
    memcpy(counts, body + 16, 8);
    size_t bytes = fed_secagg_reveal_bytes((size_t)counts[0] + counts[1]);
    for (int i = 0; i < s->n; i++) {
        if (!s->masked[i]) continue;
        if (*at + 8 + bytes > f->msg_cap) return STATUS_CORRUPT;
        if (fed_secagg_client_reveal(s->cl[i], body, len, f->msg + *at + 8, bytes) != STATUS_OK) continue;
        uint32_t fh[2] = { (uint32_t)s->ids[i], (uint32_t)bytes };
        memcpy(f->msg + *at, fh, 8);
        *at += 8 + bytes;
        h->count++;
    }
    return STATUS_OK;
}

status fed_client_round(fed_run *f, const uint8_t *in, size_t in_len, size_t *out_len)
{
    fed_msg_head h;
    if (in_len < sizeof h) return STATUS_CORRUPT;
    memcpy(&h, in, sizeof h);
    if (h.magic != FED_MAGIC) {
        log_error("fed: a message without the federated magic (%zu bytes)", in_len);
        return STATUS_CORRUPT;
    }
    if (h.kind == FED_MSG_ROUND) return fed_client_on_round(f, in, in_len, out_len);
    fed_sa_local *s = f->sa;
    if (!s || s->round != h.round) {
        log_error("fed: a secure-aggregation message of round %lld, which rank %d did not start", (long long)h.round,
                  f->rank);
        return STATUS_CORRUPT;
    }
    static const uint32_t reply[] = { [FED_MSG_SA_ROSTER] = FED_MSG_SA_SHARES, [FED_MSG_SA_SHARES] = FED_MSG_SA_MASKED,
                                      [FED_MSG_SA_REQUEST] = FED_MSG_SA_REVEALS };
    if (h.kind != FED_MSG_SA_ROSTER && h.kind != FED_MSG_SA_SHARES && h.kind != FED_MSG_SA_REQUEST) {
        log_error("fed: a message of kind %u where a secure-aggregation phase was expected", h.kind);
        return STATUS_CORRUPT;
    }
    fed_msg_head out = { FED_MAGIC, reply[h.kind], h.round, 0, 0 };
    size_t at = sizeof out;
    const uint8_t *body = in + sizeof h;
    size_t len = in_len - sizeof h;
    if (h.kind == FED_MSG_SA_ROSTER) TRY(fed_client_on_roster(f, body, len, &out, &at));
    else if (h.kind == FED_MSG_SA_SHARES) TRY(fed_client_on_shares(f, body, len, &out, &at));
    else TRY(fed_client_on_request(f, body, len, &out, &at));
    if (h.kind == FED_MSG_SA_REQUEST) fed_sa_free(f);  /* the round's secrets go */
    memcpy(f->msg, &out, sizeof out);
    *out_len = at;
    return STATUS_OK;
}

status fed_client_loop(fed_run *f)
{
    double wait = 4 * f->round_timeout + config_float(f->cfg, "comm.timeout");
    for (;;) {
        size_t got = 0, out = 0;
        TRY(comm_star_recv(&f->star, f->in, f->msg_cap, &got, FED_TAG_DOWN, wait));
        fed_msg_head h;
        if (got < sizeof h) return STATUS_CORRUPT;
        memcpy(&h, f->in, sizeof h);
        if (h.magic == FED_MAGIC && h.kind == FED_MSG_STOP) {
            f->lost_seen = h.reserved > 0;
            break;
        }
        status st = fed_client_round(f, f->in, got, &out);
        if (st != STATUS_OK) {
            fed_sa_free(f);
            return st;
        }
        TRY(comm_star_send(&f->star, f->msg, out, FED_TAG_UP));
    }
    fed_sa_free(f);
    return STATUS_OK;
}
