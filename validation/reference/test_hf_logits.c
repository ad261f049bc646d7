/* test_hf_logits — the Nebula side of validation/cli/test_ckpt_hf.sh: a committed
 * GPT-2 or BERT checkpoint loaded as nebula-train resumes (ckpt_load: checksums, model
 * and table hash checked), one forward of a fixed batch, and a safetensors dump of the
 * batch and the logits for validation/reference/hf_ref.py to recompute with
 * transformers' GPT2LMHeadModel / BertForMaskedLM.
 *
 *     test_hf_logits CKPT_DIR OUT.safetensors [B [T]]
 *
 * The batch is model_batch_synthetic's (seed 1234); BERT's attention mask pads the last
 * quarter of sequence 0, so the masked keys are compared too. GPT-2: the forward with
 * its loss, logits (B, T, Vp); BERT: the forward without targets, the MLM head at every
 * position, logits (B, T, V). The dump holds in.tokens and (BERT) in.mask (B, T) as
 * float32 (exact: ids < 2^24), out.logits, and the metadata family and vocab_size.
 * Exit 0 when the dump is written, 1 on any failure (logged), 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/runtime.h"
#include "ckpt/tool/offline.h"
#include "ckpt/tool/safetensors.h"
#include "nn/model.h"

enum { BATCH_SEED = 1234 };

static status spec_of_checkpoint(const char *dir, model_spec *spec)
{
    ckpt_catalog cat;
    TRY(ckpt_catalog_open(&cat, dir));
    config mc;
    status st = STATUS_OK;
    if (model_config_from_ini(&mc, cat.config) != STATUS_OK || model_spec_from_config(spec, &mc) != STATUS_OK ||
        strcmp(spec->name, cat.h.model) != 0) {
        log_error0("%s: its stored [model] section does not describe the model '%s' it holds", dir, cat.h.model);
        st = STATUS_INPUT;
    }
    ckpt_catalog_free(&cat);
    return st;
}

static float *as_float(const int32_t *v, size_t n)
{
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; f && i < n; i++) f[i] = (float)v[i];
    return f;
}

static status dump(const model *m, const model_batch *b, const char *out)
{
    bool bert = m->spec.family == MODEL_FAMILY_BERT;
    int B = m->B, T = m->T, V = model_vocab_size(&m->spec), Vp = bert ? V : model_padded_vocab_size(&m->spec);
    float *ids = as_float(b->ids, (size_t)B * T), *mask = bert ? as_float(b->mask, (size_t)B * T) : NULL;
    st_tensor t[3];
    int nt = 0;
    t[nt++] = (st_tensor){ "in.tokens", 2, { B, T }, ids };
    if (bert) t[nt++] = (st_tensor){ "in.mask", 2, { B, T }, mask };
    t[nt++] = (st_tensor){ "out.logits", 3, { B, T, Vp }, bert ? m->bert.acts.logits : m->gpt2.acts.logits };
    char meta[256];
    snprintf(meta, sizeof meta, "{\"model\":\"%s\",\"family\":\"%s\",\"vocab_size\":\"%d\"}", m->spec.name,
             bert ? "bert" : "gpt2", V);
    status st = !ids || (bert && !mask) ? STATUS_NOMEM : st_write(out, t, nt, meta);
    free(ids);
    free(mask);
    return st;
}

static status run(const runtime *rt, const char *dir, const char *out, int B, int T)
{
    model_spec spec;
    TRY(spec_of_checkpoint(dir, &spec));
    if (spec.family == MODEL_FAMILY_RESNET) {
        log_error0("%s: %s is not a transformers model (GPT-2 and BERT are)", dir, spec.name);
        return STATUS_INPUT;
    }
    int max_t = spec.family == MODEL_FAMILY_GPT2 ? spec.gpt2.max_seq_len : spec.bert.max_position;
    if (T > max_t) T = max_t;
    model m;
    memset(&m, 0, sizeof m);
    TRY(model_init(&m, &spec, B, T, 0, false));
    ckpt_content c = { .model = spec.name, .table_hash = param_table_hash(model_params(&m)) };
    c.groups[c.ngroups++] = (ckpt_tensors){ "params", model_params(&m), model_buffers(&m)->params, false };
    ckpt_info info;
    model_batch b;
    status st = ckpt_load(rt->world, NULL, dir, &c, &info);
    if (st == STATUS_OK) st = model_batch_init(&b, &m);
    if (st == STATUS_OK) {
        model_batch_synthetic(&b, &m, BATCH_SEED);
        if (spec.family == MODEL_FAMILY_BERT) {
            for (int t = T - T / 4; t < T; t++) b.mask[t] = 0;  /* sequence 0's tail: padding */
            st = bert_forward(&m.bert, b.ids, NULL, b.mask, NULL);
        } else {
            st = model_forward(&m, &b, false);
        }
        if (st == STATUS_OK && rt->rank == 0) st = dump(&m, &b, out);
        if (st == STATUS_OK && rt->rank == 0)
            printf("%s: %s at step %lld, %d sequences of %d tokens -> %s\n", dir, spec.name, (long long)info.step, B,
                   T, out);
        model_batch_free(&b);
    }
    model_free(&m);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s CKPT_DIR OUT.safetensors [B [T]]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *out = argv[2];
    int B = argc > 3 ? atoi(argv[3]) : 2, T = argc > 4 ? atoi(argv[4]) : 32;
    if (B < 1 || T < 4) {
        fprintf(stderr, "%s: B must be positive and T at least 4\n", argv[0]);
        return 2;
    }
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    st = run(&rt, dir, out, B, T);
    if (st != STATUS_OK) log_error0("no logits for %s: %s", dir, status_str(st));
    runtime_free(&rt);
    return st == STATUS_OK ? 0 : 1;
}
