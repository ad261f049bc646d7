/* fuzz_tokenizer — libFuzzer harness of the tokenizer-file readers (tok_files.c): the
 * first byte picks the layout, the rest is the file(s), split at the first NUL for
 * vocab.json + merges.txt:
 *   0 tokenizer.json   1 vocab.json \0 merges.txt   2 vocab.txt
 * The files go into a private directory under the name tok_load keys on. A reader
 * must answer OK or STATUS_INPUT; an accepted tokenizer must encode a fixed text and
 * the input's own bytes (when they are UTF-8) to ids inside its vocabulary, and a
 * byte-level BPE that has all 256 byte tokens must decode them back to the same bytes.
 * Built by `make fuzz` with libFuzzer, ASan and UBSan, and by `make` as a replay
 * program (replay.c). */
#include "fuzz_input.h"
#include "data/tokenizer.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *workdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(dir, sizeof dir, "%s/nebula-fuzz-tok-%d", base, (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

static void put(const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", workdir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || path_write_all(fd, p, n) != 0) {
        perror(path);
        abort();
    }
    close(fd);
}

static void clear(void)
{
    static const char *const names[] = { "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt" };
    char path[512];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", workdir(), names[i]);
        unlink(path);
    }
}

static void exercise(tok *t, const char *text, size_t len, bool roundtrip)
{
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    status st = tok_encode(t, text, len, &ids, &n, &cap);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "tok_encode answers OK or STATUS_INPUT");
    if (st == STATUS_OK) {
        for (size_t i = 0; i < n; i++) fuzz_require(ids[i] >= 0 && ids[i] < tok_vocab_size(t), "ids inside the vocabulary");
        /* a BPE from vocab.json + merges.txt (no prefix space) decodes what it encoded: a byte
         * without its token made encode refuse */
        if (roundtrip && tok_get_kind(t) == TOK_KIND_BPE) {
            size_t dl;
            char *d = tok_decode(t, ids, n, &dl);
            fuzz_require(d != NULL, "decode allocates");
            fuzz_require(dl == len && !memcmp(d, text, len), "BPE decode(encode(x)) == x");
            free(d);
        }
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    clear();
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const char *load;
    char path[512];
    switch (data[0] % 3) {
    case 0:
        put("tokenizer.json", p, n);
        load = "tokenizer.json";
        break;
    case 1: {
        const uint8_t *nul = memchr(p, 0, n);
        size_t a = nul ? (size_t)(nul - p) : n;
        put("vocab.json", p, a);
        put("merges.txt", nul ? nul + 1 : p + n, nul ? n - a - 1 : 0);
        load = "merges.txt";
        break;
    }
    default:
        put("vocab.txt", p, n);
        load = "vocab.txt";
        break;
    }
    snprintf(path, sizeof path, "%s/%s", workdir(), load);
    tok *t = NULL;
    status st = tok_load(&t, path);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "tok_load answers OK or STATUS_INPUT");
    if (st == STATUS_OK) {
        static const char text[] = "Hello, world! It's <|endoftext|> [MASK] caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac  \t x";
        bool roundtrip = data[0] % 3 == 1;
        exercise(t, text, sizeof text - 1, roundtrip);
        if (n < 4096) exercise(t, (const char *)p, n, roundtrip);  /* invalid UTF-8 is refused, valid encoded */
        tok_free(t);
    }
    return 0;
}
