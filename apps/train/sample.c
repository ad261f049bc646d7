/* sample — nebula-train sample: text from a trained GPT-2 (generation with a KV cache,
 * libcore/nn/gpt2_generate.h, drawn by libcore/nn/sampler.h) or the fills of [MASK]
 * tokens by a BERT's masked-LM head. One process; MPI only because the checkpoint
 * reader is the trainer's (ckpt_load, every checksum verified).
 *
 *   nebula-train sample RUN_DIR|CHECKPOINT_DIR --prompt TEXT [--tokens N] [--temperature T]
 *       [--greedy] [--top-k K] [--top-p P] [--seed S] [--mask] [--no-cache] [--ignore-eos] [--json]
 *       [--tokenizer PATH]
 *
 * The model is the one the checkpoint's stored [model] section describes and the
 * tokenizer the one of its run's data (tok_find with data.tokenizer and data.train of
 * the stored config), so a checkpoint needs no options to be read back as text. */
#include <inttypes.h>
#include <ini.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <utf8proc.h>

#include "base/runtime.h"
#include "ckpt/ckpt.h"
#include "ckpt/tool/offline.h"
#include "data/tokenizer.h"
#include "nn/gpt2_generate.h"
#include "nn/model.h"
#include "nn/sampler.h"
#include "train_app.h"

typedef struct sample_args {
    const char *path;          /* RUN_DIR or a checkpoint directory */
    const char *prompt;        /* --prompt */
    int tokens;                /* --tokens: new tokens at most */
    sampler_options so;        /* --temperature (--greedy: 0), --top-k, --top-p, --seed */
    bool top_k_set;            /* --top-k given (fill-mask's default is 5, generation's 50) */
    bool mask;                 /* --mask: BERT fill-mask */
    bool no_cache;             /* --no-cache: recompute the whole sequence per token (the baseline) */
    bool ignore_eos;           /* --ignore-eos: go on past <|endoftext|> */
    bool json;                 /* --json: one JSON document on stdout */
    const char *tokenizer;     /* --tokenizer: instead of the run's (data.tokenizer, the files beside data.train) */
} sample_args;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool parse_num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !(v >= lo && v <= hi)) {
        log_error0("%s needs a number in [%g, %g], got '%s'", opt, lo, hi, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

/* 0, or 2 after a message. */
static int sample_parse(int argc, char **argv, sample_args *a)
{
    memset(a, 0, sizeof *a);
    a->tokens = 64;
    a->so = (sampler_options){ .temperature = 1.0, .top_k = 50, .top_p = 1.0, .seed = 1234 };
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        bool takes = true;
        if (!strcmp(o, "--prompt") && v) a->prompt = v;
        else if (!strcmp(o, "--tokenizer") && v) a->tokenizer = v;
        else if (!strcmp(o, "--tokens")) { if (!parse_num(o, v, 1, 1 << 20, &x) || x != (int)x) return 2; a->tokens = (int)x; }
        else if (!strcmp(o, "--temperature")) { if (!parse_num(o, v, 0, 1e6, &x)) return 2; a->so.temperature = x; }
        else if (!strcmp(o, "--top-k")) { if (!parse_num(o, v, 0, 1 << 24, &x) || x != (int)x) return 2; a->so.top_k = (int)x; a->top_k_set = true; }
        else if (!strcmp(o, "--top-p")) { if (!parse_num(o, v, 1e-9, 1, &x)) return 2; a->so.top_p = x; }
        else if (!strcmp(o, "--seed")) { if (!parse_num(o, v, 0, 9007199254740992.0, &x) || x != (double)(uint64_t)x) return 2; a->so.seed = (uint64_t)x; }
        else {
            takes = false;
            if (!strcmp(o, "--greedy")) a->so.temperature = 0;
            else if (!strcmp(o, "--mask")) a->mask = true;
            else if (!strcmp(o, "--no-cache")) a->no_cache = true;
            else if (!strcmp(o, "--ignore-eos")) a->ignore_eos = true;
            else if (!strcmp(o, "--json")) a->json = true;
            else if (o[0] != '-' && !a->path) a->path = o;
            else {
                log_error0("sample: unexpected argument '%s'%s\n%s", o, !strcmp(o, "--prompt") ? " (it needs a value)" : "",
                           train_usage);
                return 2;
            }
        }
        if (takes) i++;
    }
    if (!a->path || !a->prompt) {
        log_error0("sample needs a run or checkpoint directory and --prompt TEXT\n%s", train_usage);
        return 2;
    }
    if (!*a->prompt) {
        log_error0("--prompt is empty: give the text to continue (or, with --mask, text with [MASK] in it)");
        return 2;
    }
    if (a->mask && !a->top_k_set) a->so.top_k = 5;  /* the fill-mask pipeline's top_k */
    if (a->mask && a->so.top_k < 1) {
        log_error0("--top-k with --mask is the number of fills to list per [MASK], at least 1");
        return 2;
    }
    return 0;
}

/* The checkpoint `path` names: itself when it holds a commit marker, else the newest
 * committed one of the run directory (path/ckpt) or of a checkpoint directory (path). */
static status sample_find(const char *path, char *out, size_t len)
{
    char marker[4200], dir[4200];
    struct stat sb;
    snprintf(marker, sizeof marker, "%s/COMMITTED", path);
    if (stat(marker, &sb) == 0) {
        snprintf(out, len, "%s", path);
        return STATUS_OK;
    }
    int64_t step;
    snprintf(dir, sizeof dir, "%s/ckpt", path);
    if (ckpt_last_committed(dir, out, len, &step) || ckpt_last_committed(path, out, len, &step)) return STATUS_OK;
    log_error0("%s: no committed checkpoint (neither a checkpoint directory with a COMMITTED marker nor a run "
               "directory with one under ckpt/)\nHINT: pass a run directory of nebula-train (--run-dir) after it "
               "saved a checkpoint, or one of its ckpt/step_N directories", path);
    return STATUS_INPUT;
}

/* data.train and data.tokenizer of the stored run config ("" when absent). */
typedef struct data_keys {
    char train[4096];
    char tokenizer[4096];
} data_keys;

static int data_key(void *user, const char *section, const char *name, const char *value)
{
    data_keys *d = user;
    if (!strcmp(section, "data") && !strcmp(name, "train")) snprintf(d->train, sizeof d->train, "%s", value);
    if (!strcmp(section, "data") && !strcmp(name, "tokenizer")) snprintf(d->tokenizer, sizeof d->tokenizer, "%s", value);
    return 1;
}

/* The prompt as ids: fill-mask splits it at each "[MASK]" (the tokenizer's [MASK] id,
 * or BERT's 103 for a tokenizer without one) and adds [CLS] ... [SEP] when the
 * tokenizer has them, as transformers' pipeline does. */
static status sample_encode(tok *t, const sample_args *a, int32_t **ids, size_t *n, int32_t *mask_id)
{
    size_t cap = 0;
    *ids = NULL, *n = 0;
    if (!a->mask) return tok_encode(t, a->prompt, strlen(a->prompt), ids, n, &cap);
    bert_special_tokens sp = BERT_SPECIAL_TOKENS_UNCASED;
    int32_t cls = tok_token_id(t, "[CLS]"), sep = tok_token_id(t, "[SEP]"), m = tok_token_id(t, "[MASK]");
    *mask_id = m >= 0 ? m : sp.mask;
    const char *s = a->prompt;
    for (;;) {
        const char *hit = strstr(s, "[MASK]");
        size_t piece = hit ? (size_t)(hit - s) : strlen(s);
        if (s == a->prompt && cls >= 0) TRY(tok_encode(t, "[CLS]", 5, ids, n, &cap));
        if (piece) TRY(tok_encode(t, s, piece, ids, n, &cap));
        if (!hit) break;
        if (*n == cap) {
            int32_t *grown = realloc(*ids, (cap = 2 * cap + 16) * sizeof *grown);
            if (!grown) return STATUS_NOMEM;
            *ids = grown;
        }
        (*ids)[(*n)++] = -1;  /* a [MASK] by its place, not its id: the byte tokenizer's 103 is also 'g' */
        s = hit + 6;
    }
    if (sep >= 0) TRY(tok_encode(t, "[SEP]", 5, ids, n, &cap));
    return STATUS_OK;  /* the -1 places become *mask_id in sample_fill_mask */
}

/* The bytes of one token for printing (a BPE token may be part of a UTF-8 character:
 * they are written as they come and the terminal joins them). */
static size_t sample_piece(const tok *t, int32_t id, int first, char *buf, size_t cap)
{
    size_t n = tok_decode_one(t, id, first, buf, cap - 1);
    buf[n] = 0;
    return n;
}

/* Text as a JSON string: bytes that are not UTF-8 (a byte-level model's output may be
 * anything) become U+FFFD, as Python's decode(errors="replace") makes them. */
static json_t *text_json(const char *s, size_t len)
{
    char *out = malloc(3 * len + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k > 0) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3, i++;
        }
    }
    json_t *j = out ? json_stringn(out, o) : NULL;
    free(out);
    return j;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

typedef struct sample_ctx {
    const sample_args *a;
    model *m;
    tok *t;
    const char *ckpt;          /* the checkpoint directory read */
    int64_t step;              /* its step */
} sample_ctx;

/* GPT-2: prefill, then one token at a time, streamed to stdout (or gathered for --json). */
static status sample_generate(const sample_ctx *x, const int32_t *prompt, int np)
{
    const sample_args *a = x->a;
    const gpt2 *g = &x->m->gpt2;
    int V = g->cfg.vocab_size, Vp = g->cfg.padded_vocab_size, maxT = g->cfg.max_seq_len;
    if (np > maxT) {
        log_error0("the prompt is %d tokens, longer than the model's context of %d (model.max_seq_len): shorten it",
                   np, maxT);
        return STATUS_INPUT;
    }
    for (int i = 0; i < np; i++)
        if (prompt[i] >= V) {
            log_error0("the prompt's token %d has id %d, outside the model's vocabulary of %d: the tokenizer (%s) "
                       "is not the one the model was trained with", i, prompt[i], V, tok_kind_name(tok_get_kind(x->t)));
            return STATUS_INPUT;
        }
    int32_t eos = a->ignore_eos ? -1 : tok_token_id(x->t, "<|endoftext|>");
    sampler s;
    gpt2_kv kv;
    TRY(sampler_init(&s, &a->so, V));
    status st = gpt2_kv_init(&kv, g, maxT, a->no_cache ? maxT : np);
    int32_t *seq = malloc((size_t)(maxT + 1) * sizeof *seq);
    if (st != STATUS_OK || !seq) {
        sampler_free(&s);
        free(seq);
        return st != STATUS_OK ? st : STATUS_NOMEM;
    }
    memcpy(seq, prompt, (size_t)np * sizeof *seq);
    if (!a->json) {
        fputs(a->prompt, stdout);
        fflush(stdout);
    }
    double t0 = now_ms();
    st = gpt2_kv_forward(&kv, g, seq, np, NULL);
    double t1 = now_ms(), prefill_ms = t1 - t0;
    int n = np, gen = 0;
    const char *stop = "tokens";
    char piece[1100];  /* a token's bytes (at most 1024) */
    while (st == STATUS_OK) {
        int32_t id = sampler_next(&s, kv.logits, (uint64_t)gen, NULL);
        if (id == eos) { stop = "eos"; break; }
        seq[n++] = id;
        gen++;
        if (!a->json && sample_piece(x->t, id, n == 1, piece, sizeof piece)) {
            fputs(piece, stdout);
            fflush(stdout);
        }
        if (gen == a->tokens) break;
        if (n >= maxT) { stop = "context"; break; }
        if (a->no_cache) {  /* the baseline: every position again */
            gpt2_kv_reset(&kv);
            st = gpt2_kv_forward(&kv, g, seq, n, NULL);
        } else {
            st = gpt2_kv_forward(&kv, g, seq + n - 1, 1, NULL);
        }
    }
    double gen_ms = now_ms() - t1;
    if (st == STATUS_OK) {
        int steps = gen > 0 ? gen - 1 : 0;  /* forwards after the prefill: the last token needs none */
        double per = steps ? gen_ms / steps : 0;
        if (a->json) {
            size_t len = 0;
            char *text = tok_decode(x->t, seq + np, (size_t)gen, &len);
            json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o, s:s, s:i, s:f, s:f, s:f, s:b, s:I}", "family",
                                  "gpt2", "checkpoint", x->ckpt, "step", (json_int_t)x->step, "prompt", a->prompt,
                                  "prompt_ids", ids_json(seq, (size_t)np), "ids", ids_json(seq + np, (size_t)gen),
                                  "text", text_json(text ? text : "", len), "stop", stop, "context", maxT, "prefill_ms", prefill_ms,
                                  "ms_per_token", per, "tokens_per_s", per > 0 ? 1e3 / per : 0.0, "kv_cache", !a->no_cache,
                                  "kv_cache_bytes", (json_int_t)gpt2_kv_cache_bytes(&kv));
            char *doc = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
            if (doc) puts(doc);
            free(doc);
            json_decref(j);
            free(text);
        } else {
            putchar('\n');
        }
        fflush(stdout);  /* the text before the summary on stderr, on a terminal too */
        if (!strcmp(stop, "context"))
            log_warn0("stopped at the model's context of %d tokens (prompt %d + %d generated)", maxT, np, gen);
        fprintf(stderr, "sample: %d tokens generated after a prompt of %d (stop: %s); prefill %.2f ms (%.3f ms/token), "
                "generation %.3f ms/token, %.1f tokens/s; %s (%.2f MiB, L %d x %d positions x C %d x K,V)\n",
                gen, np, stop, prefill_ms, prefill_ms / np, per, per > 0 ? 1e3 / per : 0.0,
                a->no_cache ? "no KV cache (--no-cache: each token recomputes the sequence)" : "KV cache",
                (double)gpt2_kv_cache_bytes(&kv) / (1 << 20), kv.L, maxT, kv.C);
    }
    (void)Vp;
    free(seq);
    gpt2_kv_free(&kv);
    sampler_free(&s);
    return st;
}

/* BERT: one forward without targets; the top-k fills of each [MASK] under the softmax. */
static status sample_fill_mask(const sample_ctx *x, int32_t *ids, int n, int32_t mask_id)
{
    const sample_args *a = x->a;
    bert *b = &x->m->bert;
    int V = b->cfg.vocab_size, k = a->so.top_k < V ? a->so.top_k : V, masks = 0;
    bool *at = calloc((size_t)n, sizeof *at);  /* the [MASK] places (sample_encode's -1) */
    if (!at) return STATUS_NOMEM;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0) at[i] = true, ids[i] = mask_id, masks++;
    int32_t *top = malloc((size_t)k * sizeof *top);
    double *p = malloc((size_t)k * sizeof *p);
    status st = !top || !p ? STATUS_NOMEM : STATUS_OK;
    if (st == STATUS_OK && !masks) {
        log_error0("--mask: the prompt has no [MASK] to fill: write [MASK] where a token should be predicted");
        st = STATUS_INPUT;
    }
    double t0 = now_ms();
    if (st == STATUS_OK) st = bert_forward(b, ids, NULL, NULL, NULL);
    double ms = now_ms() - t0;
    if (st != STATUS_OK) {
        free(top), free(p), free(at);
        return st;
    }
    json_t *jm = json_array();
    char piece[1100];  /* a token's bytes (at most 1024) */
    if (!a->json) printf("%s\n", a->prompt);
    for (int i = 0, seen = 0; i < n; i++) {
        if (!at[i]) continue;
        sampler_top_probs(b->acts.logits + (size_t)i * V, V, k, top, p);
        json_t *fills = json_array();
        if (!a->json) printf("[MASK] %d of %d (token %d):\n", ++seen, masks, i);
        for (int r = 0; r < k; r++) {
            sample_piece(x->t, top[r], 1, piece, sizeof piece);
            if (a->json)
                json_array_append_new(fills, json_pack("{s:i, s:o, s:f}", "id", top[r], "token", text_json(piece, strlen(piece)), "prob", p[r]));
            else
                printf("  %2d  %.6f  id %-6d %s\n", r + 1, p[r], top[r], piece);
        }
        json_array_append_new(jm, json_pack("{s:i, s:o}", "position", i, "fills", fills));
    }
    if (a->json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o, s:i, s:o, s:f}", "family", "bert", "checkpoint", x->ckpt, "step",
                              (json_int_t)x->step, "prompt", a->prompt, "ids", ids_json(ids, (size_t)n), "mask_id",
                              mask_id, "masks", jm, "forward_ms", ms);
        char *doc = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (doc) puts(doc);
        free(doc);
        json_decref(j);
    } else {
        json_decref(jm);
    }
    fprintf(stderr, "sample: fill-mask of %d [MASK] in %d tokens, one forward in %.2f ms\n", masks, n, ms);
    free(top), free(p), free(at);
    return STATUS_OK;
}

/* Everything after the runtime: find, read the config, tokenize, build, load, run. */
static status sample_run(const runtime *rt, const sample_args *a)
{
    char dir[4096];
    TRY(sample_find(a->path, dir, sizeof dir));
    ckpt_catalog cat;
    TRY(ckpt_catalog_open(&cat, dir));
    config mc;
    model_spec spec;
    data_keys dk = { "", "" };
    tok *t = NULL;
    int32_t *ids = NULL, mask_id = -1;
    size_t n = 0;
    model m;
    memset(&m, 0, sizeof m);
    status st = model_config_from_ini(&mc, cat.config) == STATUS_OK && model_spec_from_config(&spec, &mc) == STATUS_OK
                    ? STATUS_OK : STATUS_INPUT;
    if (st != STATUS_OK) {
        log_error0("%s: its stored [model] section does not describe a model", dir);
        goto free_catalog;
    }
    ini_parse_string(cat.config ? cat.config : "", data_key, &dk);
    if (model_spec_images(&spec) || (spec.family == MODEL_FAMILY_BERT) != a->mask) {
        char kind[64];
        snprintf(kind, sizeof kind, "%s image classifier", model_family_name(&spec));
        log_error0("%s holds %s, a %s: sample generates text from GPT-2 checkpoints and fills [MASK] tokens "
                   "with BERT ones (--mask)%s", dir, spec.name,
                   model_spec_images(&spec) ? kind :
                   spec.family == MODEL_FAMILY_BERT ? "BERT masked language model" : "GPT-2 causal language model",
                   spec.family == MODEL_FAMILY_BERT ? ": add --mask and write [MASK] in the prompt" :
                   spec.family == MODEL_FAMILY_GPT2 ? ": drop --mask" : "");
        st = STATUS_INPUT;
        goto free_catalog;
    }
    if ((st = tok_find(&t, a->tokenizer ? a->tokenizer : dk.tokenizer, dk.train)) != STATUS_OK) goto free_catalog;
    if (tok_get_kind(t) == TOK_KIND_BYTES && model_vocab_size(&spec) != 256) {
        log_error0("%s: no tokenizer for a model of vocabulary %d: its run's data.tokenizer is empty and no tokenizer "
                   "files lie beside data.train (%s)\nHINT: --tokenizer DIR (tokenizer.json, vocab.json + merges.txt "
                   "or vocab.txt)", dir, model_vocab_size(&spec), dk.train[0] ? dk.train : "unset");
        st = STATUS_INPUT;
        goto free_tokens;
    }
    if ((st = sample_encode(t, a, &ids, &n, &mask_id)) != STATUS_OK) goto free_tokens;
    if (n == 0) {
        log_error0("--prompt '%s' encodes to no tokens", a->prompt);
        st = STATUS_INPUT;
        goto free_tokens;
    }
    if (a->mask && (int)n > spec.bert.max_position) {
        log_error0("the prompt is %zu tokens, longer than the model's %d positions: shorten it", n,
                   spec.bert.max_position);
        st = STATUS_INPUT;
        goto free_tokens;
    }
    /* GPT-2 reads only its parameters (the cache is gpt2_kv's): built for one token */
    if ((st = model_init(&m, &spec, 1, a->mask ? (int)n : 1, 0, false)) != STATUS_OK) goto free_tokens;
    ckpt_content c = { .model = spec.name, .table_hash = param_table_hash(model_params(&m)) };
    c.groups[c.ngroups++] = (ckpt_tensors){ "params", model_params(&m), model_buffers(&m)->params, false };
    st = ckpt_catalog_load(rt->world, &cat, &c);
    sample_ctx x = { a, &m, t, dir, cat.h.step };
    if (st == STATUS_OK) st = a->mask ? sample_fill_mask(&x, ids, (int)n, mask_id) : sample_generate(&x, ids, (int)n);
    model_free(&m);
free_tokens:
    free(ids);
    tok_free(t);
free_catalog:
    ckpt_catalog_free(&cat);
    return st;
}

int sample_main(int argc, char **argv)
{
    sample_args a;
    int rc = sample_parse(argc, argv, &a);
    if (rc) return runtime_exit_early(rc);
    sampler s;  /* the sampler's option checks before MPI starts: a usage error exits 2 at once */
    if (sampler_init(&s, &a.so, 1) != STATUS_OK) return runtime_exit_early(2);
    sampler_free(&s);
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };  /* one process, no core binding */
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.size != 1) {
        log_error0("sample runs as one process; it was started as %d (run it without mpirun)", rt.size);
        st = STATUS_USAGE;
    }
    if (st == STATUS_OK) st = sample_run(&rt, &a);
    runtime_exit(&rt, st);
}
