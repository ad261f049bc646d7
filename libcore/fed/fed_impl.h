/* fed_impl — what the files of the round engine share: the run, the data in memory,
 * the planted faults of the tests and the wire layouts of the round's messages.
 *
 * Messages (host byte order: the ranks of one job run one build, runtime_version.c):
 *   round  server -> rank   fed_msg_round, then ids[nclients] (int32), then the global
 *                           model (d floats: parameters, then the model's state)
 *   update rank -> server   fed_msg_head, then per client fed_msg_client and its vector
 *                           (n floats, n = the client's claim, checked by the server)
 *   secure aggregation: the round message (kind SECAGG_ROUND) gets advertisements, then
 *   the roster, the routed shares, the masked vectors and the unmask request travel in
 *   fed_msg_head frames (fed_client.c, fed_server.c); a rank's frame carries its
 *   clients' messages one after the other, each preceded by its client id and length. */
#ifndef NEBULA_FED_IMPL_H
#define NEBULA_FED_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/star.h"
#include "fed.h"
#include "fed/part.h"
#include "fed/secagg.h"
#include "nn/model.h"
#include "record/tfevent.h"
#include "train/train.h"

#define FED_MAGIC 0x4e464544u  /* "NFED" */

enum fed_msg_kind {
    FED_MSG_ROUND = 1,         /* train and send updates */
    FED_MSG_STOP,              /* the run is over */
    FED_MSG_UPDATES,           /* a rank's clients' updates (plain) */
    FED_MSG_SA_ADVERTISE,      /* secagg round 0: advertisements */
    FED_MSG_SA_ROSTER,         /* the roster, server -> rank */
    FED_MSG_SA_SHARES,         /* round 1: share ciphertexts */
    FED_MSG_SA_MASKED,         /* round 2: masked vectors */
    FED_MSG_SA_REQUEST,        /* round 3: the unmask request, server -> rank */
    FED_MSG_SA_REVEALS,        /* round 3: reveals */
};

/* The tags of the star's messages: down (server to rank) and up. Every message names
 * its kind and round, checked by the receiver; a member the server lost is never read
 * from again (comm/star.h), so no late message meets a later phase. */
#define FED_TAG_DOWN 0x4644
#define FED_TAG_UP   0x4655

typedef struct fed_msg_head {
    uint32_t magic;            /* FED_MAGIC */
    uint32_t kind;             /* fed_msg_kind */
    int64_t round;             /* the round it belongs to */
    int32_t count;             /* clients in it (or entries) */
    int32_t reserved;
} fed_msg_head;

typedef struct fed_msg_round {
    fed_msg_head h;            /* kind ROUND or STOP; count = clients selected on the receiving rank */
    int32_t secagg;            /* 1: the secure-aggregation phases follow */
    int32_t secagg_t;          /* their threshold */
    int32_t secagg_n;          /* clients sampled in all (the encoder's bound on summands) */
    int32_t frac_bits;         /* fixed point */
    double clip;               /* C: clip the update to this norm (0: no clipping) */
    double noise_std;          /* distributed DP: each client's noise share per element (0: none) */
    double bit_noise_std;      /* adaptive clipping under distributed DP: the share on the bit */
    double lr;                 /* the clients' learning rate */
    uint64_t d;                /* floats of the global model that follows */
} fed_msg_round;

typedef struct fed_msg_client {
    int32_t id;                /* the client */
    int32_t ok;                /* 1: an update follows; 0: the client failed (no vector) */
    int64_t round;             /* the round it was computed for */
    double weight;             /* FedAvg weight: its samples (1 under DP) */
    double loss;               /* mean local training loss */
    double norm;               /* L2 norm of the update before clipping */
    int32_t bit;               /* adaptive clipping: norm <= C */
    int32_t pad;
    uint64_t n;                /* floats that follow */
} fed_msg_client;

/* Extra elements of a securely aggregated vector after the d of the update: the
 * weight, the adaptive-clipping bit and weight x loss (their sums are what the server needs). */
#define FED_SA_EXTRA 3

/* A planted fault (fed.plant), for tests. */
typedef enum fed_plant_kind {
    FED_PLANT_SCALE = 0,       /* update x -100 */
    FED_PLANT_NAN,             /* a NaN in the update */
    FED_PLANT_SIZE,            /* one float short */
    FED_PLANT_STALE,           /* the previous round's number */
    FED_PLANT_NORM,            /* update x 1e4 (beyond any clip) */
    FED_PLANT_FAIL,            /* the client fails: no update */
    FED_PLANT_DROP,            /* secagg: drops after sharing (no masked vector) */
    FED_PLANT_KILL,            /* rank ID's process ends (SIGKILL) on receiving round ROUND */
} fed_plant_kind;

typedef struct fed_plant {
    fed_plant_kind kind;
    int64_t id;                /* client (rank for kill) */
    int64_t round;             /* -1: every round */
} fed_plant;
#define FED_PLANTS_MAX 32

/* A data set in memory. */
typedef struct fed_data {
    int64_t n;                 /* samples */
    bool images;
    int H, W;                  /* images: (3, H, W) each */
    int T;                     /* tokens: inputs and targets of T each */
    float *x;                  /* (n, 3, H, W) normalised images */
    int32_t *labels;           /* (n) */
    int32_t *ids, *targets;    /* (n, T) tokens */
    int64_t *source;           /* (n) tokens: the file each window came from */
    int64_t nsources;
} fed_data;

struct fed_run {
    bool audit;                /* set up for nebula-fed audit: nothing is written */
    bool quiet;                /* an audit's shadow run: no round lines printed */
    const config *cfg;
    const runtime *rt;
    comm_star star;
    int world, rank;
    uint64_t seed;
    int64_t rounds;            /* fed.rounds, or what the budget allows */
    int nclients;
    bool poisson;
    int per_round;             /* fixed sampling: clients per round */
    double q;                  /* sampling rate (poisson: fed.sample_rate; fixed: per_round / nclients) */
    int local_steps, local_batch, eval_batch, eval_every;
    double round_timeout;
    /* privacy and aggregation */
    int dp;                    /* 0 off, 1 central, 2 distributed */
    bool adaptive, secagg, robust_median;
    double trim;               /* trimmed_mean's fraction; robust when > 0 or median */
    bool robust;
    int secagg_t, frac_bits;
    double delta, target_eps, max_norm, clip_noise;
    double dpsgd_clip;         /* sample-level DP-SGD: per-example clip norm (dp.sample_clip; 0: off) */
    double dpsgd_sigma;        /* its noise multiplier (dp.sample_noise) */
    float *dpsgd_acc;          /* (np) DP-SGD: the sum of the clipped per-example gradients */
    fed_server_opt sopt;
    /* model and data */
    model_spec spec;
    model m;                   /* the clients' model, sized for local_batch (DP-SGD: for one example) */
    model_batch batch;
    train_optim opt;
    double lr;
    model ev;                  /* rank 0: the global model (its buffers hold the server's state), sized for eval_batch */
    model_batch evbatch;
    bool have_ev;
    size_t np, ns, d;          /* parameter floats, state floats, d = np + ns */
    fed_data train, val;
    int32_t *owner;            /* (train.n) the client of each sample */
    int64_t *shard_start;      /* (nclients + 1) offsets into shard */
    int64_t *shard;            /* samples grouped by client */
    /* buffers */
    uint8_t *in;               /* a received message, msg_cap + 1 bytes */
    int64_t *perm;             /* (largest shard) a client's sample order */
    struct fed_sa_local *sa;   /* secure aggregation: this rank's clients in the round (fed_client.c) */
    float *global;             /* (d) clients: the global model received */
    float *upd;                /* (d) scratch of one update */
    uint8_t *msg;              /* a message buffer of msg_cap + 1 bytes */
    size_t msg_cap;
    bool lost_seen;            /* clients: the server's stop message said ranks were lost */
    fed_plant plant[FED_PLANTS_MAX];
    int nplant;
    /* server */
    fed_ledger led;
    ckpt_writer *ckpt;
    int64_t ckpt_every;
    char run_dir[4096];
    char config_text[65536];
    int metrics_fd;            /* RUN_DIR/metrics.jsonl (O_APPEND) */
    int launch;                /* this launch's number in it (docs/metrics.md) */
    tfevent *tb;
    double sigma_update;       /* the noise multiplier of the updates (sigma, less the clip count's share) */
    float *agg;                /* (d) the aggregate */
    float *sm, *sv;            /* (np) server optimizer moments */
    double t0;
};

/* fed_dpsgd.c: sample-level DP-SGD in the local steps */
/* Refuses what DP-SGD cannot do (batch norm, stream counters), naming the key. */
status fed_dpsgd_check(const fed_run *f);
/* The sampling rate of the accountant: local_batch over the smallest non-empty shard, at most 1. */
double fed_dpsgd_rate(const fed_run *f);
/* Epsilon at dp.delta of a client's examples after `rounds` rounds of E local steps each. */
double fed_dpsgd_epsilon(const fed_run *f, int64_t rounds);
/* Adds clip(g_i, C) of the examples idx[n] of d into acc (the parameter count of m1),
 * g_i the gradient of example i alone through m1 (a model of batch 1, input b1); the
 * losses' sum into *loss_sum, the examples whose norm exceeded C into *clipped. */
status fed_dpsgd_accumulate(model *m1, train_optim *o, model_batch *b1, const fed_data *d, const int64_t *idx,
                            int64_t n, double C, float *acc, double *loss_sum, int64_t *clipped);
/* One local DP-SGD step of `client` (0-based `step` of the round) at rate lr; the mean
 * loss of the examples drawn (NaN when none was) into *loss. */
status fed_dpsgd_step(fed_run *f, int client, int64_t round, int step, double lr, double *loss);

/* fed_setup.c */
/* A shadow run of nebula-fed audit (one process, nothing written or printed): train is
 * moved into it (zeroed here), seed replaces fed.seed; data.val is not read. */
status fed_setup_shadow(fed_run **out, const config *cfg, const runtime *rt, fed_data *train, uint64_t seed);
void fed_data_free(fed_data *d);
/* fed_attack.c: the loss and logit-scaled confidence (fed_audit_logit_margin) of every
 * sample of d under the global model f->ev */
status fed_sample_scores(fed_run *f, const fed_data *d, double *loss, double *phi);
int fed_client_rank(const fed_run *f, int client);
int fed_clients_on_rank(const fed_run *f, int rank);
bool fed_planted(const fed_run *f, fed_plant_kind k, int64_t id, int64_t round);
/* fed_client.c: a rank's answer to a round message (in, in_len) into f->msg; *out_len
 * its size. Also runs the secure-aggregation phases through the star (or in-process). */
status fed_client_round(fed_run *f, const uint8_t *in, size_t in_len, size_t *out_len);
/* The next frame (id u32 | len u32 | bytes) of buf[0..len) at *at; false at the end or
 * for a frame that would overrun. */
bool fed_frame_next(const uint8_t *buf, size_t len, size_t *at, uint32_t *id, const uint8_t **data, size_t *n);
/* The rank's loop: round messages until STOP. */
status fed_client_loop(fed_run *f);
/* The server's random streams (rng stream ids, above every client id and below
 * part.h's FED_PART_STREAM_*). */
#define FED_STREAM_SAMPLE   0xFFFFFE00u  /* fixed sampling */
#define FED_STREAM_NOISE    0xFFFFFE01u  /* central DP noise */
#define FED_STREAM_CLIPBITS 0xFFFFFE02u  /* adaptive clipping: the noise on the count */

/* The server's buffers of a round, one pair per rank. */
typedef struct fed_srv {
    int nworld;                /* ranks */
    uint8_t **out, **in;       /* [world] messages to and replies from each rank */
    size_t *out_len, *cap;     /* [world] */
    int64_t *in_len;           /* [world] bytes received, < 0: none */
    void **ptrs;               /* [world] scratch for the star's pointer lists */
    bool *expect;              /* [world] */
    int32_t *sel;              /* [nclients] the clients sampled, ascending */
    int nsel;
    bool *got;                 /* [nclients] by index into sel: an answer arrived */
    const float **upd;         /* [nclients] plain: the accepted updates */
    double *w;                 /* [nclients] their weights */
    float *scratch;            /* [nclients] robust aggregation */
    uint8_t *sa_buf;           /* secure aggregation: roster, masked vectors, reveals */
    size_t sa_cap;
    uint64_t *sa_sum;          /* (d + FED_SA_EXTRA) */
    double *sa_dec;            /* (d + FED_SA_EXTRA) */
} fed_srv;

typedef struct fed_round_stats {
    int64_t dropped, refused, aggregated;
    double loss, wsum;         /* sum of weight x loss, of weights */
    double bits;               /* adaptive clipping: the (noisy, under distributed DP) count under C */
} fed_round_stats;

/* fed_server.c */
status fed_server_loop(fed_run *f);
status fed_exchange(fed_run *f, fed_srv *s);
bool fed_reply_ok(const fed_srv *s, int r, uint32_t kind, int64_t round, fed_msg_head *h);
double fed_expected_clients(const fed_run *f);
/* fed_srv.c: the buffers; sel's index of a client (-1: not sampled) */
status fed_srv_init(fed_run *f, fed_srv *s);
void fed_srv_free(fed_srv *s);
int fed_sel_index(const fed_srv *s, int32_t client);
/* fed_secagg_round.c: secure aggregation's exchanges after the round messages went out
 * and the advertisements came back; f->agg gets the sum (weights applied, not divided
 * unless DP is off). */
status fed_secagg_round(fed_run *f, fed_srv *s, int64_t round, int t, fed_round_stats *rs);
/* fed_state.c: checkpoints, metrics */
status fed_ckpt_init(fed_run *f);
status fed_ckpt_save(fed_run *f);
status fed_ckpt_load(fed_run *f);
void fed_metrics_round(fed_run *f, int64_t sampled, int64_t dropped, int64_t refused, int64_t aggregated,
                       double loss, double eval_loss, double eval_acc, double secs);
/* The held-out loss and accuracy of the global model (rank 0). */
status fed_evaluate(fed_run *f, double *loss, double *acc);
/* Sample s of d into slot j of b (a batch of f->m or f->ev: images or tokens as d holds). */
void fed_batch_put(model_batch *b, int j, const fed_data *d, int64_t s);
/* The cross-entropy of a classifier's logits z[C] at class y, computed shifted by the
 * maximum; *top (may be NULL) receives the arg max. */
double fed_class_xent(const float *z, int C, int y, int *top);

#endif
