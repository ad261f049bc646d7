/* metrics — what the run reports: one plain line per log interval on rank 0's stdout
 * and one JSON record per line in RUN_DIR/metrics.jsonl (kinds train, eval,
 * dgc_layers, summary). The keys are fixed (docs/training.md, "Output and metrics"):
 * scripts and tests parse them.
 *
 * Every line parses as JSON: a record is serialised into memory first and written with one
 * write(2) on an O_APPEND descriptor (a crash loses no line the write returned for), and a
 * short write (a full disk) is cut back off the file, so a record is there whole or not at
 * all. JSON has no NaN or Infinity: a non-finite number is written as null and the key
 * stays (train_json_num); the record's "nonfinite" lists those keys.
 *
 * Every record carries when and in which launch it was written (docs/metrics.md): "time"
 * (UTC, ISO 8601), "elapsed_s" (since this launch set up its metrics), "launch" (1 for a
 * run directory's first launch, then one more than the highest in the file's tail:
 * requeues, relaunches and resumes by hand all count) and "job" (SLURM_JOB_ID or "-").
 * Records of steps an earlier launch had already written (it got further than the
 * checkpoint this launch resumed from, or than step 0 without one) carry "redone": true.
 *
 * A failed write does not stop training. A Slurm user's product is the checkpoints, which
 * stop the run themselves when the disk fails them (exit 1); metrics are the record of the
 * run, so a lost record is logged (once per failure streak, with errno and path), counted,
 * and reported at the end (the summary line and the summary record's metrics_lost), and the
 * exit code stays that of the training. Later records are tried again (a scratch file
 * system that was full may have room again); the gap is then named in the log.
 *
 * Fault points (CHAOS build, module "metrics", rank 0):
 *   metrics.open   opening metrics.jsonl at set-up -> exit 1 (STATUS_IO) before training
 *   metrics.write  writing one record              -> the record is lost and counted; the run goes on
 *   metrics.close  closing the file at the end     -> a warning; exit code unchanged */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "observe.h"


/* seconds as h:mm:ss (negative or non-finite: 0:00:00). */
static void train_hms(char *buf, size_t cap, double seconds)
{
    long s = isfinite(seconds) && seconds > 0 ? lround(seconds) : 0;
    snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
}


/* What the tail of metrics.jsonl (its last 64 KiB) says of earlier launches: the highest
 * launch number (an older file's records without one count as launch 1) and the furthest
 * step any record there reached (its step, a launch record's previous_step, a resume
 * record's redo_until), so a launch that died early still passes the mark on. A torn
 * last line (a crash inside a write) is cut off first, so the next record starts a line
 * of its own. */
static void metrics_history(train_run *r)
{
    r->launch = 1;
    r->prev_step = -1;
    char path[4200], buf[65536];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->run_dir);
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return;
    }
    off_t at = st.st_size > (off_t)sizeof buf - 1 ? st.st_size - (off_t)(sizeof buf - 1) : 0;
    ssize_t n = pread(fd, buf, (size_t)(st.st_size - at), at);
    if (n > 0 && buf[n - 1] != '\n') {
        char *nl = memrchr(buf, '\n', (size_t)n);
        off_t keep = nl ? at + (nl - buf) + 1 : 0;
        if ((nl || at == 0) && ftruncate(fd, keep) == 0) {
            log_warn("metrics: cut a torn last record (%lld bytes) off %s", (long long)(st.st_size - keep), path);
            n = (ssize_t)(keep - at);
        }
    }
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    char *line = buf;
    if (at > 0) { /* the window's first line is a part of one */
        char *nl = strchr(buf, '\n');
        line = nl ? nl + 1 : buf + n;
    }
    long launch = 0, records = 0;
    for (char *end; line < buf + n; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) end = buf + n;
        *end = '\0';
        json_t *j = json_loads(line, 0, NULL);
        if (!json_is_object(j)) {
            json_decref(j);
            continue;
        }
        records++;
        json_t *l = json_object_get(j, "launch");
        if (json_is_integer(l) && json_integer_value(l) > launch) launch = (long)json_integer_value(l);
        static const char *const marks[] = { "step", "previous_step", "redo_until" };
        for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++) {
            json_t *v = json_object_get(j, marks[k]);
            if (json_is_integer(v) && json_integer_value(v) > r->prev_step) r->prev_step = (long)json_integer_value(v);
        }
        json_decref(j);
    }
    r->launch = launch > 0 ? (int)launch + 1 : records > 0 ? 2 : 1;
}

status train_metrics_open(train_run *r)
{
    r->t_launch = train_now_s();
    r->redo_until = -1;
    metrics_history(r);
    TRY(train_rundir_open_file(r, "metrics.jsonl", O_WRONLY | O_APPEND | O_CREAT, &r->metrics_fault,
                               "metrics.open", &r->metrics_fd));
    char host[256] = "?";
    (void)gethostname(host, sizeof host - 1);
    const char *requeues = getenv("SLURM_RESTART_COUNT");
    train_metrics_write(r, json_pack("{s:s, s:i, s:s, s:I, s:s}", "kind", "launch", "world", r->rt->size, "host",
                                     host, "previous_step", (json_int_t)r->prev_step, "slurm_restart_count",
                                     requeues && *requeues ? requeues : "-"));
    return STATUS_OK;
}

/* The keys (paths such as "layers.3.density") whose values are null: in these records
 * only train_json_num writes null, for a number that was NaN or infinite. */
static void metrics_nonfinite(json_t *v, char *path, size_t len, size_t cap, json_t *out)
{
    if (json_is_null(v)) {
        json_array_append_new(out, json_string(path));
    } else if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
            snprintf(path + len, cap - len, "%s%s", len ? "." : "", key);
            metrics_nonfinite(x, path, strlen(path), cap, out);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            snprintf(path + len, cap - len, "%s%zu", len ? "." : "", i);
            metrics_nonfinite(x, path, strlen(path), cap, out);
        }
    }
    path[len] = '\0';
}

/* "time", "elapsed_s", "launch", "job", "step" (when the builder left it out),
 * "redone" and "nonfinite" (docs/metrics.md). */
static void metrics_stamp(train_run *r, json_t *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[48], path[512] = "";
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);  /* rundir.c's holder line, + ms */
    snprintf(when + w, sizeof when - w, ".%03dZ", (int)(ts.tv_nsec / 1000000));
    json_t *bad = json_array();
    metrics_nonfinite(j, path, 0, sizeof path, bad);
    const char *job = getenv("SLURM_JOB_ID");
    json_object_set_new(j, "time", json_string(when));
    json_object_set_new(j, "elapsed_s", json_real(round((train_now_s() - r->t_launch) * 1e3) / 1e3));
    json_object_set_new(j, "launch", json_integer(r->launch));
    json_object_set_new(j, "job", json_string(job && *job ? job : "-"));
    if (!json_object_get(j, "step")) json_object_set_new(j, "step", json_integer(r->step));
    json_t *st = json_object_get(j, "step"), *kind = json_object_get(j, "kind");
    bool stepwise = json_is_string(kind) && (!strcmp(json_string_value(kind), "train") ||
                                             !strcmp(json_string_value(kind), "eval"));
    if (stepwise && json_is_integer(st) && json_integer_value(st) <= r->redo_until)
        json_object_set_new(j, "redone", json_true());
    if (json_array_size(bad)) json_object_set_new(j, "nonfinite", bad);
    else json_decref(bad);
}

/* One record's line, written whole or not at all; false (errno set) when it is not. */
static bool metrics_append(train_run *r, const char *text, size_t n)
{
    int inj = FAULT_ERRNO(&r->metrics_fault, "metrics.write", r->step);
    if (inj) {
        errno = inj;
        return false;
    }
    ssize_t w = write(r->metrics_fd, text, n);
    if (w == (ssize_t)n) return true;
    int err = w < 0 ? errno : ENOSPC;  /* a short write on a regular file: the disk filled */
    if (w > 0) {  /* cut the torn tail: this process is the file's one writer (the run-dir lock) */
        off_t end = lseek(r->metrics_fd, 0, SEEK_CUR);
        if (end < w || ftruncate(r->metrics_fd, end - w) != 0)
            log_warn("cannot cut a torn record off %s/metrics.jsonl: %s; its last line is incomplete", r->run_dir,
                     strerror(errno));
    }
    errno = err;
    return false;
}

/* One record of metrics.jsonl (rank 0; a no-op elsewhere); takes j. A NULL j (a record
 * that could not be built) counts as lost. */
static void metrics_sink(void *ctx, void *record)
{
    train_metrics_write(ctx, record);
}

void train_metrics_attach(train_run *r)
{
    r->sink = (train_sink){ metrics_sink, r };
}

void train_metrics_write(train_run *r, void *record)
{
    json_t *j = record;
    if (r->metrics_fd < 0) {
        json_decref(j);
        return;
    }
    r->metrics_records++;
    train_tensorboard_record(r, j);  /* the same numbers, before the stamp adds its keys */
    if (j) metrics_stamp(r, j);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL;
    bool ok = false, built = line != NULL;
    int err = 0;
    if (built) {
        line[n] = '\n', line[n + 1] = '\0';
        ok = metrics_append(r, line, n + 1);
        err = errno;
        free(line);
    } else {
        free(text);
    }
    if (ok && r->metrics_errno) {
        log_warn("metrics: writing %s/metrics.jsonl again at step %ld; %ld record(s) were lost before", r->run_dir,
                 r->step, r->metrics_lost);
        r->metrics_errno = 0;
    }
    if (ok) return;
    r->metrics_lost++;
    if (!built)  /* not an I/O error: said every time, it names a bug of the record's builder */
        log_warn("metrics: a record at step %ld could not be serialised (a value JSON cannot hold, or out of "
                 "memory); it is lost and counted", r->step);
    else if (r->metrics_errno == 0)  /* once per streak of failures */
        log_warn("metrics: cannot write a record to %s/metrics.jsonl at step %ld: %s; training goes on, lost "
                 "records are counted and reported at the end", r->run_dir, r->step, strerror(err));
    if (built) r->metrics_errno = err;
}

void train_metrics_close(train_run *r)
{
    if (r->metrics_fd < 0) return;
    int inj = FAULT_ERRNO(&r->metrics_fault, "metrics.close", r->step);
    int rc = close(r->metrics_fd);  /* NFS reports a failed write-back here */
    r->metrics_fd = -1;
    if (inj || rc != 0)
        log_warn("metrics: closing %s/metrics.jsonl failed: %s; its last records may be lost", r->run_dir,
                 strerror(inj ? inj : errno));
}

/* Rank 0, at a log interval. */
void train_log_step(train_run *r, const train_step_stats *ss, double units, const char *unit)
{
    if (r->rt->rank != 0) return;
    /* the ETA from a moving average of the intervals' step times (weight 0.3 for the
     * newest): one slow interval (a checkpoint, an evaluation) moves it by a third */
    r->eta_ms = r->eta_ms > 0 ? 0.7 * r->eta_ms + 0.3 * ss->step_ms : ss->step_ms;
    char elapsed[32], eta[32];
    train_hms(elapsed, sizeof elapsed, train_now_s() - r->t_launch);
    train_hms(eta, sizeof eta, (double)(r->steps - r->step) * r->eta_ms / 1e3);
    /* One plain line per interval, progress and ETA included: under mpirun every rank's
     * stdout is a pseudo-terminal, so a terminal cannot be told from a batch log here. */
    printf("step=%ld loss=%.6f lr=%.4e gnorm=%.4f %s=%.1f step_ms=%.1f comm_wait_ms=%.2f done=%ld/%ld (%.1f%%) "
           "elapsed=%s eta=%s", r->step, ss->loss, ss->lr, ss->gnorm, unit, units / (ss->step_ms / 1e3), ss->step_ms,
           ss->comm_wait_ms, r->step, r->steps, r->steps > 0 ? 100.0 * r->step / r->steps : 100.0, elapsed, eta);
    const dgc_stats *ds = &r->dstats;
    if (r->dgc && dgc_active(r->dgc))
        printf(" dgc_density=%.4g dgc_sent_kB=%.1f dgc_ratio=%.1f residual=%.4g select_ms=%.2f exchange_ms=%.2f"
               " zero_skipped=%zu", ds->density, ds->bytes_sent / 1e3,
               ds->bytes_sent ? (double)ds->dense_bytes / ds->bytes_sent : 0.0, ds->residual_norm,
               ds->select_s * 1e3, ds->exchange_s * 1e3, ds->zero_skipped);
    int pp = r->grid.shape.pp, m = r->tb.accum;
    if (pp > 1)  /* measured against 1F1B's (p - 1) / (m + p - 1) for equal stages */
        printf(" bubble=%.3f bubble_1f1b=%.3f", ss->bubble, (double)(pp - 1) / (m + pp - 1));
    printf("\n");
    fflush(stdout);
    /* numbers through train_json_num: a diverged loss or gnorm is null, never a blank line */
    json_t *j = json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "kind", "train", "step", (json_int_t)r->step,
                          "loss", train_json_num(ss->loss), "lr", train_json_num(ss->lr), "gnorm",
                          train_json_num(ss->gnorm), unit, train_json_num(units / (ss->step_ms / 1e3)), "step_ms",
                          train_json_num(ss->step_ms), "comm_wait_ms", train_json_num(ss->comm_wait_ms));
    if (r->dgc && dgc_active(r->dgc))
        json_object_update_new(j, json_pack("{s:o, s:I, s:I, s:o, s:o, s:o, s:o}", "dgc_density",
                                            train_json_num(ds->density), "dgc_bytes_sent", (json_int_t)ds->bytes_sent,
                                            "dgc_bytes_recv", (json_int_t)ds->bytes_recv, "dgc_residual_norm",
                                            train_json_num(ds->residual_norm), "dgc_select_ms",
                                            train_json_num(ds->select_s * 1e3), "dgc_encode_ms",
                                            train_json_num(ds->encode_s * 1e3), "dgc_exchange_ms",
                                            train_json_num(ds->exchange_s * 1e3)));
    if (r->dgc && dgc_active(r->dgc))  /* Pro 3: rank 0's slice */
        json_object_update_new(j, json_pack("{s:I, s:o, s:o}", "dgc_zero_skipped", (json_int_t)ds->zero_skipped,
                                            "dgc_zero_precision", train_json_num(ds->zero_predicted ?
                                                (double)ds->zero_hit / ds->zero_predicted : 1.0),
                                            "dgc_zero_recall", train_json_num(ds->zero_true ?
                                                (double)ds->zero_hit / ds->zero_true : 1.0)));
    if (pp > 1)
        json_object_update_new(j, json_pack("{s:o, s:o}", "bubble", train_json_num(ss->bubble), "bubble_1f1b",
                                            train_json_num((double)(pp - 1) / (m + pp - 1))));
    train_metrics_write(r, j);
}

/* DGC-Pro's choice per tensor (collective): rank 0 writes every tensor's density,
 * concentration and dense flag to metrics.jsonl ("dgc_layers") and prints a summary. */
status train_log_dgc_layers(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    int n = pt->count;
    float *dens = calloc((size_t)n, sizeof(float)), *conc = calloc((size_t)n, sizeof(float));
    uint8_t *dense = calloc((size_t)n, 1);
    CHECK(dens && conc && dense, "out of memory");
    status st = dgc_layer_table(r->dgc, dens, conc, dense, r->step);
    if (st == STATUS_OK && r->rt->rank == 0) {
        json_t *layers = json_array();
        int nd = 0;
        float lo = INFINITY, hi = 0;
        for (int e = 0; e < n; e++) {
            json_array_append_new(layers, json_pack("{s:s, s:o, s:o, s:b}", "name", pt->entries[e].name, "density",
                                                    train_json_num(dens[e]), "concentration",
                                                    train_json_num(conc[e]), "dense", (int)dense[e]));
            if (dense[e]) nd++;
            else lo = fminf(lo, dens[e]), hi = fmaxf(hi, dens[e]);
        }
        printf("dgc layers: %d compressed (density %.3g .. %.3g), %d dense\n", n - nd, nd < n ? lo : 0.0f,
               nd < n ? hi : 0.0f, nd);
        train_metrics_write(r, json_pack("{s:s, s:I, s:o}", "kind", "dgc_layers", "step", (json_int_t)r->step,
                                         "layers", layers));
    }
    free(dens), free(conc), free(dense);
    return st;
}
