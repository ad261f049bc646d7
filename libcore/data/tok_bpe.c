/* tok_bpe — byte-level BPE encoding (GPT-2, RoBERTa): pre-tokenisation by GPT-2's
 * regex (PCRE2, JIT), bytes to their one-symbol tokens, merges lowest rank first, a
 * cache per pre-token (tokenizer.h).
 *
 * The one design decision: the pattern spells white space as Unicode's White_Space
 * set ([\t-\r\x{85}\p{Z}]) instead of PCRE2's \s, which with UCP also takes U+180E:
 * the `tokenizers` library (Oniguruma) and Python's `regex` module, whose \s is
 * White_Space, split "a\u180Eb" into three pieces, and so does this. Letters and
 * numbers are the Unicode general categories L and N, as there. */
#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS  "\\t-\\r\\x{85}\\p{Z}"
const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef WS

#define CACHE_MAX_ENTRIES (1u << 20)       /* pre-tokens cached before the cache starts over */
#define CACHE_MAX_IDS     ((size_t)1 << 24)
#define CACHE_MAX_KEY_BYTES ((size_t)1 << 26)  /* 64 MiB of cached pre-token text */

/* ---- the merge table --------------------------------------------------------------- */

static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }

static uint32_t merge_slot(const merge_map *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)(h >> 32) & mask;; i = (i + 1) & mask)
        if (m->key[i] == key || m->key[i] == UINT64_MAX) return i;
}

static void merge_grow(merge_map *m)
{
    merge_map n = { .cap = m->cap ? m->cap * 2 : 4096, .count = m->count };
    n.key = malloc(n.cap * sizeof *n.key);
    n.rank = malloc(n.cap * sizeof *n.rank);
    n.id = malloc(n.cap * sizeof *n.id);
    CHECK(n.key && n.rank && n.id, "out of memory for a BPE merge table");
    memset(n.key, 0xff, n.cap * sizeof *n.key);
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->key[i] != UINT64_MAX) {
            uint32_t s = merge_slot(&n, m->key[i]);
            n.key[s] = m->key[i];
            n.rank[s] = m->rank[i];
            n.id[s] = m->id[i];
        }
    merge_free(m);
    *m = n;
}

bool merge_put(merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    if ((uint64_t)(m->count + 1) * 2 > m->cap) merge_grow(m);
    uint64_t k = pair_key(left, right);
    uint32_t s = merge_slot(m, k);
    if (m->key[s] == k) return false;
    m->key[s] = k;
    m->rank[s] = rank;
    m->id[s] = id;
    m->count++;
    return true;
}

void merge_free(merge_map *m)
{
    free(m->key);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

/* The rank and result of merging (l, r); false when no merge has that pair. */
bool merge_get(const merge_map *m, int32_t l, int32_t r, int32_t *rank, int32_t *id)
{
    if (!m->cap) return false;
    uint32_t s = merge_slot(m, pair_key(l, r));
    if (m->key[s] == UINT64_MAX) return false;
    *rank = m->rank[s];
    *id = m->id[s];
    return true;
}

/* ---- set-up ------------------------------------------------------------------------ */

pcre2_code *tok_compile_pattern(void)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)tok_gpt2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                   &off, NULL);
    CHECK(re, "GPT-2's pre-tokenisation pattern compiles (PCRE2 built with Unicode support)");
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  /* without JIT (some platforms) the interpreter matches alike */
    return re;
}

status tok_bpe_prepare(tok *t, const char *where)
{
    uint32_t cp[256];
    tok_byte_unicode(cp);
    int16_t inv[512];  /* code point -> byte, -1 when no byte is written so */
    memset(inv, 0xff, sizeof inv);
    for (int b = 0; b < 256; b++) {
        inv[cp[b]] = (int16_t)b;
        char u[4];
        int l = tok_utf8_put(cp[b], u);
        t->byte_id[b] = smap_get(&t->vocab, u, (size_t)l);
    }
    /* what each id decodes to: its symbols mapped back to bytes; a special's text as is */
    t->dec_off = calloc((size_t)t->V + 1, sizeof *t->dec_off);
    size_t total = 0;
    for (int id = 0; id < t->V; id++) total += t->text[id] ? strlen(t->text[id]) : 0;
    t->dec = malloc(total + 1);
    if (!t->dec_off || !t->dec) return STATUS_NOMEM;
    size_t k = 0;
    for (int id = 0; id < t->V; id++) {
        t->dec_off[id] = k;
        const char *s = t->text[id];
        if (!s) continue;
        bool special = false;
        for (int j = 0; j < t->nspecial; j++) special |= t->special_id[j] == id;
        size_t len = strlen(s);
        for (size_t i = 0; i < len;) {
            uint32_t c;
            int n = tok_utf8_get((const uint8_t *)s + i, len - i, &c);
            if (!n) {
                log_error("%s: token %d is not valid UTF-8", where, id);
                return STATUS_INPUT;
            }
            if (!special && c < 512 && inv[c] >= 0) t->dec[k++] = (char)inv[c];
            else {
                memcpy(t->dec + k, s + i, (size_t)n);
                k += (size_t)n;
            }
            i += (size_t)n;
        }
    }
    t->dec_off[t->V] = k;
    t->re = tok_compile_pattern();
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    CHECK(t->md, "out of memory for PCRE2 match data");
    return STATUS_OK;
}

/* ---- encoding ---------------------------------------------------------------------- */

/* A candidate merge: the pair at symbol pos (and the next live one) of rank `rank`. */
typedef struct merge_cand {
    int32_t rank, pos, left, right;
} merge_cand;

static bool cand_less(merge_cand a, merge_cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void cand_push(merge_cand *h, size_t *n, merge_cand c)
{
    size_t i = (*n)++;
    h[i] = c;
    while (i && cand_less(h[i], h[(i - 1) / 2])) {
        merge_cand x = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

static merge_cand cand_pop(merge_cand *h, size_t *n)
{
    merge_cand top = h[0];
    h[0] = h[--*n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(h[l], h[m])) m = l;
        if (r < *n && cand_less(h[r], h[m])) m = r;
        if (m == i) break;
        merge_cand x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
    return top;
}

/* The candidate (pos, its next live symbol) when a merge has that pair. */
static void cand_add(const tok *t, const int32_t *sym, const int32_t *next, int32_t pos, merge_cand *h, size_t *nh)
{
    int32_t nx = next[pos], rank, id;
    if (nx >= 0 && merge_get(&t->merges, sym[pos], sym[nx], &rank, &id))
        cand_push(h, nh, (merge_cand){ rank, pos, sym[pos], sym[nx] });
}

/* The merges of one pre-token's symbols sym[0..n) in place; returns the new count.
 * The `tokenizers` library's order: the candidate pair of the lowest rank first, the
 * leftmost of equal ranks, one at a time, each merge making its new neighbours
 * candidates (a min-heap: O(n log n) for a pre-token of n bytes, which a long run of
 * punctuation or letters can make large). For merges.txt files where every merge's
 * parts were made by earlier merges (every trained one) this is GPT-2's loop too. */
static size_t bpe_merge(tok *t, int32_t *sym, size_t n)
{
    if (n < 2) return n;
    int32_t *next = t->mnext, *prev = t->mprev;
    merge_cand *h = t->mheap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) cand_add(t, sym, next, (int32_t)i, h, &nh);
    while (nh) {
        merge_cand c = cand_pop(h, &nh);
        int32_t nx = next[c.pos], rank, id;
        /* stale: the symbol was merged away or its pair changed since */
        if (sym[c.pos] < 0 || nx < 0 || sym[c.pos] != c.left || sym[nx] != c.right) continue;
        merge_get(&t->merges, c.left, c.right, &rank, &id);
        sym[c.pos] = id;
        sym[nx] = -1;
        next[c.pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = c.pos;
        if (prev[c.pos] >= 0) cand_add(t, sym, next, prev[c.pos], h, &nh);
        cand_add(t, sym, next, c.pos, h, &nh);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    return k;
}

static void cache_reset(tok *t)
{
    smap_free(&t->cache);
    t->cache_ids_len = 0;
}

/* One pre-token's ids, appended to *ids. */
static status encode_word(tok *t, const uint8_t *w, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    int32_t c = smap_get(&t->cache, (const char *)w, len);
    if (c >= 0) return tok_push(ids, n, cap, t->cache_ids + t->cache_off[c], (size_t)(t->cache_off[c + 1] - t->cache_off[c]));
    if (len > t->work_cap) {  /* symbols, links and at most 3 len candidates (len + 2 per merge) */
        size_t c = len * 2;
        int32_t *p = realloc(t->work, c * sizeof *p), *nx = realloc(t->mnext, c * sizeof *nx);
        if (p) t->work = p;
        if (nx) t->mnext = nx;
        int32_t *pv = p && nx ? realloc(t->mprev, c * sizeof *pv) : NULL;
        if (pv) t->mprev = pv;
        merge_cand *h = pv ? realloc(t->mheap, 3 * c * sizeof *h) : NULL;
        if (!h) return STATUS_NOMEM;
        t->mheap = h;
        t->work_cap = c;
    }
    int32_t *sym = t->work;
    size_t ns = len;
    for (size_t i = 0; i < len; i++) {
        sym[i] = t->byte_id[w[i]];
        if (sym[i] < 0) {
            log_error("byte 0x%02x has no token in this vocabulary (a byte-level BPE vocabulary holds all 256)", w[i]);
            return STATUS_INPUT;
        }
    }
    bool whole = false;
    if (t->ignore_merges) {  /* the pre-token's own text, in the byte alphabet, when the vocabulary has it */
        uint32_t cp[256];
        tok_byte_unicode(cp);
        char text[2 * TOK_MAX_TOKEN];  /* a byte is at most 2 bytes of the alphabet */
        size_t tl = 0;
        for (size_t i = 0; i < len && len <= TOK_MAX_TOKEN; i++) tl += (size_t)tok_utf8_put(cp[w[i]], text + tl);
        int32_t id = len <= TOK_MAX_TOKEN ? smap_get(&t->vocab, text, tl) : -1;
        if (id >= 0) {
            sym[0] = id;
            ns = 1;
            whole = true;
        }
    }
    if (!whole) ns = bpe_merge(t, sym, ns);
    if (t->cache.count >= CACHE_MAX_ENTRIES || t->cache_ids_len + ns > CACHE_MAX_IDS || t->cache.pool_len + len > CACHE_MAX_KEY_BYTES)
        cache_reset(t);
    uint32_t index;
    if (smap_put(&t->cache, (const char *)w, len, (int32_t)t->cache.count, &index)) {
        size_t need = t->cache_ids_len + ns;
        if (need > t->cache_ids_cap) {
            size_t cc = need * 2 + 4096;
            int32_t *p = realloc(t->cache_ids, cc * sizeof *p);
            if (p) {
                t->cache_ids = p;
                t->cache_ids_cap = cc;
            }
        }
        uint64_t *o = realloc(t->cache_off, ((size_t)t->cache.ecap + 1) * sizeof *o);
        if (o) t->cache_off = o;
        if (need <= t->cache_ids_cap && o) {
            memcpy(t->cache_ids + t->cache_ids_len, sym, ns * sizeof *sym);
            t->cache_off[index] = t->cache_ids_len;
            t->cache_ids_len = need;
            t->cache_off[index + 1] = need;
        } else {
            cache_reset(t);  /* out of memory for the cache: encode without it */
        }
    }
    return tok_push(ids, n, cap, sym, ns);
}

status tok_bpe_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    const char *s = text;
    char *owned = NULL;
    if (t->add_prefix_space && len && text[0] != ' ') {
        owned = malloc(len + 1);
        if (!owned) return STATUS_NOMEM;
        owned[0] = ' ';
        memcpy(owned + 1, text, len);
        s = owned;
        len++;
    }
    status st = STATUS_OK;
    PCRE2_SIZE at = 0;
    while (at < len && st == STATUS_OK) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, len, at, PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (rc < 0) {
            /* cannot happen: every code point matches one of the branches */
            log_error("pre-tokenisation stopped at byte %zu (PCRE2 error %d)", (size_t)at, rc);
            st = STATUS_INPUT;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        if (ov[0] > at) st = encode_word(t, (const uint8_t *)s + at, ov[0] - at, ids, n, cap);
        if (st == STATUS_OK && ov[1] > ov[0]) st = encode_word(t, (const uint8_t *)s + ov[0], ov[1] - ov[0], ids, n, cap);
        at = ov[1] > at ? ov[1] : at + 1;
    }
    free(owned);
    return st;
}
