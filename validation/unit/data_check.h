/* data_check — shared helpers of the data tests: one line per check, capture of
 * the error messages libcore logs to stderr (so a test can assert their text),
 * scratch files.
 *
 * Header-only (static functions): each test_*.c is its own program. */
#ifndef NEBULA_DATA_CHECK_H
#define NEBULA_DATA_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

typedef struct test_ctx {
    int failures;        /* FAIL lines so far */
    char dir[64];        /* scratch directory */
    char captured[8192]; /* stderr of the last capture_end */
    int saved_fd;        /* the real stderr while capturing */
    FILE *cap;           /* capture file */
} test_ctx;

__attribute__((format(printf, 3, 4)))
static bool check(test_ctx *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok) t->failures++;
    return ok;
}

/* stderr goes to a temporary file until capture_end, which keeps its text in
 * t->captured and echoes it to the real stderr (the test log keeps it). */
static void capture_begin(test_ctx *t)
{
    fflush(stderr);
    t->cap = tmpfile();
    if (!t->cap) { perror("tmpfile"); exit(1); }
    t->saved_fd = dup(2);
    dup2(fileno(t->cap), 2);
}

static const char *capture_end(test_ctx *t)
{
    fflush(stderr);
    dup2(t->saved_fd, 2);
    close(t->saved_fd);
    rewind(t->cap);
    size_t n = fread(t->captured, 1, sizeof t->captured - 1, t->cap);
    t->captured[n] = '\0';
    fclose(t->cap);
    fputs(t->captured, stderr);
    return t->captured;
}

static void scratch_dir(test_ctx *t, const char *name)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/nebula-%s-XXXXXX", name);
    if (!mkdtemp(t->dir)) { perror("mkdtemp"); exit(1); }
}

static void scratch_free(test_ctx *t)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", t->dir);
}

static const char *scratch_path(const test_ctx *t, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", t->dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

/* data_open must fail with `want` and a message containing the path and every
 * text in the NULL-terminated list. */
static void expect_open_error(test_ctx *t, const data_config *cfg, status want, const char *name, ...)
{
    data_loader *d = NULL;
    capture_begin(t);
    status st = data_open(&d, cfg);
    const char *msg = capture_end(t);
    bool ok = st == want && d == NULL && strstr(msg, cfg->path) != NULL;
    va_list ap;
    va_start(ap, name);
    const char *missing = NULL;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!missing && !strstr(msg, s)) missing = s;
    va_end(ap);
    check(t, ok && !missing, "%s: %s%s%s", name, status_str(st), missing ? "; message lacks: " : "",
          missing ? missing : "");
    data_free(d);
}

#endif
