/* test_config_compat — unit test of config schema versions (libcore/base/config_compat.c,
 * config_migrate.c) on a made-up history that has every kind of entry: a rename within a
 * section, a rename into another section, a removed key and a default that changed.
 * Checks the aliases (value, warning once, FILE:LINE, --set), the refusal of removed
 * keys, the old default kept for old files, the version key, the dump's version line,
 * and migrate-config's output, report, exit codes and in-place rule. Also the one pure
 * piece of the compat.sched_floor_first switch: balanced shares with and without it.
 *
 * Runs without mpirun. Messages go to stderr and are captured where a check reads them. */
#include "base/config.h"
#include "train/train_impl.h"
#include "../check.h"

static const config_key schema[] = {
    { "train", "max_grad_norm", CONFIG_TYPE_FLOAT, "1", .min = 0, .max = 1e9, .help = "renamed from train.clip" },
    { "train", "steps", CONFIG_TYPE_INT, "10", .min = 1, .max = 1000, .help = "unchanged" },
    { "zero", "stage", CONFIG_TYPE_INT, "0", .min = 0, .max = 1, .help = "moved from train.zero" },
    { "data", "shuffle", CONFIG_TYPE_BOOL, "true", .help = "default changed in version 2 (was false)" },
};
static const config_alias history[] = {
    { CONFIG_ALIAS_RENAMED, 2, "train.clip", "train.max_grad_norm", NULL, NULL },
    { CONFIG_ALIAS_RENAMED, 2, "train.zero", "zero.stage", NULL, NULL },
    { CONFIG_ALIAS_REMOVED, 2, "train.fused", NULL, NULL, "always fused now; nothing replaces it" },
    { CONFIG_ALIAS_DEFAULT, 2, NULL, "data.shuffle", "false", "shuffled by default" },
};
static const config_compat compat = { 2, history, 4 };

static config *fresh(void)
{
    static config c;
    config_init(&c, schema, 4);
    config_set_compat(&c, &compat);
    return &c;
}

static const char *write_text(test_ctx *t, const char *name, const char *text, char *path, size_t len)
{
    scratch_path(t, name, path, len);
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
    return path;
}

static char *read_text(const char *path)
{
    static char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_aliases(test_ctx *t)
{
    char path[256];
    write_text(t, "old.ini", "; a comment\n[train]\nclip = 0.5\nsteps = 7\nzero = 1\n", path, sizeof path);
    config *c = fresh();
    capture_begin(t);
    status st = config_load_file(c, path);
    const char *err = capture_end(t, true);
    check(t, st == STATUS_OK && config_float(c, "train.max_grad_norm") == 0.5 && config_int(c, "zero.stage") == 1,
          "old names load through their aliases (train.clip = 0.5, train.zero = 1)");
    char where[512];
    snprintf(where, sizeof where, "%s:3: train.clip is deprecated since config_version 2; it is now train.max_grad_norm", path);
    check(t, strstr(err, where) != NULL, "the warning names FILE:LINE, the old and the new key");
    check(t, !config_bool(c, "data.shuffle") && strstr(config_origin(c, "data.shuffle"), "config_version 1"),
          "a version-1 file keeps the old default of a key whose default changed (data.shuffle = false)");
    capture_begin(t);
    st = config_set(c, "train.clip=0.25");
    err = capture_end(t, true);
    check(t, st == STATUS_OK && config_float(c, "train.max_grad_norm") == 0.25 && !strstr(err, "deprecated"),
          "--set of an old name works, without a second warning for the same key");
    c = fresh();
    capture_begin(t);
    st = config_set(c, "train.clip=0.25");
    err = capture_end(t, true);
    check(t, st == STATUS_OK && strstr(err, "--set train.clip=0.25: train.clip is deprecated"), "--set alone warns naming --set");
    check(t, !strcmp(config_canonical_key(c, "train.zero"), "zero.stage") &&
             !strcmp(config_canonical_key(c, "train.steps"), "train.steps"), "config_canonical_key follows renames only");

    write_text(t, "removed.ini", "[train]\nfused = true\n", path, sizeof path);
    c = fresh();
    capture_begin(t);
    st = config_load_file(c, path);
    err = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(err, ":2: train.fused was removed in config_version 2: always fused now"),
          "a removed key is refused with FILE:LINE and the reason");
    write_text(t, "v2.ini", "[nebula]\nconfig_version = 2\n[train]\nsteps = 3\n", path, sizeof path);
    c = fresh();
    check(t, config_load_file(c, path) == STATUS_OK && config_bool(c, "data.shuffle"),
          "a version-2 file gets today's default");
    write_text(t, "v9.ini", "[nebula]\nconfig_version = 9\n", path, sizeof path);
    capture_begin(t);
    st = config_load_file(fresh(), path);
    err = capture_end(t, true);
    check(t, st == STATUS_INPUT && strstr(err, "expected an integer in [1, 2]"), "a newer version is refused with the range");
    char dump[2048];
    config_dump(fresh(), dump, sizeof dump);
    check(t, !strncmp(dump, "[nebula]\nconfig_version = 2\n\n[train]\n", 36), "the dump starts with the version");
}

static void test_migrate(test_ctx *t)
{
    char in[256], out[256], rep[256];
    write_text(t, "m.ini", "; header\n\n[train]\nclip = 0.5   ; inline\nzero = 1\nsteps = 7\n", in, sizeof in);
    scratch_path(t, "m2.ini", out, sizeof out);
    scratch_path(t, "report.txt", rep, sizeof rep);
    FILE *r = fopen(rep, "w");
    int rc = config_migrate(fresh(), in, out, false, r);
    fclose(r);
    const char *want = "; header\n\n[nebula]\nconfig_version = 2\n\n[train]\nmax_grad_norm = 0.5   ; inline\n"
                       "; train.zero moved to [zero] as stage\nsteps = 7\n\n[zero]\nstage = 1\n\n[data]\nshuffle = false\n";
    const char *got = read_text(out);
    check(t, rc == 0 && !strcmp(got, want), "migrate: renamed in place, moved, defaulted, version written, comments kept");
    if (strcmp(got, want)) fprintf(stderr, "got:\n%s\nwant:\n%s\n", got, want);
    const char *report = read_text(rep);
    check(t, strstr(report, "converted   train.clip") && strstr(report, "-> train.max_grad_norm") &&
             strstr(report, "m.ini:4)") && strstr(report, "defaulted   data.shuffle") &&
             strstr(report, "1 defaulted, 0 impossible"), "the report lists each key converted and defaulted");
    static config a, b;
    a = *fresh();
    b = a;
    config_load_file(&a, in);
    config_load_file(&b, out);
    char da[2048], db[2048];
    config_dump(&a, da, sizeof da), config_dump(&b, db, sizeof db);
    check(t, !strcmp(da, db), "old and migrated files resolve to the same config");

    write_text(t, "imp.ini", "[train]\nfused = yes\nsteps = 2\n", in, sizeof in);
    r = fopen(rep, "w");
    rc = config_migrate(fresh(), in, out, false, r);
    fclose(r);
    check(t, rc == 1 && strstr(read_text(out), "; removed in config_version 2: always fused now") &&
             strstr(read_text(out), "; fused = yes"), "a removed key: exit 1, commented out with its reason");
    check(t, strstr(read_text(rep), "impossible  train.fused"), "the report calls it impossible");
    capture_begin(t);
    rc = config_migrate(fresh(), in, in, false, stdout);
    capture_end(t, true);
    check(t, rc == 2 && !strcmp(read_text(in), "[train]\nfused = yes\nsteps = 2\n"), "OLD is not overwritten without --in-place");
    write_text(t, "bad.ini", "[train]\nstepz = 2\n", in, sizeof in);
    unlink(out);
    capture_begin(t);
    rc = config_migrate(fresh(), in, out, false, stdout);
    capture_end(t, true);
    check(t, rc == 2 && access(out, F_OK) != 0, "an unknown key: exit 2, nothing written");
}

/* compat.sched_floor_first: 2 ranks at 3 and 1 busy samples/s, global batch 40, floor 10. */
static void test_sched_floor_first(test_ctx *t)
{
    const double speed[2] = { 3, 1 };
    double scratch[6], w[2], frac[2];
    bool in[2];
    int64_t now[2], old[2];
    train_sched_balanced_weights(speed, 2, 40, 10, false, scratch, in, w);
    train_sched_apportion(w, 2, 40, 10, now, frac);
    train_sched_balanced_weights(speed, 2, 40, 10, true, scratch, in, w);
    train_sched_apportion(w, 2, 40, 10, old, frac);
    check(t, now[0] == 30 && now[1] == 10, "balanced today: 30/10, in proportion to speed (got %lld/%lld)",
          (long long)now[0], (long long)now[1]);
    check(t, old[0] == 25 && old[1] == 15, "compat.sched_floor_first: 10 each, then 20 by speed = 25/15 (got %lld/%lld)",
          (long long)old[0], (long long)old[1]);
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "config-compat");
    test_aliases(&t);
    test_migrate(&t);
    test_sched_floor_first(&t);
    scratch_free(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
