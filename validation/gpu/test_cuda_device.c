/* test_cuda_device — the device layer itself: copies round-trip bit for bit, the
 * workspace grows and keeps its alignment, events order two streams, and the
 * float sum kernel equals kernels/cpu/reduce.c's (one addition per element: exact). */
#define CHECK_GPU  /* the CUDA checks */
#include "../check.h"

#include "cpu/reduce.h"

int main(void)
{
    gpu_test_start("test_cuda_device");
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const size_t n = 1000003;  /* not a multiple of the block size */
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    gpu_fill_uniform(a, n, -1.0f, 1.0f, &seed);
    gpu_fill_uniform(b, n, -1.0f, 1.0f, &seed);

    float *da = gpu_guarded(a, n), *db = gpu_guarded(b, n);
    gpu_check_close("h2d then d2h round trip", da, a, n, 0.0, 0.0);

    cuda_reduce_sum_f32(da, db, n);
    reduce_apply(a, b, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM);
    gpu_check_close("reduce_sum_f32 vs reduce_apply (exact)", da, a, n, 0.0, 0.0);

    /* Two streams ordered by an event: s2 copies what s1 wrote. */
    cuda_stream s1, s2;
    cuda_event ev;
    if (cuda_stream_create(&s1) || cuda_stream_create(&s2) || cuda_event_create(&ev)) gpu_die("stream/event", 1);
    float *dc = gpu_guarded(NULL, n);
    cuda_stream_use(s1);
    cuda_reduce_sum_f32(da, db, n);  /* a += b again */
    cuda_event_record(ev, s1);
    cuda_stream_wait_event(s2, ev);
    cuda_stream_use(s2);
    cuda_memcpy_d2d(dc, da, n * sizeof(float));
    reduce_apply(a, b, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM);
    gpu_check_close("event orders stream 2 after stream 1", dc, a, n, 0.0, 0.0);
    cuda_stream_use(NULL);

    char *w1 = cuda_workspace(1000), *w2 = cuda_workspace(5u << 20), *w3 = cuda_workspace(4096);
    int ok = w1 && w2 && w3 == w2 && ((uintptr_t)w2 % 256) == 0;
    printf("%s  workspace grows once and stays 256-byte aligned\n", ok ? "ok   " : "FAIL ");
    ok ? gpu_passed++ : gpu_failed++;

    cuda_event_destroy(ev);
    cuda_stream_destroy(s1);
    cuda_stream_destroy(s2);
    gpu_release(da, 1);
    gpu_release(db, 1);
    gpu_release(dc, 1);
    free(a);
    free(b);
    return gpu_test_end("test_cuda_device");
}
