/* tokenizer — text to token ids and back: byte-level BPE (GPT-2), WordPiece (BERT)
 * and plain bytes (vocabulary 256), for nebula-train prepare, sample and the
 * Hugging Face export.
 *
 * Files (the Hugging Face layouts, so a tokenizer moves between Nebula and
 * `tokenizers`/`transformers` unchanged):
 *   byte-level BPE  vocab.json ({"token": id}, tokens in GPT-2's byte-to-unicode
 *                   alphabet) + merges.txt (an optional "#version" line, then one
 *                   "left right" pair per line, highest priority first), or one
 *                   tokenizer.json whose model is BPE
 *   WordPiece       vocab.txt (one token per line, the id is the line number) or a
 *                   tokenizer.json whose model is WordPiece
 *   bytes           no file: token id = byte value
 * tok_load takes a file or a directory holding one of these (tokenizer.json first,
 * then vocab.json + merges.txt, then vocab.txt).
 *
 * The one design decision: pre-tokenisation is GPT-2's regex, run by PCRE2 with UTF
 * and UCP (Unicode letters, numbers and white space by property, as the `regex`
 * module and `tokenizers` see them), never hand-written character classes; the merge
 * loop below it is the one of GPT-2's encoder.py (lowest merge rank first), with a
 * cache per pre-token. Special tokens (added tokens of a tokenizer.json,
 * <|endoftext|>, [CLS] [SEP] [MASK] [PAD] [UNK] of a vocab.txt) are matched in the
 * text before pre-tokenisation and become their own ids.
 *
 * A malformed file is STATUS_INPUT with a message naming the file, the line or
 * byte offset, and what was expected. */
#ifndef NEBULA_TOKENIZER_H
#define NEBULA_TOKENIZER_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

typedef enum tok_kind {
    TOK_KIND_BYTES = 0,     /* id = byte, vocabulary 256 */
    TOK_KIND_BPE,           /* byte-level BPE (GPT-2, RoBERTa) */
    TOK_KIND_WORDPIECE,     /* WordPiece (BERT), lower-casing and accent stripping per its config */
} tok_kind;

typedef struct tok tok;     /* opaque: vocabulary, merges, specials, the regex, a cache */

/* A tokenizer from `path` (a file or a directory, see above); "bytes" gives the byte
 * tokenizer. STATUS_INPUT naming the file and position on malformed input. */
status tok_load(tok **out, const char *path);
/* The tokenizer of a data set: `tokenizer` when it is not empty (the key
 * data.tokenizer), else the tokenizer files in the directory of `data_path` (the token
 * file data.train names: nebula-train prepare writes them there), else bytes. */
status tok_find(tok **out, const char *tokenizer, const char *data_path);
/* The byte tokenizer (never fails). */
tok *tok_bytes(void);
void tok_free(tok *t);

tok_kind tok_get_kind(const tok *t);
const char *tok_kind_name(tok_kind k);          /* "bytes", "bpe", "wordpiece" */
int tok_vocab_size(const tok *t);               /* largest id + 1 */
/* The id of a special or ordinary token by its text ("<|endoftext|>", "[MASK]"), -1
 * when the vocabulary lacks it. */
int32_t tok_token_id(const tok *t, const char *token);

/* Encodes len bytes of UTF-8 text, appending to *ids (capacity *cap, grown with
 * realloc; *n the count so far). Special tokens in the text become their ids.
 * STATUS_INPUT for invalid UTF-8 (BPE and WordPiece; the message names the byte
 * offset), STATUS_NOMEM when growing fails. Thread-safe for distinct tok objects
 * only (the cache is per object). */
status tok_encode(tok *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap);

/* The bytes one id stands for when decoding (BPE: its bytes, which may be part of a
 * UTF-8 character; WordPiece: the token with "##" removed, a leading space added
 * unless it continues a word or follows nothing (first = 1)); the count written,
 * at most cap; 0 for an id outside the vocabulary. */
size_t tok_decode_one(const tok *t, int32_t id, int first, char *buf, size_t cap);
/* Decodes n ids into a new NUL-terminated string (malloc; *len its length). NULL on
 * out of memory. */
char *tok_decode(const tok *t, const int32_t *ids, size_t n, size_t *len);

/* Whether encoding a text in pieces split at white space between two other characters
 * gives the ids of the whole: false when a prefix space is added per call or a special
 * token holds or absorbs white space (data_prepare_tok.c then encodes whole parts). */
bool tok_chunkable(const tok *t);

/* Writes the tokenizer's files into directory dir (created if missing): vocab.json +
 * merges.txt (BPE) or vocab.txt (WordPiece); nothing for bytes. Atomic per file. */
status tok_save(const tok *t, const char *dir);

/* BPE training on a corpus (nebula-train prepare --tokenizer bpe --vocab-size N):
 * GPT-2's pre-tokenisation, the 256 byte tokens, then merges of the most frequent
 * adjacent pair (ties broken by the pair's lexicographic order, as `tokenizers`'
 * BpeTrainer does) until vocab_size - (number of specials) tokens; specials (e.g.
 * "<|endoftext|>") appended last. files: ninputs text files. */
status tok_train_bpe(tok **out, const char *const *files, const uint64_t *limits /* (ninputs) bytes read of each
                     file; NULL: all */, int ninputs, int vocab_size, const char *const *specials, int nspecials);

/* ---- nebula-train prepare with a tokenizer (data_prepare_tok.c) ---- */

typedef struct data_prepare_opts {
    const char *const *inputs;  /* text files, UTF-8 (each one document) */
    int ninputs;
    const char *train_out;      /* the training token file */
    const char *val_out;        /* the held-out token file; NULL when val_fraction is 0 */
    double val_fraction;        /* the last fraction of each input, from a line end, is held out */
    const char *out_dir;        /* where the tokenizer's files are written beside the token files */
    int bpe_vocab_size;         /* > 0: train a byte-level BPE of this size on the training parts first */
    bool progress;              /* a progress line on stderr (rank 0, when it is a terminal) */
    double timeout_s;           /* deadline of each agreement between the ranks (0: none) */
    const char *val_stale;      /* with val_out NULL: a held-out file of an earlier run, removed at the commit */
} data_prepare_opts;

typedef struct data_prepare_result {
    uint64_t bytes;             /* text read */
    uint64_t tokens[2];         /* tokens written: training, held-out */
    double seconds;             /* wall time of the encoding and the writes */
    double train_seconds;       /* of it, BPE training (rank 0) */
} data_prepare_result;

/* Collective over comm (every rank calls it; one process works alone). *t: the
 * tokenizer to encode with, or, with bpe_vocab_size > 0, set to the one trained.
 * Writes the token files (llm.c's format for vocabularies up to 65536, else Nebula's
 * with 4-byte tokens) and the tokenizer's files into out_dir. The same status on
 * every rank; STATUS_INPUT names the file and byte offset of bad text. */
status data_prepare_tokens(const data_prepare_opts *o, tok **t, MPI_Comm comm, data_prepare_result *res);

#endif
