/* fake_cuda — a host-only stand-in for the CUDA runtime and for kernels/cuda/device.h,
 * so that libcore/comm/comm_nccl.c and validation/gpu/test_nccl.c, both unchanged, build
 * and run on a machine without a GPU (build/test/fake/test_nccl_fake, `make check`).
 *
 * What it is for: a LOGIC test of comm_nccl.c — bucket boundaries, the leftover
 * bucket, staging slots, the order of NCCL calls, event and stream dependencies,
 * the deadline and abort path. It proves nothing about CUDA or NCCL themselves: no
 * kernels run, "device memory" is malloc'd host memory, NCCL is MPI point-to-point
 * (fake_nccl.c). A pass here is not a pass on a GPU (make check-gpu is that).
 *
 * The one design decision: device work is deferred, not run at the call, and run
 * in the least helpful order a GPU could legally choose. Every stream is a queue
 * that runs only when the host polls: a query or synchronise runs the stream it
 * asks about first, as far as it goes (others get one round only if it is blocked);
 * a poll of NCCL (ncclCommGetAsyncError, "time passes") advances each stream by one
 * operation. So work the host never waited for is usually still queued when the
 * host looks: a missing cudaStreamWaitEvent, MPI reading a staging slot before its
 * copy ran, or a result read before the copy stream wrote it gives wrong numbers or
 * a failed check here, as it could on a GPU, instead of being hidden by eager
 * execution. Device and pinned blocks are registered: every copy,
 * memset, NCCL call and inter-node MPI buffer is checked against them, and memory
 * queued work still uses may not be handed to MPI or freed. Misuse ends the job
 * with "FAIL  fake CUDA/NCCL (rank R): ..." and MPI_Abort. Streams are all
 * non-blocking (the fake has no legacy-stream synchronisation; comm_nccl and
 * device.cu create only non-blocking streams). Not thread-safe: one host thread. */
#include <mpi.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/device.h"
#include "fake_impl.h"

#define FAKE_SYNC_LIMIT_S 60.0 /* a synchronising call stuck this long is a hang: fail */
#define FAKE_GARBAGE 0x5a      /* fresh blocks hold 0x5a5a5a5a = 1.5e16f: unzeroed use shows */

typedef enum { FAKE_OP_COPY, FAKE_OP_SET, FAKE_OP_RECORD, FAKE_OP_WAIT, FAKE_OP_STEP } fake_op_kind;

typedef struct fake_op {
    struct fake_op *next;  /* later work on the same stream */
    fake_op_kind kind;
    void *dst;             /* COPY, SET: written */
    const void *src;       /* COPY: read */
    size_t bytes;          /* COPY, SET */
    int value;             /* SET: byte value */
    cudaMemcpyKind dir;    /* COPY */
    cudaEvent_t ev;        /* RECORD, WAIT */
    uint64_t ticket;       /* RECORD: this record's number; WAIT: the record waited for */
    fake_step_fn step;     /* STEP */
    void *arg;             /* STEP */
    const void *rd;        /* memory read, for the hazard checks (cudaFree, MPI buffers) */
    size_t rd_bytes;
    const void *wr;        /* memory written */
    size_t wr_bytes;
} fake_op;

struct CUstream_st {
    fake_op *head, *tail;  /* queued work, oldest first */
    int id;                /* creation order, for messages */
    bool destroyed;        /* cudaStreamDestroy'd: runs what it holds, takes nothing new */
};

struct CUevent_st {
    uint64_t recorded;     /* cudaEventRecord calls so far */
    uint64_t completed;    /* the latest record a stream has reached */
    cudaStream_t stream;   /* where the latest record was queued */
    bool destroyed;
};

typedef struct fake_block {
    char *base;            /* malloc'd */
    size_t bytes;
    bool pinned;           /* cudaMallocHost (host memory), else cudaMalloc ("device") */
} fake_block;

/* The fake is one process's pretend GPU: file-scope state is its device. */
static struct CUstream_st legacy = { .id = 0 };   /* the NULL stream */
static cudaStream_t *streams;                     /* every stream ever created, legacy first */
static int nstreams, cap_streams;
static fake_block *blocks;                        /* live allocations */
static int nblocks, cap_blocks;
static int live_streams, live_events;
static cudaStream_t current;                      /* device.h: cuda_stream_use */
static void *workspace;                           /* device.h: cuda_workspace */
static size_t workspace_bytes;
static int error_code;                            /* device.h: cuda_error_record */
static char error_msg[256];

int fake_nccl_aborts;
int fake_nccl_live;

int fake_rank(void)
{
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

_Noreturn void fake_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL  fake CUDA/NCCL (rank %d): %s\n", fake_rank(), msg);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 3);
    abort();
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- memory ---------------------------------------------------------------- */

static int block_of(const void *p)
{
    for (int i = 0; i < nblocks; i++)
        if ((const char *)p >= blocks[i].base && (const char *)p < blocks[i].base + blocks[i].bytes) return i;
    return -1;
}

static void check_block(const void *p, size_t bytes, bool pinned, const char *what)
{
    if (bytes == 0) return;
    int i = block_of(p);
    if (i < 0 || blocks[i].pinned != pinned)
        fake_fail("%s: %p is not in any live %s block", what, p, pinned ? "pinned host (cudaMallocHost)"
                                                                        : "device (cudaMalloc)");
    size_t off = (size_t)((const char *)p - blocks[i].base);
    if (bytes > blocks[i].bytes - off)
        fake_fail("%s: %zu bytes at offset %zu run past the end of a %zu-byte %s block", what, bytes, off,
                  blocks[i].bytes, pinned ? "pinned" : "device");
}

void fake_check_device(const void *p, size_t bytes, const char *what) { check_block(p, bytes, false, what); }
void fake_check_pinned(const void *p, size_t bytes, const char *what) { check_block(p, bytes, true, what); }

/* Host memory: must not overlap device memory (pinned or pageable both fine). */
static void check_host(const void *p, size_t bytes, const char *what)
{
    if (bytes == 0) return;
    for (int i = 0; i < nblocks; i++)
        if (!blocks[i].pinned && (const char *)p < blocks[i].base + blocks[i].bytes &&
            blocks[i].base < (const char *)p + bytes)
            fake_fail("%s: host side %p overlaps a device block", what, p);
}

/* Device blocks are device memory, pinned blocks host memory, the rest unregistered. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof *a);
    int i = block_of(p);
    a->type = i < 0 ? cudaMemoryTypeUnregistered : blocks[i].pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    a->device = i < 0 ? -2 : 0;
    if (a->type == cudaMemoryTypeDevice) a->devicePointer = (void *)p;
    else a->hostPointer = (void *)p;
    return cudaSuccess;
}

static bool overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    return na && nb && (const char *)a < (const char *)b + nb && (const char *)b < (const char *)a + na;
}

/* The queued operation that touches [p, p+bytes), or NULL. */
static const fake_op *pending_user(const void *p, size_t bytes, int *stream_id)
{
    for (int s = 0; s < nstreams; s++)
        for (const fake_op *o = streams[s]->head; o; o = o->next)
            if (overlaps(o->rd, o->rd_bytes, p, bytes) || overlaps(o->wr, o->wr_bytes, p, bytes)) {
                *stream_id = streams[s]->id;
                return o;
            }
    return NULL;
}

/* No progress first: the device has done only what the host has seen it do. */
void fake_check_idle(const void *p, size_t bytes, const char *what)
{
    int sid;
    const fake_op *o = pending_user(p, bytes, &sid);
    static const char *names[] = { "cudaMemcpyAsync", "cudaMemsetAsync", "event record", "event wait",
                                   "NCCL collective or kernel" };
    if (o)
        fake_fail("%s: %zu bytes at %p are still used by a queued %s on stream %d: the host went ahead without "
                  "waiting for the event that covers it", what, bytes, p, names[o->kind], sid);
}

static cudaError_t block_new(void **p, size_t bytes, bool pinned)
{
    if (!p) return cudaErrorInvalidValue;
    if (nblocks == cap_blocks) {
        cap_blocks = cap_blocks ? 2 * cap_blocks : 64;
        blocks = realloc(blocks, (size_t)cap_blocks * sizeof *blocks);
        if (!blocks) return cudaErrorMemoryAllocation;
    }
    char *b = malloc(bytes ? bytes : 1);
    if (!b) return cudaErrorMemoryAllocation;
    memset(b, FAKE_GARBAGE, bytes);
    blocks[nblocks++] = (fake_block){ .base = b, .bytes = bytes ? bytes : 1, .pinned = pinned };
    *p = b;
    return cudaSuccess;
}

/* cudaFree synchronises the device: waits until no queued work uses the block. */
static cudaError_t block_free(void *p, bool pinned, const char *what)
{
    if (!p) return cudaSuccess;
    int i = block_of(p);
    if (i < 0 || blocks[i].base != (char *)p || blocks[i].pinned != pinned)
        fake_fail("%s(%p): not the start of a live %s block", what, p, pinned ? "pinned" : "device");
    double t0 = now_s();
    int sid;
    for (;;) {
        fake_progress();
        if (!pending_user(blocks[i].base, blocks[i].bytes, &sid)) break;
        if (now_s() - t0 > FAKE_SYNC_LIMIT_S)
            fake_fail("%s(%p): queued work on stream %d still uses the block after %.0f s (cudaFree would hang)",
                      what, p, sid, FAKE_SYNC_LIMIT_S);
        sched_yield();
    }
    free(blocks[i].base);
    blocks[i] = blocks[--nblocks];
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return block_new(p, bytes, false); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return block_new(p, bytes, true); }
cudaError_t cudaFree(void *p) { return block_free(p, false, "cudaFree"); }
cudaError_t cudaFreeHost(void *p) { return block_free(p, true, "cudaFreeHost"); }

/* ---- streams and events ---------------------------------------------------- */

static cudaStream_t stream_or_legacy(cudaStream_t s, const char *what)
{
    if (!s) return &legacy;
    if (s->destroyed) fake_fail("%s on stream %d after cudaStreamDestroy", what, s->id);
    return s;
}

static void stream_register(cudaStream_t s)
{
    if (nstreams == cap_streams) {
        cap_streams = cap_streams ? 2 * cap_streams : 16;
        streams = realloc(streams, (size_t)cap_streams * sizeof *streams);
        if (!streams) fake_fail("out of memory for streams");
    }
    streams[nstreams++] = s;
}

static void enqueue(cudaStream_t s, fake_op op)
{
    if (nstreams == 0) stream_register(&legacy);
    fake_op *o = malloc(sizeof *o);
    if (!o) fake_fail("out of memory for a queued operation");
    *o = op;
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
}

void fake_enqueue_step(cudaStream_t s, fake_step_fn step, void *arg, const void *rd, size_t rd_bytes, void *wr,
                       size_t wr_bytes)
{
    enqueue(stream_or_legacy(s, "NCCL enqueue"),
            (fake_op){ .kind = FAKE_OP_STEP, .step = step, .arg = arg, .rd = rd, .rd_bytes = rd_bytes, .wr = wr,
                       .wr_bytes = wr_bytes });
}

static void check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k, const char *what)
{
    switch (k) {
    case cudaMemcpyHostToDevice: check_host(src, n, what); fake_check_device(dst, n, what); break;
    case cudaMemcpyDeviceToHost: fake_check_device(src, n, what); check_host(dst, n, what); break;
    case cudaMemcpyDeviceToDevice:
        fake_check_device(src, n, what);
        fake_check_device(dst, n, what);
        if (overlaps(dst, n, src, n)) fake_fail("%s: device-to-device copy between overlapping ranges", what);
        break;
    default: fake_fail("%s: copy kind %d is not modelled by the fake", what, (int)k);
    }
}

/* Runs the head of s if it can; true when it did. */
static bool stream_step(cudaStream_t s)
{
    fake_op *o = s->head;
    if (!o) return false;
    switch (o->kind) {
    case FAKE_OP_COPY:
        check_copy(o->dst, o->src, o->bytes, o->dir, "queued cudaMemcpyAsync (memory freed meanwhile?)");
        memmove(o->dst, o->src, o->bytes);
        break;
    case FAKE_OP_SET:
        fake_check_device(o->dst, o->bytes, "queued cudaMemsetAsync (memory freed meanwhile?)");
        memset(o->dst, o->value, o->bytes);
        break;
    case FAKE_OP_RECORD:
        if (o->ticket > o->ev->completed) o->ev->completed = o->ticket;
        break;
    case FAKE_OP_WAIT:
        if (o->ev->completed < o->ticket) return false;
        break;
    case FAKE_OP_STEP:
        if (!o->step(o->arg)) return false;
        break;
    }
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    free(o);
    return true;
}

static bool running;  /* a step is running: no nested progress */

/* "Time passes": one round, each stream one operation, starting at another stream each time. */
void fake_progress(void)
{
    static unsigned round;
    if (running) return;
    running = true;
    round++;
    for (int i = 0; i < nstreams; i++) stream_step(streams[(round + (unsigned)i) % (unsigned)nstreams]);
    running = false;
}

/* The host asks about s: s runs as far as it can; only if it is blocked do the
 * others get a round (what it waits for may be there), and s runs again. */
static void progress_for(cudaStream_t s)
{
    if (running) return;
    running = true;
    while (stream_step(s)) {}
    running = false;
    if (!s->head) return;
    fake_progress();
    running = true;
    while (stream_step(s)) {}
    running = false;
}

static cudaError_t stream_sync(cudaStream_t s, const char *what)
{
    double t0 = now_s();
    for (;;) {
        progress_for(s);
        if (!s->head) return cudaSuccess;
        if (now_s() - t0 > FAKE_SYNC_LIMIT_S)
            fake_fail("%s: stream %d still has work after %.0f s (would hang on a GPU)", what, s->id,
                      FAKE_SYNC_LIMIT_S);
        sched_yield();
    }
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    if (flags != cudaStreamNonBlocking)
        fake_fail("cudaStreamCreateWithFlags(%u): the fake models non-blocking streams only", flags);
    cudaStream_t n = calloc(1, sizeof *n);
    if (!n) return cudaErrorMemoryAllocation;
    if (nstreams == 0) stream_register(&legacy);
    n->id = nstreams;
    stream_register(n);
    live_streams++;
    *s = n;
    return cudaSuccess;
}

/* Like CUDA: returns at once; queued work still runs. The struct is kept (tiny). */
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s == &legacy || s->destroyed) fake_fail("cudaStreamDestroy of a stream not live");
    s->destroyed = true;
    live_streams--;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { return stream_sync(stream_or_legacy(s, "sync"), "sync"); }

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    s = stream_or_legacy(s, "cudaStreamQuery");
    progress_for(s);
    return s->head ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    for (int i = 0; i < nstreams; i++) stream_sync(streams[i], "cudaDeviceSynchronize");
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (flags & ~(unsigned)cudaEventDisableTiming) fake_fail("cudaEventCreateWithFlags(%u): not modelled", flags);
    *e = calloc(1, sizeof **e);
    if (!*e) return cudaErrorMemoryAllocation;
    live_events++;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

static cudaEvent_t event_live(cudaEvent_t e, const char *what)
{
    if (!e || e->destroyed) fake_fail("%s on an event not live", what);
    return e;
}

/* Queued work may still record it: the struct is kept. */
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    event_live(e, "cudaEventDestroy")->destroyed = true;
    live_events--;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    event_live(e, "cudaEventRecord");
    e->stream = stream_or_legacy(s, "cudaEventRecord");
    enqueue(e->stream, (fake_op){ .kind = FAKE_OP_RECORD, .ev = e, .ticket = ++e->recorded });
    return cudaSuccess;
}

/* Waits for the event's latest record as of now (a never-recorded event: nothing). */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (flags) fake_fail("cudaStreamWaitEvent flags %u: not modelled", flags);
    event_live(e, "cudaStreamWaitEvent");
    s = stream_or_legacy(s, "cudaStreamWaitEvent");
    if (e->recorded) enqueue(s, (fake_op){ .kind = FAKE_OP_WAIT, .ev = e, .ticket = e->recorded });
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    event_live(e, "cudaEventQuery");
    if (e->completed < e->recorded) progress_for(e->stream);
    return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    check_copy(dst, src, n, k, "cudaMemcpyAsync");
    enqueue(stream_or_legacy(s, "cudaMemcpyAsync"),  /* both sides tracked: a staging slot is host memory */
            (fake_op){ .kind = FAKE_OP_COPY, .dst = dst, .src = src, .bytes = n, .dir = k, .rd = src, .rd_bytes = n,
                       .wr = dst, .wr_bytes = n });
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    fake_check_device(p, n, "cudaMemsetAsync");
    enqueue(stream_or_legacy(s, "cudaMemsetAsync"),
            (fake_op){ .kind = FAKE_OP_SET, .dst = p, .bytes = n, .value = value, .wr = p, .wr_bytes = n });
    return cudaSuccess;
}

/* On the legacy stream, which the non-blocking streams do not wait for. */
cudaError_t cudaMemset(void *p, int value, size_t n) { return cudaMemsetAsync(p, value, n, NULL); }

/* ---- device and errors ------------------------------------------------------- */

/* Leaks at exit, unless a communicator was aborted (then leaking is the design). */
static void fake_exit_check(void)
{
    if (fake_nccl_aborts) return;
    int dev = 0, pin = 0;
    for (int i = 0; i < nblocks; i++) blocks[i].pinned ? pin++ : dev++;
    if (workspace) dev--;  /* device.h's workspace lives as long as the thread */
    if (dev || pin || live_streams || live_events || fake_nccl_live) {
        fprintf(stderr, "FAIL  fake CUDA/NCCL: exit with %d device block(s), %d pinned block(s), %d stream(s), "
                        "%d event(s), %d NCCL communicator(s) not freed\n", dev, pin, live_streams, live_events,
                fake_nccl_live);
        fflush(stderr);
        _exit(1);
    }
}

cudaError_t cudaGetDeviceCount(int *count)
{
    static bool said;
    if (!said) {
        said = true;
        atexit(fake_exit_check);
        if (fake_rank() <= 0)
            printf("# FAKE CUDA and NCCL (validation/gpu/fake): host memory and MPI stand in for the GPU; this run "
                   "checks comm_nccl.c's logic, not CUDA or NCCL\n");
        fflush(stdout);
    }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

/* Each rank its own pretend GPU (bus id = world rank), as on a node with one GPU per rank. */
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device)
{
    if (device != 0 || len <= 0) return cudaErrorInvalidDevice;
    snprintf(bus, (size_t)len, "0000:%02x:00.0", fake_rank() & 0xff);
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (fake)";
    case cudaErrorMemoryAllocation: return "out of memory (fake)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (fake)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (fake)";
    case cudaErrorNotReady: return "device not ready (fake)";
    }
    return "unknown error (fake)";
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }

/* ---- kernels/cuda/device.h, as device.cu implements it over the runtime ------ */

int cuda_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int cuda_device_select(int ordinal, cuda_device_info *info)
{
    int e = (int)cudaSetDevice(ordinal);
    if (e) return e;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "fake GPU (host memory, validation/gpu/fake)");
    info->sm_major = 9;
    info->multiprocessors = 1;
    info->memory_bytes = (size_t)1 << 30;
    return 0;
}

int cuda_malloc(void **p, size_t bytes) { return (int)cudaMalloc(p, bytes ? bytes : 1); }
int cuda_malloc_host(void **p, size_t bytes) { return (int)cudaMallocHost(p, bytes ? bytes : 1); }
void cuda_free(void *p) { if (p) cudaFree(p); }
void cuda_free_host(void *p) { if (p) cudaFreeHost(p); }

/* Host copies are synchronous with respect to the host; device-to-device ones are not. */
static int copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, current);
    if (e == cudaSuccess && kind != cudaMemcpyDeviceToDevice) e = cudaStreamSynchronize(current);
    return (int)e;
}

int cuda_memcpy_h2d(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyHostToDevice); }
int cuda_memcpy_d2h(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyDeviceToHost); }
int cuda_memcpy_d2d(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyDeviceToDevice); }
int cuda_memset(void *p, int byte, size_t bytes) { return (int)cudaMemsetAsync(p, byte, bytes, current); }
int cuda_synchronize(void) { return (int)cudaStreamSynchronize(current); }

int cuda_stream_create(cuda_stream *s) { return (int)cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
void cuda_stream_destroy(cuda_stream s) { if (s) cudaStreamDestroy(s); }
void cuda_stream_use(cuda_stream s) { current = s; }
cuda_stream cuda_stream_current(void) { return current; }
int cuda_event_create(cuda_event *e) { return (int)cudaEventCreate(e); }
void cuda_event_destroy(cuda_event e) { if (e) cudaEventDestroy(e); }
int cuda_event_record(cuda_event e, cuda_stream s) { return (int)cudaEventRecord(e, s); }
int cuda_stream_wait_event(cuda_stream s, cuda_event e) { return (int)cudaStreamWaitEvent(s, e, 0); }

int cuda_event_done(cuda_event e)
{
    cudaError_t r = cudaEventQuery(e);
    return r == cudaSuccess ? 1 : r == cudaErrorNotReady ? 0 : -(int)r;
}

float cuda_event_elapsed_ms(cuda_event start, cuda_event stop)
{
    (void)start, (void)stop;
    return 0.0f;  /* no clock on the fake device */
}

void *cuda_workspace(size_t bytes)
{
    if (bytes <= workspace_bytes) return workspace;
    cudaStreamSynchronize(current);
    cudaFree(workspace);
    workspace = NULL;
    workspace_bytes = 0;
    if (cudaMalloc(&workspace, bytes) != cudaSuccess) {
        cuda_error_record((int)cudaErrorMemoryAllocation, "cudaMalloc of the kernel workspace", __FILE__, __LINE__);
        return NULL;
    }
    workspace_bytes = bytes;
    return workspace;
}

void cuda_error_record(int code, const char *what, const char *file, int line)
{
    if (error_code) return;
    error_code = code;
    snprintf(error_msg, sizeof error_msg, "%s: %s at %s:%d", what, cudaGetErrorString((cudaError_t)code), file, line);
}

int cuda_error_take(char *msg, size_t len)
{
    int e = error_code;
    if (e && msg && len) snprintf(msg, len, "%s", error_msg);
    error_code = 0;
    return e;
}

const char *cuda_error_name(int code) { return cudaGetErrorString((cudaError_t)code); }

void cuda_launch_check(const char *what, const char *file, int line)
{
    (void)what, (void)file, (void)line;  /* the fake launches nothing that can fail */
}

typedef struct reduce_args {
    float *dst;
    const float *src;
    size_t n;
} reduce_args;

static bool reduce_step(void *arg)
{
    reduce_args *a = arg;
    for (size_t i = 0; i < a->n; i++) a->dst[i] += a->src[i];
    free(a);
    return true;
}

void cuda_reduce_sum_f32(float *dst, const float *src, size_t n)
{
    fake_check_device(dst, n * sizeof(float), "cuda_reduce_sum_f32 dst");
    fake_check_device(src, n * sizeof(float), "cuda_reduce_sum_f32 src");
    reduce_args *a = malloc(sizeof *a);
    if (!a) fake_fail("out of memory");
    *a = (reduce_args){ dst, src, n };
    fake_enqueue_step(current, reduce_step, a, src, n * sizeof(float), dst, n * sizeof(float));
}
