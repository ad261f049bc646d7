/* llmc — llm.c's GPT-2 model file (karpathy/llm.c: written by train_gpt2.py
 * write_model, read by train_gpt2.c gpt2_build_from_checkpoint), and its mapping
 * to and from Nebula's GPT-2 parameter table (gpt2.h).
 *
 * File: a header of 256 little-endian int32 — [0] magic 20240326, [1] version
 * (3: fp32, 5: bf16), [2] max_seq_len, [3] vocab_size V, [4] num_layers L,
 * [5] num_heads NH, [6] channels C, [7] padded_vocab_size Vp, the rest 0 — then
 * every parameter in llm.c's order (fill_in_parameter_sizes), each per-layer
 * tensor as L consecutive copies, layer 0 first:
 *
 *   llm.c      shape in llm.c    Nebula (HF GPT-2 name)      Nebula shape  relation
 *   wte        (Vp, C)           wte.weight                  (Vp, C)       same
 *   wpe        (maxT, C)         wpe.weight                  (maxT, C)     same
 *   ln1w       (L, C)            h.<l>.ln_1.weight           (C)           same
 *   ln1b       (L, C)            h.<l>.ln_1.bias             (C)           same
 *   qkvw       (L, 3C, C)        h.<l>.attn.c_attn.weight    (C, 3C)       transposed
 *   qkvb       (L, 3C)           h.<l>.attn.c_attn.bias      (3C)          same
 *   attprojw   (L, C, C)         h.<l>.attn.c_proj.weight    (C, C)        transposed
 *   attprojb   (L, C)            h.<l>.attn.c_proj.bias      (C)           same
 *   ln2w       (L, C)            h.<l>.ln_2.weight           (C)           same
 *   ln2b       (L, C)            h.<l>.ln_2.bias             (C)           same
 *   fcw        (L, 4C, C)        h.<l>.mlp.c_fc.weight       (C, 4C)       transposed
 *   fcb        (L, 4C)           h.<l>.mlp.c_fc.bias         (4C)          same
 *   fcprojw    (L, C, 4C)        h.<l>.mlp.c_proj.weight     (4C, C)       transposed
 *   fcprojb    (L, C)            h.<l>.mlp.c_proj.bias       (C)           same
 *   lnfw       (C)               ln_f.weight                 (C)           same
 *   lnfb       (C)               ln_f.bias                   (C)           same
 *
 * The one design decision: llm.c keeps a block's four matrices as nn.Linear
 * (out, in) — its train_gpt2.py transposes HF's Conv1D weights on load — while
 * Nebula keeps HF's Conv1D (in, out) so its checkpoints convert to HF safetensors
 * unchanged. The mapping transposes exactly those four and copies the rest; it
 * is a permutation of floats, so Nebula -> llm.c fp32 -> Nebula is bit-exact
 * (bf16 files round each float to nearest-even, as torch's .to(torch.bfloat16)).
 * The q, k, v thirds of c_attn keep their order in both layouts. Rows V..Vp-1 of
 * wte are padding: written as zeros, read as stored.
 *
 * The reader treats the file as hostile: every header field is range-checked and
 * the file size must equal 1024 + parameters x (4 or 2) bytes, in overflow-checked
 * 64-bit arithmetic, before anything is allocated or read. Errors are STATUS_INPUT
 * with one message naming the file, the field, the value and what was expected. */
#ifndef NEBULA_LLMC_H
#define NEBULA_LLMC_H

#include <stddef.h>

#include "nn/gpt2.h"
#include "base/log.h"
#include "nn/param.h"

#define LLMC_MAGIC        20240326  /* header[0] of an llm.c GPT-2 model file */
#define LLMC_HEADER_INTS  256       /* int32 values before the parameters (1024 bytes) */

typedef enum llmc_version {
    LLMC_VERSION_FP32 = 3,  /* every parameter a little-endian float32 */
    LLMC_VERSION_BF16 = 5,  /* every parameter a bfloat16 (the top half of a float32) */
} llmc_version;

typedef struct llmc_model {
    gpt2_config cfg;       /* sizes from (or for) the header */
    llmc_version version;  /* the dtype of the file read; llmc_write takes its own */
    size_t num_params;     /* floats in params */
    float *params;         /* (num_params) in llm.c's order and layout (table above) */
} llmc_model;

/* Reads and validates `path`; bf16 parameters are widened exactly to float.
 * STATUS_INPUT for a missing or malformed file, STATUS_NOMEM, STATUS_IO for a
 * read that fails; on failure m holds nothing. */
status llmc_read(llmc_model *m, const char *path);

/* Writes m as `version` atomically (path.h path_write_atomic); rows V..Vp-1 of wte
 * are written as zeros whatever m holds there. STATUS_IO on failure. */
status llmc_write(const llmc_model *m, const char *path, llmc_version version);

/* Fills m (allocating m->params) from a Nebula GPT-2 flat buffer `params` laid out
 * by `pt`, for the sizes in cfg. STATUS_INPUT when the table does not hold exactly
 * the tensors of that GPT-2 with those shapes (the message names the first that
 * differs); STATUS_NOMEM. */
status llmc_from_table(llmc_model *m, const gpt2_config *cfg, const param_table *pt, const float *params);

/* The inverse: writes every tensor of pt in `params` from m. Padding between
 * tensors is not touched. STATUS_INPUT as for llmc_from_table, with m->cfg. */
status llmc_to_table(const llmc_model *m, const param_table *pt, float *params);

void llmc_free(llmc_model *m);

#endif
