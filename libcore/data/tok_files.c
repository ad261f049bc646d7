/* tok_files — the tokenizer files: vocab.json + merges.txt and tokenizer.json (the
 * `tokenizers` library's layouts), vocab.txt (BERT's), read as hostile input and
 * written atomically (tokenizer.h).
 *
 * The one design decision: only the tokenizer.json pipelines whose encoding Nebula
 * reproduces exactly are accepted — byte-level BPE (ByteLevel pre-tokenizer with
 * its regex, no normaliser, no dropout) and BERT's WordPiece (BertNormalizer,
 * BertPreTokenizer) — and any other normaliser, pre-tokenizer or model option is
 * refused by name: a tokenizer that silently encodes differently from the one the
 * model was trained with is worse than none. */
#include "tokenizer_impl.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOK_FILE_MAX ((uint64_t)1 << 30)  /* a tokenizer file larger than 1 GiB is not one */

/* Reads a whole regular file (NUL-terminated copy in *buf). */
static status read_file(const char *path, const char *what, char **buf, size_t *len)
{
    int fd;
    struct stat sb;
    char why[256];
    if (path_open_regular(path, &fd, &sb, TOK_FILE_MAX, why, sizeof why) != 0) {
        log_error("%s %s %s", what, path, why);
        return STATUS_INPUT;
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len + 1);
    if (!*buf) {
        close(fd);
        return STATUS_NOMEM;
    }
    int rc = path_read_all_at(fd, *buf, *len, 0);
    close(fd);
    if (rc != 0) {
        log_error("cannot read %s %s: %s", what, path, strerror(errno));
        free(*buf);
        return STATUS_IO;
    }
    (*buf)[*len] = '\0';
    return STATUS_OK;
}

/* The file parsed; its text in *src (malloc, *srclen bytes) when src is not NULL. */
static json_t *load_json_src(const char *path, const char *what, char **src, size_t *srclen)
{
    char *buf;
    size_t len;
    if (read_file(path, what, &buf, &len) != STATUS_OK) return NULL;
    json_error_t e;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
    if (!j) log_error("%s:%d:%d: not valid JSON (%s): %s", path, e.line, e.column, what, e.text);
    if (j && src) {
        *src = buf;
        *srclen = len;
    } else {
        free(buf);
    }
    return j;
}

static json_t *load_json(const char *path, const char *what) { return load_json_src(path, what, NULL, NULL); }

/* Every "token": id of a vocabulary object. */
static status read_vocab_object(tok *t, json_t *vocab, const char *path, const char *key)
{
    if (!json_is_object(vocab)) {
        log_error("%s: %s must be an object of \"token\": id", path, key);
        return STATUS_INPUT;
    }
    const char *k;
    json_t *v;
    char where[4300];
    snprintf(where, sizeof where, "%s (%s)", path, key);
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v)) {
            log_error("%s: the id of token '%.64s' is not an integer", where, k);
            return STATUS_INPUT;
        }
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= TOK_MAX_VOCAB) {
            log_error("%s: token '%.64s' has id %lld, outside [0, %d)", where, k, (long long)id, TOK_MAX_VOCAB);
            return STATUS_INPUT;
        }
        TRY(tok_add_entry(t, k, strlen(k), (int32_t)id, where));
    }
    if (!t->V) {
        log_error("%s: the vocabulary is empty", where);
        return STATUS_INPUT;
    }
    if ((size_t)t->V > 2 * json_object_size(vocab) + 1024) {
        log_error("%s: %zu tokens with ids up to %d: a vocabulary's ids are (nearly) dense", where,
                  json_object_size(vocab), t->V - 1);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status tok_add_special(tok *t, const char *text, int32_t id, uint8_t flags, const char *where)
{
    int32_t have = smap_get(&t->vocab, text, strlen(text));
    if (have < 0) TRY(tok_add_entry(t, text, strlen(text), id, where));
    else if (have != id && id >= 0) {
        log_error("%s: special token '%s' has id %d, but the vocabulary gives it %d", where, text, id, have);
        return STATUS_INPUT;
    }
    for (int k = 0; k < t->nspecial; k++)
        if (!strcmp(t->special[k], text)) return STATUS_OK;
    char **s = realloc(t->special, (size_t)(t->nspecial + 1) * sizeof *s);
    if (s) t->special = s;
    int32_t *d = realloc(t->special_id, (size_t)(t->nspecial + 1) * sizeof *d);
    if (d) t->special_id = d;
    uint8_t *fl = realloc(t->special_flags, (size_t)(t->nspecial + 1));
    if (fl) t->special_flags = fl;
    if (!s || !d || !fl) return STATUS_NOMEM;
    fl[t->nspecial] = flags;
    t->special[t->nspecial] = strdup(text);
    t->special_id[t->nspecial] = have >= 0 ? have : id;
    if (!t->special[t->nspecial]) return STATUS_NOMEM;
    if (text[0] != '<' && text[0] != '[') t->special_any_start = true;
    t->nspecial++;
    return STATUS_OK;
}

/* One merge "left right" (line or pair) of rank `rank`. */
static status add_merge(tok *t, const char *left, const char *right, int rank, const char *where)
{
    int32_t l = smap_get(&t->vocab, left, strlen(left)), r = smap_get(&t->vocab, right, strlen(right));
    if (l < 0 || r < 0) {
        log_error("%s: merge '%s %s': '%s' is not in the vocabulary", where, left, right, l < 0 ? left : right);
        return STATUS_INPUT;
    }
    char both[2 * TOK_MAX_TOKEN + 1];
    size_t a = strlen(left), b = strlen(right);
    if (a + b > 2 * TOK_MAX_TOKEN) {
        log_error("%s: merge '%.32s %.32s' is too long", where, left, right);
        return STATUS_INPUT;
    }
    memcpy(both, left, a);
    memcpy(both + a, right, b);
    int32_t id = smap_get(&t->vocab, both, a + b);
    if (id < 0) {
        log_error("%s: merge '%s %s' makes '%.*s', which is not in the vocabulary", where, left, right, (int)(a + b), both);
        return STATUS_INPUT;
    }
    if (!merge_put(&t->merges, l, r, rank, id)) {
        log_error("%s: merge '%s %s' appears twice", where, left, right);
        return STATUS_INPUT;
    }
    if (rank >= t->nmerges) {
        int32_t *p = realloc(t->merge_pair, (size_t)(rank + 1) * 2 * sizeof *p);
        if (!p) return STATUS_NOMEM;
        t->merge_pair = p;
        t->nmerges = rank + 1;
    }
    t->merge_pair[2 * rank] = l;
    t->merge_pair[2 * rank + 1] = r;
    return STATUS_OK;
}

static status read_merges_txt(tok *t, const char *path)
{
    char *buf;
    size_t len;
    TRY(read_file(path, "merges file", &buf, &len));
    status st = STATUS_OK;
    if (strlen(buf) != len) {
        log_error("%s: a NUL byte at offset %zu: merges.txt is text", path, strlen(buf));
        st = STATUS_INPUT;
    }
    int rank = 0, line = 0;
    for (char *p = buf; st == STATUS_OK && p < buf + len;) {
        char *eol = memchr(p, '\n', (size_t)(buf + len - p));
        if (!eol) eol = buf + len;
        *eol = '\0';
        if (eol > p && eol[-1] == '\r') eol[-1] = '\0';
        line++;
        if (!(line == 1 && !strncmp(p, "#version", 8)) && *p) {
            char *sp = strchr(p, ' ');
            char where[4300];
            snprintf(where, sizeof where, "%s:%d", path, line);
            if (!sp || sp == p || !sp[1] || strchr(sp + 1, ' ')) {
                log_error("%s: expected two tokens separated by one space, got '%.80s'", where, p);
                st = STATUS_INPUT;
            } else {
                *sp = '\0';
                st = add_merge(t, p, sp + 1, rank++, where);
            }
        }
        p = eol + 1;
    }
    free(buf);
    return st;
}

status tok_read_bpe_files(tok **out, const char *vocab_json, const char *merges_txt)
{
    *out = NULL;
    json_t *j = load_json(vocab_json, "vocabulary");
    if (!j) return STATUS_INPUT;
    tok *t = tok_alloc(TOK_KIND_BPE);
    status st = read_vocab_object(t, j, vocab_json, "vocab.json");
    json_decref(j);
    if (st == STATUS_OK) st = read_merges_txt(t, merges_txt);
    /* GPT2TokenizerFast treats <|endoftext|> as a special token when the vocabulary has it */
    int32_t eot = smap_get(&t->vocab, "<|endoftext|>", 13);
    if (st == STATUS_OK && eot >= 0) st = tok_add_special(t, "<|endoftext|>", eot, 0, vocab_json);
    if (st == STATUS_OK) st = tok_bpe_prepare(t, vocab_json);
    if (st != STATUS_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return STATUS_OK;
}

/* vocab.txt: one token per line, the id is the line number from 0. */
static status read_vocab_lines(tok *t, const char *path)
{
    char *buf;
    size_t len;
    TRY(read_file(path, "vocabulary", &buf, &len));
    status st = STATUS_OK;
    if (strlen(buf) != len) {
        log_error("%s: a NUL byte at offset %zu: vocab.txt is text", path, strlen(buf));
        st = STATUS_INPUT;
    }
    int id = 0;
    for (char *p = buf; st == STATUS_OK && p < buf + len; id++) {
        char *eol = memchr(p, '\n', (size_t)(buf + len - p));
        if (!eol) eol = buf + len;
        size_t l = (size_t)(eol - p);
        if (l && p[l - 1] == '\r') l--;
        char where[4300];
        snprintf(where, sizeof where, "%s:%d", path, id + 1);
        if (!l) {
            log_error("%s: an empty line: every line of vocab.txt is one token", where);
            st = STATUS_INPUT;
        } else if (tok_utf8_check((const uint8_t *)p, l) < l) {
            log_error("%s: invalid UTF-8 at byte %zu of the line", where, tok_utf8_check((const uint8_t *)p, l));
            st = STATUS_INPUT;
        } else {
            st = tok_add_entry(t, p, l, id, where);
        }
        p = eol + 1;
    }
    if (st == STATUS_OK && id == 0) {
        log_error("%s: the vocabulary is empty", path);
        st = STATUS_INPUT;
    }
    free(buf);
    return st;
}

/* BERT's lower-casing: tokenizer_config.json beside vocab.txt may turn it off. */
static bool lowercase_beside(const char *vocab_txt)
{
    char dir[4200], f[4300];
    snprintf(dir, sizeof dir, "%s", vocab_txt);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    snprintf(f, sizeof f, "%s/tokenizer_config.json", dir);
    bool lower = true;
    if (access(f, F_OK) != 0) return lower;
    json_t *j = load_json(f, "tokenizer config");  /* hostile like the rest: through path_open_regular */
    if (j && json_is_false(json_object_get(j, "do_lower_case"))) lower = false;
    json_decref(j);
    return lower;
}

status tok_read_vocab_txt(tok **out, const char *path)
{
    *out = NULL;
    tok *t = tok_alloc(TOK_KIND_WORDPIECE);
    status st = read_vocab_lines(t, path);
    t->lowercase = t->strip_accents = lowercase_beside(path);
    t->clean_text = t->chinese_chars = true;
    static const char *const specials[] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
    for (int i = 0; i < 5 && st == STATUS_OK; i++) {
        int32_t id = smap_get(&t->vocab, specials[i], strlen(specials[i]));
        if (id >= 0) st = tok_add_special(t, specials[i], id, 0, path);
    }
    t->unk = smap_get(&t->vocab, "[UNK]", 5);
    if (st == STATUS_OK) st = tok_wordpiece_prepare(t, path);
    if (st != STATUS_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return STATUS_OK;
}

/* ---- tokenizer.json ------------------------------------------------------------------ */

static const char *type_of(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "";
}

static bool flag(json_t *o, const char *key, bool dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static status bpe_from_json(tok *t, json_t *root, json_t *model, const char *path)
{
    json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    if (!json_is_null(norm) && norm) {
        log_error("%s: normalizer \"%s\" is not supported: Nebula's byte-level BPE takes none (GPT-2, RoBERTa)", path,
                  type_of(norm));
        return STATUS_INPUT;
    }
    if (strcmp(type_of(pre), "ByteLevel") || !flag(pre, "use_regex", true)) {
        log_error("%s: pre_tokenizer \"%s\"%s is not supported: byte-level BPE needs ByteLevel with GPT-2's regex", path,
                  type_of(pre), strcmp(type_of(pre), "ByteLevel") ? "" : " without use_regex");
        return STATUS_INPUT;
    }
    t->add_prefix_space = flag(pre, "add_prefix_space", false);
    json_t *drop = json_object_get(model, "dropout");
    if ((drop && !json_is_null(drop)) || flag(model, "byte_fallback", false) ||
        json_string_value(json_object_get(model, "continuing_subword_prefix")) ||
        json_string_value(json_object_get(model, "end_of_word_suffix"))) {
        log_error("%s: model options dropout, byte_fallback, continuing_subword_prefix and end_of_word_suffix are "
                  "not supported (byte-level BPE as GPT-2 has it)", path);
        return STATUS_INPUT;
    }
    t->ignore_merges = flag(model, "ignore_merges", false);
    TRY(read_vocab_object(t, json_object_get(model, "vocab"), path, "model.vocab"));
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) {
        log_error("%s: model.merges must be an array of \"left right\" strings or [left, right] pairs", path);
        return STATUS_INPUT;
    }
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        char where[4300], buf[2 * TOK_MAX_TOKEN + 2];
        snprintf(where, sizeof where, "%s (model.merges[%zu])", path, i);
        const char *l = NULL, *r = NULL;
        if (json_is_string(m) && json_string_length(m) < sizeof buf) {
            snprintf(buf, sizeof buf, "%s", json_string_value(m));
            char *sp = strchr(buf, ' ');
            if (sp && sp != buf && sp[1] && !strchr(sp + 1, ' ')) {
                *sp = '\0';
                l = buf;
                r = sp + 1;
            }
        } else if (json_is_array(m) && json_array_size(m) == 2) {
            l = json_string_value(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1));
        }
        if (!l || !r || !*l || !*r) {
            log_error("%s: expected \"left right\" or [\"left\", \"right\"]", where);
            return STATUS_INPUT;
        }
        TRY(add_merge(t, l, r, (int)i, where));
    }
    return STATUS_OK;
}

static status wordpiece_from_json(tok *t, json_t *root, json_t *model, const char *path)
{
    json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    if (strcmp(type_of(norm), "BertNormalizer") || strcmp(type_of(pre), "BertPreTokenizer")) {
        log_error("%s: WordPiece with normalizer \"%s\" and pre_tokenizer \"%s\" is not supported: BERT's "
                  "BertNormalizer and BertPreTokenizer are", path, type_of(norm), type_of(pre));
        return STATUS_INPUT;
    }
    t->lowercase = flag(norm, "lowercase", true);
    t->strip_accents = flag(norm, "strip_accents", t->lowercase);  /* null: follows lowercase */
    t->clean_text = flag(norm, "clean_text", true);
    t->chinese_chars = flag(norm, "handle_chinese_chars", true);
    const char *prefix = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    if (prefix && strlen(prefix) >= sizeof t->prefix) {
        log_error("%s: model.continuing_subword_prefix is longer than %zu bytes", path, sizeof t->prefix - 1);
        return STATUS_INPUT;
    }
    if (prefix) snprintf(t->prefix, sizeof t->prefix, "%s", prefix);
    json_t *mc = json_object_get(model, "max_input_chars_per_word");
    if (json_is_integer(mc)) t->max_chars = json_integer_value(mc) > 0 && json_integer_value(mc) < 1000000
                                                ? (int)json_integer_value(mc) : 100;
    TRY(read_vocab_object(t, json_object_get(model, "vocab"), path, "model.vocab"));
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk = unk ? smap_get(&t->vocab, unk, strlen(unk)) : -1;
    if (unk && t->unk < 0) {
        log_error("%s: model.unk_token '%s' is not in model.vocab", path, unk);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status tok_read_tokenizer_json(tok **out, const char *path)
{
    *out = NULL;
    char *src = NULL;
    size_t srclen = 0;
    json_t *root = load_json_src(path, "tokenizer", &src, &srclen);
    if (!root) return STATUS_INPUT;
    json_t *model = json_object_get(root, "model");
    const char *type = type_of(model);
    tok *t = NULL;
    status st = STATUS_OK;
    if (!json_is_object(model)) {
        log_error("%s: no \"model\" object: not a tokenizer.json of the tokenizers library", path);
        st = STATUS_INPUT;
    } else if (!strcmp(type, "BPE")) {
        t = tok_alloc(TOK_KIND_BPE);
        st = bpe_from_json(t, root, model, path);
    } else if (!strcmp(type, "WordPiece")) {
        t = tok_alloc(TOK_KIND_WORDPIECE);
        st = wordpiece_from_json(t, root, model, path);
    } else {
        log_error("%s: model.type \"%s\" is not supported: BPE (byte-level) or WordPiece", path, type);
        st = STATUS_INPUT;
    }
    json_t *added = json_object_get(root, "added_tokens");
    size_t i;
    json_t *a;
    if (st == STATUS_OK && added && !json_is_array(added)) {
        log_error("%s: added_tokens must be an array", path);
        st = STATUS_INPUT;
    }
    json_array_foreach(added, i, a) {
        if (st != STATUS_OK) break;
        const char *content = json_string_value(json_object_get(a, "content"));
        json_t *id = json_object_get(a, "id");
        char where[4300];
        snprintf(where, sizeof where, "%s (added_tokens[%zu])", path, i);
        if (!content || !*content || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= TOK_MAX_VOCAB ||
            json_integer_value(id) >= (json_int_t)t->V + (json_int_t)json_array_size(added) + 1024) {
            log_error("%s: expected {\"id\": an integer just past the vocabulary's %d tokens, \"content\": non-empty "
                      "string}", where, t->V);
            st = STATUS_INPUT;
        } else {
            uint8_t f = (uint8_t)((flag(a, "lstrip", false) ? TOK_SPECIAL_LSTRIP : 0) |
                                  (flag(a, "rstrip", false) ? TOK_SPECIAL_RSTRIP : 0) |
                                  (flag(a, "single_word", false) ? TOK_SPECIAL_SINGLE_WORD : 0) |
                                  (flag(a, "normalized", !flag(a, "special", false)) ? TOK_SPECIAL_NORMALIZED : 0));
            if ((f & TOK_SPECIAL_NORMALIZED) && t->kind == TOK_KIND_WORDPIECE && (t->lowercase || t->strip_accents)) {
                log_error("%s: added token '%s' is normalized: the library matches it in the lower-cased text, Nebula "
                          "only in the raw text (set \"normalized\": false, as BERT's special tokens have it)", where,
                          content);
                st = STATUS_INPUT;
            } else {
                st = tok_add_special(t, content, (int32_t)json_integer_value(id), f, where);
            }
        }
    }
    json_decref(root);
    if (t) {
        t->json_src = src;  /* tok_save writes the file as it was: every option survives */
        t->json_len = srclen;
    } else {
        free(src);
    }
    if (st == STATUS_OK) st = t->kind == TOK_KIND_BPE ? tok_bpe_prepare(t, path) : tok_wordpiece_prepare(t, path);
    if (st != STATUS_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return STATUS_OK;
}

/* ---- saving ------------------------------------------------------------------------ */

typedef struct save_text {
    const char *data;
    size_t len;
} save_text;

static int fill_text(void *ctx, int fd)
{
    const save_text *s = ctx;
    return path_write_all(fd, s->data, s->len);
}

static status save_file(const char *dir, const char *name, const char *data, size_t len)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    save_text s = { data, len };
    return path_write_atomic(path, "tokenizer file", fill_text, &s);
}

/* A growing text buffer for the writers. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sbuf_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t c = (b->len + n + 1) * 2;
        char *p = realloc(b->p, c);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

status tok_save(const tok *t, const char *dir)
{
    if (t->kind == TOK_KIND_BYTES) return STATUS_OK;
    TRY(path_mkdirs(dir, "tokenizer directory"));
    if (t->json_src) return save_file(dir, "tokenizer.json", t->json_src, t->json_len);
    sbuf b = { 0 };
    status st = STATUS_OK;
    if (t->kind == TOK_KIND_WORDPIECE) {
        for (int id = 0; id < t->V; id++) {
            const char *x = t->text[id];
            if (!x || strpbrk(x, "\r\n")) {
                log_error("tokenizer: id %d %s: vocab.txt cannot hold it", id, x ? "holds a line break" : "has no token");
                free(b.p);
                return STATUS_INPUT;
            }
            sbuf_add(&b, x, strlen(x));
            sbuf_add(&b, "\n", 1);
        }
        if (b.oom) st = STATUS_NOMEM;
        if (st == STATUS_OK) st = save_file(dir, "vocab.txt", b.p, b.len);
        free(b.p);
        /* the one setting of a vocab.txt tokenizer that is not BERT's default travels beside it */
        const char *cfg = t->lowercase ? "{\"do_lower_case\": true}\n" : "{\"do_lower_case\": false}\n";
        if (st == STATUS_OK) st = save_file(dir, "tokenizer_config.json", cfg, strlen(cfg));
        return st;
    }
    json_t *vocab = json_object();
    for (int id = 0; id < t->V && vocab; id++)
        if (t->text[id]) json_object_set_new(vocab, t->text[id], json_integer(id));
    char *text = vocab ? json_dumps(vocab, JSON_ENSURE_ASCII | JSON_COMPACT) : NULL;
    json_decref(vocab);
    if (!text) return STATUS_NOMEM;
    st = save_file(dir, "vocab.json", text, strlen(text));
    free(text);
    sbuf_add(&b, "#version: 0.2\n", 14);
    for (int r = 0; r < t->nmerges; r++) {
        const char *l = t->text[t->merge_pair[2 * r]], *rr = t->text[t->merge_pair[2 * r + 1]];
        sbuf_add(&b, l, strlen(l));
        sbuf_add(&b, " ", 1);
        sbuf_add(&b, rr, strlen(rr));
        sbuf_add(&b, "\n", 1);
    }
    if (b.oom) st = STATUS_NOMEM;
    if (st == STATUS_OK) st = save_file(dir, "merges.txt", b.p, b.len);
    free(b.p);
    return st;
}
