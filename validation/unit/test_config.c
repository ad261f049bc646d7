/* test_config — unit test of libcore/config: defaults, files, every type and bound,
 * error statuses, --set precedence, origins, and the dump -> load round trip that
 * checkpoints rely on.
 *
 * Runs without mpirun: MPI is never initialised, and the log functions work without it.
 * Bad inputs make config print its error messages to stderr; that is expected, only the
 * "ok"/"FAIL" lines on stdout are the verdict. Bugs (die) are checked in forked children. */
#include "base/config.h"
#include "../check.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const config_key schema[] = {
    { "train", "steps", CONFIG_TYPE_INT, "100", .min = 1, .max = 1000000, .help = "optimizer steps" },
    { "train", "lr", CONFIG_TYPE_FLOAT, "3e-4", .min = 0, .max = 1, .help = "peak learning rate" },
    { "train", "seed", CONFIG_TYPE_INT, "-7", .help = "unbounded integer" },
    { "train", "optim", CONFIG_TYPE_ENUM, "adamw", .choices = "sgd|adamw|lamb", .help = "optimizer" },
    { "train", "compile", CONFIG_TYPE_BOOL, "no", .help = "a switch" },
    { "data", "path", CONFIG_TYPE_STRING, "/tmp/data", .help = "dataset path" },
    { "data", "shard", CONFIG_TYPE_SIZE, "256M", .min = 1, .max = INFINITY, .help = "bytes per shard" },
    { "data", "cache", CONFIG_TYPE_SIZE, "1G", .min = 1024, .max = 0x1p40, .help = "cache bytes" },
    { "comm", "timeout", CONFIG_TYPE_FLOAT, "30", .min = 0.001, .max = INFINITY, .help = "seconds" },
    { "comm", "label", CONFIG_TYPE_STRING, "", .help = "may be empty" },
};
static const int nkeys = (int)(sizeof schema / sizeof schema[0]);

/* Writes text to DIR/name; the path goes to the caller's buffer. */
static const char *write_file(test_ctx *t, const char *name, const char *text, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", t->dir, name);
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_defaults(test_ctx *t)
{
    config cfg;
    check(t, config_init(&cfg, schema, nkeys) == STATUS_OK, "init");
    check(t, config_int(&cfg, "train.steps") == 100, "default int");
    check(t, config_float(&cfg, "train.lr") == 3e-4, "default float");
    check(t, config_int(&cfg, "train.seed") == -7, "default negative int");
    check(t, !strcmp(config_str(&cfg, "train.optim"), "adamw"), "default enum");
    check(t, config_bool(&cfg, "train.compile") == false, "default bool");
    check(t, !strcmp(config_str(&cfg, "data.path"), "/tmp/data"), "default string");
    check(t, config_size(&cfg, "data.shard") == 256ull << 20, "default size 256M");
    check(t, !strcmp(config_str(&cfg, "comm.label"), ""), "default empty string");
    check(t, !strcmp(config_origin(&cfg, "train.lr"), "default"), "default origin");
}

/* The file has comments, blank lines, CRLF, an inline comment and a ':' pair so line
 * numbers are not trivially equal to key order. */
static void test_load_file(test_ctx *t)
{
    config cfg;
    char path[256];
    config_init(&cfg, schema, nkeys);
    write_file(t, "run.ini",
               "; a run\n"                      /* 1 */
               "\n"                             /* 2 */
               "[train]\n"                      /* 3 */
               "steps = 5000\r\n"               /* 4 */
               "lr = 0.01 ; inline comment\n"   /* 5 */
               "# another comment\n"            /* 6 */
               "optim = LAMB\n"                 /* 7 */
               "compile = on\n"                 /* 8 */
               "[data]\n"                       /* 9 */
               "path: /scratch/x y/z;w\n"       /* 10 */
               "shard = 64KiB\n",               /* 11 */
               path, sizeof path);
    check(t, config_load_file(&cfg, path) == STATUS_OK, "load file");
    check(t, config_int(&cfg, "train.steps") == 5000, "file int (CRLF line)");
    check(t, config_float(&cfg, "train.lr") == 0.01, "file float with inline comment");
    check(t, !strcmp(config_str(&cfg, "train.optim"), "lamb"), "file enum, any case, schema spelling");
    check(t, config_bool(&cfg, "train.compile"), "file bool 'on'");
    check(t, !strcmp(config_str(&cfg, "data.path"), "/scratch/x y/z;w"), "file string with blank and ';'");
    check(t, config_size(&cfg, "data.shard") == 65536, "file size 64KiB");
    char want[300];
    snprintf(want, sizeof want, "%s:5", path);
    check(t, !strcmp(config_origin(&cfg, "train.lr"), want), "origin FILE:LINE (%s)", config_origin(&cfg, "train.lr"));
    snprintf(want, sizeof want, "%s:11", path);
    check(t, !strcmp(config_origin(&cfg, "data.shard"), want), "origin of last line");
    check(t, !strcmp(config_origin(&cfg, "data.cache"), "default"), "untouched key keeps origin default");
}

static void test_sizes(test_ctx *t)
{
    static const struct { const char *text; uint64_t want; } good[] = {
        { "4096", 4096 }, { "64K", 65536 }, { "64k", 65536 }, { "64KiB", 65536 }, { "64kib", 65536 },
        { "256M", 256ull << 20 }, { "3 MiB", 3ull << 20 }, { "2G", 2ull << 30 }, { "2gib", 2ull << 30 },
        { "1T", 1ull << 40 }, { "1", 1 }, { "16777215T", 16777215ull << 40 },
    };
    static const char *const bad[] = { "0", "-1", "1.5G", "12KB", "G", "", "0x10", "1 G B",
                                       "18446744073709551616", "16777216T" };
    config cfg;
    config_init(&cfg, schema, nkeys);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char a[64];
        snprintf(a, sizeof a, "data.shard=%s", good[i].text);
        bool ok = config_set(&cfg, a) == STATUS_OK && config_size(&cfg, "data.shard") == good[i].want;
        check(t, ok, "size '%s' = %llu", good[i].text, (unsigned long long)good[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char a[64];
        snprintf(a, sizeof a, "data.shard=%s", bad[i]);
        check(t, config_set(&cfg, a) == STATUS_INPUT, "size '%s' refused", bad[i]);
    }
    check(t, config_set(&cfg, "data.cache=1K") == STATUS_OK, "size at lower bound 1K");
    check(t, config_set(&cfg, "data.cache=1023") == STATUS_INPUT, "size below lower bound");
    check(t, config_set(&cfg, "data.cache=1TiB") == STATUS_OK, "size at upper bound 1TiB");
    check(t, config_set(&cfg, "data.cache=1099511628800") == STATUS_INPUT, "size above upper bound");
    check(t, config_size(&cfg, "data.cache") == 1ull << 40, "refused value leaves the old one");
}

static void expect_set(test_ctx *t, config *cfg, const char *a, status want, const char *what)
{
    check(t, config_set(cfg, a) == want, "%s: --set %s", what, a);
}

static void test_scalars(test_ctx *t)
{
    config cfg;
    config_init(&cfg, schema, nkeys);
    expect_set(t, &cfg, "train.steps=1", STATUS_OK, "int at min");
    expect_set(t, &cfg, "train.steps=1000000", STATUS_OK, "int at max");
    check(t, config_int(&cfg, "train.steps") == 1000000, "int value");
    expect_set(t, &cfg, "train.steps=0", STATUS_INPUT, "int below min");
    expect_set(t, &cfg, "train.steps=1000001", STATUS_INPUT, "int above max");
    expect_set(t, &cfg, "train.steps=1.5", STATUS_INPUT, "int with fraction");
    expect_set(t, &cfg, "train.steps=abc", STATUS_INPUT, "int not a number");
    expect_set(t, &cfg, "train.seed=-9223372036854775808", STATUS_OK, "int64 min, unbounded key");
    check(t, config_int(&cfg, "train.seed") == INT64_MIN, "int64 min value");
    expect_set(t, &cfg, "train.seed=9223372036854775808", STATUS_INPUT, "int64 overflow");
    expect_set(t, &cfg, "train.lr=1e-3", STATUS_OK, "float exponent");
    check(t, config_float(&cfg, "train.lr") == 1e-3, "float value");
    expect_set(t, &cfg, "train.lr=0", STATUS_OK, "float at min");
    expect_set(t, &cfg, "train.lr=1", STATUS_OK, "float at max");
    expect_set(t, &cfg, "train.lr=1.0000001", STATUS_INPUT, "float above max");
    expect_set(t, &cfg, "train.lr=-0.1", STATUS_INPUT, "float below min");
    expect_set(t, &cfg, "train.lr=nan", STATUS_INPUT, "float nan");
    expect_set(t, &cfg, "comm.timeout=inf", STATUS_INPUT, "float inf");
    expect_set(t, &cfg, "train.lr=0.1x", STATUS_INPUT, "float trailing junk");
    expect_set(t, &cfg, "comm.timeout=1e9", STATUS_OK, "float one-sided range");
    expect_set(t, &cfg, "comm.timeout=0", STATUS_INPUT, "float below one-sided min");
    static const struct { const char *text; bool want; } bools[] = {
        { "true", true }, { "false", false }, { "1", true }, { "0", false }, { "yes", true },
        { "no", false }, { "on", true }, { "off", false }, { "TRUE", true }, { "Off", false },
    };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        char a[64];
        snprintf(a, sizeof a, "train.compile=%s", bools[i].text);
        check(t, config_set(&cfg, a) == STATUS_OK && config_bool(&cfg, "train.compile") == bools[i].want,
              "bool '%s'", bools[i].text);
    }
    expect_set(t, &cfg, "train.compile=maybe", STATUS_INPUT, "bool word");
    expect_set(t, &cfg, "train.compile=2", STATUS_INPUT, "bool 2");
    expect_set(t, &cfg, "train.optim=sgd", STATUS_OK, "enum choice");
    expect_set(t, &cfg, "train.optim=adamx", STATUS_INPUT, "enum not a choice");
    expect_set(t, &cfg, "train.optim=", STATUS_INPUT, "enum empty");
    check(t, !strcmp(config_str(&cfg, "train.optim"), "sgd"), "enum keeps last good value");
}

static void test_strings(test_ctx *t)
{
    config cfg;
    config_init(&cfg, schema, nkeys);
    char a[CONFIG_STR_MAX + 64], big[CONFIG_STR_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[CONFIG_STR_MAX] = '\0';
    snprintf(a, sizeof a, "data.path=%s", big);
    check(t, config_set(&cfg, a) == STATUS_OK && strlen(config_str(&cfg, "data.path")) == CONFIG_STR_MAX,
          "string of CONFIG_STR_MAX characters");
    big[CONFIG_STR_MAX] = 'x';
    big[CONFIG_STR_MAX + 1] = '\0';
    snprintf(a, sizeof a, "data.path=%s", big);
    check(t, config_set(&cfg, a) == STATUS_INPUT, "string one character too long");
    expect_set(t, &cfg, "data.path=  a b=c  ", STATUS_OK, "string with blanks and '='");
    check(t, !strcmp(config_str(&cfg, "data.path"), "a b=c"), "string trimmed like a file value");
    expect_set(t, &cfg, "data.path=a;b", STATUS_OK, "string with ';' inside a word");
    expect_set(t, &cfg, "data.path=a ;b", STATUS_INPUT, "string with ' ;' (would be a comment)");
    expect_set(t, &cfg, "data.path=;b", STATUS_INPUT, "string starting with ';'");
    expect_set(t, &cfg, "data.path=a\tb", STATUS_INPUT, "string with a control character");
    expect_set(t, &cfg, "comm.label=", STATUS_OK, "empty string");
}

static void test_bad_files(test_ctx *t)
{
    static const struct { const char *name, *text, *what; } bad[] = {
        { "unknown_key.ini", "[train]\nsteps = 5\nlrr = 0.1\n", "unknown key (line 3)" },
        { "unknown_sec.ini", "[trian]\nlr = 0.1\n", "unknown section" },
        { "outside.ini", "lr = 0.1\n[train]\n", "key outside any section" },
        { "bad_type.ini", "[train]\nsteps = many\n", "bad int" },
        { "range.ini", "[train]\nlr = 2\n", "float out of range" },
        { "enum.ini", "[train]\noptim = adamx\n", "bad enum" },
        { "size.ini", "[data]\nshard = 1.5G\n", "bad size" },
        { "syntax1.ini", "[train\nsteps = 5\n", "unclosed section header" },
        { "syntax2.ini", "[train]\nsteps\n", "key without value" },
        { "dup.ini", "[train]\nsteps = 5\nsteps = 6\n", "key set twice" },
        { "indent.ini", "[train]\nsteps = 5\n  lr = 0.1\n", "indented line continues a value" },
        { "late.ini", "[train]\nsteps = 5\n\n\n\n[data]\nbogus = 1\n", "error after good lines" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config cfg;
        char path[256];
        config_init(&cfg, schema, nkeys);
        write_file(t, bad[i].name, bad[i].text, path, sizeof path);
        status st = config_load_file(&cfg, path);
        bool unchanged = config_int(&cfg, "train.steps") == 100 &&
                         !strcmp(config_origin(&cfg, "train.steps"), "default");
        check(t, st == STATUS_INPUT && unchanged, "%s -> input error, config unchanged", bad[i].what);
    }
    config cfg;
    char path[256];
    config_init(&cfg, schema, nkeys);
    snprintf(path, sizeof path, "%s/does-not-exist.ini", t->dir);
    check(t, config_load_file(&cfg, path) == STATUS_INPUT, "missing file -> input error");
    check(t, config_load_file(&cfg, t->dir) == STATUS_INPUT, "directory -> input error");
    char line[CONFIG_STR_MAX + 512];
    snprintf(line, sizeof line, "[data]\npath = %0*d\n", CONFIG_STR_MAX + 200, 0);
    check(t, config_load_string(&cfg, line, "long") == STATUS_INPUT, "overlong line -> input error");
    write_file(t, "empty.ini", "", path, sizeof path);
    check(t, config_load_file(&cfg, path) == STATUS_OK, "empty file is fine");
}

static void test_set_precedence(test_ctx *t)
{
    config cfg;
    char path[256];
    config_init(&cfg, schema, nkeys);
    write_file(t, "prec.ini", "[train]\nlr = 0.01\nsteps = 10\n", path, sizeof path);
    check(t, config_load_file(&cfg, path) == STATUS_OK, "load before --set");
    check(t, config_set(&cfg, " train.lr = 0.02 ") == STATUS_OK, "--set with blanks");
    check(t, config_float(&cfg, "train.lr") == 0.02, "--set overrides the file");
    check(t, !strcmp(config_origin(&cfg, "train.lr"), "--set"), "origin --set");
    check(t, config_int(&cfg, "train.steps") == 10, "file value not overridden stays");
    expect_set(t, &cfg, "train.lr", STATUS_INPUT, "no '='");
    expect_set(t, &cfg, "lr=0.1", STATUS_INPUT, "no section");
    expect_set(t, &cfg, "=0.1", STATUS_INPUT, "no key");
    expect_set(t, &cfg, "train.=0.1", STATUS_INPUT, "empty key name");
    expect_set(t, &cfg, "optim.lr=0.1", STATUS_INPUT, "key in the wrong section");
    expect_set(t, &cfg, "train.lrr=0.1", STATUS_INPUT, "misspelt key");
    check(t, config_float(&cfg, "train.lr") == 0.02, "failed --set leaves the value");
}

static bool same_values(const config *a, const config *b)
{
    for (int k = 0; k < a->nkeys; k++) {
        const config_value *x = &a->values[k], *y = &b->values[k];
        if (strcmp(x->text, y->text)) return false;
        switch (a->schema[k].type) {
        case CONFIG_TYPE_INT: if (x->i != y->i) return false; break;
        case CONFIG_TYPE_FLOAT: if (memcmp(&x->f, &y->f, sizeof x->f)) return false; break;
        case CONFIG_TYPE_BOOL: if (x->b != y->b) return false; break;
        case CONFIG_TYPE_SIZE: if (x->u != y->u) return false; break;
        default: break;
        }
    }
    return true;
}

static void test_round_trip(test_ctx *t)
{
    config a, b, c;
    config_init(&a, schema, nkeys);
    char path_set[CONFIG_STR_MAX + 64];
    snprintf(path_set, sizeof path_set, "data.path=/p/%0*d", CONFIG_STR_MAX - 3, 7);
    static const char *const sets[] = {
        "train.lr=0.1", "comm.timeout=0.3333333333333333", "train.seed=-42", "train.compile=yes",
        "train.optim=LAMB", "data.shard=1536", "data.cache=3GiB", "comm.label=a=b c;d",
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) config_set(&a, sets[i]);
    check(t, config_set(&a, path_set) == STATUS_OK, "set a %d-character path", CONFIG_STR_MAX);
    size_t need = config_dump(&a, NULL, 0);
    char *text = malloc(need + 1);
    check(t, config_dump(&a, text, need + 1) == need && strlen(text) == need, "dump size like snprintf");
    char small[16];
    check(t, config_dump(&a, small, sizeof small) == need && strlen(small) == sizeof small - 1,
          "dump into a short buffer truncates and terminates");
    check(t, strstr(text, "[train]\nsteps = 100\nlr = 0.1\n") != NULL, "dump is readable INI");
    check(t, strstr(text, "shard = 1536\ncache = 3G\n") != NULL, "sizes dumped canonically");
    config_init(&b, schema, nkeys);
    check(t, config_load_string(&b, text, "dump") == STATUS_OK, "load the dump");
    check(t, same_values(&a, &b), "dump -> load gives identical values");
    check(t, !strcmp(config_origin(&b, "train.lr"), "dump:3"), "origin from a loaded string");
    char path[256];
    write_file(t, "dump.ini", text, path, sizeof path);
    config_init(&c, schema, nkeys);
    check(t, config_load_file(&c, path) == STATUS_OK && same_values(&a, &c), "dump -> file -> load identical");
    char name[400];
    memset(name, 'd', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    config_load_string(&c, "[train]\nseed = 1\n", name);
    const char *o = config_origin(&c, "train.seed");
    check(t, strlen(o) < CONFIG_ORIGIN_MAX && !strncmp(o, "...", 3) && !strcmp(o + strlen(o) - 2, ":2"),
          "long path origin keeps its tail");
    free(text);
}

static void test_output(test_ctx *t)
{
    config cfg;
    config_init(&cfg, schema, nkeys);
    config_set(&cfg, "train.lr=0.5");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(&cfg, f);
    config_help(schema, nkeys, f);
    fclose(f);
    check(t, strstr(buf, "train.lr") && strstr(buf, "0.5") && strstr(buf, "--set"), "print has key, value, origin");
    check(t, strstr(buf, "lr = 3e-4  (float in [0, 1])") != NULL, "help has default and range");
    check(t, strstr(buf, "optim = adamw  (enum: sgd|adamw|lamb)") != NULL, "help has choices");
    check(t, strstr(buf, "cache = 1G  (size in [1K, 1T])") != NULL, "help prints size bounds with suffixes");
    check(t, strstr(buf, "shard = 256M  (size >= 1)") != NULL, "help prints a one-sided range");
    free(buf);
}

/* Bugs must die (abort), not return: run each in a child with stderr silenced. */
static bool dies(void (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(1);
        fn();
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT;
}

static void bad_default(void)
{
    static const config_key s[] = { { "a", "b", CONFIG_TYPE_INT, "7", .min = 1, .max = 5 } };
    config cfg;
    config_init(&cfg, s, 1);
}

static void dup_key(void)
{
    static const config_key s[] = { { "a", "b", CONFIG_TYPE_INT, "1", .help = "" },
                                    { "a", "b", CONFIG_TYPE_BOOL, "no", .help = "" } };
    config cfg;
    config_init(&cfg, s, 2);
}

static void wrong_type(void)
{
    config cfg;
    config_init(&cfg, schema, nkeys);
    config_int(&cfg, "train.lr");
}

static void missing_key(void)
{
    config cfg;
    config_init(&cfg, schema, nkeys);
    config_float(&cfg, "train.nope");
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "config");

    test_defaults(&t);
    test_load_file(&t);
    test_sizes(&t);
    test_scalars(&t);
    test_strings(&t);
    test_bad_files(&t);
    test_set_precedence(&t);
    test_round_trip(&t);
    test_output(&t);
    check(&t, dies(bad_default), "default out of range dies");
    check(&t, dies(dup_key), "duplicate schema key dies");
    check(&t, dies(wrong_type), "getter of the wrong type dies");
    check(&t, dies(missing_key), "getter of an unknown key dies");

    scratch_free(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
