/* unit_check — shared helpers of the single-process unit tests: one line per check,
 * capture of the error messages libcore logs to stderr (so a test can assert their
 * text), a scratch directory and whole-file writes and reads.
 *
 * Header-only (static functions): each test_*.c is its own program; a helper a
 * program does not use is not an error (unused static functions are discarded). */
#ifndef NEBULA_UNIT_CHECK_H
#define NEBULA_UNIT_CHECK_H

#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct test_ctx {
    int failures;          /* FAIL lines so far */
    char dir[64];          /* scratch directory */
    char captured[8192];   /* stderr of the last capture_end */
    int saved_fd;          /* the real stderr while capturing */
    FILE *cap;             /* capture file */
} test_ctx;

__attribute__((format(printf, 3, 4), unused))
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

/* stderr goes to a temporary file until capture_end, which returns its text and
 * (echo) copies it to the real stderr for the test log; loops over thousands of
 * files do not. */
__attribute__((unused)) static void capture_begin(test_ctx *t)
{
    fflush(stderr);
    t->cap = tmpfile();
    if (!t->cap) { perror("tmpfile"); exit(1); }
    t->saved_fd = dup(2);
    dup2(fileno(t->cap), 2);
}

__attribute__((unused)) static const char *capture_end(test_ctx *t, bool echo)
{
    fflush(stderr);
    dup2(t->saved_fd, 2);
    close(t->saved_fd);
    rewind(t->cap);
    size_t n = fread(t->captured, 1, sizeof t->captured - 1, t->cap);
    t->captured[n] = '\0';
    fclose(t->cap);
    if (echo) fputs(t->captured, stderr);  /* the test log keeps the messages */
    return t->captured;
}

/* /tmp/nebula-NAME-XXXXXX, removed with everything in it by scratch_free. */
__attribute__((unused)) static void scratch_dir(test_ctx *t, const char *name)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/nebula-%s-XXXXXX", name);
    if (!mkdtemp(t->dir)) { perror("mkdtemp"); exit(1); }
}

__attribute__((unused)) static int scratch_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

__attribute__((unused)) static void scratch_free(test_ctx *t)
{
    if (nftw(t->dir, scratch_rm, 8, FTW_DEPTH | FTW_PHYS) != 0) fprintf(stderr, "could not remove %s\n", t->dir);
}

__attribute__((unused)) static const char *scratch_path(const test_ctx *t, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", t->dir, name);
    return buf;
}

/* A new file each time: truncating and rewriting one makes ext4 flush it to disk
 * on close (auto_da_alloc), which costs milliseconds per hostile file. */
__attribute__((unused)) static void write_bytes(const char *path, const void *p, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

/* The whole file, malloc'ed (one byte more, for callers that append); exits on error. */
__attribute__((unused)) static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *p = malloc(*n + 1);
    if (!p || fread(p, 1, *n, f) != *n) { perror(path); exit(1); }
    fclose(f);
    return p;
}

#endif
