/* bert — the BERT family with its masked-LM head on the CPU (Devlin et al., NAACL
 * 2019; Hugging Face BertForMaskedLM): parameters in one flat buffer with HF names,
 * activations sized once for (B, T), forward with fused loss, backward that fills the
 * flat gradient buffer, and the MLM masking of the paper (15%; 80/10/10).
 *
 * The one design decision: every tensor keeps HF's name and nn.Linear layout (out, in),
 * so the flat buffer is a BertForMaskedLM state dict as it stands — no transposes to
 * convert either way. Names are those of BertForMaskedLM without its "bert." prefix on
 * the encoder ("embeddings.*", "encoder.layer.{i}.*", then "cls.predictions.*"); the
 * MLM decoder (cls.predictions.decoder.weight) is TIED to
 * embeddings.word_embeddings.weight and is not a separate tensor. The forward and
 * backward reach each tensor through named views (bert_views, as gpt2.h).
 *
 * Semantics, as HF modeling_bert with dropout off: post-norm blocks, LayerNorm eps
 * 1e-12, exact (erf) GELU in the FFN and the MLM transform; positions 0..T-1 in every
 * sequence; attention_mask (B, T) 1 keep / 0 pad masks KEYS (padded queries are still
 * computed); word_embeddings has padding_idx = pad_token_id as in HF: the embedding
 * lookup adds no gradient to that row (the tied decoder still does). One difference at
 * an edge no real batch reaches: a sequence whose every key is padding gets attention
 * output 0 (attention.h) where HF averages the values uniformly. */
#ifndef NEBULA_BERT_H
#define NEBULA_BERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "device.h"
#include "model_base.h"
#include "param.h"
#include "tp.h"

#define BERT_MAX_POSITION 512  /* rows of position_embeddings in every BERT checkpoint */

typedef struct bert_config {
    int max_position;     /* max_position_embeddings: rows of position_embeddings, T <= this */
    int type_vocab_size;  /* rows of token_type_embeddings (2: sentence A / B) */
    int vocab_size;       /* V: rows of word_embeddings, columns of the MLM logits */
    int num_layers;       /* L */
    int num_heads;        /* NH */
    int channels;         /* C: hidden_size (the paper's H) */
    int intermediate;     /* IC: intermediate_size of the FFN (4C in every named model) */
    int pad_token_id;     /* [PAD]: padding_idx of word_embeddings (0 in the uncased vocabulary) */
} bert_config;

/* Named configurations with the uncased WordPiece vocabulary (V = 30522):
 *   bert-tiny  L=2  C=128  NH=2  IC=512   (google/bert_uncased_L-2_H-128_A-2, Turc et al. 2019)
 *   bert-base  L=12 C=768  NH=12 IC=3072
 *   bert-large L=24 C=1024 NH=16 IC=4096
 * Tests shrink vocab_size after looking up bert-tiny (test_bert_ref uses V = 1000); the
 * special ids below stay valid for any V > 103. STATUS_INPUT listing the names when
 * `name` is unknown. */
status bert_config_named(bert_config *cfg, const char *name);
/* Positive sizes, heads divide channels, max_position <= 512, pad id inside the
 * vocabulary. STATUS_INPUT; the message names the field by its [model] config key
 * (model.h: model.n_head, model.n_embd, model.max_seq_len, ...). */
status bert_config_check(const bert_config *cfg);

/* Special token ids of the uncased vocabulary (bert-base-uncased's vocab.txt). */
typedef struct bert_special_tokens {
    int32_t pad;   /* [PAD] = 0 */
    int32_t unk;   /* [UNK] = 100 */
    int32_t cls;   /* [CLS] = 101 */
    int32_t sep;   /* [SEP] = 102 */
    int32_t mask;  /* [MASK] = 103 */
} bert_special_tokens;

#define BERT_SPECIAL_TOKENS_UNCASED ((bert_special_tokens){ 0, 100, 101, 102, 103 })

#define BERT_MASK_PROB        0.15  /* share of eligible positions selected for prediction */
#define BERT_MASK_KEEP_MASK   0.80  /* of those: replaced by [MASK] */
#define BERT_MASK_KEEP_RANDOM 0.10  /* of those: replaced by a uniform random id in [0, V) */
                                    /* the remaining 0.10 keep their token */

/* The MLM corruption of Devlin et al. §3.1 as HF's DataCollatorForLanguageModeling does
 * it: each eligible position (attention_mask 1 — NULL means all — and not one of the
 * special ids pad/unk/cls/sep/mask) is selected independently with probability 0.15;
 * a selected one becomes [MASK] with probability 0.8, a uniform random id in [0, V) with
 * 0.1 (which may be any id, as in HF), and stays with 0.1. targets = the original id at
 * selected positions, -1 (XENT_IGNORE) elsewhere; masked_ids = the corrupted batch
 * (it may be input_ids itself, for in-place use).
 *
 * Randomness: stream (seed, rank, RNG_PURPOSE_MASK, step); position n = b*T + t reads
 * block n of it (outputs 4n..: selection, action, random id), so the result is a pure
 * function of (seed, rank, step, batch) and each position's draw is independent of the
 * others'. Returns the number of selected positions. */
int bert_mask_tokens(int32_t *masked_ids,            /* (B, T) out */
                     int32_t *targets,               /* (B, T) out */
                     const int32_t *input_ids,       /* (B, T) */
                     const int32_t *attention_mask,  /* (B, T) or NULL */
                     int B, int T, int V, const bert_special_tokens *special,
                     uint64_t seed, uint32_t rank, uint64_t step);

#define BERT_HEAD_ROWS 64  /* with targets, the MLM head's rows are padded to a multiple of this */

typedef struct bert_acts {
    float *emb;           /* (B, T, C) word + position + token-type embeddings */
    float *emb_ln;        /* (B, T, C) the input of the stage's first block: embeddings.LayerNorm's output,
                             or on a later pipeline stage the previous one's (the L of the per-block
                             views below is the stage's blocks) */
    float *emb_mean;      /* (B, T) */
    float *emb_rstd;      /* (B, T) */
    float *q;             /* (L, B, T, C) attention.self.query output */
    float *k;             /* (L, B, T, C) attention.self.key output */
    float *v;             /* (L, B, T, C) attention.self.value output */
    float *atty;          /* (L, B, T, C) heads concatenated */
    float *att_lse;       /* (L, B, NH, T) */
    float *attproj;       /* (L, B, T, C) attention.output.dense output */
    float *res1;          /* (L, B, T, C) block input + attproj */
    float *ln1;           /* (L, B, T, C) attention.output.LayerNorm output */
    float *ln1_mean;      /* (L, B, T) */
    float *ln1_rstd;      /* (L, B, T) */
    float *fch;           /* (L, B, T, IC) intermediate.dense output */
    float *fch_gelu;      /* (L, B, T, IC) */
    float *fcproj;        /* (L, B, T, C) output.dense output */
    float *res2;          /* (L, B, T, C) ln1 + fcproj */
    float *ln2;           /* (L, B, T, C) output.LayerNorm output: the block's output */
    float *ln2_mean;      /* (L, B, T) */
    float *ln2_rstd;      /* (L, B, T) */
    /* The MLM head runs on head_rows rows (bert.head_rows): every position without
     * targets, the targeted positions (in order) with them. */
    float *head_x;        /* (rows, C) the last block's output at the head's rows (with targets) */
    float *tr;            /* (rows, C) cls.predictions.transform.dense output */
    float *tr_gelu;       /* (rows, C) */
    float *tr_ln;         /* (rows, C) transform.LayerNorm output */
    float *tr_mean;       /* (rows) */
    float *tr_rstd;       /* (rows) */
    float *logits;        /* (rows, V) */
    float *losses;        /* (rows) */
    float *xent_lse;      /* (rows) */
    double *xent_part;    /* (rows, 2) tensor parallelism: the vocabulary-parallel cross-entropy's sums */
    float *key_mask;      /* (B, T) attention_mask as 1.0 / 0.0 */
} bert_acts;

typedef struct bert_grad_scratch {
    float *dresidual;     /* (B, T, C) gradient of the current block's output */
    float *dbtc;          /* (B, T, C) */
    float *dbtc2;         /* (B, T, C) */
    float *dq;            /* (B, T, C) */
    float *dk;            /* (B, T, C) */
    float *dv;            /* (B, T, C) */
    float *dbti;          /* (B, T, IC) */
    float *dbti2;         /* (B, T, IC) */
    float *dlogits;       /* (B, T, V) */
    float *dlosses;       /* (B, T) */
    float *pad_row;       /* (C) word_embeddings grad row of [PAD], kept across the lookup's backward */
} bert_grad_scratch;

/* Named views: each tensor's offset in every flat buffer (params, grads, moments; host
 * or device), resolved once at init as the table is built (gpt2.h says why offsets). */
typedef struct bert_layer_views {
    size_t q_w, q_b;                  /* encoder.layer.l.attention.self.query.weight (C, C), .bias (C) */
    size_t k_w, k_b;                  /* .attention.self.key (C, C), (C) */
    size_t v_w, v_b;                  /* .attention.self.value (C, C), (C) */
    size_t attn_out_w, attn_out_b;    /* .attention.output.dense (C, C), (C) */
    size_t attn_ln_w, attn_ln_b;      /* .attention.output.LayerNorm (C), (C) */
    size_t inter_w, inter_b;          /* .intermediate.dense (IC, C), (IC) */
    size_t out_w, out_b;              /* .output.dense (C, IC), (C) */
    size_t out_ln_w, out_ln_b;        /* .output.LayerNorm (C), (C) */
} bert_layer_views;
#define BERT_LAYER_TENSORS 16        /* fields of bert_layer_views = tensors per block in the table */

typedef struct bert_views {
    size_t word_emb;                  /* embeddings.word_embeddings.weight (V, C), also the tied MLM decoder */
    size_t pos_emb;                   /* embeddings.position_embeddings.weight (max_position, C) */
    size_t type_emb;                  /* embeddings.token_type_embeddings.weight (type_vocab_size, C) */
    size_t emb_ln_w, emb_ln_b;        /* embeddings.LayerNorm (C), (C) */
    bert_layer_views *layer;          /* [L] the blocks */
    size_t cls_b;                     /* cls.predictions.bias (V) */
    size_t tr_w, tr_b;                /* cls.predictions.transform.dense (C, C), (C) */
    size_t tr_ln_w, tr_ln_b;          /* cls.predictions.transform.LayerNorm (C), (C) */
} bert_views;

/* What a forward leaves for its backward besides the activations (a pipeline stage's
 * activation sets, bert_set_slot). */
typedef struct bert_slot {
    int head_rows, head_targeted;
    float mean_loss;
} bert_slot;

typedef struct bert {
    MODEL_BASE_GROUP;         /* pt, pb, dev, ops, w, hook, loss_scale, mean_loss (model_base.h) */
    bert_config cfg;          /* sizes */
    bert_views views;         /* every tensor's offset by name, resolved at init */
    nn_tp tp;                 /* tensor-parallel group (tp.h); size 1: the whole model on this rank */
    int B, T;                 /* batch shape of the next forward (B <= capacity; bert_set_batch) */
    int capacity;             /* samples the activations are sized for (the B of init) */
    float *act_memory;        /* one allocation behind acts */
    size_t act_floats;        /* its size */
    bert_acts acts;           /* views into act_memory */
    float *grad_memory;       /* one allocation behind gs */
    size_t grad_floats;       /* its size */
    bert_grad_scratch gs;     /* views into grad_memory */
    int32_t *pos_ids;         /* (B, T) position of each token, 0..T-1 (on the device) */
    int32_t *input_ids;       /* (B, T) copy of the last forward's input_ids (on the device) */
    int32_t *type_ids;        /* (B, T) copy of the last forward's token_type_ids, 0 when NULL (on the device) */
    int head_rows;            /* rows of the last forward's MLM head: B*T, or the targeted positions padded
                                 to a multiple of BERT_HEAD_ROWS (at most B*T) */
    int head_targeted;        /* of them, targeted positions (the first ones) */
    int32_t *head_pos;        /* (B*T) host: the position of each head row (with targets) */
    int32_t *head_tgt;        /* (B*T) host: its target */
    int32_t *dev_head_pos;    /* the same on the device; NULL on the CPU */
    int32_t *dev_head_tgt;
    int32_t *stage_ids;       /* (2, B, T) host staging of input and type ids (GPU only) */
    float *stage;             /* (2, B, T) host staging of the key mask and of losses / dlosses (GPU only) */
    int l0, l1;               /* pipeline stage (tp.h's nn_stage): the blocks [l0, l1) this rank holds */
    int slots, slot;          /* activation sets (micro-batches in flight) and the one in use */
    size_t slot_floats;       /* floats of one set in act_memory */
    int32_t *slot_ids;        /* (slots, 4, B, T) host: each set's input and type ids, head positions and
                                 targets; input_ids .. head_tgt point at the current set's (on the CPU) */
    bert_slot *slot_state;    /* (slots) each set's head rows and loss while another set is in use */
    int *init_index;          /* [pt.count] each tensor's index in the whole model's table (its init stream) */
} bert;

/* Builds the table, allocates params (+ grads and moments when `train`) and the
 * activations for (B, T); initialises as HF's BertPreTrainedModel._init_weights:
 * normal(0, 0.02) for Linear and Embedding weights (the [PAD] row of word_embeddings
 * zeroed), zero biases, LayerNorm weight 1 and bias 0, each tensor from its own
 * counter-RNG stream (seed, 0, RNG_PURPOSE_INIT, tensor index). Weight decay on
 * matrices and embeddings, none on biases and LayerNorm weights. STATUS_INPUT when T
 * exceeds max_position (names the key) or the config is inconsistent. */
/* As gpt2_set_batch: the next micro-batches have B samples, 1 <= B <= capacity (CPU only). */
void bert_set_batch(bert *m, int B);

status bert_init(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train);
/* The same on a device (NULL: the CPU), as gpt2_init_on. */
status bert_init_on(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev);
/* The same as one tensor-parallel shard (tp NULL or size 1: the whole model), Megatron-
 * style as gpt2_init_tp: query, key and value by heads and intermediate.dense by output
 * units (column-parallel, with their biases), attention.output.dense and output.dense by
 * input columns (row-parallel; their biases whole, added on tp rank 0 before the sum),
 * word_embeddings by rows with cls.predictions.bias (vocabulary-parallel lookup, tied
 * decoder and cross-entropy); the embeddings' position and type tables, the LayerNorms
 * and the MLM transform whole. The weights are the whole model's from the same seed,
 * sliced. CPU only; STATUS_INPUT when tp does not divide the heads or the vocabulary. */
status bert_init_tp(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                    const nn_tp *tp);
/* The same as one pipeline stage (stage NULL: the whole model), as gpt2_init_parallel:
 * the table holds the stage's blocks, plus the embeddings on the first stage and the
 * MLM head with the tied word_embeddings on the last (the same init streams as the
 * whole model's, so both copies start equal); the activations are sized for the
 * stage's blocks, `slots` times. A stage that does not start at block 0 reads its
 * input from bert_stage_in, one that does not end at the last leaves its output in
 * bert_stage_out (its forward's loss is 0); its backward starts from the gradient
 * written into bert_stage_grad and leaves there the gradient of its input. */
status bert_init_parallel(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                          const nn_tp *tp, const nn_stage *stage);
/* Selects activation set k (0..slots-1) for the next forward or backward. */
void bert_set_slot(bert *m, int k);
/* (B, T, C) of the current set: the stage's input (the hidden states entering block l0),
 * its output (leaving block l1 - 1) and the gradient buffer at the stage's boundary. */
float *bert_stage_in(bert *m);
float *bert_stage_out(bert *m);
float *bert_stage_grad(bert *m);
/* STATUS_INPUT (naming the keys) when a tp group of `tp` ranks cannot split cfg. */
status bert_check_tp(const bert_config *cfg, int tp);
/* The whole model's table as the shard of tp rank `tp_rank` of `tp_size` sees it (its
 * entries' full shapes and split dims), for the checkpoint layout (train/hybrid.c). */
status bert_table_whole(const bert_config *cfg, int tp_size, int tp_rank, param_table *out);
void bert_free(bert *m);

/* input_ids, token_type_ids, attention_mask, mlm_targets: (B, T). token_type_ids NULL
 * means all 0, attention_mask NULL means no padding, mlm_targets NULL means no loss
 * (logits only); targets hold -1 where nothing is predicted. Writes acts.logits and
 * mean_loss over the targeted positions (0 when none). Without targets the logits are
 * (B, T, V); with them the MLM head runs at the targeted positions only (NVIDIA's BERT
 * recipe, `dense_seq_output`: the loss and every gradient are the same, the head's
 * FLOPs drop to the masked share, 15% in pre-training) and acts.logits holds head_rows
 * rows, one per targeted position in order (head_pos), then padding rows (ignored). The inputs are
 * copied for bert_backward. STATUS_INPUT naming the position when an id, type, mask
 * value or target is out of range. */
status bert_forward(bert *m, const int32_t *input_ids, const int32_t *token_type_ids, const int32_t *attention_mask,
                    const int32_t *mlm_targets);
/* Gradient of the mean loss of the last forward, ADDED into the grad buffer. It reads
 * the inputs that forward copied, so a mismatched batch cannot be passed. */
void bert_backward(bert *m);

/* Model FLOPs of one training step per token: 6 per parameter of the whole model
 * (every shard and stage counted once: what one model replica computes). */
double bert_flops_per_token(const bert *m);
/* Parameters of one encoder block: 4 C^2 + 2 C IC + 9 C + IC (bert_build_table's 16
 * tensors), for the FLOP counts. */
double bert_block_params(const bert_config *cfg);

#endif
