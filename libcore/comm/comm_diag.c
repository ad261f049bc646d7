/* comm_diag — naming the ranks that did not arrive at a collective.
 *
 * MPI gives no way to ask which ranks entered a collective. Every rank that waits
 * in comm_test answers probes on a private duplicate of the world communicator
 * with the sequence number it waits on and the last one it started. A rank whose
 * deadline passes probes all others and waits a short grace period: ranks that
 * started this op (seq >= ours) arrived; ranks that answer with an older seq are
 * behind; ranks that do not answer are outside communication (computing, hung or
 * dead). */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

enum { DIAG_TAG_PROBE = 1, DIAG_TAG_REPLY = 2 };

void comm_diag_service(comm *c, uint64_t waiting_seq, bool force)
{
    double now = MPI_Wtime();
    if (!force && now - c->diag_last < 1e-3) return;
    c->diag_last = now;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, DIAG_TAG_PROBE, c->diag, &flag, &st));
        if (!flag) return;
        uint64_t probe, reply[3] = { 0, waiting_seq, c->seq };
        MPI_CHECK(MPI_Recv(&probe, 1, MPI_UINT64_T, st.MPI_SOURCE, DIAG_TAG_PROBE, c->diag, MPI_STATUS_IGNORE));
        reply[0] = probe;  /* echoed, so a late reply to an older probe is not miscounted */
        /* 24 bytes go eagerly: the send completes without the prober's progress. */
        MPI_CHECK(MPI_Send(reply, 3, MPI_UINT64_T, st.MPI_SOURCE, DIAG_TAG_REPLY, c->diag));
    }
}

/* Appends "a-b" ranges of the ranks with mark[r] set to out. */
static void rank_list(char *out, size_t len, const char *mark, int n)
{
    size_t used = strlen(out);
    int first = 1;
    for (int r = 0; r < n && used + 16 < len; r++) {
        if (!mark[r]) continue;
        int e = r;
        while (e + 1 < n && mark[e + 1]) e++;
        used += (size_t)snprintf(out + used, len - used, e > r ? "%s%d-%d" : "%s%d", first ? "" : ",", r, e);
        first = 0;
        r = e;
    }
}

status comm_diag_timeout(comm *c, const comm_op *o)
{
    int n = c->rt->size, me = c->rt->rank;
    uint64_t (*reply)[3] = calloc((size_t)n, sizeof *reply);
    char *got = calloc((size_t)n, 1), *late = calloc((size_t)n, 1), *waiting = calloc((size_t)n, 1);
    MPI_Request *req = calloc((size_t)n, sizeof *req);
    CHECK(reply && got && late && waiting && req, "out of memory while diagnosing a timeout");
    c->diag_probe = o->seq;  /* lives in comm: an unfinished send may read it after we return */
    for (int r = 0; r < n; r++) {
        req[r] = MPI_REQUEST_NULL;
        if (r != me) MPI_CHECK(MPI_Isend(&c->diag_probe, 1, MPI_UINT64_T, r, DIAG_TAG_PROBE, c->diag, &req[r]));
    }
    double grace = c->opt.timeout_s / 2;
    grace = grace < 0.2 ? 0.2 : grace > 2.0 ? 2.0 : grace;
    double end = MPI_Wtime() + grace;
    int nreply = 0;
    while (nreply < n - 1 && MPI_Wtime() < end) {
        comm_diag_service(c, o->seq, true);
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, DIAG_TAG_REPLY, c->diag, &flag, &st));
        if (!flag) continue;
        uint64_t r3[3];
        MPI_CHECK(MPI_Recv(r3, 3, MPI_UINT64_T, st.MPI_SOURCE, DIAG_TAG_REPLY, c->diag, MPI_STATUS_IGNORE));
        if (r3[0] != o->seq) continue;  /* answer to an older probe */
        memcpy(reply[st.MPI_SOURCE], r3, sizeof r3);
        if (!got[st.MPI_SOURCE]) nreply++;
        got[st.MPI_SOURCE] = 1;
    }
    char detail[1024] = "";
    size_t dl = 0;
    waiting[me] = 1;
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        if (got[r] && reply[r][2] >= o->seq) { waiting[r] = 1; continue; }
        late[r] = 1;
        if (dl + 96 < sizeof detail)
            dl += (size_t)(got[r] ? snprintf(detail + dl, sizeof detail - dl, "; rank %d waits at collective #%llu",
                                             r, (unsigned long long)reply[r][1])
                                  : snprintf(detail + dl, sizeof detail - dl,
                                             "; rank %d did not answer (computing, hung or dead)", r));
    }
    char late_list[512] = "", wait_list[512] = "";
    rank_list(late_list, sizeof late_list, late, n);
    rank_list(wait_list, sizeof wait_list, waiting, n);
    snprintf(c->diag_late, sizeof c->diag_late, "%s", late_list);  /* for callers that report or test it */
    size_t bytes = o->count * reduce_dtype_size(o->dtype);
    if (late_list[0])
        log_error("allreduce #%llu (%s, %zu bytes) timed out after %.1f s: rank%s %s did not arrive%s; waiting: %s",
                  (unsigned long long)o->seq, comm_algo_name(o->algo), bytes, MPI_Wtime() - o->t_start,
                  strchr(late_list, ',') || strchr(late_list, '-') ? "s" : "", late_list, detail, wait_list);
    else
        log_error("allreduce #%llu (%s, %zu bytes) timed out after %.1f s although every rank arrived "
                  "(%s): the transport is not delivering", (unsigned long long)o->seq, comm_algo_name(o->algo),
                  bytes, MPI_Wtime() - o->t_start, wait_list);
    log_error("HINT: raise comm.timeout if the slow rank is legitimately busy; otherwise check the "
              "named ranks' logs and nodes");
    for (int r = 0; r < n; r++) {
        int flag = 0;
        if (req[r] == MPI_REQUEST_NULL) continue;
        MPI_Test(&req[r], &flag, MPI_STATUS_IGNORE);
        if (!flag) { MPI_Cancel(&req[r]); MPI_Request_free(&req[r]); }
    }
    free(reply); free(got); free(late); free(waiting); free(req);
    return STATUS_TIMEOUT;
}
