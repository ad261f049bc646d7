/* hf — Hugging Face model directories and names: what `transformers` saves for
 * GPT2LMHeadModel and BertForMaskedLM (model.safetensors, config.json, tokenizer
 * files), written from a Nebula model and read back into one.
 *
 * Nebula's GPT-2 and BERT tensors already carry Hugging Face's names without the
 * model prefix (gpt2.h, bert.h), so the mapping is a prefix and the tied weights:
 *   GPT2LMHeadModel   "transformer." + name; lm_head.weight is wte.weight (not saved)
 *   BertForMaskedLM   "bert." + name for embeddings.* and encoder.*, cls.* as it is;
 *                     cls.predictions.decoder.weight is embeddings.word_embeddings.weight
 *                     and cls.predictions.decoder.bias is cls.predictions.bias (not saved)
 *
 * The one design decision: reading is tolerant and checked. A file's names may carry
 * "module." (DistributedDataParallel), then "transformer." or "bert.", or none; a tied
 * copy present in the file must equal its twin bit for bit (or stands in for a twin the
 * file lacks); tensors with no Nebula counterpart (old GPT-2 files' attn.bias and
 * attn.masked_bias buffers, position_ids, a BertModel's pooler) are skipped and listed;
 * every tensor Nebula needs must be there. So the same reader serves `--from
 * safetensors` and `--from hf`, whatever transformers class or wrapper wrote the file. */
#ifndef NEBULA_HF_H
#define NEBULA_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "nn/model.h"
#include "safetensors.h"

/* Rows of tensor e in an ecosystem file: GPT-2's wte has the vocabulary's rows there
 * (Hugging Face's vocab_size), Nebula's padded_vocab_size in the table; every other
 * tensor its first dimension. */
int64_t hf_file_rows(const model_spec *s, const param_entry *e);

/* ---- reading tensors ---------------------------------------------------------------- */

typedef struct hf_read_report {
    int used;               /* tensors of the file that were read or checked against a twin */
    int skipped;            /* tensors of the file that the model has no counterpart for */
    char skipped_names[1024]; /* their names, ", "-separated, cut short with "... (N in all)" */
} hf_read_report;

/* Fills m's parameters (and buffers, ResNet's batch-norm statistics) from f by name, as
 * the top of this file says; GPT-2's padding rows are left zero. STATUS_INPUT, logged
 * naming the file and the tensors (all missing ones; both of two names that map onto
 * one tensor; both twins of a tie that differ; a shape, naming both shapes); STATUS_IO
 * when the file cannot be read. */
status hf_read_tensors(model *m, const st_file *f, hf_read_report *r);

/* ---- a transformers directory ------------------------------------------------------- */

/* Whether --to hf can describe the model (GPT-2 and BERT; ResNet: torchvision's names go
 * through --to safetensors). */
bool hf_family_supported(const model_spec *s);

/* Where a model directory may be written (before anything is computed): a new name, an
 * empty directory, or one holding only files with a config.json (an earlier export, which
 * is replaced); never a run's state or a committed checkpoint (path_in_run_state).
 * STATUS_INPUT naming `flag` and the reason. */
status hf_dir_check(const char *dir, const char *flag);

/* Writes model m (its parameters in rank 0's buffer) as a transformers directory:
 * model.safetensors under transformers' names with `meta_json` (a flat JSON object of
 * strings, or NULL) as its metadata, config.json (hf_config_json), and the tokenizer of
 * the run whose stored config is `run_ini` (its data.tokenizer, else the files beside its
 * data.train: tok_find; a byte tokenizer writes none). Everything is written into
 * DIR.tmp.PID next to DIR and renamed to DIR at the end (an earlier export there is
 * replaced), so DIR is either what was there before or the whole new directory.
 * *tok_kind_out: the tokenizer's kind name ("bytes", "bpe", "wordpiece"). STATUS_INPUT for
 * a family hf_family_supported refuses or a tokenizer that does not fit the model;
 * STATUS_IO, logged, when writing fails (the temporary directory is removed). */
status hf_write_dir(const model *m, const char *run_ini, const char *meta_json, const char *dir,
                    const char **tok_kind_out);

/* config.json text (malloc'd) for spec s: GPT2Config (model_type gpt2, GPT2LMHeadModel,
 * gelu_new: Nebula's tanh GELU) or BertConfig (bert, BertForMaskedLM, erf GELU), the
 * real vocab_size (not GPT-2's padded one), dropout 0 (Nebula trains without it),
 * torch_dtype float32; bos_token_id / eos_token_id (GPT-2) when >= 0, else null. NULL
 * for ResNet or when out of memory. */
char *hf_config_json(const model_spec *s, int32_t bos, int32_t eos);

/* Reads DIR/config.json into mc, which is initialised here with MODEL_CONFIG_KEYS:
 * model.name the preset of the family whose sizes match (else one with the same blocks,
 * else gpt2 / bert-base), or `want` when given (it must be of the same family), and
 * every size the config states.
 * Settings Nebula's model cannot reproduce (another activation or LayerNorm epsilon,
 * intermediate_size other than 4 x hidden_size, token types other than 2, relative
 * positions) are refused. STATUS_INPUT, logged naming the file, the key (or the line
 * and column of a JSON syntax error) and what is expected. */
status hf_config_read(config *mc, const char *dir, const char *want);

/* The weights file of DIR: DIR/model.safetensors, opened with st_open. A directory with
 * only pytorch_model.bin, or a sharded model.safetensors.index.json, is STATUS_INPUT
 * with the hint to re-save it with safe_serialization as one file. */
status hf_open_weights(st_file *f, const char *dir);

#endif
