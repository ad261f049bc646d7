/* ckpt — see ckpt.h. The writer (synchronous and asynchronous saves, the background
 * thread); the load policy is ckpt_load.c. The HDF5 file is ckpt_file.c and ckpt_read.c,
 * directories and the commit protocol ckpt_dir.c.
 *
 * The one design decision: the background thread of an asynchronous save makes only
 * POSIX calls (pwrite, fsync, rename). MPI is initialised MPI_THREAD_FUNNELED and
 * Debian's parallel HDF5 is built without thread safety, so everything that needs
 * either happens on the calling thread: in ckpt_save the blobs are gathered to rank 0
 * (MPI_Gather: a few bytes per rank) and rank 0 creates the file with all its metadata
 * with the serial driver; contiguous datasets allocated at creation have fixed file
 * offsets, so the thread only has to copy the tensors into staging memory, hash them,
 * put them there and fsync; ckpt_poll writes the checksums and commits.
 * Raising the thread level to MPI_THREAD_MULTIPLE would let each rank's thread write its
 * own slices through MPI-IO, but HDF5 would still have to stay on one thread, and under
 * THREAD_MULTIPLE OpenMPI takes locks in every other communication; worth it only when the
 * per-rank state (DGC residuals) grows too large to gather. */
#include "ckpt_impl.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* ckpt_agree, with the first failing rank's errno (*err, when err is not NULL) and its
 * rank (*who) on every rank. `stopped`: this rank's failure is only that it stopped on
 * another's (peer_stop); a rank that failed itself is named before any such one. */
static status agree_from(comm_ctl ctl, status st, bool stopped, char *why, size_t len, int *err, int *who)
{
    int rank, size, first;
    MPI_Comm_rank(ctl.comm, &rank);
    MPI_Comm_size(ctl.comm, &size);
    int mine = st == STATUS_OK ? 2 * size : stopped ? size + rank : rank;
    TRY(comm_ctl_allreduce(ctl, &mine, &first, 1, MPI_INT, MPI_MIN));
    if (first == 2 * size) {
        if (who) *who = size;
        return STATUS_OK;
    }
    first %= size;
    if (who) *who = first;
    int code[2] = { (int)st, err ? *err : 0 };
    TRY(comm_ctl_bcast(ctl, code, 2, MPI_INT, first));
    if (why) TRY(comm_ctl_bcast(ctl, why, (int)len, MPI_CHAR, first));
    if (err) *err = code[1];
    return (status)code[0];
}

status ckpt_agree(comm_ctl ctl, status st, char *why, size_t len)
{
    return agree_from(ctl, st, false, why, len, NULL, NULL);
}

/* The early stop of a synchronous save's writes. A rank whose write (or fsync) fails tells
 * every other rank at once: a one-int MPI_Isend of its rank, tag PEER_STOP_TAG, on the
 * save's communicator, before it closes the file (a close may block on a failing device).
 * Every rank posted one MPI_Irecv from any rank with that tag before writing, and tests it
 * (MPI_Test: local, no file system call) before each dataset, every 64 MiB inside one and
 * before its fsync (ckpt_file_write_slices): a healthy rank stops there, within one piece,
 * instead of writing its whole share before the agreement. A stopped rank has no failure
 * of its own: the agreement that follows, which every rank reaches as before, names the
 * rank that failed, its file and its errno (agree_from's `stopped`). Afterwards no message
 * stays pending: a save agreed OK had no sender and cancels its receive; a failed one
 * reduces the number of senders (with the ENOSPC flag, write_step) and each rank receives
 * the messages still due to it (peer_stop_drain).
 * Why not a marker file in the .tmp directory, polled by every rank: on a parallel file
 * system each poll is a metadata lookup on the server, NFS's attribute cache can hide the
 * file for tens of seconds, and a failing device may refuse to create it. Why not one
 * non-blocking collective posted by every rank before writing: a rank contributes when
 * it posts, and a failing rank cannot change its contribution later. MPI is called from
 * the calling thread only (MPI_THREAD_FUNNELED); an asynchronous save writes on rank 0's
 * thread alone, so it needs none of this. */
#define PEER_STOP_TAG 7411

typedef struct peer_stop {
    MPI_Comm comm;
    MPI_Request recv, *sends;  /* sends: a failed rank's, one per other rank */
    int msg, mine, got, told, size;
} peer_stop;

static void peer_stop_open(peer_stop *ps, MPI_Comm comm)
{
    *ps = (peer_stop){ .comm = comm, .recv = MPI_REQUEST_NULL };
    MPI_Comm_rank(comm, &ps->mine);
    MPI_Comm_size(comm, &ps->size);
    MPI_Irecv(&ps->msg, 1, MPI_INT, MPI_ANY_SOURCE, PEER_STOP_TAG, comm, &ps->recv);
}

static bool peer_stop_failed(void *arg)
{
    peer_stop *ps = arg;
    if (!ps->got) MPI_Test(&ps->recv, &ps->got, MPI_STATUS_IGNORE);
    return ps->got;
}

static void peer_stop_tell(void *arg)
{
    peer_stop *ps = arg;
    if (ps->told || !(ps->sends = malloc((size_t)ps->size * sizeof *ps->sends))) return;  /* no memory: no early stop */
    ps->told = 1;
    for (int r = 0; r < ps->size; r++) {
        ps->sends[r] = MPI_REQUEST_NULL;
        if (r != ps->mine) MPI_Isend(&ps->mine, 1, MPI_INT, r, PEER_STOP_TAG, ps->comm, &ps->sends[r]);
    }
}

/* Once the ranks agreed: `told` of them sent (0 for a save agreed OK); receives what is
 * still due to this rank, cancels the receive when nothing is, and completes the sends,
 * which the others receive the same way. told < 0 (a rank missed the agreement): nothing
 * is waited for. */
static void peer_stop_drain(peer_stop *ps, int told)
{
    int due = told < 0 ? 0 : told - ps->told - ps->got;
    if (due > 0 && !ps->got) {
        MPI_Wait(&ps->recv, MPI_STATUS_IGNORE);
        due--;
    } else if (!ps->got) {
        MPI_Cancel(&ps->recv);
        MPI_Wait(&ps->recv, MPI_STATUS_IGNORE);
    }
    for (; due > 0; due--) MPI_Recv(&ps->msg, 1, MPI_INT, MPI_ANY_SOURCE, PEER_STOP_TAG, ps->comm, MPI_STATUS_IGNORE);
    for (int r = 0; ps->sends && r < ps->size; r++) {
        if (told >= 0) MPI_Wait(&ps->sends[r], MPI_STATUS_IGNORE);
        else if (ps->sends[r] != MPI_REQUEST_NULL) MPI_Request_free(&ps->sends[r]);
    }
    free(ps->sends);
    *ps = (peer_stop){ .comm = MPI_COMM_NULL, .recv = MPI_REQUEST_NULL };
}

/* *n = the largest shared-memory node of ctl's communicator. */
static status count_ranks_per_node(comm_ctl ctl, int *n)
{
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(ctl.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, n));
    MPI_CHECK(MPI_Comm_free(&node));
    return comm_ctl_allreduce(ctl, MPI_IN_PLACE, n, 1, MPI_INT, MPI_MAX);
}

static size_t plan_bytes(const ckpt_plan *p)
{
    size_t n = 0;
    for (int k = 0; k < p->ndsets; k++) n += p->dsets[k].bytes;
    return n;
}

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* Rank 0 of an async writer: one allocation holding every dataset (tensors and blobs'
 * rows) at an address aligned for O_DIRECT. */
static status staging_init(ckpt_writer *w, const ckpt_content *shape)
{
    size_t bytes = 0;
    for (int k = 0; k < w->plan.ndsets; k++) bytes += round_up(w->plan.dsets[k].bytes, CKPT_ALIGN);
    w->staging = aligned_alloc(CKPT_ALIGN, bytes);
    if (!w->staging) {
        log_error("cannot allocate %.1f MiB of staging memory for asynchronous checkpoints",
                  (double)bytes / (1 << 20));
        return STATUS_NOMEM;
    }
    w->staging_bytes = bytes;
    /* Touch every page now: the first save must not pay the page faults. */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bytes; i += 4096) ((char *)w->staging)[i] = 0;
    size_t off = 0;
    for (int k = 0; k < w->plan.ndsets; k++) {
        w->plan.dsets[k].src = (char *)w->staging + off;
        off += round_up(w->plan.dsets[k].bytes, CKPT_ALIGN);
    }
    double t0 = omp_get_wtime();
    for (int k = 0; k < w->plan.ntensors; k++) {
        const ckpt_dset *d = &w->plan.dsets[k];
        const ckpt_tensors *g = &shape->groups[d->group];
        memcpy((void *)d->src, g->data + g->table->entries[d->index].offset, d->bytes);
    }
    w->stats.memcpy_s = omp_get_wtime() - t0;
    return STATUS_OK;
}

status ckpt_writer_init(ckpt_writer **out, MPI_Comm comm, const char *dir, int keep_last, bool async,
                        const ckpt_content *shape)
{
    CHECK(keep_last >= 1, "checkpoints keep_last must be at least 1");
    CHECK(dir && strlen(dir) + 64 < CKPT_PATH_MAX, "the checkpoint directory path is empty or too long");
    CHECK(ckpt_host_little_endian(), "checkpoints hash float32 as stored, little-endian; this host is big-endian");
    *out = NULL;
    ckpt_writer *w = calloc(1, sizeof *w);
    CHECK(w, "out of memory for a checkpoint writer");
    watchdog_enter(shape->wd, "checkpoint writer set-up: MPI_Comm_dup, MPI_Comm_split_type", shape->timeout_s);
    MPI_CHECK(MPI_Comm_dup(comm, &w->comm));
    w->ctl = comm_ctl_watched(ckpt_ctl(w->comm, shape->timeout_s), shape->wd);  /* ctl.wd: the writer's watchdog */
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->keep_last = keep_last;
    w->async = async;
    ckpt_plan_build(&w->plan, shape, w->size);  /* checks names and sizes */
    for (int g = 0; g < shape->ngroups; g++)
        CHECK(!async || !shape->shards[g], "async checkpoints stage full groups on rank 0: not with sharded groups");
    w->ngroups = shape->ngroups;
    w->nblobs = shape->nblobs;
    for (int g = 0; g < w->ngroups; g++) {
        snprintf(w->group_name[g], CKPT_GROUP_MAX, "%s", shape->groups[g].group);
        w->group_total[g] = shape->groups[g].table->total;
        w->group_hash[g] = param_table_hash(shape->groups[g].table);
    }
    for (int b = 0; b < w->nblobs; b++) {
        snprintf(w->blob_name[b], CKPT_GROUP_MAX, "%s", shape->blobs[b].name);
        w->blob_bytes[b] = shape->blobs[b].bytes;
    }
    status st = count_ranks_per_node(w->ctl, &w->ranks_per_node);
    watchdog_leave(w->ctl.wd);
    if (st != STATUS_OK) return st;  /* w leaks: a rank did not arrive, the job is ending */
    if (st == STATUS_OK) st = fault_plan_init(&w->chaos, "ckpt");
    w->chaos.rank = w->rank;  /* ckpt.write runs on every rank of a synchronous save */
    atomic_init(&w->done, true);
    w->copied = true;
    w->committed_step = -1;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->copied_cond, NULL);
    if (st == STATUS_OK && w->rank == 0) {
        int inject = FAULT_ERRNO(&w->chaos, "ckpt.mkdir", -1);
        if (inject) log_error("cannot create checkpoint directory %s: %s", w->dir, strerror(inject));
        st = inject ? STATUS_IO : path_mkdirs(w->dir, "checkpoint directory");
    }
    if (st == STATUS_OK && async && w->rank == 0) st = staging_init(w, shape);
    st = ckpt_agree(w->ctl, st, NULL, 0);
    if (st == STATUS_TIMEOUT) return st;  /* no collective free */
    if (st != STATUS_OK) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return STATUS_OK;
}

/* c must describe what init was given; anything else is a bug in the caller. */
static void content_check(const ckpt_writer *w, const ckpt_content *c)
{
    CHECK(c->ngroups == w->ngroups && c->nblobs == w->nblobs,
          "ckpt_save: the content has other groups or blobs than the shape given to ckpt_writer_init");
    CHECK(c->step >= 0 && c->model && c->model[0], "ckpt_save: step must be >= 0 and model named");
    for (int g = 0; g < c->ngroups; g++)
        CHECK(c->groups[g].data && !strcmp(c->groups[g].group, w->group_name[g]) &&
                  c->groups[g].table->total == w->group_total[g] &&
                  param_table_hash(c->groups[g].table) == w->group_hash[g],
              "ckpt_save: a group differs from the shape given to ckpt_writer_init");
    for (int g = 0; g < c->ngroups; g++)
        CHECK(!w->async || !c->shards[g], "ckpt_save: async checkpoints cannot write sharded groups");
    for (int b = 0; b < c->nblobs; b++)
        CHECK(c->blobs[b].data && !strcmp(c->blobs[b].name, w->blob_name[b]) && c->blobs[b].bytes == w->blob_bytes[b],
              "ckpt_save: a blob differs from the shape given to ckpt_writer_init");
}

static int ranks_per_node(const ckpt_writer *w, const ckpt_content *c)
{
    return c->ranks_per_node > 0 ? c->ranks_per_node : w->ranks_per_node;
}

/* The local phase of a save, after `st` of this rank: a failure is shown in this rank's
 * beacon (watchdog_failed) before the ranks agree, and the agreement names the first
 * failing rank, its errno and its reason on every rank. The deadline is the watchdog's
 * for the bytes moved (the ranks may arrive that far apart). */
static status agree_phase(comm_ctl ctl, const ckpt_content *c, size_t bytes, status st, bool stopped, char *why,
                          int *err, int *who)
{
    if (st != STATUS_OK) watchdog_failed(c->wd, why[0] ? why : status_str(st));
    ctl.timeout_s = ckpt_guard_s(ctl.timeout_s, bytes);
    status agreed = agree_from(ctl, st, stopped, why, CKPT_WHY_MAX, err, who);
    if (agreed != STATUS_TIMEOUT) watchdog_failed(c->wd, NULL);  /* every rank knows: a later hang is not this */
    return agreed;
}

/* ckpt_write_step with the CHAOS faults of `chaos` (NULL: none). No collective HDF5 or
 * MPI-IO call: rank 0 creates the file and its metadata, every rank pwrite()s its slices
 * (ckpt_file_write_slices), and after each of the two phases the ranks agree on a status
 * through ctl, with its deadline, so that one rank's I/O error ends the save on every rank
 * at once, naming that rank, the file and the errno; while they write, a rank's failure
 * stops the others' writes early (peer_stop). A failure not stopped by `fault` removes
 * what the save left (ckpt_dir_discard); *err is then ENOSPC when any rank ran out of
 * space, else the first failing rank's errno (0: unknown). */
static status write_step(comm_ctl ctl, const char *dir, ckpt_plan *p, const ckpt_content *c, int ranks_per_node,
                         int keep_last, ckpt_fault fault, fault_plan *chaos, int *err)
{
    MPI_Comm comm = ctl.comm;
    int rank, who = 0, nospc = 0;  /* nospc: this rank's own errno was ENOSPC */
    peer_stop ps = { .comm = MPI_COMM_NULL, .recv = MPI_REQUEST_NULL };
    MPI_Comm_rank(comm, &rank);
    char why[CKPT_WHY_MAX] = "", h5[CKPT_PATH_MAX];
    ckpt_dir_tmp_path(h5, sizeof h5, dir, c->step);
    strcat(h5, "/" CKPT_FILE);
    *err = 0;
    watchdog_failed(c->wd, NULL);  /* a new save: no failure of this rank's yet */
    status st = rank == 0 ? ckpt_dir_prepare_tmp_at(dir, c->step, chaos) : STATUS_OK;
    if (st != STATUS_OK) *err = errno;
    st = ckpt_agree(ctl, st, NULL, 0);
    if (st == STATUS_TIMEOUT) return st;  /* a rank did not arrive: nothing more is collective */
    if (st == STATUS_OK) {
        TRY(ckpt_checksums_parallel(ctl, p, c));
        size_t bytes = plan_bytes(p);
        char op[96];  /* the local calls are guarded too: a rank blocked in one shows it in its beacon */
        snprintf(op, sizeof op, "checkpoint save of step %" PRId64 ": writing %s", c->step, CKPT_FILE);
        watchdog_enter(c->wd, op, ckpt_guard_s(c->timeout_s, bytes));
        errno = 0;
        if (rank == 0 && (st = ckpt_file_create(h5, p, c, ranks_per_node, why)) != STATUS_OK) *err = errno;
        nospc = *err == ENOSPC;
        st = agree_phase(ctl, c, bytes, st, false, why, err, &who);
        if (st == STATUS_OK) st = comm_ctl_bcast(ctl, p->offsets, p->ndsets, MPI_UINT64_T, 0);
        if (st == STATUS_OK) {
            for (int k = 0; k < p->ndsets; k++) p->dsets[k].offset = (haddr_t)p->offsets[k];
            peer_stop_open(&ps, comm);
            ckpt_peer_watch watch = { peer_stop_failed, peer_stop_tell, &ps };
            st = ckpt_file_write_slices(h5, comm, p, c, FAULT_ERRNO(chaos, "ckpt.write", c->step), &watch, why, err);
            bool stopped = st != STATUS_OK && !ps.told;  /* on another rank's failure */
            if (stopped) log_warn("checkpoint of step %" PRId64 ": %s", c->step, why);
            nospc |= *err == ENOSPC;
            st = agree_phase(ctl, c, bytes, st, stopped, why, err, &who);
            if (st == STATUS_OK) peer_stop_drain(&ps, 0);  /* no rank failed, none sent */
        }
        watchdog_leave(c->wd);
        if (st == STATUS_TIMEOUT) {
            if (ps.comm != MPI_COMM_NULL) peer_stop_drain(&ps, -1);
            return st;
        }
        if (st != STATUS_OK) {
            log_error0("checkpoint of step %" PRId64 " not saved: rank %d: %s", c->step, who,
                       why[0] ? why : status_str(st));
        } else {
            if (rank == 0) {  /* size and metadata; every rank fsync'd its data */
                st = ckpt_dir_fsync_at(h5, FAULT_ERRNO(chaos, "ckpt.fsync", c->step));
                if (st == STATUS_OK) st = ckpt_dir_commit_at(dir, c->step, keep_last, fault, chaos);
                if (st != STATUS_OK) *err = errno;
            }
            st = ckpt_agree(ctl, st, NULL, 0);
        }
    }
    if (st == STATUS_OK) return STATUS_OK;
    if (rank == 0 && fault == CKPT_FAULT_NONE) ckpt_dir_discard(dir, c->step);
    if (st == STATUS_TIMEOUT) return st;
    /* any rank's ENOSPC (not only the first failing rank's, which *err is now) and the
     * ranks that told of a failure; also holds the others until rank 0 has cleaned up */
    int any[2] = { nospc || *err == ENOSPC, ps.told };
    status red = comm_ctl_allreduce(ctl, MPI_IN_PLACE, any, 2, MPI_INT, MPI_SUM);
    if (ps.comm != MPI_COMM_NULL) peer_stop_drain(&ps, red == STATUS_OK ? any[1] : -1);
    TRY(red);
    if (any[0]) *err = ENOSPC;
    return st;
}

status ckpt_write_step(MPI_Comm comm, const char *dir, ckpt_plan *p, const ckpt_content *c, int ranks_per_node,
                       int keep_last, ckpt_fault fault)
{
    int err;
    return write_step(comm_ctl_watched(ckpt_ctl(comm, c->timeout_s), c->wd), dir, p, c, ranks_per_node, keep_last,
                      fault, NULL, &err);
}

static size_t checkpoint_bytes(const ckpt_writer *w)
{
    size_t n = 0;
    for (int k = 0; k < w->plan.ndsets; k++) n += w->plan.dsets[k].bytes;
    return n;
}

/* Rank 0, once a failed save of `step` is returned to the caller: what failed and
 * what to do. errno ENOSPC, or less free space than a checkpoint takes, is a full
 * file system; anything else is the storage's error. */
static void log_save_failure(const ckpt_writer *w, int64_t step, int err)
{
    if (w->rank != 0 || w->fault != CKPT_FAULT_NONE) return;
    char last[CKPT_PATH_MAX], resume[CKPT_PATH_MAX + 128];
    int64_t last_step;
    if (ckpt_last_committed(w->dir, last, sizeof last, &last_step))
        snprintf(resume, sizeof resume, "the last committed checkpoint is step %" PRId64 " at %s, where a relaunch "
                 "resumes", last_step, last);
    else
        snprintf(resume, sizeof resume, "no checkpoint is committed yet: a relaunch starts from step 0");
    struct statvfs fs;
    double free_mib = statvfs(w->dir, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize / (1 << 20) : -1;
    double need_mib = (double)checkpoint_bytes(w) / (1 << 20);
    if (err == ENOSPC || (free_mib >= 0 && free_mib < need_mib)) {
        log_error("checkpoint of step %" PRId64 " failed: %s: %s has %.1f MiB free, a checkpoint takes %.1f MiB",
                  step, strerror(ENOSPC), w->dir, free_mib, need_mib);
        log_error("HINT: free space there or keep fewer checkpoints (ckpt.keep_last, now %d); %s", w->keep_last, resume);
    } else {
        log_error("checkpoint of step %" PRId64 " failed: %s", step, err ? strerror(err) : "I/O error");
        log_error("HINT: check the storage under %s (dmesg, the file system's health) before relaunching; %s",
                  w->dir, resume);
    }
}

static status save_sync(ckpt_writer *w, const ckpt_content *c)
{
    int err;
    ckpt_content cw = *c;
    cw.wd = w->ctl.wd;  /* the writer's, as the shape given at init had it */
    status st = write_step(w->ctl, w->dir, &w->plan, &cw, ranks_per_node(w, c), w->keep_last, w->fault, &w->chaos,
                           &err);
    if (st == STATUS_TIMEOUT) return st;
    if (st == STATUS_OK && w->rank == 0) w->commits++, w->committed_step = c->step;
    if (st != STATUS_OK) {
        log_save_failure(w, c->step, err);
        /* The caller's abort on another rank would cut rank 0's message short. */
        TRY(comm_ctl_barrier(w->ctl));
    }
    return st;
}

/* Writes in pieces of 64 MiB and asks the kernel to start writing each one back at
 * once (sync_file_range), so the disk works while the rest is still being copied
 * and the final fsync has little left to do; it also keeps a checkpoint from
 * filling the page cache with gigabytes of dirty pages on a training node. */
static int pwrite_all(int fd, const char *p, size_t n, off_t off, bool direct)
{
    const size_t piece = (size_t)64 << 20;
    while (n > 0) {
        ssize_t got = pwrite(fd, p, n < piece ? n : piece, off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        if (!direct) sync_file_range(fd, off, got, SYNC_FILE_RANGE_WRITE);  /* a hint: failure changes nothing */
        p += got;
        n -= (size_t)got;
        off += got;
    }
    return 0;
}

/* One dataset: the whole pages with O_DIRECT when the file system takes it (no copy
 * into the page cache, none of the kernel's writeback work — on a busy training node
 * that work competes with the step loop for the same cores: measured 3.5 s of system
 * time for 1.5 GB written through the page cache against 0.4 s direct), the rest
 * through the page cache. *direct is closed and set to -1 when the file system
 * refuses O_DIRECT. */
static int write_dataset(int fd, int *direct, const ckpt_dset *d)
{
    size_t body = d->offset % CKPT_ALIGN == 0 ? d->bytes / CKPT_ALIGN * CKPT_ALIGN : 0;
    if (*direct >= 0 && body > 0) {
        if (pwrite_all(*direct, d->src, body, (off_t)d->offset, true) == 0)
            return body == d->bytes ? 0 : pwrite_all(fd, (const char *)d->src + body, d->bytes - body,
                                                      (off_t)(d->offset + body), false);
        if (errno != EINVAL) return -1;
        close(*direct);  /* EINVAL: no O_DIRECT here after all */
        *direct = -1;
    }
    return pwrite_all(fd, d->src, d->bytes, (off_t)d->offset, false);
}

/* The background thread's work: POSIX only. */
static status write_staged(ckpt_writer *w)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char h5[CKPT_PATH_MAX];
    ckpt_dir_tmp_path(h5, sizeof h5, w->dir, w->pending_step);
    strcat(h5, "/" CKPT_FILE);
    int inject = FAULT_ERRNO(&w->chaos, "ckpt.open", w->pending_step);
    errno = inject;
    int fd = inject ? -1 : open(h5, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        w->thread_err = errno;
        log_error("cannot open %s: %s", h5, log_errno_str());
        return STATUS_IO;
    }
    /* -1 (tmpfs, ..., or a failure): the page cache only */
    int direct = FAULT_ERRNO(&w->chaos, "ckpt.open_direct", w->pending_step) ? -1
                                                                           : open(h5, O_WRONLY | O_CLOEXEC | O_DIRECT);
    int rc = 0;
    const char *op = "write";
    for (int k = 0; k < w->plan.ndsets && rc == 0; k++) {
        ckpt_dset *d = &w->plan.dsets[k];
        if (d->group >= 0) d->crc = ckpt_crc_bytes(0, d->src, d->bytes);  /* blobs were hashed when staged */
        inject = k == 0 ? FAULT_ERRNO(&w->chaos, "ckpt.write", w->pending_step) : 0;
        errno = inject;
        rc = inject ? -1 : write_dataset(fd, &direct, d);
    }
    if (rc == 0) {  /* the file's data, direct or not, and the device's cache */
        op = "fsync";
        inject = FAULT_ERRNO(&w->chaos, "ckpt.fsync", w->pending_step);
        errno = inject;
        rc = inject ? -1 : fsync(fd);
    }
    int err = errno;
    if (direct >= 0) close(direct);
    inject = FAULT_ERRNO(&w->chaos, "ckpt.close", w->pending_step);
    int closed = close(fd);  /* the descriptor goes either way */
    if ((inject || closed != 0) && rc == 0) {
        rc = -1;
        op = "close";
        err = inject ? inject : errno;
    }
    if (rc != 0) {
        errno = err;
        log_error("cannot %s checkpoint %s: %s", op, h5, log_errno_str());
        w->thread_err = err;
        return STATUS_IO;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    w->stats.write_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    w->stats.write_t0 = (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec;
    return STATUS_OK;  /* the caller's thread writes the checksums and commits (finish_async) */
}

/* The background thread's copy of the groups not staged in ckpt_save: one memcpy per
 * dataset, then ckpt_fence may return. */
static void copy_staged(ckpt_writer *w)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0; k < w->plan.ntensors; k++) {
        ckpt_dset *d = &w->plan.dsets[k];
        if (d->from) memcpy((void *)d->src, d->from, d->bytes);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    w->stats.copy_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    w->stats.copy_t0 = (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec;
    pthread_mutex_lock(&w->lock);
    w->copied = true;
    pthread_cond_broadcast(&w->copied_cond);
    pthread_mutex_unlock(&w->lock);
}

static void *write_thread(void *arg)
{
    ckpt_writer *w = arg;  /* writes plan.dsets[].crc; the caller reads them only after the join */
    struct timespec ts = { .tv_sec = w->delay_ms / 1000, .tv_nsec = (long)(w->delay_ms % 1000) * 1000000L };
    if (w->delay_ms) nanosleep(&ts, NULL);
    copy_staged(w);
    if (w->delay_ms) nanosleep(&ts, NULL);  /* so a save after the fence finds the write running */
    w->thread_status = write_staged(w);
    atomic_store(&w->done, true);
    return NULL;
}

/* The file and its metadata; tensor checksums are 0 until the thread has computed
 * them (finish_async writes them). */
static status stage_create_file(ckpt_writer *w, const ckpt_content *c, char *why)
{
    ckpt_plan *p = &w->plan;
    for (int k = p->ntensors; k < p->ndsets; k++) {  /* rows gathered in ckpt_save */
        ckpt_dset *d = &p->dsets[k];
        size_t row = d->dims[1];
        for (int r = 0; r < w->size; r++)
            d->row_crcs[r] = ckpt_crc_bytes(0, (const char *)d->src + (size_t)r * row, row);
        d->crc = ckpt_crc_rows(d->row_crcs, w->size, row);
    }
    for (int k = 0; k < p->ntensors; k++) p->dsets[k].crc = 0;  /* the thread computes them */
    TRY(ckpt_dir_prepare_tmp_at(w->dir, c->step, &w->chaos));
    char h5[CKPT_PATH_MAX];
    ckpt_dir_tmp_path(h5, sizeof h5, w->dir, c->step);
    strcat(h5, "/" CKPT_FILE);
    int inject = FAULT_ERRNO(&w->chaos, "ckpt.create", c->step);  /* stands for HDF5's calls in the create */
    if (inject) {
        errno = inject;
        snprintf(why, CKPT_WHY_MAX, "cannot create %s: %s", h5, log_errno_str());
        errno = inject;
        return STATUS_IO;
    }
    return ckpt_file_create(h5, p, c, ranks_per_node(w, c), why);
}

/* Stages the groups marked copy_in_save now and points the others' datasets at the
 * caller's buffers, for the background thread to copy. */
static void stage_sources(ckpt_writer *w, const ckpt_content *c)
{
    size_t total = 0;
    for (int k = 0; k < w->plan.ntensors; k++) {
        ckpt_dset *d = &w->plan.dsets[k];
        const ckpt_tensors *g = &c->groups[d->group];
        d->from = g->data + g->table->entries[d->index].offset;
        if (g->copy_in_save) {
            memcpy((void *)d->src, d->from, d->bytes);
            d->from = NULL;
        }
        total += d->bytes;
    }
    w->stats = (ckpt_stats){ .bytes = total, .memcpy_s = w->stats.memcpy_s };
}

void ckpt_get_stats(const ckpt_writer *w, ckpt_stats *s)
{
    *s = w->last;
    s->memcpy_s = w->stats.memcpy_s;
}

/* Rank 0, calling thread: stage the content and create the file and its metadata
 * (tensor checksums still 0), then start the thread. */
static status stage_and_start(ckpt_writer *w, const ckpt_content *c, char *why)
{
    stage_sources(w, c);
    w->thread_err = 0;
    TRY(stage_create_file(w, c, why));
    w->pending_step = c->step;
    w->pending_fault = w->fault;
    w->thread_status = STATUS_OK;
    w->copied = false;  /* no thread runs: no lock needed */
    atomic_store(&w->done, false);
    if (pthread_create(&w->thread, NULL, write_thread, w) == 0) {
        w->running = true;
        return STATUS_OK;
    }
    log_warn("cannot start the checkpoint writer thread; writing step %" PRId64 " in the calling thread", c->step);
    write_thread(w);
    return w->thread_status;
}

static status save_async(ckpt_writer *w, const ckpt_content *c)
{
    char why[CKPT_WHY_MAX] = "";
    for (int b = 0; b < c->nblobs; b++) {
        const ckpt_dset *d = &w->plan.dsets[w->plan.ntensors + b];
        int n = (int)c->blobs[b].bytes;
        TRY(comm_ctl_gather(w->ctl, c->blobs[b].data, n, MPI_BYTE, w->rank == 0 ? (void *)d->src : NULL, n, MPI_BYTE,
                            0));
    }
    status st = w->rank == 0 ? stage_and_start(w, c, why) : STATUS_OK;
    if (st != STATUS_OK) {  /* rank 0, before the agreement lets the others go on to abort */
        int err = w->thread_err ? w->thread_err : errno;
        if (why[0]) log_error("checkpoint of step %" PRId64 " not saved: %s", c->step, why);
        if (w->fault == CKPT_FAULT_NONE) ckpt_dir_discard(w->dir, c->step);
        log_save_failure(w, c->step, err);
    }
    return ckpt_agree(w->ctl, st, NULL, 0);
}

/* Rank 0, calling thread, after the background write: the checksums it computed go
 * into the file's attributes (HDF5 stays on one thread), the file is synced again,
 * and the checkpoint is committed. */
static status finish_async(ckpt_writer *w)
{
    char h5[CKPT_PATH_MAX], why[CKPT_WHY_MAX] = "";
    double t0 = omp_get_wtime();
    ckpt_dir_tmp_path(h5, sizeof h5, w->dir, w->pending_step);
    strcat(h5, "/" CKPT_FILE);
    errno = 0;
    status st = ckpt_file_set_checksums(h5, &w->plan, &w->chaos, w->pending_step, why);
    if (st != STATUS_OK) {
        w->thread_err = errno;
        log_error("checkpoint of step %" PRId64 " not committed: %s", w->pending_step, why);
        return st;
    }
    st = ckpt_dir_commit_at(w->dir, w->pending_step, w->keep_last, w->pending_fault, &w->chaos);
    if (st != STATUS_OK) w->thread_err = errno;
    w->stats.finish_s = omp_get_wtime() - t0;
    return st;
}

/* Rank 0: joins a finished (or, when `block`, a running) background write and
 * finishes it; the first failure is kept for the next save or wait. */
static void join_async(ckpt_writer *w, bool block)
{
    if (!w->running || (!block && !atomic_load(&w->done))) return;
    if (!atomic_load(&w->done)) w->waited++;
    pthread_join(w->thread, NULL);
    w->running = false;
    status st = w->thread_status;
    if (st == STATUS_OK) st = finish_async(w);
    w->last = w->stats;
    if (st == STATUS_OK) {
        w->commits++, w->committed_step = w->pending_step;
        return;
    }
    log_error("asynchronous checkpoint of step %" PRId64 " failed; the next save or ckpt_wait reports it",
              w->pending_step);
    if (w->pending_fault == CKPT_FAULT_NONE) ckpt_dir_discard(w->dir, w->pending_step);
    if (w->deferred == STATUS_OK) {
        w->deferred = st;
        w->deferred_step = w->pending_step;
        w->deferred_err = w->thread_err;
    }
}

void ckpt_fence(ckpt_writer *w)
{
    if (!w || !w->async || w->rank != 0) return;
    double t0 = omp_get_wtime();
    pthread_mutex_lock(&w->lock);
    bool waited = !w->copied;
    while (!w->copied) pthread_cond_wait(&w->copied_cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
    if (waited) w->stats.fence_s += omp_get_wtime() - t0;
}

long ckpt_commits(const ckpt_writer *w, int64_t *step)
{
    if (step) *step = w ? w->committed_step : -1;
    return w ? w->commits : 0;
}

void ckpt_poll(ckpt_writer *w)
{
    if (w && w->async && w->rank == 0) join_async(w, false);
}

/* Collective: joins a running background write on rank 0; its status on every rank. */
static status wait_previous(ckpt_writer *w)
{
    if (!w->async) return STATUS_OK;
    int st = STATUS_OK;
    if (w->rank == 0) {
        /* the background write runs at the storage's pace; the others wait in the broadcast */
        char op[96];
        snprintf(op, sizeof op, "checkpoint: waiting for the background write of step %" PRId64, w->pending_step);
        watchdog_enter(w->ctl.wd, op, ckpt_guard_s(w->ctl.timeout_s, plan_bytes(&w->plan)));
        join_async(w, true);
        watchdog_leave(w->ctl.wd);
        st = (int)w->deferred;
        w->deferred = STATUS_OK;
        if (st != STATUS_OK) log_save_failure(w, w->deferred_step, w->deferred_err);
    }
    TRY(comm_ctl_bcast(w->ctl, &st, 1, MPI_INT, 0));
    return (status)st;
}

status ckpt_save(ckpt_writer *w, const ckpt_content *c)
{
    content_check(w, c);
    double t0 = omp_get_wtime();
    TRY(wait_previous(w));  /* staging is free again */
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = w->async ? save_async(w, c) : save_sync(w, c);
    ckpt_h5_quiet_end(q);
    if (w->async && w->rank == 0) w->stats.save_s = omp_get_wtime() - t0;
    return st;
}

status ckpt_wait(ckpt_writer *w)
{
    return wait_previous(w);
}

void ckpt_writer_free(ckpt_writer *w)
{
    if (!w) return;
    if (w->running) join_async(w, true);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->copied_cond);
    free(w->staging);
    ckpt_plan_free(&w->plan);
    MPI_Comm_free(&w->comm);
    free(w);
}
