/* prepare — nebula-train prepare: text files into token files (libcore/data).
 *
 *   nebula-train prepare OUT_DIR FILE...                        byte-level, no MPI
 *   [mpirun -np N] nebula-train prepare OUT_DIR FILE... --tokenizer bpe --vocab-size V
 *   [mpirun -np N] nebula-train prepare OUT_DIR FILE... --tokenizer DIR|FILE
 *   nebula-train prepare --images DIR --out FILE.h5 ...        image folders (prepare_images.c)
 *
 * With a tokenizer the ranks encode equal shares of the text (data_prepare_tokens);
 * the tokenizer's files land in OUT_DIR beside train.bin and val.bin, where sampling
 * and the Hugging Face export find them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/path.h"
#include "base/runtime.h"
#include "comm/ctl.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "train_app.h"

typedef struct prepare_args {
    double frac;              /* --val-fraction */
    const char **files;       /* inputs */
    int nfiles;
    const char *out;          /* OUT_DIR */
    const char *tokenizer;    /* --tokenizer: bytes, bpe or a path */
    int vocab_size;           /* --vocab-size (bpe) */
    double timeout_s;         /* --timeout: deadline of each agreement between the ranks */
} prepare_args;

static int parse(int argc, char **argv, prepare_args *a)
{
    *a = (prepare_args){ .frac = 0.1, .tokenizer = "bytes", .timeout_s = 3600 };
    a->files = calloc((size_t)argc, sizeof *a->files);
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        char *end = NULL;
        if (!strcmp(argv[i], "--val-fraction")) {
            a->frac = strtod(v, &end);
            if (i + 1 >= argc || *end || a->frac < 0 || a->frac >= 1) {
                log_error0("--val-fraction needs a number in [0, 1), got '%s'", v);
                return 2;
            }
            i++;
        } else if (!strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc || !*v) {
                log_error0("--tokenizer needs bytes, bpe (trained here, with --vocab-size) or a tokenizer's directory "
                           "or file (tokenizer.json, vocab.json + merges.txt, vocab.txt)");
                return 2;
            }
            a->tokenizer = v;
            i++;
        } else if (!strcmp(argv[i], "--vocab-size")) {
            long n = strtol(v, &end, 10);
            if (i + 1 >= argc || *end || n < 257 || n > (1 << 24)) {
                log_error0("--vocab-size needs a whole number in [257, 16777216], got '%s'", v);
                return 2;
            }
            a->vocab_size = (int)n;
            i++;
        } else if (!strcmp(argv[i], "--timeout")) {
            a->timeout_s = strtod(v, &end);
            if (i + 1 >= argc || *end || !(a->timeout_s >= 0)) {
                log_error0("--timeout needs seconds (0: no deadline), got '%s'", v);
                return 2;
            }
            i++;
        } else if (!strncmp(argv[i], "--", 2)) {
            log_error0("prepare: unknown option '%s'\n%s", argv[i], train_usage);
            return 2;
        } else if (!a->out) {
            a->out = argv[i];
        } else {
            a->files[a->nfiles++] = argv[i];
        }
    }
    if (!a->out || a->nfiles == 0) {
        log_error0("prepare needs an output directory and at least one text file\n%s", train_usage);
        return 2;
    }
    bool bpe = !strcmp(a->tokenizer, "bpe");
    if (bpe != (a->vocab_size > 0)) {
        log_error0(bpe ? "--tokenizer bpe trains a vocabulary: give its size with --vocab-size N (e.g. 8192)"
                       : "--vocab-size is for --tokenizer bpe (a tokenizer read from files has its own size)");
        return 2;
    }
    return 0;
}

/* Byte-level: one process, no MPI (data_prepare_text). Tokenizer files of an earlier
 * prepare into the same directory go: sample and convert --to hf would take them for
 * this data's tokenizer. */
static int prepare_bytes(const prepare_args *a, const char *train, const char *val)
{
    status st = path_mkdirs(a->out, "output directory");
    if (st == STATUS_OK) st = data_prepare_text(a->files, a->nfiles, train, val, a->frac);
    static const char *const names[] = { "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt",
                                         "tokenizer_config.json" };
    for (int i = 0; i < 5 && st == STATUS_OK; i++) {
        char f[4400];
        snprintf(f, sizeof f, "%s/%s", a->out, names[i]);
        if (unlink(f) == 0) printf("prepare: removed %s, which belonged to an earlier tokenizer\n", f);
    }
    if (st == STATUS_OK) printf("wrote %s and %s\n", train, val);
    return status_exit_code(st);
}

static int prepare_tokenized(int argc, char **argv, const prepare_args *a, const char *train, const char *val)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    tok *t = NULL;
    bool bpe = !strcmp(a->tokenizer, "bpe");
    if (!bpe) st = tok_load(&t, a->tokenizer);  /* every rank reads it: no broadcast of a parsed table */
    if (st == STATUS_OK && rt.rank == 0) st = path_mkdirs(a->out, "output directory");
    int mine = (int)st, worst = 0;
    if (comm_ctl_allreduce(comm_ctl_named(rt.world, a->timeout_s, "prepare"), &mine, &worst, 1, MPI_INT, MPI_MAX) !=
        STATUS_OK)
        worst = STATUS_PEER;
    st = (status)worst;
    data_prepare_result res;
    data_prepare_opts o = { .inputs = a->files, .ninputs = a->nfiles, .train_out = train,
                            .val_out = a->frac > 0 ? val : NULL, .val_fraction = a->frac, .out_dir = a->out,
                            .bpe_vocab_size = a->vocab_size, .progress = true, .timeout_s = a->timeout_s,
                            .val_stale = a->frac > 0 ? NULL : val };
    if (st == STATUS_OK) st = data_prepare_tokens(&o, &t, rt.world, &res);
    if (st == STATUS_OK && rt.rank == 0) {
        double s = res.seconds - res.train_seconds > 0 ? res.seconds - res.train_seconds : 1e-9;  /* encoding + writes */
        printf("prepare: %s tokenizer, vocabulary %d; %.2f MB of text -> %llu + %llu tokens (%.2f bytes/token) in "
               "%.2f s on %d rank%s: %.2f MB/s, %.0f tokens/s%s\n",
               tok_kind_name(tok_get_kind(t)), tok_vocab_size(t), res.bytes / 1e6, (unsigned long long)res.tokens[0],
               (unsigned long long)res.tokens[1], (double)res.bytes / (double)(res.tokens[0] + res.tokens[1]), s,
               rt.size, rt.size > 1 ? "s" : "", res.bytes / 1e6 / s, (res.tokens[0] + res.tokens[1]) / s, "");
        if (bpe) printf("prepare: BPE training on rank 0 took %.2f s before that\n", res.train_seconds);
        printf("wrote %s%s%s and the tokenizer's files in %s\n", train, o.val_out ? " and " : "", o.val_out ? val : "",
               a->out);
    }
    tok_free(t);
    fflush(stdout);
    runtime_free(&rt);
    return status_exit_code(st);
}

int prepare_main(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--images")) return prepare_images_main(argc, argv);
    prepare_args a;
    int rc = parse(argc, argv, &a);
    if (rc) {
        free(a.files);
        return rc;
    }
    char train[4200], val[4200];
    snprintf(train, sizeof train, "%s/train.bin", a.out);
    snprintf(val, sizeof val, "%s/val.bin", a.out);
    /* the output rule (base/path.h) before the directory is created: neither may be an
     * input, a device or a run's file, nor inside a checkpoint */
    status st = path_output_check(train, "prepare", a.files, a.nfiles);
    if (st == STATUS_OK) st = path_output_check(val, "prepare", a.files, a.nfiles);
    if (st != STATUS_OK) rc = status_exit_code(st);
    else if (!strcmp(a.tokenizer, "bytes")) rc = prepare_bytes(&a, train, val);
    else rc = prepare_tokenized(argc, argv, &a, train, val);
    free(a.files);
    return rc;
}
