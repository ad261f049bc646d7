/* tokenizer — the tokenizer object, its files (vocab.json + merges.txt, tokenizer.json,
 * vocab.txt), special tokens and decoding; the encoders are tok_bpe.c and
 * tok_wordpiece.c, the trainer tok_train.c (tokenizer.h).
 *
 * The one design decision: every reader treats the file as hostile. JSON goes
 * through jansson (its line and column in the message), vocab.txt and merges.txt are
 * read line by line with the line number kept, and every id, length and reference is
 * checked before it is used; a message names the file, the position and what would
 * be right. */
#include "tokenizer_impl.h"
#include "base/path.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

/* ---- small pieces ---------------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t len)
{
    /* FNV-1a, then a final mix so that the low bits (the slot) depend on every byte */
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

void smap_free(smap *m)
{
    free(m->slot);
    free(m->key_off);
    free(m->key_len);
    free(m->val);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static uint32_t smap_find(const smap *m, const char *key, size_t len, uint64_t h)
{
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slot[i];
        if (!e) return i;
        e--;
        if (m->key_len[e] == len && !memcmp(m->pool + m->key_off[e], key, len)) return i;
    }
}

int32_t smap_get(const smap *m, const char *key, size_t len)
{
    if (!m->cap) return -1;
    uint32_t e = m->slot[smap_find(m, key, len, tok_hash(key, len))];
    return e ? m->val[e - 1] : -1;
}

static bool smap_grow(smap *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 1024;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return false;
    uint32_t *old = m->slot, ocap = m->cap;
    m->slot = slot;
    m->cap = cap;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i]) {
            uint32_t e = old[i] - 1;
            m->slot[smap_find(m, m->pool + m->key_off[e], m->key_len[e], tok_hash(m->pool + m->key_off[e], m->key_len[e]))] = old[i];
        }
    free(old);
    return true;
}

bool smap_put(smap *m, const char *key, size_t len, int32_t val, uint32_t *index)
{
    *index = UINT32_MAX;
    if ((uint64_t)(m->count + 1) * 2 > m->cap && !smap_grow(m)) return false;
    uint64_t h = tok_hash(key, len);
    uint32_t s = smap_find(m, key, len, h);
    if (m->slot[s]) {
        *index = m->slot[s] - 1;
        return false;
    }
    if (m->count == m->ecap) {
        uint32_t c = m->ecap ? m->ecap * 2 : 1024;
        uint64_t *o = realloc(m->key_off, c * sizeof *o);
        if (o) m->key_off = o;
        uint32_t *l = realloc(m->key_len, c * sizeof *l);
        if (l) m->key_len = l;
        int32_t *v = realloc(m->val, c * sizeof *v);
        if (v) m->val = v;
        if (!o || !l || !v) return false;
        m->ecap = c;
    }
    if (m->pool_len + len > m->pool_cap) {
        size_t c = (m->pool_len + len) * 2 + 4096;
        char *p = realloc(m->pool, c);
        if (!p) return false;
        m->pool = p;
        m->pool_cap = c;
    }
    memcpy(m->pool + m->pool_len, key, len);
    m->key_off[m->count] = m->pool_len;
    m->key_len[m->count] = (uint32_t)len;
    m->val[m->count] = val;
    m->pool_len += len;
    m->slot[s] = ++m->count;
    *index = m->count - 1;
    return true;
}

void tok_byte_unicode(uint32_t cp[256])
{
    /* GPT-2's bytes_to_unicode: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for
     * themselves; the other 68 bytes take U+0100, U+0101, ... in byte order */
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = self ? (uint32_t)b : next++;
    }
}

int tok_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int tok_utf8_get(const uint8_t *s, size_t len, uint32_t *cp)
{
    if (!len) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!n || c > 0xF4 || (size_t)n > len) return 0;
    uint32_t v = c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return n;
}

size_t tok_utf8_check(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int n = tok_utf8_get(s + i, len - i, &cp);
        if (!n) return i;
        i += (size_t)n;
    }
    return len;
}

status tok_push(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t count)
{
    if (*n + count > *cap) {
        size_t c = (*n + count) * 2 + 256;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p) {
            log_error("out of memory for %zu token ids", c);
            return STATUS_NOMEM;
        }
        *ids = p;
        *cap = c;
    }
    memcpy(*ids + *n, src, count * sizeof *src);
    *n += count;
    return STATUS_OK;
}

/* ---- the object ---------------------------------------------------------------- */

tok *tok_alloc(tok_kind kind)
{
    tok *t = calloc(1, sizeof *t);
    CHECK(t, "out of memory for a tokenizer");
    t->kind = kind;
    t->unk = -1;
    t->max_chars = 100;
    snprintf(t->prefix, sizeof t->prefix, "##");
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

tok *tok_bytes(void)
{
    tok *t = tok_alloc(TOK_KIND_BYTES);
    t->V = 256;
    return t;
}

void tok_free(tok *t)
{
    if (!t) return;
    smap_free(&t->vocab);
    smap_free(&t->cache);
    for (int i = 0; i < t->text_cap; i++) free(t->text[i]);
    free(t->text);
    free(t->dec);
    free(t->dec_off);
    for (int i = 0; i < t->nspecial; i++) free(t->special[i]);
    free(t->special);
    free(t->special_id);
    free(t->special_flags);
    merge_free(&t->merges);
    free(t->merge_pair);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t->cache_ids);
    free(t->cache_off);
    free(t->work);
    free(t->mnext);
    free(t->mprev);
    free(t->mheap);
    free(t->norm);
    free(t->json_src);
    free(t);
}

tok_kind tok_get_kind(const tok *t) { return t->kind; }
int tok_vocab_size(const tok *t) { return t->V; }

const char *tok_kind_name(tok_kind k)
{
    return k == TOK_KIND_BPE ? "bpe" : k == TOK_KIND_WORDPIECE ? "wordpiece" : "bytes";
}

int32_t tok_token_id(const tok *t, const char *token)
{
    if (t->kind == TOK_KIND_BYTES) return token[0] && !token[1] ? (uint8_t)token[0] : -1;
    return smap_get(&t->vocab, token, strlen(token));
}

status tok_add_entry(tok *t, const char *text, size_t len, int32_t id, const char *where)
{
    if (id < 0 || id >= TOK_MAX_VOCAB) {
        log_error("%s: token '%.*s' has id %d, outside [0, %d)", where, (int)(len > 64 ? 64 : len), text, id, TOK_MAX_VOCAB);
        return STATUS_INPUT;
    }
    if (!len || len > TOK_MAX_TOKEN) {
        log_error("%s: a token of %zu bytes (id %d): tokens have 1 to %d bytes", where, len, id, TOK_MAX_TOKEN);
        return STATUS_INPUT;
    }
    if (id >= t->text_cap) {
        int c = id + 1 > 2 * t->text_cap ? id + 1 : 2 * t->text_cap;
        char **p = realloc(t->text, (size_t)c * sizeof *p);
        if (!p) return STATUS_NOMEM;
        memset(p + t->text_cap, 0, (size_t)(c - t->text_cap) * sizeof *p);
        t->text = p;
        t->text_cap = c;
    }
    if (id >= t->V) t->V = id + 1;
    if (t->text[id]) {
        log_error("%s: id %d is given to both '%s' and '%.*s'", where, id, t->text[id], (int)(len > 64 ? 64 : len), text);
        return STATUS_INPUT;
    }
    uint32_t index;
    if (!smap_put(&t->vocab, text, len, id, &index)) {
        if (index == UINT32_MAX) return STATUS_NOMEM;
        log_error("%s: token '%.*s' appears twice (ids %d and %d)", where, (int)(len > 64 ? 64 : len), text,
                  t->vocab.val[index], id);
        return STATUS_INPUT;
    }
    t->text[id] = strndup(text, len);
    return t->text[id] ? STATUS_OK : STATUS_NOMEM;
}

/* ---- specials, encode, decode ---------------------------------------------------- */

/* The special token of pass `normalized` that starts at s[0..len) (the longest when
 * several do: the leftmost-longest matching of the tokenizers library), or -1. */
static int special_at(const tok *t, const char *s, size_t len, bool normalized)
{
    int best = -1;
    size_t best_len = 0;
    for (int k = 0; k < t->nspecial; k++) {
        if (!(t->special_flags[k] & TOK_SPECIAL_NORMALIZED) != !normalized) continue;
        size_t l = strlen(t->special[k]);
        if (l <= len && l > best_len && !memcmp(s, t->special[k], l)) {
            best = k;
            best_len = l;
        }
    }
    return best;
}

/* Unicode's White_Space property: \t..\r, U+0085 and the categories Zs, Zl, Zp (Rust's
 * char::is_whitespace, Oniguruma's \s). */
bool tok_is_ws(uint32_t c)
{
    if ((c >= '\t' && c <= '\r') || c == ' ' || c == 0x85) return true;
    if (c < 0x80) return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* A word character as the library's single_word sees it: ASCII letters, digits and
 * '_', other letters and numbers. */
static bool is_word_cp(uint32_t c)
{
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The code point ending at s[i - 1] (valid UTF-8 text), its start in *start. */
static uint32_t cp_before(const char *s, size_t i, size_t *start)
{
    size_t j = i - 1;
    while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
    uint32_t c = 0;
    tok_utf8_get((const uint8_t *)s + j, i - j, &c);
    *start = j;
    return c;
}

static status encode_plain(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    if (!len) return STATUS_OK;
    if (t->kind == TOK_KIND_BPE) return tok_bpe_encode(t, text, len, ids, n, cap);
    return tok_wordpiece_encode(t, text, len, ids, n, cap);
}

/* The library's added-token extraction: the tokens that are not normalised are split
 * off first, then the normalised ones in the pieces between (pass 1), then the model
 * encodes what is left. lstrip / rstrip take the white space beside a match into it,
 * single_word drops a match that touches a word character. */
static status encode_specials(tok *t, const char *text, size_t len, bool normalized, int32_t **ids, size_t *n,
                              size_t *cap)
{
    if (!len) return STATUS_OK;
    size_t from = 0;
    for (size_t i = 0; i < len && t->nspecial;) {
        if (text[i] != '<' && text[i] != '[' && !t->special_any_start) {
            i++;
            continue;
        }
        int k = special_at(t, text + i, len - i, normalized);
        if (k < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = i + strlen(t->special[k]), j;
        uint8_t f = t->special_flags[k];
        uint32_t c;
        if (f & TOK_SPECIAL_SINGLE_WORD) {
            bool before = start > 0 && is_word_cp(cp_before(text, start, &j));
            bool after = stop < len && tok_utf8_get((const uint8_t *)text + stop, len - stop, &c) && is_word_cp(c);
            if (before || after) {
                i = stop;  /* the match is consumed, as the library's matcher consumes it */
                continue;
            }
        }
        if (f & TOK_SPECIAL_LSTRIP)
            while (start > from && tok_is_ws(cp_before(text, start, &j))) start = j;
        if (f & TOK_SPECIAL_RSTRIP) {
            int l;
            while (stop < len && (l = tok_utf8_get((const uint8_t *)text + stop, len - stop, &c)) > 0 && tok_is_ws(c))
                stop += (size_t)l;
        }
        TRY(normalized ? encode_plain(t, text + from, start - from, ids, n, cap)
                       : encode_specials(t, text + from, start - from, true, ids, n, cap));
        TRY(tok_push(ids, n, cap, &t->special_id[k], 1));
        from = i = stop;
    }
    return normalized ? encode_plain(t, text + from, len - from, ids, n, cap)
                      : encode_specials(t, text + from, len - from, true, ids, n, cap);
}

status tok_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    if (t->kind == TOK_KIND_BYTES) {
        if (*n + len > *cap) {
            size_t c = *n + len + 256;
            int32_t *p = realloc(*ids, c * sizeof *p);
            if (!p) return STATUS_NOMEM;
            *ids = p;
            *cap = c;
        }
        for (size_t i = 0; i < len; i++) (*ids)[*n + i] = (uint8_t)text[i];
        *n += len;
        return STATUS_OK;
    }
    size_t bad = tok_utf8_check((const uint8_t *)text, len);
    if (bad < len) {
        log_error("invalid UTF-8 at byte %zu (0x%02x): the text must be UTF-8 (iconv -f LATIN1 -t UTF-8 converts "
                  "Latin-1 text; the byte tokenizer takes any bytes)", bad, (uint8_t)text[bad]);
        return STATUS_INPUT;
    }
    return encode_specials(t, text, len, false, ids, n, cap);
}

bool tok_chunkable(const tok *t)
{
    if (t->add_prefix_space) return false;
    for (int k = 0; k < t->nspecial; k++) {
        if (t->special_flags[k] & (TOK_SPECIAL_LSTRIP | TOK_SPECIAL_RSTRIP | TOK_SPECIAL_SINGLE_WORD)) return false;
        for (const char *c = t->special[k]; *c; c++)
            if ((*c >= '\t' && *c <= '\r') || *c == ' ') return false;
    }
    return true;
}

size_t tok_decode_one(const tok *t, int32_t id, int first, char *buf, size_t cap)
{
    if (id < 0 || id >= t->V) return 0;
    if (t->kind == TOK_KIND_BYTES) {
        if (cap < 1) return 0;
        buf[0] = (char)id;
        return 1;
    }
    if (t->kind == TOK_KIND_BPE) {
        size_t l = (size_t)(t->dec_off[id + 1] - t->dec_off[id]);
        if (l > cap) l = cap;
        memcpy(buf, t->dec + t->dec_off[id], l);
        return l;
    }
    const char *s = t->text[id];
    if (!s) return 0;
    size_t pl = strlen(t->prefix), k = 0;
    if (pl && !strncmp(s, t->prefix, pl)) s += pl;
    else if (!first && cap > 0) buf[k++] = ' ';
    size_t l = strlen(s);
    if (l > cap - k) l = cap - k;
    memcpy(buf + k, s, l);
    return k + l;
}

char *tok_decode(const tok *t, const int32_t *ids, size_t n, size_t *len)
{
    size_t cap = 64, k = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n && s; i++) {
        char piece[TOK_MAX_TOKEN + 8];
        size_t l = tok_decode_one(t, ids[i], i == 0, piece, sizeof piece);
        if (k + l + 1 > cap) {
            cap = (k + l + 1) * 2;
            char *p = realloc(s, cap);
            if (!p) {
                free(s);
                return NULL;
            }
            s = p;
        }
        memcpy(s + k, piece, l);
        k += l;
    }
    if (!s) return NULL;
    s[k] = '\0';
    if (len) *len = k;
    return s;
}

/* ---- finding the files ----------------------------------------------------------- */

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

status tok_load(tok **out, const char *path)
{
    *out = NULL;
    if (!strcmp(path, "bytes")) {
        *out = tok_bytes();
        return STATUS_OK;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        log_error("cannot open tokenizer %s: %s (a directory with tokenizer.json, vocab.json + merges.txt or "
                  "vocab.txt; one of those files; or \"bytes\")", path, strerror(errno));
        return STATUS_INPUT;
    }
    char a[4400], b[4400];
    if (S_ISDIR(sb.st_mode)) {
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (is_file(a)) return tok_read_tokenizer_json(out, a);
        snprintf(a, sizeof a, "%s/vocab.json", path);
        snprintf(b, sizeof b, "%s/merges.txt", path);
        if (is_file(a) || is_file(b)) return tok_read_bpe_files(out, a, b);
        snprintf(a, sizeof a, "%s/vocab.txt", path);
        if (is_file(a)) return tok_read_vocab_txt(out, a);
        log_error("%s holds no tokenizer: expected tokenizer.json, vocab.json + merges.txt (byte-level BPE) or "
                  "vocab.txt (WordPiece)", path);
        return STATUS_INPUT;
    }
    /* a file: its name says which; vocab.json and merges.txt find their twin beside them */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    if (ends_with(path, "merges.txt")) {
        snprintf(a, sizeof a, "%s/vocab.json", dir);
        return tok_read_bpe_files(out, a, path);
    }
    if (ends_with(path, "tokenizer.json")) return tok_read_tokenizer_json(out, path);
    if (ends_with(path, ".json")) {
        snprintf(b, sizeof b, "%s/merges.txt", dir);
        return tok_read_bpe_files(out, path, b);
    }
    if (ends_with(path, ".txt")) return tok_read_vocab_txt(out, path);
    log_error("%s: not a tokenizer file name: tokenizer.json, vocab.json (+ merges.txt beside it) or vocab.txt", path);
    return STATUS_INPUT;
}

status tok_find(tok **out, const char *tokenizer, const char *data_path)
{
    if (tokenizer && tokenizer[0]) return tok_load(out, tokenizer);
    *out = NULL;
    if (data_path && data_path[0] && strcmp(data_path, "synthetic")) {
        char dir[4096], f[4200];
        snprintf(dir, sizeof dir, "%s", data_path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        static const char *const names[] = { "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt" };
        for (int i = 0; i < 4; i++) {
            snprintf(f, sizeof f, "%s/%s", dir, names[i]);
            if (is_file(f)) return tok_load(out, dir);
        }
    }
    *out = tok_bytes();
    return STATUS_OK;
}
