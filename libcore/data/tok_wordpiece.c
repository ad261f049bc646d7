/* tok_wordpiece — BERT's WordPiece: BertNormalizer (clean text, spaces around CJK
 * ideographs, accents stripped by NFD, lower case), BertPreTokenizer (split at white
 * space, punctuation as words of their own), then greedy longest-match-first pieces
 * with the "##" continuation prefix (tokenizer.h).
 *
 * The one design decision: the Unicode facts (general category, canonical
 * decomposition, lower case) come from utf8proc, and each step follows the
 * `tokenizers` library's Rust definitions: white space is the White_Space property,
 * a control character is any category C but \t \n \r, punctuation is ASCII
 * punctuation or any category P, lower case is per code point (char::to_lowercase:
 * U+0130 becomes "i\u0307"). */
#include "tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

status tok_wordpiece_prepare(tok *t, const char *where)
{
    (void)where;
    t->dec_off = NULL;
    return STATUS_OK;
}

static bool is_control(uint32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r') return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN;
}

static bool is_punct(uint32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
    if (c < 0x80) return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static bool is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static status grow(tok *t, size_t need)
{
    if (need <= t->norm_cap) return STATUS_OK;
    size_t c = need * 2 + 256;
    uint8_t *p = realloc(t->norm, c);
    if (!p) return STATUS_NOMEM;
    t->norm = p;
    t->norm_cap = c;
    return STATUS_OK;
}

/* The pieces of one word w[0..len) (valid UTF-8, nchars code points). */
static status encode_word(tok *t, const uint8_t *w, size_t len, size_t nchars, int32_t **ids, size_t *n, size_t *cap)
{
    if (!len) return STATUS_OK;
    size_t first = *n;
    bool bad = nchars > (size_t)t->max_chars;
    size_t pl = strlen(t->prefix);
    char cand[16 + TOK_MAX_TOKEN];  /* no vocabulary entry is longer than TOK_MAX_TOKEN */
    for (size_t start = 0; start < len && !bad;) {
        int32_t found = -1;
        size_t end = len;
        /* the longest vocabulary entry from start, shrinking by whole code points */
        while (end > start) {
            size_t off = start ? pl : 0, l = end - start;
            if (off + l < sizeof cand) {
                memcpy(cand, t->prefix, off);
                memcpy(cand + off, w + start, l);
                found = smap_get(&t->vocab, cand, off + l);
                if (found >= 0) break;
            }
            do end--;
            while (end > start && (w[end] & 0xC0) == 0x80);
        }
        if (found < 0) bad = true;
        else {
            TRY(tok_push(ids, n, cap, &found, 1));
            start = end;
        }
    }
    if (!bad) return STATUS_OK;
    *n = first;
    if (t->unk < 0) {
        log_error("the word '%.*s' has no WordPiece encoding and the vocabulary has no [UNK]", (int)(len > 64 ? 64 : len), w);
        return STATUS_INPUT;
    }
    return tok_push(ids, n, cap, &t->unk, 1);
}

/* Normalised text (steps that map code points one to one or to a few), into t->norm. */
static status normalise(tok *t, const uint8_t *s, size_t len, size_t *out_len)
{
    TRY(grow(t, len * 3 + 16));
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        int l = tok_utf8_get(s + i, len - i, &c);
        i += (size_t)l;
        if (t->clean_text) {
            if (c == 0 || c == 0xFFFD || is_control(c)) continue;
            if (tok_is_ws(c)) c = ' ';
        }
        if (t->chinese_chars && is_cjk(c)) {
            t->norm[k++] = ' ';
            k += (size_t)tok_utf8_put(c, (char *)t->norm + k);
            t->norm[k++] = ' ';
        } else {
            k += (size_t)tok_utf8_put(c, (char *)t->norm + k);
        }
    }
    *out_len = k;
    return STATUS_OK;
}

status tok_wordpiece_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    size_t nl;
    TRY(normalise(t, (const uint8_t *)text, len, &nl));
    const uint8_t *s = t->norm;
    uint8_t *nfd = NULL;
    if (t->strip_accents && nl) {
        utf8proc_ssize_t r = utf8proc_map(t->norm, (utf8proc_ssize_t)nl, &nfd, UTF8PROC_DECOMPOSE | UTF8PROC_STABLE);
        if (r < 0) {
            log_error("cannot decompose the text: %s", utf8proc_errmsg(r));
            return STATUS_INPUT;
        }
        s = nfd;
        nl = (size_t)r;
    }
    /* strip marks and lower-case into a word buffer; split at white space and punctuation */
    uint8_t *word = malloc(nl * 2 + 8);
    if (!word) {
        free(nfd);
        return STATUS_NOMEM;
    }
    size_t wl = 0, wc = 0;
    status st = STATUS_OK;
    for (size_t i = 0; i < nl && st == STATUS_OK;) {
        uint32_t c;
        int l = tok_utf8_get(s + i, nl - i, &c);
        i += (size_t)l;
        if (t->strip_accents && c >= 0x300 && utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN) continue;
        if (tok_is_ws(c)) {
            st = encode_word(t, word, wl, wc, ids, n, cap);
            wl = wc = 0;
            continue;
        }
        if (is_punct(c)) {
            st = encode_word(t, word, wl, wc, ids, n, cap);
            wl = wc = 0;
            char p[4];
            int pl = tok_utf8_put(c, p);
            if (st == STATUS_OK) st = encode_word(t, (const uint8_t *)p, (size_t)pl, 1, ids, n, cap);
            continue;
        }
        if (t->lowercase) {
            if (c == 0x130) {  /* İ: the full lower-case mapping is two code points */
                word[wl++] = 'i';
                wl += (size_t)tok_utf8_put(0x307, (char *)word + wl);
                wc += 2;
                continue;
            }
            c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        }
        wl += (size_t)tok_utf8_put(c, (char *)word + wl);
        wc++;
    }
    if (st == STATUS_OK) st = encode_word(t, word, wl, wc, ids, n, cap);
    free(word);
    free(nfd);
    return st;
}
