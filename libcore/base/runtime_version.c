/* runtime_version — the start-up check that every rank of a job runs software that speaks
 * a common wire protocol (docs/design.md#versions): one MPI_Allgather of
 * each rank's build string, host and protocol range, before any communicator of the
 * training exists.
 *
 * The one design decision: compatibility is decided by the protocol range alone, never by
 * the build string. A rank speaks every protocol from NEBULA_PROTOCOL_OLDEST to
 * NEBULA_PROTOCOL_VERSION; a job runs when one version lies in every rank's range (the
 * highest such), so compute nodes can be upgraded one at a time while the protocol stays
 * the same, and a rank that cannot talk to the others is refused on every rank with the
 * same message, before a mismatched collective could hang or corrupt the run. */
#include "runtime.h"

#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What each rank tells the others (plain bytes: every build agrees on this layout, which
 * is therefore part of protocol 1 and may never change). */
typedef struct version_row {
    char build[64];     /* cli_version(), or NEBULA_TEST_BUILD */
    char host[64];      /* short host name */
    int32_t oldest;     /* oldest protocol version it speaks */
    int32_t newest;     /* newest: NEBULA_PROTOCOL_VERSION, or NEBULA_TEST_PROTOCOL */
} version_row;
_Static_assert(sizeof(version_row) == 136, "the start-up exchange is frozen: every build sends these 136 bytes");

/* NEBULA_TEST_PROTOCOL: "N" (speaks N only) or "LO-HI"; false when malformed. */
static bool test_protocol(const char *v, int32_t *lo, int32_t *hi)
{
    char *end;
    long a = strtol(v, &end, 10), b = a;
    if (end == v) return false;
    if (*end == '-') {
        const char *s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s) return false;
    }
    if (*end || a < 0 || b < a || b > 1 << 20) return false;
    *lo = (int32_t)a, *hi = (int32_t)b;
    return true;
}

static bool same_kind(const version_row *a, const version_row *b)
{
    return !strcmp(a->build, b->build) && a->oldest == b->oldest && a->newest == b->newest;
}

/* The ranks of first's kind (build and range) for a message:
 * "build X (protocol 1..1) on ranks 0-1,3 (hosts a, b)". */
static void describe_group(const version_row *rows, int n, int first, char *out, size_t cap)
{
    const version_row *me = &rows[first];
    int count = 0;
    for (int r = first; r < n; r++) count += same_kind(&rows[r], me);
    size_t used = (size_t)snprintf(out, cap, "build %s (protocol %d..%d) on rank%s ", me->build, me->oldest,
                                   me->newest, count > 1 ? "s" : "");
    for (int r = first, listed = 0; r < n && used < cap; r++) {
        if (!same_kind(&rows[r], me)) continue;
        int end = r;  /* a run of consecutive ranks of this kind */
        while (end + 1 < n && same_kind(&rows[end + 1], me)) end++;
        used += (size_t)snprintf(out + used, cap - used, end > r ? "%s%d-%d" : "%s%d", listed++ ? "," : "", r, end);
        r = end;
    }
    for (int r = first, hosts = 0; r < n && used < cap; r++) {
        bool seen = !same_kind(&rows[r], me);
        for (int q = first; q < r && !seen; q++) seen = same_kind(&rows[q], me) && !strcmp(rows[q].host, rows[r].host);
        if (seen) continue;
        if (hosts == 4) {
            used += (size_t)snprintf(out + used, cap - used, ", ...");
            break;
        }
        used += (size_t)snprintf(out + used, cap - used, "%s%s", hosts++ ? ", " : " (host ", rows[r].host);
    }
    if (used + 1 < cap) strcat(out, ")");
}

/* Every distinct kind of rank, "; "-separated, into out. */
static void describe_all(const version_row *rows, int n, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int r = 0; r < n && used + 1 < cap; r++) {
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = same_kind(&rows[q], &rows[r]);
        if (seen) continue;
        if (used) used += (size_t)snprintf(out + used, cap - used, "; ");
        if (used < cap) describe_group(rows, n, r, out + used, cap - used);
        used = strlen(out);
    }
}

status runtime_check_versions(runtime *rt)
{
    version_row me;
    memset(&me, 0, sizeof me);
    const char *build = getenv("NEBULA_TEST_BUILD"), *proto = getenv("NEBULA_TEST_PROTOCOL");
    snprintf(me.build, sizeof me.build, "%s", build && *build ? build : cli_version());
    snprintf(me.host, sizeof me.host, "%s", rt->host);
    me.oldest = NEBULA_PROTOCOL_OLDEST, me.newest = NEBULA_PROTOCOL_VERSION;
    bool bad_env = proto && *proto && !test_protocol(proto, &me.oldest, &me.newest);
    version_row *rows = calloc((size_t)rt->size, sizeof *rows);
    CHECK(rows, "out of memory for the version exchange");
    watchdog_enter(rt->wd, "start-up: exchanging build and protocol versions", rt->timeout_s);
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, rows, (int)sizeof me, MPI_BYTE, rt->world));
    int any_bad_env = bad_env;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any_bad_env, 1, MPI_INT, MPI_MAX, rt->world));
    watchdog_leave(rt->wd);
    if (bad_env) log_error("NEBULA_TEST_PROTOCOL='%s' is not N or LO-HI (protocol versions, a test hook)", proto);
    if (any_bad_env) {
        free(rows);
        return STATUS_INPUT;
    }
    int32_t lo = 0, hi = INT32_MAX;
    bool mixed = false;
    for (int r = 0; r < rt->size; r++) {
        lo = rows[r].oldest > lo ? rows[r].oldest : lo;
        hi = rows[r].newest < hi ? rows[r].newest : hi;
        mixed = mixed || !same_kind(&rows[r], &rows[0]);
    }
    char text[2048];
    if (mixed) describe_all(rows, rt->size, text, sizeof text);
    free(rows);
    if (lo > hi) {
        log_error0("incompatible versions: no wire protocol version is spoken by every rank: %s; every rank refuses "
                   "to start\nHINT: install one Nebula on every node, or builds whose protocol ranges overlap "
                   "(docs/design.md#versions)", text);
        return STATUS_USAGE;
    }
    rt->protocol = hi;
    if (mixed) log_msg0(LOG_LEVEL_INFO, "mixed versions, compatible: %s; running protocol %d", text, hi);
    return STATUS_OK;
}
