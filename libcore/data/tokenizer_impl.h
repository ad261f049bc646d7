/* tokenizer_impl — what tokenizer.c (files, specials, decode), tok_bpe.c (byte-level
 * BPE), tok_wordpiece.c (WordPiece) and tok_train.c (BPE training) share. */
#ifndef NEBULA_TOKENIZER_IMPL_H
#define NEBULA_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>

#include "tokenizer.h"

#define TOK_MAX_VOCAB   (1 << 24)   /* ids beyond this are refused: no real vocabulary is that large */
#define TOK_MAX_TOKEN   1024        /* bytes of one vocabulary entry */

/* An open-addressing map from byte strings to int32 values; the keys live in one
 * growing pool, so a map is three allocations however many keys it holds. */
typedef struct smap {
    uint32_t *slot;     /* (cap) entry index + 1; 0 = empty */
    uint32_t cap;       /* power of two */
    uint32_t count;     /* entries */
    uint64_t *key_off;  /* (count) offset of each key in pool */
    uint32_t *key_len;  /* (count) */
    int32_t *val;       /* (count) */
    uint32_t ecap;      /* allocated entries */
    char *pool;         /* keys, back to back */
    size_t pool_len, pool_cap;
} smap;

void smap_free(smap *m);
/* The value of key, or -1. */
int32_t smap_get(const smap *m, const char *key, size_t len);
/* Inserts or (when present) returns the existing entry's index in *index; true when
 * it inserted. False with *index = UINT32_MAX on out of memory. */
bool smap_put(smap *m, const char *key, size_t len, int32_t val, uint32_t *index);
uint64_t tok_hash(const void *p, size_t len);

/* A BPE merge: (left id, right id) -> (rank, merged id), open addressing on the pair. */
typedef struct merge_map {
    uint64_t *key;      /* (cap) left << 32 | right, UINT64_MAX = empty */
    int32_t *rank;      /* (cap) */
    int32_t *id;        /* (cap) */
    uint32_t cap, count;
} merge_map;

struct tok {
    tok_kind kind;
    int V;                      /* largest id + 1 */
    smap vocab;                 /* token text (as in the file) -> id */
    char **text;                /* (text_cap) the file's text of each id; NULL for an id no entry has */
    int text_cap;
    char *dec;                  /* the bytes each id decodes to, back to back */
    uint64_t *dec_off;          /* (V + 1) offsets into dec */
    /* specials: matched in the raw text before anything else, longest first */
    int nspecial;
    char **special;             /* (nspecial) their text */
    int32_t *special_id;        /* (nspecial) */
    uint8_t *special_flags;     /* (nspecial) TOK_SPECIAL_* of a tokenizer.json's added token */
    bool special_any_start;     /* a special starts with a byte other than '<' or '[' (scan every byte) */
    /* byte-level BPE */
    merge_map merges;
    int32_t *merge_pair;        /* (2 * nmerges) left, right of each merge in rank order (tok_save) */
    int nmerges;
    bool ignore_merges;         /* tokenizer.json: a pre-token that is a vocabulary entry is taken whole */
    int32_t byte_id[256];       /* id of each byte's one-symbol token; -1 when the vocabulary lacks it */
    bool add_prefix_space;      /* tokenizer.json's ByteLevel add_prefix_space */
    pcre2_code *re;             /* GPT-2's pre-tokenisation pattern, JIT-compiled */
    pcre2_match_data *md;
    smap cache;                 /* pre-token bytes -> index into cache_off */
    int32_t *cache_ids;         /* the cached encodings, back to back */
    size_t cache_ids_len, cache_ids_cap;
    uint64_t *cache_off;        /* (cache.count + 1) offsets into cache_ids */
    int32_t *work;              /* merge scratch: symbols of one pre-token (work_cap) */
    int32_t *mnext, *mprev;     /* (work_cap) the live symbols' links */
    struct merge_cand *mheap;   /* (3 work_cap) candidate merges, a min-heap */
    size_t work_cap;
    /* WordPiece */
    int32_t unk;                /* [UNK]'s id, -1 without */
    int max_chars;              /* a longer word becomes [UNK] (100) */
    bool lowercase, strip_accents, clean_text, chinese_chars;
    char prefix[16];            /* continuing-subword prefix, "##" */
    char *json_src;             /* the tokenizer.json it was read from (tok_save writes it back), or NULL */
    size_t json_len;
    uint8_t *norm;              /* normalisation scratch */
    size_t norm_cap;
};

/* GPT-2's byte-to-unicode table: the code point each byte is written as in
 * vocab.json and merges.txt (printable Latin-1 bytes as themselves, the rest from
 * U+0100 on, in byte order). */
void tok_byte_unicode(uint32_t cp[256]);
/* UTF-8: writes cp (< 0x110000) into out (4 bytes room), returns the length. */
int tok_utf8_put(uint32_t cp, char *out);
/* Decodes one code point at s[0..len), returns its length, or 0 for an invalid or
 * truncated sequence (overlong forms, surrogates and values above U+10FFFF are
 * invalid, as they are to Rust's str). */
int tok_utf8_get(const uint8_t *s, size_t len, uint32_t *cp);
/* Offset of the first invalid byte of s, or len when all of it is valid UTF-8. */
size_t tok_utf8_check(const uint8_t *s, size_t len);

/* Unicode's White_Space property (tokenizer.c): what every pre-tokenizer here splits at. */
bool tok_is_ws(uint32_t c);

/* Appends n ids to *ids (growing it). */
status tok_push(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t count);

/* Byte-level BPE (tok_bpe.c). */
status tok_bpe_prepare(tok *t, const char *where);                  /* regex, byte ids, decode table */
status tok_bpe_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap);
bool merge_put(merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id);
void merge_free(merge_map *m);
/* The rank and result of merging (left, right); false when no merge has that pair. */
bool merge_get(const merge_map *m, int32_t left, int32_t right, int32_t *rank, int32_t *id);
/* GPT-2's pre-tokenisation pattern (PCRE2 syntax). */
extern const char tok_gpt2_pattern[];
pcre2_code *tok_compile_pattern(void);

/* WordPiece (tok_wordpiece.c). */
status tok_wordpiece_prepare(tok *t, const char *where);
status tok_wordpiece_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap);

/* The readers (tok_files.c): a complete tokenizer in *out, or an error naming the
 * file and position. */
status tok_read_tokenizer_json(tok **out, const char *path);
status tok_read_bpe_files(tok **out, const char *vocab_json, const char *merges_txt);
status tok_read_vocab_txt(tok **out, const char *path);
/* An added token's options in a tokenizer.json (the library's AddedToken). */
enum {
    TOK_SPECIAL_LSTRIP = 1,        /* takes the white space before it */
    TOK_SPECIAL_RSTRIP = 2,        /* takes the white space after it */
    TOK_SPECIAL_SINGLE_WORD = 4,   /* only where no word character touches it */
    TOK_SPECIAL_NORMALIZED = 8,    /* matched after the non-normalised ones, in the pieces between */
};
/* Registers a special token (its text must be in the vocabulary or get the id given). */
status tok_add_special(tok *t, const char *text, int32_t id, uint8_t flags, const char *where);

/* Used by the loaders: registers the vocabulary entry (text, id). */
status tok_add_entry(tok *t, const char *text, size_t len, int32_t id, const char *where);
tok *tok_alloc(tok_kind kind);

#endif
