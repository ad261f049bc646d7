/* fed — federated learning over libcore: a server (rank 0) and clients (every rank
 * hosts fed.clients / (world - 1) simulated clients, each with its own data shard; one
 * process alone hosts them all) run rounds of FedAvg (McMahan et al., AISTATS 2017):
 * the server samples clients, sends them the global model, each client takes
 * fed.local_steps steps of the model's optimizer on its shard (the trainer's one-batch
 * step, train_step_batch), and the server aggregates the updates (local - global) and
 * steps its own optimizer (FedAvg, FedAdam, FedYogi). Options:
 *   - client-level differential privacy (DP-FedAvg, McMahan et al., ICLR 2018): every
 *     update clipped to norm C, Gaussian noise sigma C on the sum, added by the server
 *     after aggregation (dp = central) or by the clients in shares under secure
 *     aggregation (dp = distributed); adaptive clipping (Andrew et al., NeurIPS 2021);
 *     the Renyi-DP accountant (rdp.h) prints epsilon every round, and a total budget
 *     (dp_target_epsilon) derives the noise or the number of rounds and stops the run
 *     when it is spent; sample-level DP-SGD in the clients' local steps (fed_dpsgd.c);
 *   - secure aggregation (secagg.h, Bonawitz et al., CCS 2017): the server learns only
 *     the sum of the updates, even with clients dropping out after sharing;
 *   - robust aggregation (coordinate-wise trimmed mean or median) against hostile
 *     clients; updates of the wrong size, non-finite, stale or beyond the clip are
 *     refused and logged, and the round goes on.
 * Clients that fail or miss fed.round_timeout are dropped for the round (comm/star.h);
 * the round completes with the others. The server's state (the global model, its
 * optimizer's moments, the clip norm, the privacy ledger) is checkpointed through
 * libcore/ckpt every ckpt.every_rounds rounds; a resumed run is bit-identical, because
 * every random draw (sampling, partitions, batches, noise) is a counter-based function
 * of (seed, round, client).
 *
 * The one design decision: the server's view of a round is messages, never shared
 * memory. Even with one process, the clients' replies are byte messages parsed as
 * hostile input, so what a test plants (fed.plant) meets the same checks a real
 * client's bytes would. */
#ifndef NEBULA_FED_H
#define NEBULA_FED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/config.h"
#include "base/runtime.h"
#include "fed/rdp.h"
#include "fed/update.h"

/* Every key nebula-fed reads ([runtime], [comm] timeout, [model], [fed], [dp],
 * [secagg], [optim], [data], [ckpt]) into out[cap]; returns how many. */
int fed_config_schema(config_key *out, int cap);

/* The privacy ledger and round state: checkpointed as the blob "fed" (fixed layout, no
 * padding). */
typedef struct fed_ledger {
    int64_t round;             /* rounds completed */
    int64_t sampled;           /* clients sampled, over the run */
    int64_t dropped;           /* of them, no update by the deadline (failed, killed, late) */
    int64_t refused;           /* of them, an update refused by the server's checks */
    int64_t aggregated;        /* of them, in an aggregate */
    int64_t stop;              /* why the run stopped: 0 running, 1 rounds done, 2 privacy budget */
    double sigma;              /* noise multiplier in force (dp.noise_multiplier, or the budget's) */
    double eps;                /* epsilon spent after `round` rounds at dp.delta (0 without DP) */
    fed_clip_state clip;       /* the clip norm in force (adaptive: learned) */
    fed_rdp rdp;               /* the accountant's Renyi divergences per order */
} fed_ledger;

typedef struct fed_run fed_run;  /* fed_impl.h */

/* Builds the run (collective over rt->world): data in memory and partitioned, the
 * model, the server's state, the checkpoint writer and metrics on rank 0. STATUS_INPUT
 * naming the key for a configuration that cannot work. */
status fed_setup(fed_run **out, const config *cfg, const runtime *rt);
/* Rank 0: the model, data, shards and privacy table. */
void fed_print(const fed_run *f, FILE *out);
/* Loads the checkpoint ckpt.resume names (rank 0; the clients hold no state). */
status fed_resume(fed_run *f);
/* The rounds: the server's loop on rank 0, the clients' on the others, until
 * fed.rounds, the privacy budget, or a stop. */
status fed_run_rounds(fed_run *f);
/* Whether a rank of the run was lost (its process died): MPI_Finalize would wait for it
 * forever, so the program ends without it (nebula-fed's main). */
bool fed_peers_lost(const fed_run *f);
/* The ledger (rank 0's is the run's). */
const fed_ledger *fed_get_ledger(const fed_run *f);
void fed_free(fed_run *f);

/* nebula-fed audit: what a membership-inference attacker gets from the released global
 * model (fed_attack.c). Members: data.train (every client's samples; text: sequences of
 * data.seq_len); non-members: data.val. */
typedef struct fed_audit_report {
    bool images;                         /* an image classifier (else a language model on sequences) */
    int64_t members, nonmembers;
    double member_loss, nonmember_loss;  /* mean cross-entropy (text: of a sequence's tokens) */
    double member_conf, nonmember_conf;  /* images: fraction whose true class has p > 1/2; text: mean exp(-loss) */
    double auc;                          /* ROC AUC of -loss as the membership score */
    double tpr_1pct, tpr_01pct;          /* TPR at 1% and 0.1% FPR of the same score */
    double yeom_advantage, yeom_accuracy; /* Yeom et al.'s threshold attack (the mean member loss) */
} fed_audit_report;
/* fed_setup for the audit: one process, the data and the global model, no file written. */
status fed_setup_audit(fed_run **out, const config *cfg, const runtime *rt);
status fed_audit_membership(fed_run *f, fed_audit_report *rep);

/* Attribute inference (Yeom et al., CSF 2018, Section 5; fed_invert.c): the hidden
 * attribute is the pixel of largest variance over data.train, its value one of
 * audit.attribute_levels equal-width bins of the pixel's range; the attacker knows the
 * rest of the record and its label and guesses the bin of least loss. */
typedef struct fed_attr_report {
    int64_t members;       /* records of data.train attacked */
    int64_t nonmembers;    /* records of data.val attacked */
    int levels;            /* L: bins the hidden value is guessed among */
    int pixel;             /* the hidden pixel, row-major index y W + x (every channel) */
    double member_acc;     /* share of members whose bin is guessed right, [0, 1] */
    double nonmember_acc;  /* the same over non-members */
    double baseline;       /* share of the members' most frequent bin: guessing without the model */
    double advantage;      /* Yeom's attribute advantage, member_acc - nonmember_acc, [-1, 1] */
} fed_attr_report;
status fed_audit_attribute(fed_run *f, fed_attr_report *rep);

/* Model inversion (Fredrikson et al., CCS 2015, MI-FACE; fed_invert.c): per class, black-box
 * gradient descent on the class's cross-entropy from the blank image, scored against the
 * class's mean member image. Means are over the classes inverted. */
typedef struct fed_inv_report {
    int classes;           /* classes inverted: those with at least one member */
    int skipped;           /* classes of the model with no member (not inverted) */
    int steps;             /* gradient steps per class (audit.inversion_steps) */
    double ssim;           /* mean SSIM on channel 0 (fed_audit_ssim), [-1, 1]; NaN below 7x7 images */
    double ncc;            /* mean normalised cross-correlation over the image, [-1, 1] */
    double cosine;         /* mean cosine over the normalised image, [-1, 1] */
    double identified;     /* share of classes whose reconstruction has its highest NCC with its own class's mean;
                              chance: 1 / classes */
} fed_inv_report;
status fed_audit_inversion(fed_run *f, fed_inv_report *rep);

/* LiRA with shadow models (Carlini et al., S&P 2022; fed_lira.c): audit.shadows runs of
 * the same recipe (this configuration, rounds and privacy included), each on a random
 * half of data.train + data.val with its own seed; every example's logit-scaled
 * confidence under the shadows that held it (IN) and those that did not (OUT), Gaussians
 * with the global variance (the paper's choice below 64 shadows), and the released
 * model's confidence scored online (IN and OUT) and offline (OUT only). */
typedef struct fed_lira_report {
    int shadows;           /* shadow runs trained */
    int64_t scored;        /* examples scored: at least one IN and one OUT shadow */
    int64_t unscored;      /* examples every shadow held, or none did (left out of the ROC) */
    double var_in, var_out; /* the global variances of phi, IN and OUT (phi units squared) */
    double auc, tpr_1pct, tpr_01pct;          /* online LiRA: ROC AUC, TPR at 1% and 0.1% FPR */
    double off_auc, off_tpr_1pct, off_tpr_01pct; /* offline LiRA */
} fed_lira_report;
/* The shadow runs in this process (one rank), then the scores of f's released model. */
status fed_audit_lira(fed_run *f, int shadows, fed_lira_report *rep);

#endif
