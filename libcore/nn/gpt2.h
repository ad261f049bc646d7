/* gpt2 — the GPT-2 family on the CPU: parameters in one flat buffer with Hugging
 * Face names, activations sized once for (B, T), forward with fused loss, backward
 * that fills the flat gradient buffer (Radford et al. 2019; llm.c's train_gpt2.c
 * layout). Linear weights keep HF's Conv1D layout (in, out), so a checkpoint
 * converts to HF safetensors without transposes; the LM head is tied to wte. The
 * forward and backward reach each tensor through named views (gpt2_views: offsets
 * resolved once at init), never by looking a name up. */
#ifndef NEBULA_GPT2_H
#define NEBULA_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "base/log.h"
#include "model_base.h"
#include "param.h"
#include "tp.h"

typedef struct gpt2_config {
    int max_seq_len;       /* n_positions: rows of wpe */
    int vocab_size;        /* V: real tokens */
    int padded_vocab_size; /* Vp >= V: rows of wte (padding masked out of the loss) */
    int num_layers;        /* L */
    int num_heads;         /* NH */
    int channels;          /* C */
} gpt2_config;

/* Named configurations: gpt2-tiny (tests), gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl.
 * STATUS_INPUT with the list of names when `name` is unknown. */
status gpt2_config_named(gpt2_config *cfg, const char *name);
/* Consistency: heads divide the width, Vp >= V, positive sizes. STATUS_INPUT; the message
 * names the field by its [model] config key (model.h: model.n_head, model.n_embd, ...). */
status gpt2_config_check(const gpt2_config *cfg);

typedef struct gpt2_acts {
    float *encoded;        /* (B, T, C) */
    float *ln1;            /* (L, B, T, C) */
    float *ln1_mean;       /* (L, B, T) */
    float *ln1_rstd;       /* (L, B, T) */
    float *qkv;            /* (L, B, T, 3C) */
    float *atty;           /* (L, B, T, C) */
    float *att_lse;        /* (L, B, NH, T) */
    float *attproj;        /* (L, B, T, C) */
    float *residual2;      /* (L, B, T, C) */
    float *ln2;            /* (L, B, T, C) */
    float *ln2_mean;       /* (L, B, T) */
    float *ln2_rstd;       /* (L, B, T) */
    float *fch;            /* (L, B, T, 4C) */
    float *fch_gelu;       /* (L, B, T, 4C) */
    float *fcproj;         /* (L, B, T, C) */
    float *residual3;      /* (L, B, T, C) */
    float *lnf;            /* (B, T, C) */
    float *lnf_mean;       /* (B, T) */
    float *lnf_rstd;       /* (B, T) */
    float *logits;         /* (B, T, Vp) */
    float *losses;         /* (B, T) */
    float *xent_lse;       /* (B, T) */
    double *xent_part;     /* (B, T, 2) tensor parallel: this rank's sum of exp and target logit; NULL at tp 1 */
} gpt2_acts;

typedef struct gpt2_grad_scratch {
    float *dresidual;      /* (B, T, C) gradient flowing down the residual stream */
    float *dbt4c;          /* (B, T, 4C) */
    float *dbt4c2;         /* (B, T, 4C) */
    float *dbt3c;          /* (B, T, 3C) */
    float *dbtc;           /* (B, T, C) */
    float *dbtc2;          /* (B, T, C) */
    float *dlogits;        /* (B, T, Vp) */
    float *dlosses;        /* (B, T) */
} gpt2_grad_scratch;

/* Shapes above are at tp = 1. With tensor parallelism of size tp (gpt2_init_tp) each
 * rank holds NH/tp heads and 4C/tp MLP columns: qkv (L, B, T, 3C/tp), atty (L, B, T, C/tp),
 * att_lse (L, B, NH/tp, T), fch and fch_gelu (L, B, T, 4C/tp), logits (B, T, Vp/tp); the
 * residual stream, the norms and the losses are whole on every rank. */

/* Named views: each tensor's offset in every flat buffer (params, grads, moments),
 * resolved once at init as the table is built. An offset rather than a pointer, so one
 * set of views serves the host buffers and the device copies alike: the forward reads
 * `p + h->c_attn_w` on whichever buffer it runs on. */
typedef struct gpt2_layer_views {
    size_t ln_1_w, ln_1_b;              /* h.l.ln_1.weight, .bias (C) */
    size_t c_attn_w, c_attn_b;          /* h.l.attn.c_attn.weight (C, 3C), .bias (3C) */
    size_t attn_proj_w, attn_proj_b;    /* h.l.attn.c_proj.weight (C, C), .bias (C) */
    size_t ln_2_w, ln_2_b;              /* h.l.ln_2.weight, .bias (C) */
    size_t fc_w, fc_b;                  /* h.l.mlp.c_fc.weight (C, 4C), .bias (4C) */
    size_t fc_proj_w, fc_proj_b;        /* h.l.mlp.c_proj.weight (4C, C), .bias (C) */
} gpt2_layer_views;
#define GPT2_LAYER_TENSORS 12          /* fields of gpt2_layer_views = tensors per block in the table */

typedef struct gpt2_views {
    size_t wte;                         /* wte.weight (Vp, C), also the tied LM head */
    size_t wpe;                         /* wpe.weight (max_seq_len, C) */
    gpt2_layer_views *h;                /* [L] the blocks */
    size_t ln_f_w, ln_f_b;              /* ln_f.weight, .bias (C) */
} gpt2_views;

typedef struct gpt2 {
    MODEL_BASE_GROUP;      /* pt, pb, dev, ops, w, hook, loss_scale, mean_loss (model_base.h) */
    gpt2_config cfg;       /* sizes */
    gpt2_views views;      /* every tensor's offset by name, resolved at init */
    int B, T;              /* batch shape of the next forward (B <= capacity; gpt2_set_batch) */
    int capacity;          /* samples the activations are sized for (the B of init) */
    float *act_memory;     /* one allocation behind acts */
    size_t act_floats;     /* its size */
    gpt2_acts acts;        /* views into act_memory */
    float *grad_memory;    /* one allocation behind gs */
    size_t grad_floats;    /* its size */
    gpt2_grad_scratch gs;  /* views into grad_memory */
    int32_t *pos_ids;      /* (B, T) position of each token, 0..T-1 (on the device) */
    int32_t *targets;      /* (B, T) copy of the last forward's targets (host) */
    int32_t *dev_ids;      /* (2, B, T) tokens and targets of the last forward on the device; NULL on the CPU */
    float *host_losses;    /* (B, T) losses copied back, and dlosses staged for upload (GPU only) */
    nn_tp tp;              /* tensor-parallel group (tp.h); size 1: the whole model on this rank */
    int l0, l1;            /* pipeline stage (tp.h's nn_stage): the blocks [l0, l1) this rank holds */
    int slots, slot;       /* activation sets (micro-batches in flight) and the one in use */
    size_t slot_floats;    /* floats of one set in act_memory */
    int32_t *slot_targets; /* (slots, B, T) each set's forward targets; `targets` points at the slot's */
    float *slot_loss;      /* (slots) each set's mean loss (-1: no forward with targets) */
    int *init_index;       /* [pt.count] each tensor's index in the whole model's table (its init stream) */
} gpt2;

/* Builds the table, allocates params (+ grads and moments when `train`) and the
 * activations for (B, T); initialises weights like GPT-2 (normal 0.02, residual
 * projections 0.02/sqrt(2L), zero biases, unit norms) from the counter RNG. */
/* The next micro-batches have B samples, 1 <= B <= capacity (CPU only; set it before
 * the forward, keep it through the backward). The activation views are laid out again
 * for B, so a run at B is the run of a model built for B, bit for bit. */
void gpt2_set_batch(gpt2 *m, int B);

status gpt2_init(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train);
/* The same on a device (NULL: the CPU). On a GPU the weights are initialised on the
 * host exactly as on the CPU and uploaded; w holds params, grads and (when `train`)
 * moments in device memory, pb only the host mirror of the parameters. */
status gpt2_init_on(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev);
/* The same with tensor parallelism over `tp` (NULL or size 1: none), Megatron-style:
 * c_attn column-parallel by heads (q, k and v of NH/tp heads: param_add_split with 3
 * parts), attn.c_proj row-parallel, mlp.c_fc column-parallel, mlp.c_proj row-parallel,
 * wte vocabulary-parallel (rows Vp/tp each: the embedding's lookup and the tied head's
 * logits and cross-entropy are split, so no rank holds a full row of logits); norms,
 * wpe and the row-parallel biases are whole on every rank, with equal gradients. The
 * weights are those of the whole model from the same seed, sliced. STATUS_INPUT when
 * tp does not divide the heads or the padded vocabulary (naming parallel.tp);
 * STATUS_USAGE on a GPU (the CPU only so far). The caller checks nn_tp_status(&m->tp)
 * after gpt2_forward and gpt2_backward. */
status gpt2_init_tp(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                    const nn_tp *tp);
/* The same as one pipeline stage (stage NULL: the whole model): the table holds the
 * stage's blocks, plus wte and wpe on the first stage and ln_f and the tied wte on the
 * last (both ends start from the same weights; the trainer sums their gradients); the
 * activations are sized for the stage's blocks, `slots` times. A stage that does not
 * start at block 0 reads its input from gpt2_stage_in, one that does not end at the
 * last leaves its output in gpt2_stage_out (and its forward's loss is 0); its backward
 * starts from the gradient written into gpt2_stage_grad and leaves there the gradient
 * of its input. STATUS_USAGE on a GPU. */
status gpt2_init_parallel(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                          const nn_tp *tp, const nn_stage *stage);
/* The table of the whole model (every block) as tp rank tp_rank of tp_size holds it: what
 * a pipeline stage's tensors are a part of (the checkpoint layout's reference). */
status gpt2_table_whole(const gpt2_config *cfg, int tp_size, int tp_rank, param_table *out);
/* Selects activation set k (0..slots-1) for the next forward or backward. */
void gpt2_set_slot(gpt2 *m, int k);
/* (B, T, C) of the current set: the stage's input (the residual stream entering block l0),
 * its output (leaving block l1 - 1) and the gradient buffer at the stage's boundary. */
float *gpt2_stage_in(gpt2 *m);
float *gpt2_stage_out(gpt2 *m);
float *gpt2_stage_grad(gpt2 *m);
/* Whether tensor parallelism of size tp fits cfg; STATUS_INPUT naming parallel.tp. */
status gpt2_check_tp(const gpt2_config *cfg, int tp);
void gpt2_free(gpt2 *m);

/* tokens, targets (B, T); targets may be NULL (no loss) and may hold -1 (ignored).
 * STATUS_INPUT when a token is outside the vocabulary (names the position). */
status gpt2_forward(gpt2 *m, const int32_t *tokens, const int32_t *targets);
/* Gradient of the mean loss of the last forward, ADDED into the grad buffer (w.grads).
 * On a GPU `tokens` is not read: the forward's copy on the device is used. */
void gpt2_backward(gpt2 *m, const int32_t *tokens);

/* Model FLOPs of one training step per token: 6 per parameter of the whole model
 * (every shard and stage counted once: what one model replica computes). */
double gpt2_flops_per_token(const gpt2 *m);
/* Parameters of one block: 12 C^2 + 13 C, for the FLOP counts. */
double gpt2_block_params(const gpt2_config *cfg);

#endif
