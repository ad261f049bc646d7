/* tokenizer — (being written) the byte tokenizer only for now; BPE and WordPiece follow. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

struct tok {
    tok_kind kind;
};

tok *tok_bytes(void)
{
    tok *t = calloc(1, sizeof *t);
    CHECK(t, "out of memory for a tokenizer");
    t->kind = TOK_KIND_BYTES;
    return t;
}

status tok_load(tok **out, const char *path)
{
    if (!strcmp(path, "bytes")) {
        *out = tok_bytes();
        return STATUS_OK;
    }
    log_error("%s: BPE and WordPiece tokenizers are not built yet", path);
    return STATUS_INPUT;
}

status tok_find(tok **out, const char *tokenizer, const char *data_path)
{
    (void)data_path;
    if (tokenizer && tokenizer[0]) return tok_load(out, tokenizer);
    *out = tok_bytes();
    return STATUS_OK;
}

void tok_free(tok *t) { free(t); }
tok_kind tok_get_kind(const tok *t) { return t->kind; }
const char *tok_kind_name(tok_kind k) { return k == TOK_KIND_BPE ? "bpe" : k == TOK_KIND_WORDPIECE ? "wordpiece" : "bytes"; }
int tok_vocab_size(const tok *t) { (void)t; return 256; }
int32_t tok_token_id(const tok *t, const char *token) { (void)t; return token[0] && !token[1] ? (uint8_t)token[0] : -1; }

status tok_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap)
{
    (void)t;
    if (*n + len > *cap) {
        size_t c = (*n + len) * 2 + 16;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p) return STATUS_NOMEM;
        *ids = p;
        *cap = c;
    }
    for (size_t i = 0; i < len; i++) (*ids)[(*n)++] = (uint8_t)text[i];
    return STATUS_OK;
}

size_t tok_decode_one(const tok *t, int32_t id, int first, char *buf, size_t cap)
{
    (void)t;
    (void)first;
    if (id < 0 || id > 255 || cap < 1) return 0;
    buf[0] = (char)id;
    return 1;
}

char *tok_decode(const tok *t, const int32_t *ids, size_t n, size_t *len)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += tok_decode_one(t, ids[i], i == 0, s + k, 1);
    s[k] = '\0';
    if (len) *len = k;
    return s;
}

status tok_save(const tok *t, const char *dir) { (void)t; (void)dir; return STATUS_OK; }

status tok_train_bpe(tok **out, const char *const *files, int ninputs, int vocab_size, const char *const *specials,
                     int nspecials)
{
    (void)out; (void)files; (void)ninputs; (void)vocab_size; (void)specials; (void)nspecials;
    log_error0("BPE training is not built yet");
    return STATUS_INPUT;
}
