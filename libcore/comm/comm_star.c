/* comm_star — see star.h. Each exchange posts one request per member, then polls them
 * all until they complete or the deadline passes (the same poll as ctl.c's: tight at
 * first, 50 us sleeps once the wait is long). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "star.h"

status comm_star_init(comm_star *s, MPI_Comm members, double timeout_s, const char *name, watchdog *wd)
{
    memset(s, 0, sizeof *s);
    s->timeout_s = timeout_s;
    s->name = name;
    s->wd = wd;
    if (MPI_Comm_dup(members, &s->comm) != MPI_SUCCESS) {
        log_error("%s: duplicating the communicator failed", name);
        return STATUS_PEER;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    size_t n = (size_t)s->size;
    s->lost = calloc(n, sizeof *s->lost);
    s->req = malloc(n * sizeof *s->req), s->st = malloc(n * sizeof *s->st);
    s->live = malloc(n * sizeof *s->live), s->done = malloc(n * sizeof *s->done);
    if (!s->lost || !s->req || !s->st || !s->live || !s->done) return STATUS_NOMEM;
    return STATUS_OK;
}

void comm_star_free(comm_star *s)
{
    if (s->comm != MPI_COMM_NULL && s->comm != 0) MPI_Comm_free(&s->comm);
    free(s->lost), free(s->req), free(s->st), free(s->live), free(s->done);
    s->lost = NULL, s->req = NULL, s->st = NULL, s->live = NULL, s->done = NULL;
}

bool comm_star_lost(const comm_star *s, int r)
{
    return r > 0 && r < s->size && s->lost[r];
}

static void star_sleep(long polls, double waited)
{
    if (polls > 1000 && waited > 0.01) {
        struct timespec ts = { 0, 50000 };  /* 50 us */
        nanosleep(&ts, NULL);
    }
}

static void star_lose(comm_star *s, int r, const char *what, int tag, const char *why)
{
    if (s->lost[r]) return;
    s->lost[r] = true;
    s->nlost++;
    log_warn("%s: member rank %d lost (%s, tag %d): %s; the exchanges go on without it", s->name, r, what, tag, why);
}

/* Polls req[r] for every r with live[r] until all completed or the deadline; a request
 * that fails or is still pending at the deadline loses its member (done[r] stays false). */
static void star_poll(comm_star *s, MPI_Request *req, bool *live, bool *done, MPI_Status *st, const char *what,
                      int tag)
{
    double t0 = MPI_Wtime(), end = t0 + s->timeout_s, prev = t0;
    char op[96];
    snprintf(op, sizeof op, "%s on %s", what, s->name);
    if (s->wd) watchdog_enter(s->wd, op, s->timeout_s + 2);
    for (long polls = 0;; polls++) {
        int pending = 0;
        for (int r = 1; r < s->size; r++) {
            if (!live[r] || done[r]) continue;
            int flag = 0;
            int rc = MPI_Test(&req[r], &flag, &st[r]);
            if (rc != MPI_SUCCESS) {
                char msg[MPI_MAX_ERROR_STRING];
                int len = 0;
                MPI_Error_string(rc, msg, &len);
                live[r] = false;
                star_lose(s, r, what, tag, msg);
            } else if (flag) {
                done[r] = true;
            } else {
                pending++;
            }
        }
        if (!pending) break;
        double now = MPI_Wtime();
        if (now - prev > 1) end += now - prev;  /* this process was stopped: not a wait for the others */
        prev = now;
        if (now > end) {
            for (int r = 1; r < s->size; r++)
                if (live[r] && !done[r]) {
                    char why[64];
                    snprintf(why, sizeof why, "nothing within %.1f s", s->timeout_s);
                    star_lose(s, r, what, tag, why);  /* the request is abandoned, never waited on */
                }
            break;
        }
        star_sleep(polls, now - t0);
    }
    if (s->wd) watchdog_leave(s->wd);
}

/* The exchange's scratch as calloc would give it: no request started, none done. */
static void star_scratch_clear(comm_star *s)
{
    size_t n = (size_t)s->size;
    for (size_t r = 0; r < n; r++) s->req[r] = MPI_REQUEST_NULL;
    memset(s->st, 0, n * sizeof *s->st);
    memset(s->live, 0, n * sizeof *s->live), memset(s->done, 0, n * sizeof *s->done);
}

status comm_star_scatter(comm_star *s, const void *const *bufs, const size_t *bytes, int tag)
{
    CHECK(s->rank == 0, "comm_star_scatter is the server's");
    MPI_Request *req = s->req;
    bool *live = s->live;
    star_scratch_clear(s);
    for (int r = 1; r < s->size; r++) {
        if (s->lost[r] || !bufs[r]) continue;
        CHECK(bytes[r] <= INT_MAX, "a star message fits an int count (MPI)");
        int rc = MPI_Isend(bufs[r], (int)bytes[r], MPI_BYTE, r, tag, s->comm, &req[r]);
        if (rc != MPI_SUCCESS) star_lose(s, r, "send", tag, "the send failed to start");
        else live[r] = true, s->bytes_sent += bytes[r];
    }
    star_poll(s, req, live, s->done, s->st, "send", tag);
    return STATUS_OK;
}

status comm_star_gather(comm_star *s, void *const *bufs, const size_t *cap, const bool *expect, int64_t *got, int tag)
{
    CHECK(s->rank == 0, "comm_star_gather is the server's");
    MPI_Request *req = s->req;
    MPI_Status *st = s->st;
    bool *live = s->live, *done = s->done;
    star_scratch_clear(s);
    got[0] = -1;
    for (int r = 1; r < s->size; r++) {
        got[r] = -1;
        if (s->lost[r] || (expect && !expect[r])) continue;
        CHECK(cap[r] < INT_MAX, "a star message fits an int count (MPI)");
        /* one byte more than the cap: a longer message is seen as one, not as an MPI error */
        int rc = MPI_Irecv(bufs[r], (int)cap[r] + 1, MPI_BYTE, r, tag, s->comm, &req[r]);
        if (rc != MPI_SUCCESS) star_lose(s, r, "receive", tag, "the receive failed to start");
        else live[r] = true;
    }
    star_poll(s, req, live, done, st, "receive", tag);
    for (int r = 1; r < s->size; r++) {
        if (!done[r]) continue;
        int n = 0;
        MPI_Get_count(&st[r], MPI_BYTE, &n);
        s->bytes_received += (uint64_t)n;
        got[r] = (size_t)n > cap[r] ? -2 : n;
    }
    return STATUS_OK;
}

/* A member's one request, waited on with a deadline. */
static status star_wait_one(comm_star *s, MPI_Request *req, MPI_Status *st, const char *what, int tag,
                            double timeout_s, int started)
{
    if (started != MPI_SUCCESS) {
        log_error("%s: %s (tag %d) failed to start", s->name, what, tag);
        return STATUS_PEER;
    }
    double t0 = MPI_Wtime(), end = t0 + timeout_s, prev = t0;
    char op[96];
    snprintf(op, sizeof op, "%s on %s", what, s->name);
    if (s->wd) watchdog_enter(s->wd, op, timeout_s + 2);
    status out = STATUS_OK;
    for (long polls = 0;; polls++) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, st);
        if (rc != MPI_SUCCESS) {
            log_error("%s: %s (tag %d) with the server failed: the server is gone", s->name, what, tag);
            out = STATUS_PEER;
            break;
        }
        if (flag) break;
        double now = MPI_Wtime();
        if (now - prev > 1) end += now - prev;
        prev = now;
        if (now > end) {
            log_error("%s: %s (tag %d): the server (rank 0) did not answer within %.1f s", s->name, what, tag,
                      timeout_s);
            out = STATUS_TIMEOUT;
            break;
        }
        star_sleep(polls, now - t0);
    }
    if (s->wd) watchdog_leave(s->wd);
    return out;
}

status comm_star_send(comm_star *s, const void *buf, size_t bytes, int tag)
{
    CHECK(s->rank != 0, "comm_star_send is a member's");
    CHECK(bytes <= INT_MAX, "a star message fits an int count (MPI)");
    MPI_Request req;
    MPI_Status st;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, 0, tag, s->comm, &req);
    TRY(star_wait_one(s, &req, &st, "send", tag, s->timeout_s, rc));
    s->bytes_sent += bytes;
    return STATUS_OK;
}

status comm_star_recv(comm_star *s, void *buf, size_t cap, size_t *got, int tag, double timeout_s)
{
    CHECK(s->rank != 0, "comm_star_recv is a member's");
    CHECK(cap < INT_MAX, "a star message fits an int count (MPI)");
    MPI_Request req;
    MPI_Status st;
    int rc = MPI_Irecv(buf, (int)cap + 1, MPI_BYTE, 0, tag, s->comm, &req);
    TRY(star_wait_one(s, &req, &st, "receive", tag, timeout_s > 0 ? timeout_s : s->timeout_s, rc));
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    s->bytes_received += (uint64_t)n;
    if ((size_t)n > cap) {
        log_error("%s: a message from the server (tag %d) is longer than the %zu bytes expected", s->name, tag, cap);
        return STATUS_CORRUPT;
    }
    *got = (size_t)n;
    return STATUS_OK;
}
