/* dgc — DGC-Pro gradient compression: Deep Gradient Compression (Lin et al., ICLR
 * 2018, arXiv 1712.01887) with a hierarchical, range-partitioned sparse exchange and
 * per-layer decisions.
 *
 * The one design decision: compression happens once per node, not once per rank.
 * A step (dgc_exchange, collective over the world) is
 *   1. dense reduce-scatter inside the node (shared memory): local rank l receives
 *      the node's summed gradient of its slice — whole tensors, balanced by size;
 *   2. on that slice, per tensor: the node's contribution c = g_node / world_size,
 *      local clipping, momentum correction (u = m u + c, v = v + s u with s the
 *      learning rate relative to its peak: see dgc_exchange; plain
 *      accumulation v = v + c without momentum), a threshold from a sample of |v|
 *      (or exact top-k), selection, momentum-factor masking (u and v zeroed where
 *      sent); small tensors and tensors whose top-k carries too little of their
 *      energy are sent dense instead (their gradient, no residual);
 *   3. a sparse allreduce among the ranks owning the same slice on every node
 *      (runtime's peers communicator): the slice is cut into one index range per
 *      peer; each peer sends its entries of range r to peer r (alltoallv), which
 *      sums them in peer order and sends the reduced range to everyone
 *      (allgatherv) — a rank sends its k entries once and receives the unions, so
 *      its traffic does not grow with the node count while the selections overlap
 *      (Ok-Topk, PPoPP'22, splits by index range the same way). Each message is
 *      encoded sparse (delta indices bit-packed at the width of their largest gap,
 *      values fp32 or fp16) or dense, whichever is smaller;
 *   4. dense allgather inside the node: every rank holds the result.
 * The result replaces the gradient buffer. For tensors compressed with momentum
 * correction, momentum and weight decay were applied before the exchange, and the
 * optimizer must apply p -= lr * g (dgc_plain_entries says which).
 *
 * Conservation: what a node accumulated equals, to float rounding, what it sent
 * plus its residual v; with fp16 values the rounding of each sent value stays in the
 * residual of the rank that rounded it. Every rank ends with the same bits.
 *
 * Every vector (the node's reduce-scatter and all-gather, the peers' alltoallv and
 * allgatherv, the energies, the votes) goes through comm.h's comm_group, and the
 * scalars and message sizes through comm/ctl.h, all with the deadline
 * dgc_options.timeout_s (comm.timeout): a node or a rank that does not arrive makes
 * the others return STATUS_TIMEOUT instead of hanging. Files: dgc_state.c (the state),
 * dgc.c (selection), dgc_exchange.c (the step), dgc_codec.c, dgc_select.c,
 * dgc_options.c; dgc_impl.h between them. */
#ifndef NEBULA_DGC_H
#define NEBULA_DGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "nn/param.h"
#include "base/runtime.h"
#include "cpu/dgc.h" /* dgc_kth_abs, dgc_select: the selection kernels */

typedef enum dgc_mode {
    DGC_MODE_AUTO = 0,  /* on unless the model or the measured communication is too small (dgc_auto_decide) */
    DGC_MODE_ON,        /* forced on */
    DGC_MODE_OFF,
} dgc_mode;

typedef enum dgc_values {
    DGC_VALUES_FP32 = 0,
    DGC_VALUES_FP16,
} dgc_values;

typedef struct dgc_options {
    dgc_mode mode;
    double sparsity;          /* final fraction NOT sent, e.g. 0.999 */
    long warmup_steps;        /* sparsity warm-up length; 0: final sparsity from the start */
    int warmup_stages;        /* stage i of the warm-up sends (1 - warmup_sparsity) * 0.25^i */
    double warmup_sparsity;   /* of the first stage: 0.75 gives DGC's 75%, 93.75%, 98.4%, ... */
    double sample_fraction;   /* of each tensor's entries sampled for the threshold, (0, 1] */
    bool exact_topk;          /* exact k-th largest instead of the sampled threshold (tests) */
    double momentum;          /* momentum correction factor (SGD's momentum); 0: plain accumulation */
    bool nesterov;            /* Nesterov form of the momentum correction */
    double weight_decay;      /* coupled weight decay folded in before compression (SGD); 0 for AdamW */
    double clip;              /* global gradient-norm clip; each node clips to clip / sqrt(nodes); 0: none */
    dgc_values values;        /* encoding of sent values */
    size_t min_numel;         /* tensors with fewer entries are sent dense */
    double min_energy;        /* tensors whose top-k carries less of |v|^2 than this go dense next step; 0: never */
    bool layer_ratios;        /* Pro 2: per-tensor densities under the schedule's budget, from concentration */
    bool zero_predict;        /* Pro 3: skip blocks predicted (and confirmed) zero before selection */
    uint64_t seed;            /* of the threshold samples */
    int64_t min_params;       /* auto: off below this many parameters */
    double min_comm_fraction; /* auto: off when communication takes less than this fraction of compute */
    double timeout_s;         /* deadline of each collective in seconds (comm.timeout); 0: none */
    const MPI_Comm *norm_comm;/* on a process grid, the ranks of every shard and stage of this node's
                                 replicas: the clipping norm sums over them (alive as long as the dgc);
                                 NULL otherwise */
    const MPI_Comm *rows_comm;/* a checkpoint's world other than rt->world (a grid): the state is padded
                                 to its largest rank's, a checkpoint's rows being of one size; NULL: none */
} dgc_options;

/* Config keys of [dgc], for an app's schema. */
#define DGC_CONFIG_KEYS                                                                                  \
    { "dgc", "mode", CONFIG_TYPE_ENUM, "off", .choices = "auto|on|off",                                   \
      .help = "gradient compression: auto (on for large models on slow links), on (forced), off" },       \
    { "dgc", "sparsity", CONFIG_TYPE_FLOAT, "0.999", .min = 0, .max = 0.999999,                            \
      .help = "final fraction of each compressed tensor not sent per step" },                              \
    { "dgc", "warmup_steps", CONFIG_TYPE_INT, "0", .min = 0, .max = 1L << 40,                              \
      .help = "steps of sparsity warm-up (stages from dgc.warmup_sparsity up to dgc.sparsity)" },          \
    { "dgc", "warmup_sparsity", CONFIG_TYPE_FLOAT, "0.75", .min = 0, .max = 0.999999,                      \
      .help = "sparsity of the first warm-up stage; each later stage sends a quarter of the one before" }, \
    { "dgc", "warmup_stages", CONFIG_TYPE_INT, "4", .min = 1, .max = 16,                                   \
      .help = "stages of the warm-up (the schedule stops at dgc.sparsity)" },                                \
    { "dgc", "sample_fraction", CONFIG_TYPE_FLOAT, "0.01", .min = 1e-6, .max = 1,                          \
      .help = "fraction of each tensor sampled to choose the threshold" },                                 \
    { "dgc", "exact_topk", CONFIG_TYPE_BOOL, "false", .help = "exact top-k instead of a sampled threshold" }, \
    { "dgc", "value_dtype", CONFIG_TYPE_ENUM, "fp32", .choices = "fp32|fp16",                                   \
      .help = "encoding of the values sent (fp16 rounding stays in the residual)" },                       \
    { "dgc", "min_numel", CONFIG_TYPE_INT, "16384", .min = 1, .max = 1L << 40,                              \
      .help = "tensors with fewer entries (biases, norms) are sent dense" },                               \
    { "dgc", "min_energy", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1,                                     \
      .help = "tensors whose top-k carries less of the gradient energy than this are sent dense" },        \
    { "dgc", "layer_ratios", CONFIG_TYPE_BOOL, "true",                                                     \
      .help = "per-tensor densities: concentrated gradients send fewer entries, diffuse ones more, same budget" }, \
    { "dgc", "zero_predict", CONFIG_TYPE_BOOL, "true",                                                     \
      .help = "skip blocks whose gradient was zero last step once a scan confirms it (exact)" },           \
    { "dgc", "min_params", CONFIG_TYPE_INT, "50000000", .min = 0, .max = 1e15,                             \
      .help = "auto: DGC-Pro stays off for models with fewer parameters" },                                \
    { "dgc", "min_comm_fraction", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 1e6,                          \
      .help = "auto: off when dense communication takes less than this fraction of compute; else a 2-step trial decides" }

struct config;
/* Fills the [dgc] keys and the deadline from comm.timeout (the schema must hold
 * COMM_CONFIG_KEYS); momentum, nesterov, weight_decay and clip come from the
 * optimizer (the caller sets them). */
void dgc_options_from_config(const struct config *cfg, dgc_options *o);

typedef struct dgc dgc;

/* Per-step figures of this rank (dgc_exchange fills them). */
typedef struct dgc_stats {
    double density;            /* target density of compressed tensors this step */
    size_t selected;           /* entries this rank's slice sent sparse */
    size_t compressed;         /* entries of its compressed tensors */
    size_t bytes_sent;         /* between nodes: alltoallv + allgatherv payload this rank sent */
    size_t bytes_recv;
    size_t dense_bytes;        /* what a ring allreduce of the slice among the peers would send */
    double residual_norm;      /* ||v|| over the slice after the selection (the fp16 rounding kept in v left out) */
    double select_s, encode_s, exchange_s, total_s;
    int dense_tensors;         /* tensors of the slice sent dense this step */
    size_t zero_predicted;     /* Pro 3: entries in blocks predicted zero (zero last step, state zero) */
    size_t zero_true;          /* entries in blocks that were zero with a zero state this step */
    size_t zero_hit;           /* predicted and true: precision = hit / predicted, recall = hit / true */
    size_t zero_skipped;       /* entries skipped (exactly the hits) */
} dgc_stats;

/* Collective over rt->world. Every node must have the same number of ranks.
 * STATUS_TIMEOUT when a rank did not arrive within o->timeout_s. */
status dgc_init(dgc **out, const runtime *rt, const param_table *pt, const dgc_options *o);
void dgc_free(dgc *d);

/* Collective. grads: this rank's gradient (its micro-batch mean), replaced by the
 * result on every rank; params: for the coupled weight decay; step: 0-based.
 * lr_scale: this step's learning rate over a fixed reference (the schedule's peak),
 * > 0. With momentum correction it is folded into the accumulation (v = v + s_t u),
 * and the compressed tensors' result divided by it, so the optimizer's p -= lr_t g
 * applies lr_ref * sum(s_t u_t) = sum(lr_t u_t) over the steps a coordinate waited:
 * what dense momentum SGD applied over those steps, at the rates of the steps that
 * produced it rather than the (decayed) rate of the step that sends it. Pass 1 for
 * DGC's original form (accumulated gradient applied at the sending step's rate).
 * STATUS_TIMEOUT when a collective missed the deadline (grads is then undefined, and
 * collectives on the runtime's node and peers communicators unsafe: the job ends). */
status dgc_exchange(dgc *d, float *grads, const float *params, long step, double lr_scale, dgc_stats *st);

/* This rank's residual (accumulated, not yet sent): elements [*offset, *offset + *count)
 * of the flat buffer, this node's share; the slices of a node's ranks are disjoint. */
const float *dgc_residual(const dgc *d, size_t *offset, size_t *count);

/* Collective over the node: each tensor's density at `step` (1 for dense tensors),
 * its concentration (Pro 2) and whether it is sent dense, on local rank 0 of every
 * node (arrays of pt->count; untouched elsewhere). STATUS_TIMEOUT past the deadline. */
status dgc_layer_table(dgc *d, float *density, float *concentration, uint8_t *dense, long step);

/* Whether compression runs (auto mode may decide after measuring); part of the state. */
bool dgc_active(const dgc *d);
void dgc_set_active(dgc *d, bool on);
/* A hot reload: the options that may change between steps (sparsity and its warm-up,
 * momentum and weight decay of the correction, clip) from o; the rest stays as at
 * dgc_init. The momentum must stay zero or non-zero (its velocity exists or not). */
void dgc_set_live(dgc *d, const dgc_options *o);

/* Adds factor times this rank's residual to grads at its slice and zeroes the state:
 * with factor = accumulation x world size, a dense averaged step then applies every
 * node's residual once (switching compression off loses nothing). lr_scale: that
 * step's, as for dgc_exchange (a residual with the rate folded in is divided by it). */
void dgc_flush(dgc *d, float *grads, float factor, double lr_scale);

/* Per table entry: 1 when momentum and weight decay were applied before the exchange. */
const uint8_t *dgc_plain_entries(const dgc *d);

/* The density (fraction sent) of compressed tensors at step (0-based). */
double dgc_density_at(const dgc_options *o, long step);

/* The per-rank state as one blob for checkpoints (the same size on every rank):
 * velocities, residuals and per-tensor decisions of this rank's slice. dgc_state
 * points at the live state (a checkpoint reads it; a load writes it). */
size_t dgc_state_bytes(const dgc *d);
void *dgc_state(dgc *d);
/* After a load into dgc_state: checks the header (slice and table); STATUS_INPUT
 * when it belongs to another layout (then the state is reset and the caller warns). */
status dgc_state_loaded(dgc *d);
/* Resets velocities, residuals and decisions (a resume at another world size). */
void dgc_state_reset(dgc *d);
/* The value check of one checkpointed row of the state blob (ckpt_value_check; no dgc
 * needed, so nebula-ckpt verify runs it too): a row with this version's header holds
 * nothing after it but float32 words (the per-tensor records' energies, concentrations
 * and scales, the velocities u and residuals v, zero padding; a record's dense flag and
 * padding read as a tiny finite float), and every one must be finite. STATUS_CORRUPT
 * with why naming `dataset`, the count and the first offset; STATUS_OK for a row of
 * another version or size, which dgc_state_loaded resets rather than uses. */
status dgc_state_check(const char *dataset, const void *row, size_t bytes, char *why, size_t len);

/* ---- codec (dgc_codec.c), exposed for tests ---------------------------------- */
/* A message covering `n` elements: dense (every value fp32) or sparse (the values
 * of the dense-tensor elements, fp32, in order, then `count` entries). */
#define DGC_MSG_HEADER 16
size_t dgc_sparse_msg_bytes(size_t ndense, const uint32_t *idx, size_t count, dgc_values vk);
/* Encodes; idx ascending and relative to the range start. Returns bytes written. */
size_t dgc_encode_sparse(uint8_t *out, const float *dense_vals, size_t ndense, const uint32_t *idx,
                         const float *val, size_t count, dgc_values vk);
size_t dgc_encode_dense(uint8_t *out, const float *vals, size_t n);
/* Decodes a message of a range of n elements and adds it to acc[0, n): dense
 * values go to the elements listed by runs (pairs of [start, end) relative to the
 * range, nruns pairs) for a sparse message. When touched is not NULL, marks every
 * sparse index (one bit per element). Returns STATUS_CORRUPT for a malformed message. */
status dgc_decode_add(const uint8_t *msg, size_t len, float *acc, size_t n, const size_t *runs, int nruns,
                      uint64_t *touched);
/* The value an entry has after encoding (fp16 rounding, or itself). */
float dgc_round_value(float v, dgc_values vk);

/* ---- selection (dgc_select.c; its kernels dgc_kth_abs and dgc_select in
 * kernels/cpu/dgc.h), exposed for tests and nebula-bench ------------------------- */
/* The threshold estimated from a stratified sample of about m = ceil(fraction * n)
 * entries (a window of 16 consecutive entries uniformly placed in each of m/16 equal
 * strata, positions from seed): the ceil(density * m)-th largest |x| of the sample
 * (scratch: m floats). */
float dgc_sampled_threshold(const float *x, size_t n, double density, double fraction, uint64_t seed,
                            float *scratch);
/* The thresholds of `count` densities from one sample (the same sample for each, as
 * dgc_sampled_threshold would draw it). */
void dgc_sampled_thresholds(const float *x, size_t n, const double *density, float *thr, int count, double fraction,
                            uint64_t seed, float *scratch);

#endif
