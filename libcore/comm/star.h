/* star — a server's exchanges with its clients: federated learning's rounds (fed/), where
 * rank 0 of a communicator is the server and every other rank hosts clients. Messages
 * are point to point and of bytes; every wait has a deadline; and, unlike the
 * collectives of ctl.h and comm_group, a member that does not answer in time is
 * recorded as lost and the exchange completes with the others. A round goes on without
 * a client that crashed or fell behind, as Flower's and TensorFlow Federated's servers
 * go on without a client that did not report.
 *
 * The one design decision: a lost member stays lost. Its posted requests are abandoned
 * (MPI may still complete them; their buffers are the caller's until star_free), later
 * exchanges leave it out, and nothing ever waits on it again, so one dead process costs
 * the run one deadline, not one per round. The communicator is a duplicate with
 * MPI_ERRORS_RETURN, so a peer whose process died (under mpirun --enable-recovery)
 * makes its requests fail instead of aborting the job.
 *
 * Tags: each exchange names a tag (the caller's round and phase), so a late message of
 * an earlier phase can never be taken for the current one. */
#ifndef NEBULA_COMM_STAR_H
#define NEBULA_COMM_STAR_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/watchdog.h"

typedef struct comm_star {
    MPI_Comm comm;             /* duplicate of the members' communicator, errors returned */
    int rank, size;            /* mine and the members' count; rank 0 is the server */
    double timeout_s;          /* deadline of one exchange in seconds (> 0) */
    const char *name;          /* for messages ("fed"); a literal */
    watchdog *wd;              /* the runtime's watchdog or NULL: a wait shows in this rank's beacon */
    bool *lost;                /* [size] server: members lost so far (never [0]) */
    MPI_Request *req;          /* [size] scratch of one exchange, allocated at init */
    MPI_Status *st;            /* [size] */
    bool *live, *done;         /* [size] a request started; it completed */
    int nlost;                 /* how many */
    uint64_t bytes_sent;       /* what this rank put on the wire so far */
    uint64_t bytes_received;
} comm_star;

/* Collective over `members` (duplicates it). STATUS_NOMEM, or STATUS_PEER when the
 * duplicate fails. */
status comm_star_init(comm_star *s, MPI_Comm members, double timeout_s, const char *name, watchdog *wd);
/* Not collective: frees the duplicate without waiting on the lost (MPI_Comm_free). */
void comm_star_free(comm_star *s);
/* Server: whether member r is lost. */
bool comm_star_lost(const comm_star *s, int r);

/* Server: sends bytes[r] from bufs[r] to every member r >= 1 that is not lost (bufs[r]
 * NULL: nothing for r), and waits until every send completed or the deadline passed;
 * a member whose send failed or did not complete is marked lost and logged (its name,
 * the tag). Returns STATUS_OK whatever was lost; the caller reads comm_star_lost. */
status comm_star_scatter(comm_star *s, const void *const *bufs, const size_t *bytes, int tag);
/* Server: receives from every member r >= 1 that is not lost and that `expect[r]` marks
 * (NULL: every one) at most cap[r] bytes into bufs[r], which holds cap[r] + 1 bytes (the one
 * more tells a longer message); got[r] = the bytes received, or -1
 * when nothing came by the deadline (the member is then lost) or the member is lost.
 * A message longer than cap[r] is received as -2 (truncated: refused, the member is not
 * lost). Returns STATUS_OK whatever was lost. */
status comm_star_gather(comm_star *s, void *const *bufs, const size_t *cap, const bool *expect, int64_t *got, int tag);

/* Member: sends bytes to the server with the deadline. STATUS_TIMEOUT or STATUS_PEER
 * (the server is gone: the member's run ends). */
status comm_star_send(comm_star *s, const void *buf, size_t bytes, int tag);
/* Member: receives at most cap bytes from the server into buf (cap + 1 bytes long; *got: how many) with
 * the deadline `timeout_s` (0: the star's). STATUS_TIMEOUT naming the server, STATUS_PEER
 * when the request fails, STATUS_CORRUPT for a message longer than cap. */
status comm_star_recv(comm_star *s, void *buf, size_t cap, size_t *got, int tag, double timeout_s);

#endif
