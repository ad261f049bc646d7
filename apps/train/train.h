/* train — the pieces of nebula-train's step loop: the config schema, the resolved
 * batch arithmetic, and one struct that owns everything a run holds (model, data,
 * buckets, checkpoint writer, metrics file) so main() reads like a script.
 *
 * The one design decision: every source of randomness after initialisation is a
 * counter-based function of (seed, step, sample) — the data order and augmentation
 * (data.h), BERT's masking (keyed by the sample's index in the file) — so the whole
 * state of a run is the flat buffers plus (step, data position). That is what makes
 * a resumed run bit-identical to an uninterrupted one, and a run at another world
 * size with the same global batch read the same samples. */
#ifndef NEBULA_TRAIN_H
#define NEBULA_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/bucket.h"
#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "base/config.h"
#include "data/data.h"
#include "dgc/dgc.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "base/runtime.h"
#include "nn/zero.h"

/* Global batch = micro_batch x accum x data-parallel size; any two given (0 = not
 * given), the third is derived; accum defaults to 1 when only one is given. */
typedef struct train_batch {
    int micro_batch;           /* b: samples per forward */
    int accum;                 /* A: forwards per optimizer step */
    int global_batch;          /* GB = b * A * world */
} train_batch;

/* STATUS_INPUT naming the keys when the three given values disagree or GB does not
 * split evenly. */
status train_batch_resolve(train_batch *tb, const config *cfg, int world);

/* The elastic state that outlives a step: checkpointed as the optional blob "elastic"
 * (fixed layout, no padding). The factor is relative to the configured global batch,
 * so successive changes do not compound. */
typedef struct train_elastic {
    int64_t global_batch;      /* GB in force: the config's until a control file changes it */
    double lr_factor;          /* multiplies the schedule's rate: lr_rule applied to GB / configured GB */
} train_elastic;

/* Everything a run owns. */
typedef struct train_run {
    const config *cfg;
    const runtime *rt;
    comm *c;
    model_spec spec;
    model m;                   /* sized for one micro-batch */
    model_batch batch;         /* the micro-batch fed to the model */
    int32_t *raw_ids;          /* (b, T) BERT: the tokens before masking */
    uint64_t *samples;         /* (b) BERT: the file's samples of the micro-batch (masking keys) */
    train_batch tb;
    int T;                     /* sequence length (transformers), 0 for ResNet */
    data_loader *train_data;
    data_loader *val_data;     /* NULL without held-out data */
    bucket_manager bm;
    int nlayers;               /* 1 + the highest param_entry.layer */
    int *layer_first, *layer_count; /* [nlayers] each layer's tensors as a range of table indices */
    status hook_status;        /* first failure inside the hook */
    adamw_hparams adamw;
    sgd_hparams sgd;
    bool use_sgd;
    lr_schedule sched;
    double clip;               /* max global gradient norm, 0 = off */
    ckpt_writer *ckpt;         /* NULL when checkpoints are off */
    FILE *metrics;             /* run_dir/metrics.jsonl on rank 0 */
    char run_dir[4096];
    long step;                 /* optimizer steps completed */
    long steps;                /* total steps of the run */
    uint64_t seed;
    int threads;               /* OpenMP / BLAS threads of this rank */
    double comm_ms;            /* calibrated: one blocking allreduce of all buckets */
    bool use_zero;             /* train.zero = 1: optimizer state sharded over the ranks (ZeRO-1) */
    zero zero;                 /* the shards, their packed moments and the all-gather; use_zero only */
    dgc *dgc;                  /* DGC-Pro when configured and not ruled out at setup; NULL otherwise */
    dgc_stats dstats;          /* of the last step it ran */
    double dgc_sent, dgc_dense;/* bytes sent between nodes by this rank over the run, and a dense ring's */
    double compute_ms;         /* auto mode: mean compute time of dense steps 2-3 */
    double dense_ms, trial_ms; /* auto mode: mean step time of dense steps 2-3 and compressed steps 4-5 */
    bool dgc_flush;            /* auto switched DGC-Pro off: flush its residuals into the next step */
    data_state loader_state;   /* the training loader's position after the last step (checkpointed) */
    train_elastic elastic;     /* checkpointed; see train_elastic */
    int config_batch;          /* the global batch the config resolves to at this world size */
    int heartbeat_fd;          /* run_dir/heartbeat on rank 0, -1 elsewhere */
    char config_text[65536];   /* the resolved config, as config_dump writes it */
} train_run;

/* Config keys of nebula-train beyond runtime/comm/model. */
extern const config_key train_schema_keys[];
extern const int train_schema_nkeys;

status train_setup(train_run *r, const config *cfg, const runtime *rt, comm *c);
/* Loads the checkpoint ckpt.resume names (auto|PATH|none); no-op without one. */
status train_resume(train_run *r);
/* The step loop up to train.steps, with logging, evaluation, checkpoints and signals. */
status train_loop(train_run *r);
void train_free(train_run *r);

/* Opens data file path for this run's model and micro-batch; train: the training
 * loader (accumulation, shuffling, augmentation), else held-out data in file order.
 * Shared with elastic.c, which reopens the training loader at a new global batch. */
status train_open_data(train_run *r, data_loader **out, const char *path, bool train);

/* Installs SIGUSR1 (checkpoint and go on) and SIGTERM / SIGUSR2 (checkpoint and stop;
 * train_loop then returns STATUS_STOPPED, exit 3) handlers. SIGUSR2 exists because
 * launchers forward it untouched (mpirun and srun both do), while both turn a SIGTERM
 * they receive into killing the ranks. */
void train_install_signals(void);

#endif
