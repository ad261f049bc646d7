/* hf_impl — what hf.c and hf_config.c share. */
#ifndef NEBULA_HF_IMPL_H
#define NEBULA_HF_IMPL_H

#include "data/tokenizer.h"
#include "hf.h"

#define PATH_MAX_HF 4096  /* bytes of a path these files build (DIR plus a file name) */

/* The tokenizer of the run whose stored config is `run_ini` (tok_find over its
 * data.tokenizer, "" when the key is absent, and data.train) and the ids config.json
 * names: GPT-2's <|endoftext|> as bos and eos when the vocabulary has it, else -1.
 * STATUS_INPUT, logged, when it cannot be loaded or its vocabulary is larger than the
 * model's. */
status hf_run_tokenizer(tok **out, const char *run_ini, const model_spec *s, int32_t *bos, int32_t *eos);

#endif
