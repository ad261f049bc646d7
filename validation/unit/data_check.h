/* data_check — helpers of the data tests, on top of unit_check.h (checks, captured
 * error messages, scratch files): an expected data_open failure.
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

#include "data/data.h"
#include "unit_check.h"

/* data_open must fail with `want` and a message containing the path and every
 * text in the NULL-terminated list. */
static void expect_open_error(test_ctx *t, const data_config *cfg, status want, const char *name, ...)
{
    data_loader *d = NULL;
    capture_begin(t);
    status st = data_open(&d, cfg);
    const char *msg = capture_end(t, true);
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
