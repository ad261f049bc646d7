/* hf_config — config.json both ways (GPT2Config, BertConfig), the weights file of a
 * transformers directory, and the tokenizer a run's stored config names (hf.h).
 *
 * Reading accepts only what Nebula's kernels compute: a config.json that asks for
 * another activation, LayerNorm epsilon or feed-forward width would load into a model
 * whose logits are not the file's, so it is refused by key rather than converted. */
#include "hf_impl.h"
#include "base/path.h"

#include <errno.h>
#include <ini.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The LayerNorm epsilons of Nebula's kernels (gpt2.c GPT2_LN_EPS, bert.c BERT_LN_EPS),
 * which are transformers' defaults. */
#define HF_GPT2_LN_EPS 1e-5
#define HF_BERT_LN_EPS 1e-12
#define HF_CONFIG_MAX  (16 << 20)  /* bytes of a config.json read: real ones are a few KiB */

static const config_key hf_model_schema[] = { MODEL_CONFIG_KEYS };

/* ---- writing ------------------------------------------------------------------------ */

static json_t *id_or_null(int32_t id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

char *hf_config_json(const model_spec *s, int32_t bos, int32_t eos)
{
    json_t *c = NULL;
    if (s->family == MODEL_FAMILY_GPT2) {
        const gpt2_config *g = &s->gpt2;
        c = json_pack("{s:s, s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:n, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:b, "
                      "s:b, s:b, s:s}",
                      "model_type", "gpt2", "architectures", "GPT2LMHeadModel", "activation_function", "gelu_new",
                      "vocab_size", g->vocab_size, "n_positions", g->max_seq_len, "n_embd", g->channels, "n_layer",
                      g->num_layers, "n_head", g->num_heads, "n_inner", "layer_norm_epsilon", HF_GPT2_LN_EPS,
                      "initializer_range", 0.02, "attn_pdrop", 0.0, "embd_pdrop", 0.0, "resid_pdrop", 0.0,
                      "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0, "reorder_and_upcast_attn", 0,
                      "tie_word_embeddings", 1, "use_cache", 1, "torch_dtype", "float32");
        if (c) {
            json_object_set_new(c, "bos_token_id", id_or_null(bos));
            json_object_set_new(c, "eos_token_id", id_or_null(eos));
        }
    } else if (s->family == MODEL_FAMILY_BERT) {
        const bert_config *b = &s->bert;
        c = json_pack("{s:s, s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:b, "
                      "s:b, s:s}",
                      "model_type", "bert", "architectures", "BertForMaskedLM", "hidden_act", "gelu", "vocab_size",
                      b->vocab_size, "hidden_size", b->channels, "num_hidden_layers", b->num_layers,
                      "num_attention_heads", b->num_heads, "intermediate_size", b->intermediate,
                      "max_position_embeddings", b->max_position, "type_vocab_size", b->type_vocab_size,
                      "pad_token_id", b->pad_token_id, "layer_norm_eps", HF_BERT_LN_EPS, "initializer_range", 0.02,
                      "hidden_dropout_prob", 0.0, "attention_probs_dropout_prob", 0.0, "position_embedding_type",
                      "absolute", "tie_word_embeddings", 1, "use_cache", 1, "torch_dtype", "float32");
    }
    if (!c) return NULL;
    char *text = json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(c);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *out = realloc(text, n + 2);  /* a final newline, as transformers writes it */
    if (!out) {
        free(text);
        return NULL;
    }
    memcpy(out + n, "\n", 2);
    return out;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct hf_json {
    const char *path;  /* DIR/config.json, for messages */
    json_t *root;      /* its object */
} hf_json;

static const char *kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

/* Key `key` as an integer in [lo, hi]; `def` when absent (def < 0: required). */
static status get_int(const hf_json *j, const char *key, long long def, long long lo, long long hi, int *out)
{
    json_t *v = json_object_get(j->root, key);
    if (!v && def >= 0) {
        *out = (int)def;
        return STATUS_OK;
    }
    if (!v || !json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char got[64];
        if (v && json_is_integer(v)) snprintf(got, sizeof got, "%lld", (long long)json_integer_value(v));
        log_error("%s: \"%s\" is %s%s%s; expected an integer in [%lld, %lld]", j->path, key,
                  !v ? "missing" : kind_of(v), v && json_is_integer(v) ? " " : "", v && json_is_integer(v) ? got : "",
                  lo, hi);
        return STATUS_INPUT;
    }
    *out = (int)json_integer_value(v);
    return STATUS_OK;
}

/* Key `key`, when present, one of `allowed` ("a|b"); `why` says what Nebula computes. */
static status want_string(const hf_json *j, const char *key, const char *allowed, const char *why)
{
    json_t *v = json_object_get(j->root, key);
    if (!v) return STATUS_OK;
    if (json_is_string(v)) {
        char list[128], *save = NULL;
        snprintf(list, sizeof list, "%s", allowed);
        for (char *w = strtok_r(list, "|", &save); w; w = strtok_r(NULL, "|", &save))
            if (!strcmp(w, json_string_value(v))) return STATUS_OK;
    }
    log_error("%s: \"%s\" is %s%s%s%s; Nebula's model reads only \"%s\" (%s)", j->path, key, kind_of(v),
              json_is_string(v) ? " \"" : "", json_is_string(v) ? json_string_value(v) : "",
              json_is_string(v) ? "\"" : "", allowed, why);
    return STATUS_INPUT;
}

/* Key `key`, when present and not null, the number `want` (relative 1e-6). */
static status want_number(const hf_json *j, const char *key, double want, const char *why)
{
    json_t *v = json_object_get(j->root, key);
    if (!v || json_is_null(v)) return STATUS_OK;
    if (json_is_number(v) && fabs(json_number_value(v) - want) <= 1e-6 * want) return STATUS_OK;
    char got[64] = "";
    if (json_is_number(v)) snprintf(got, sizeof got, " %g", json_number_value(v));
    log_error("%s: \"%s\" is %s%s; Nebula's model computes with %g (%s)", j->path, key, kind_of(v), got, want, why);
    return STATUS_INPUT;
}

/* Key `key`, when present, the boolean `want`. */
static status want_bool(const hf_json *j, const char *key, bool want, const char *why)
{
    json_t *v = json_object_get(j->root, key);
    if (!v || (json_is_boolean(v) && json_is_true(v) == want)) return STATUS_OK;
    log_error("%s: \"%s\" is %s%s; Nebula's model has it %s (%s)", j->path, key, kind_of(v),
              json_is_boolean(v) ? (json_is_true(v) ? " true" : " false") : "", want ? "true" : "false", why);
    return STATUS_INPUT;
}

/* The sizes every family shares, in the order of MODEL_CONFIG_KEYS. */
typedef struct hf_sizes {
    int n_layer, n_head, n_embd, max_seq_len, vocab_size;
} hf_sizes;

static status read_gpt2(const hf_json *j, hf_sizes *z)
{
    int n_inner = 0, n_ctx = 0;
    TRY(get_int(j, "n_layer", -1, 1, 1024, &z->n_layer));
    TRY(get_int(j, "n_head", -1, 1, 4096, &z->n_head));
    TRY(get_int(j, "n_embd", -1, 1, 65536, &z->n_embd));
    TRY(get_int(j, "n_ctx", 0, 0, 1 << 20, &n_ctx));
    TRY(get_int(j, "n_positions", n_ctx ? n_ctx : -1, 1, 1 << 20, &z->max_seq_len));
    TRY(get_int(j, "vocab_size", -1, 1, 1 << 24, &z->vocab_size));
    json_t *inner = json_object_get(j->root, "n_inner");
    if (inner && !json_is_null(inner)) {
        TRY(get_int(j, "n_inner", -1, 1, 1 << 20, &n_inner));
        if (n_inner != 4 * z->n_embd) {
            log_error("%s: \"n_inner\" is %d; Nebula's GPT-2 has 4 x n_embd = %d (null means that)", j->path,
                      n_inner, 4 * z->n_embd);
            return STATUS_INPUT;
        }
    }
    TRY(want_string(j, "activation_function", "gelu_new|gelu_pytorch_tanh", "GELU's tanh approximation"));
    TRY(want_number(j, "layer_norm_epsilon", HF_GPT2_LN_EPS, "GPT-2's LayerNorm epsilon"));
    TRY(want_bool(j, "scale_attn_weights", true, "scores divided by sqrt(head size)"));
    TRY(want_bool(j, "scale_attn_by_inverse_layer_idx", false, "no per-layer scaling"));
    TRY(want_bool(j, "add_cross_attention", false, "a decoder alone"));
    return want_bool(j, "tie_word_embeddings", true, "lm_head is wte");
}

static status read_bert(const hf_json *j, hf_sizes *z)
{
    int inter = 0, types = 0;
    TRY(get_int(j, "num_hidden_layers", -1, 1, 1024, &z->n_layer));
    TRY(get_int(j, "num_attention_heads", -1, 1, 4096, &z->n_head));
    TRY(get_int(j, "hidden_size", -1, 1, 65536, &z->n_embd));
    TRY(get_int(j, "max_position_embeddings", -1, 1, BERT_MAX_POSITION, &z->max_seq_len));
    TRY(get_int(j, "vocab_size", -1, 104, 1 << 24, &z->vocab_size));
    TRY(get_int(j, "intermediate_size", -1, 1, 1 << 20, &inter));
    if (inter != 4 * z->n_embd) {
        log_error("%s: \"intermediate_size\" is %d; Nebula's BERT has 4 x hidden_size = %d", j->path, inter,
                  4 * z->n_embd);
        return STATUS_INPUT;
    }
    TRY(get_int(j, "type_vocab_size", 2, 2, 2, &types));
    TRY(want_string(j, "hidden_act", "gelu", "the exact, erf GELU"));
    TRY(want_string(j, "position_embedding_type", "absolute", "learned absolute positions"));
    TRY(want_number(j, "layer_norm_eps", HF_BERT_LN_EPS, "BERT's LayerNorm epsilon"));
    TRY(want_bool(j, "is_decoder", false, "an encoder"));
    TRY(want_bool(j, "tie_word_embeddings", true, "the MLM decoder is word_embeddings"));
    json_t *pad = json_object_get(j->root, "pad_token_id");
    if (pad && !(json_is_integer(pad) && json_integer_value(pad) == 0))
        log_warn("%s: \"pad_token_id\" is not 0; Nebula's BERT keeps [PAD] at id 0 (it only decides which "
                 "embedding row gets no gradient in training)", j->path);
    return STATUS_OK;
}

/* The preset of the family whose sizes are z's, else one with z's blocks (a vocabulary or
 * context of its own), else the family's base model. */
static const char *preset_for(model_family f, const hf_sizes *z)
{
    static const char *const gpt2s[] = { "gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl" };
    static const char *const berts[] = { "bert-tiny", "bert-base", "bert-large" };
    const char *const *names = f == MODEL_FAMILY_GPT2 ? gpt2s : berts;
    int n = f == MODEL_FAMILY_GPT2 ? 5 : 3;
    const char *near = NULL;  /* the same blocks, another vocabulary or context */
    for (int i = 0; i < n; i++) {
        hf_sizes p;
        gpt2_config g;
        bert_config b;
        if (f == MODEL_FAMILY_GPT2 && gpt2_config_named(&g, names[i]) == STATUS_OK)
            p = (hf_sizes){ g.num_layers, g.num_heads, g.channels, g.max_seq_len, g.vocab_size };
        else if (f == MODEL_FAMILY_BERT && bert_config_named(&b, names[i]) == STATUS_OK)
            p = (hf_sizes){ b.num_layers, b.num_heads, b.channels, b.max_position, b.vocab_size };
        else
            continue;
        if (!memcmp(&p, z, sizeof p)) return names[i];
        if (!near && p.n_layer == z->n_layer && p.n_head == z->n_head && p.n_embd == z->n_embd) near = names[i];
    }
    return near ? near : f == MODEL_FAMILY_GPT2 ? "gpt2" : "bert-base";
}

static status load_json(hf_json *j, const char *path)
{
    int fd;
    struct stat sb;
    char why[160];
    j->path = path;
    if (path_open_regular(path, &fd, &sb, HF_CONFIG_MAX, why, sizeof why) != 0) {
        log_error("%s %s; a transformers model directory holds config.json (save_pretrained writes it)", path, why);
        return STATUS_INPUT;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    int rc = text ? path_read_all_at(fd, text, (size_t)sb.st_size, 0) : -1;
    close(fd);
    if (rc != 0) {
        log_error("cannot read %s: %s", path, text ? log_errno_str() : "out of memory");
        free(text);
        return STATUS_IO;
    }
    json_error_t err;
    j->root = json_loadb(text, (size_t)sb.st_size, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!j->root) {
        log_error("%s:%d:%d: not valid JSON: %s (config.json is one JSON object, as save_pretrained writes it)",
                  path, err.line, err.column, err.text);
        return STATUS_INPUT;
    }
    if (!json_is_object(j->root)) {
        log_error("%s: the document is %s; config.json is one JSON object of the model's settings", path,
                  kind_of(j->root));
        json_decref(j->root);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status hf_config_read(config *mc, const char *dir, const char *want)
{
    char path[PATH_MAX_HF];
    snprintf(path, sizeof path, "%s/config.json", dir);
    hf_json j;
    TRY(load_json(&j, path));
    json_t *type = json_object_get(j.root, "model_type");
    const char *mt = json_is_string(type) ? json_string_value(type) : "";
    model_family fam = !strcmp(mt, "gpt2") ? MODEL_FAMILY_GPT2 : MODEL_FAMILY_BERT;
    hf_sizes z;
    status st = STATUS_OK;
    if (strcmp(mt, "gpt2") != 0 && strcmp(mt, "bert") != 0) {
        log_error("%s: \"model_type\" is %s%s%s%s; expected \"gpt2\" (GPT2LMHeadModel) or \"bert\" "
                  "(BertForMaskedLM), the architectures Nebula has", path, type ? kind_of(type) : "missing",
                  json_is_string(type) ? " \"" : "", mt, json_is_string(type) ? "\"" : "");
        st = STATUS_INPUT;
    }
    if (st == STATUS_OK) st = fam == MODEL_FAMILY_GPT2 ? read_gpt2(&j, &z) : read_bert(&j, &z);
    json_decref(j.root);
    if (st != STATUS_OK) return st;
    if (want && strncmp(want, fam == MODEL_FAMILY_GPT2 ? "gpt2" : "bert", 4) != 0) {
        log_error("%s describes a %s model; --model %s is not one (leave --model out: the sizes come from the file)",
                  path, mt, want);
        return STATUS_INPUT;
    }
    config_init(mc, hf_model_schema, (int)(sizeof hf_model_schema / sizeof hf_model_schema[0]));
    const char *keys[] = { "n_layer", "n_head", "n_embd", "max_seq_len", "vocab_size" };
    const int vals[] = { z.n_layer, z.n_head, z.n_embd, z.max_seq_len, z.vocab_size };
    char set[CONFIG_STR_MAX];
    snprintf(set, sizeof set, "model.name=%s", want ? want : preset_for(fam, &z));
    st = config_set(mc, set);
    for (int k = 0; k < 5 && st == STATUS_OK; k++) {
        snprintf(set, sizeof set, "model.%s=%d", keys[k], vals[k]);
        st = config_set(mc, set);
    }
    if (st != STATUS_OK) log_error("%s: its sizes do not fit Nebula's [model] keys (see above)", path);
    return st;
}

status hf_open_weights(st_file *f, const char *dir)
{
    char path[PATH_MAX_HF];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) == 0) return st_open(f, path);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb) == 0) {
        log_error("%s: a model sharded over several files; Nebula reads one model.safetensors: re-save it with "
                  "model.save_pretrained(DIR, safe_serialization=True, max_shard_size=\"100GB\")", dir);
        return STATUS_INPUT;
    }
    snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
    bool pickle = stat(path, &sb) == 0;
    log_error("%s holds no model.safetensors%s; re-save the model with model.save_pretrained(DIR, "
              "safe_serialization=True)%s", dir, pickle ? " (only pytorch_model.bin, a pickle Nebula does not read)"
              : "", pickle ? ", which writes model.safetensors" : "");
    return STATUS_INPUT;
}

/* ---- the tokenizer ------------------------------------------------------------------ */

typedef struct hf_data_keys {
    char tokenizer[CONFIG_STR_MAX];  /* data.tokenizer, "" when absent */
    char train[CONFIG_STR_MAX];      /* data.train */
} hf_data_keys;

static int data_key(void *user, const char *section, const char *name, const char *value)
{
    hf_data_keys *k = user;
    if (!strcmp(section, "data") && !strcmp(name, "tokenizer")) snprintf(k->tokenizer, sizeof k->tokenizer, "%s", value);
    if (!strcmp(section, "data") && !strcmp(name, "train")) snprintf(k->train, sizeof k->train, "%s", value);
    return 1;
}

status hf_run_tokenizer(tok **out, const char *run_ini, const model_spec *s, int32_t *bos, int32_t *eos)
{
    hf_data_keys k = { "", "" };
    *bos = *eos = -1;
    if (run_ini) ini_parse_string(run_ini, data_key, &k);  /* the checkpoint's reader checked the text */
    if (tok_find(out, k.tokenizer, k.train) != STATUS_OK) {
        log_error("the tokenizer of the checkpoint's run (data.tokenizer = '%s', data.train = '%s') cannot be "
                  "loaded (see above); a model directory without it would tokenize text differently", k.tokenizer,
                  k.train);
        return STATUS_INPUT;
    }
    if (tok_get_kind(*out) == TOK_KIND_BYTES) {
        if (model_vocab_size(s) != 256)  /* the weights are still worth having; the user must know */
            log_warn("no tokenizer found for %s's vocabulary of %d (data.tokenizer = '%s', no tokenizer files beside "
                     "data.train = '%s'): the directory gets none; copy the tokenizer's files into it", s->name,
                     model_vocab_size(s), k.tokenizer, k.train);
        return STATUS_OK;
    }
    if (tok_vocab_size(*out) > model_vocab_size(s)) {
        log_error("the run's %s tokenizer (data.tokenizer = '%s', data.train = '%s') has %d tokens, more than "
                  "%s's vocab_size %d: not this model's tokenizer", tok_kind_name(tok_get_kind(*out)), k.tokenizer,
                  k.train, tok_vocab_size(*out), s->name, model_vocab_size(s));
        tok_free(*out);
        *out = NULL;
        return STATUS_INPUT;
    }
    if (s->family == MODEL_FAMILY_GPT2) *bos = *eos = tok_token_id(*out, "<|endoftext|>");
    return STATUS_OK;
}
