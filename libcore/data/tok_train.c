/* tok_train — byte-level BPE training (nebula-train prepare --tokenizer bpe): GPT-2's
 * pre-tokenisation counts the words of the corpus, then the most frequent adjacent
 * pair of symbols is merged until the vocabulary is full (tokenizer.h).
 *
 * The one design decision: words are counted once and merges update only the words
 * that hold the merged pair (a list per pair) and the counts of the pairs around it;
 * the next pair comes from a max-heap with stale entries skipped on the way out. Ties
 * go to the smaller (left id, right id), so a corpus gives the same vocabulary on
 * every machine. The first 256 ids are the bytes in GPT-2's order ('!' = 0), as in
 * GPT-2's own vocab.json. A pair seen fewer than twice is never merged. */
#include "tokenizer_impl.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/path.h"

typedef struct word {
    int32_t *sym;       /* its symbols (ids) */
    int32_t n;
    int64_t freq;       /* occurrences in the corpus */
} word;

typedef struct pair_info {
    int64_t count;      /* sum of freq over the occurrences of the pair */
    int32_t *words;     /* words that held the pair when it was counted (may repeat, may be stale) */
    int32_t nw, cw;
} pair_info;

typedef struct heap_entry {
    int64_t count;
    uint64_t key;
} heap_entry;

typedef struct trainer {
    word *w;
    int32_t nw;
    merge_map pairs;    /* pair key -> index into info (in .id; .rank unused) */
    pair_info *info;
    int32_t ninfo, cinfo;
    heap_entry *heap;
    size_t nheap, cheap;
} trainer;

static bool heap_less(heap_entry a, heap_entry b) { return a.count < b.count || (a.count == b.count && a.key > b.key); }

static void heap_push(trainer *tr, int64_t count, uint64_t key)
{
    if (tr->nheap == tr->cheap) {
        tr->cheap = tr->cheap ? tr->cheap * 2 : 4096;
        tr->heap = realloc(tr->heap, tr->cheap * sizeof *tr->heap);
        CHECK(tr->heap, "out of memory training a tokenizer");
    }
    size_t i = tr->nheap++;
    tr->heap[i] = (heap_entry){ count, key };
    while (i && heap_less(tr->heap[(i - 1) / 2], tr->heap[i])) {
        heap_entry x = tr->heap[i];
        tr->heap[i] = tr->heap[(i - 1) / 2];
        tr->heap[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

static heap_entry heap_pop(trainer *tr)
{
    heap_entry top = tr->heap[0];
    tr->heap[0] = tr->heap[--tr->nheap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < tr->nheap && heap_less(tr->heap[m], tr->heap[l])) m = l;
        if (r < tr->nheap && heap_less(tr->heap[m], tr->heap[r])) m = r;
        if (m == i) break;
        heap_entry x = tr->heap[i];
        tr->heap[i] = tr->heap[m];
        tr->heap[m] = x;
        i = m;
    }
    return top;
}

static pair_info *pair_get(trainer *tr, int32_t l, int32_t r, bool create)
{
    int32_t rank, id;
    if (merge_get(&tr->pairs, l, r, &rank, &id)) return &tr->info[id];  /* id: the index into info */
    if (!create) return NULL;
    if (tr->ninfo == tr->cinfo) {
        tr->cinfo = tr->cinfo ? tr->cinfo * 2 : 4096;
        tr->info = realloc(tr->info, (size_t)tr->cinfo * sizeof *tr->info);
        CHECK(tr->info, "out of memory training a tokenizer");
    }
    memset(&tr->info[tr->ninfo], 0, sizeof tr->info[0]);
    merge_put(&tr->pairs, l, r, 0, tr->ninfo);
    return &tr->info[tr->ninfo++];
}

/* Adds (sign = +1) or removes (-1) the pairs of word wi, pushing the changed counts. */
static void count_word(trainer *tr, int32_t wi, int sign)
{
    word *w = &tr->w[wi];
    for (int32_t i = 0; i + 1 < w->n; i++) {
        pair_info *p = pair_get(tr, w->sym[i], w->sym[i + 1], true);
        p->count += sign * w->freq;
        if (sign > 0) {
            if (p->nw == p->cw) {
                p->cw = p->cw ? p->cw * 2 : 4;
                p->words = realloc(p->words, (size_t)p->cw * sizeof *p->words);
                CHECK(p->words, "out of memory training a tokenizer");
            }
            if (!p->nw || p->words[p->nw - 1] != wi) p->words[p->nw++] = wi;
        }
        heap_push(tr, p->count, (uint64_t)(uint32_t)w->sym[i] << 32 | (uint32_t)w->sym[i + 1]);
    }
}

/* Counts the pre-tokens of one file into `words` (text -> index) and freq. */
static status count_file(const char *path, uint64_t limit, pcre2_code *re, pcre2_match_data *md, smap *words,
                         int64_t **freq, size_t *cfreq)
{
    int fd;
    struct stat sb;
    char why[256];
    if (path_open_regular(path, &fd, &sb, 0, why, sizeof why) != 0) {
        log_error("%s %s", path, why);
        return STATUS_INPUT;
    }
    size_t len = (size_t)sb.st_size < limit ? (size_t)sb.st_size : (size_t)limit;
    char *buf = malloc(len + 1);
    status st = STATUS_OK;
    if (!buf) st = STATUS_NOMEM;
    else if (path_read_all_at(fd, buf, len, 0) != 0) {
        log_error("cannot read %s: %s", path, log_errno_str());
        st = STATUS_IO;
    }
    close(fd);
    size_t bad = st == STATUS_OK ? tok_utf8_check((const uint8_t *)buf, len) : len;
    if (bad < len) {
        log_error("%s: invalid UTF-8 at byte %zu (0x%02x): BPE training reads UTF-8 text (iconv -f LATIN1 -t UTF-8 "
                  "converts Latin-1)", path, bad, (uint8_t)buf[bad]);
        st = STATUS_INPUT;
    }
    for (PCRE2_SIZE at = 0; st == STATUS_OK && at < len;) {
        int rc = pcre2_match(re, (PCRE2_SPTR)buf, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        uint32_t index;
        if (smap_put(words, buf + ov[0], ov[1] - ov[0], 0, &index) || index != UINT32_MAX) {
            if (index >= *cfreq) {
                size_t c = *cfreq ? *cfreq * 2 : 65536;
                int64_t *f = realloc(*freq, c * sizeof *f);
                if (!f) {
                    st = STATUS_NOMEM;
                    break;
                }
                memset(f + *cfreq, 0, (c - *cfreq) * sizeof *f);
                *freq = f;
                *cfreq = c;
            }
            (*freq)[index]++;
        } else {
            st = STATUS_NOMEM;
        }
        at = ov[1] > at ? ov[1] : at + 1;
    }
    free(buf);
    return st;
}

static void trainer_free(trainer *tr)
{
    for (int32_t i = 0; i < tr->nw; i++) free(tr->w[i].sym);
    free(tr->w);
    for (int32_t i = 0; i < tr->ninfo; i++) free(tr->info[i].words);
    free(tr->info);
    free(tr->heap);
    merge_free(&tr->pairs);
}

/* Merges pair (a, b) into id c in every word that holds it. */
static void apply_merge(trainer *tr, int32_t a, int32_t b, int32_t c)
{
    pair_info *p = pair_get(tr, a, b, false);
    int32_t nw = p->nw, *list = malloc((size_t)nw * sizeof *list);
    CHECK(list, "out of memory training a tokenizer");
    memcpy(list, p->words, (size_t)nw * sizeof *list);
    for (int32_t k = 0; k < nw; k++) {
        word *w = &tr->w[list[k]];
        bool has = false;
        for (int32_t i = 0; i + 1 < w->n && !has; i++) has = w->sym[i] == a && w->sym[i + 1] == b;
        if (!has) continue;
        count_word(tr, list[k], -1);
        int32_t j = 0;
        for (int32_t i = 0; i < w->n; i++) {
            if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) {
                w->sym[j++] = c;
                i++;
            } else {
                w->sym[j++] = w->sym[i];
            }
        }
        w->n = j;
        count_word(tr, list[k], +1);
    }
    free(list);
}

status tok_train_bpe(tok **out, const char *const *files, const uint64_t *limits, int ninputs, int vocab_size,
                     const char *const *specials, int nspecials)
{
    *out = NULL;
    if (vocab_size < 256 + nspecials || vocab_size > TOK_MAX_VOCAB) {
        log_error("--vocab-size %d: byte-level BPE needs at least 256 + %d (the bytes and the special tokens), at most %d",
                  vocab_size, nspecials, TOK_MAX_VOCAB);
        return STATUS_INPUT;
    }
    pcre2_code *re = tok_compile_pattern();
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    smap words = { 0 };
    int64_t *freq = NULL;
    size_t cfreq = 0;
    status st = STATUS_OK;
    for (int i = 0; i < ninputs && st == STATUS_OK; i++) st = count_file(files[i], limits ? limits[i] : UINT64_MAX, re, md, &words, &freq, &cfreq);
    pcre2_match_data_free(md);
    pcre2_code_free(re);

    tok *t = tok_alloc(TOK_KIND_BPE);
    uint32_t cp[256];
    tok_byte_unicode(cp);
    int32_t byte_id[256];
    for (int k = 0; k < 256 && st == STATUS_OK; k++) {
        /* GPT-2's order: the bytes that stand for themselves, then the others */
        int b = k < 188 ? (int)(k < 94 ? 33 + k : k < 106 ? 161 + (k - 94) : 174 + (k - 106)) : -1;
        if (b < 0) {
            int skip = k - 188, x = 0;
            for (b = 0; b < 256; b++)
                if (cp[b] >= 256 && x++ == skip) break;
        }
        char u[4];
        int l = tok_utf8_put(cp[b], u);
        byte_id[b] = k;
        st = tok_add_entry(t, u, (size_t)l, k, "BPE training");
    }

    trainer tr = { 0 };
    if (st == STATUS_OK) {
        tr.nw = (int32_t)words.count;
        tr.w = calloc((size_t)tr.nw + 1, sizeof *tr.w);
        CHECK(tr.w, "out of memory training a tokenizer");
        for (int32_t i = 0; i < tr.nw; i++) {
            word *w = &tr.w[i];
            const uint8_t *s = (const uint8_t *)words.pool + words.key_off[i];
            w->n = (int32_t)words.key_len[i];
            w->freq = freq[i];
            w->sym = malloc((size_t)w->n * sizeof *w->sym);
            CHECK(w->sym, "out of memory training a tokenizer");
            for (int32_t j = 0; j < w->n; j++) w->sym[j] = byte_id[s[j]];
            count_word(&tr, i, +1);
        }
    }
    smap_free(&words);
    free(freq);

    int target = vocab_size - nspecials, next = 256, rank = 0;
    while (st == STATUS_OK && next < target && tr.nheap) {
        heap_entry e = heap_pop(&tr);
        int32_t a = (int32_t)(e.key >> 32), b = (int32_t)(uint32_t)e.key;
        pair_info *p = pair_get(&tr, a, b, false);
        if (!p || p->count != e.count) continue;  /* stale: the pair's count changed since */
        if (e.count < 2) break;
        char both[2 * TOK_MAX_TOKEN];
        size_t la = strlen(t->text[a]), lb = strlen(t->text[b]);
        if (la + lb > TOK_MAX_TOKEN) {
            p->count = -1;  /* never merged: the token would be too long */
            continue;
        }
        memcpy(both, t->text[a], la);
        memcpy(both + la, t->text[b], lb);
        int32_t have = smap_get(&t->vocab, both, la + lb);
        int32_t c = have >= 0 ? have : next;
        if (have < 0) st = tok_add_entry(t, both, la + lb, next++, "BPE training");
        if (st == STATUS_OK && !merge_put(&t->merges, a, b, rank, c)) st = STATUS_INPUT;
        if (st != STATUS_OK) break;
        int32_t *mp = realloc(t->merge_pair, (size_t)(rank + 1) * 2 * sizeof *mp);
        CHECK(mp, "out of memory training a tokenizer");
        t->merge_pair = mp;
        mp[2 * rank] = a;
        mp[2 * rank + 1] = b;
        t->nmerges = ++rank;
        apply_merge(&tr, a, b, c);
    }
    trainer_free(&tr);
    if (st == STATUS_OK && next < target)
        log_warn("BPE training: the corpus has no pair seen twice after %d merges: the vocabulary has %d tokens "
                 "instead of %d", rank, next + nspecials, vocab_size);
    for (int i = 0; i < nspecials && st == STATUS_OK; i++) st = tok_add_special(t, specials[i], next++, 0, "BPE training");
    if (st == STATUS_OK) st = tok_bpe_prepare(t, "BPE training");
    if (st != STATUS_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return STATUS_OK;
}
