/* dnn — the oneDNN glue the convolution and batch-norm kernels share: one CPU
 * engine and stream for the process, memory descriptors for the two activation
 * layouts Nebula uses, and plain-loop converters between them.
 *
 * Layouts of a 4-D activation (N, C, H, W):
 *   DNN_NCHW     torch's contiguous layout; index ((n*C + c)*H + h)*W + w.
 *   DNN_BLOCKED  oneDNN's nChw16c on AVX-512 CPUs, nChw8c below (dnn_block(): one
 *                vector of floats, isa.h's channel block): channels in blocks of B,
 *                the B channels of one pixel adjacent; index
 *                (((n*C/B + c/B)*H + h)*W + w)*B + c%B. Needs C % B == 0 (16 serves
 *                both), so it holds exactly N*C*H*W floats, and elementwise kernels
 *                (ReLU, residual add) run on it unchanged.
 * Measured on the 2-core AVX2 machine (ResNet-18 CIFAR shapes, batch 64): oneDNN's
 * direct convolutions reach 95-145 GFLOP/s on nChw8c, 60-85 on NCHW (its GEMM
 * path) and im2col + OpenBLAS SGEMM per image 30-46, so a CNN keeps its
 * activations blocked end to end and converts only at the edges. On AVX-512 the
 * 8-block confines oneDNN to its AVX2 kernels: the block follows the ISA level.
 *
 * The engine is created at the ISA level of isa_active() (dnnl_set_max_cpu_isa).
 *
 * oneDNN failures here are programming errors (a shape the caller validated, an
 * out-of-memory inside the library): they die with the call and oneDNN's status. */
#ifndef NEBULA_KERNELS_DNN_H
#define NEBULA_KERNELS_DNN_H

#include <dnnl.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum dnn_layout {
    DNN_NCHW = 0,
    DNN_BLOCKED,
} dnn_layout;

/* The channel block of DNN_BLOCKED: 16 or 8 (isa_channel_block), fixed per process. */
int dnn_block(void);
/* oneDNN's name of DNN_BLOCKED ("nChw16c") or of DNN_NCHW ("nchw"). */
const char *dnn_layout_name(dnn_layout l);

/* The oneDNN library loaded at run time, for provenance: "3.0.0 (commit HASH)". */
void dnn_version(char *buf, size_t len);

/* Dies with the failing call's text and oneDNN's status name. */
#define DNN_CHECK(call) dnn_check((call), #call, __FILE__, __LINE__)
void dnn_check(dnnl_status_t st, const char *call, const char *file, int line);

/* The process's CPU engine and in-order stream (created on first use, after oneDNN's
 * highest ISA is set from isa_active()). */
dnnl_engine_t dnn_engine(void);
dnnl_stream_t dnn_stream(void);

/* f32 descriptor of (N, C, H, W) in `layout`; dnn_md_typed: of data type dt (bf16). */
void dnn_md(dnnl_memory_desc_t *md, int N, int C, int H, int W, dnn_layout layout);
void dnn_md_typed(dnnl_memory_desc_t *md, int N, int C, int H, int W, dnn_layout layout, dnnl_data_type_t dt);
/* A memory object for `md` without a buffer; dnn_run attaches buffers per call. */
dnnl_memory_t dnn_mem(const dnnl_memory_desc_t *md);
/* An attribute with one sum post-op (dst = dst + result), or NULL when !sum; the caller
 * destroys it (dnnl_primitive_attr_destroy) after creating its primitive descriptor. */
dnnl_primitive_attr_t dnn_sum_attr(bool sum);
/* A primitive from its descriptor (destroys pd). */
dnnl_primitive_t dnn_primitive(dnnl_primitive_desc_t pd);
/* Implementation name of a primitive descriptor (e.g. "jit:avx2"), for logs. */
const char *dnn_impl(const_dnnl_primitive_desc_t pd);

/* One argument of a primitive call: the memory object and the buffer to use. */
typedef struct dnn_arg {
    int arg;             /* DNNL_ARG_* */
    dnnl_memory_t mem;   /* from dnn_mem */
    const void *data;    /* buffer for this call */
} dnn_arg;
/* Attaches each buffer and executes `p` on the stream, waiting for it. */
void dnn_run(dnnl_primitive_t p, const dnn_arg *args, int nargs);

/* One matmul primitive: C (M, N) [+]= op(A) (M, K) · op(B) (K, N), row-major with leading
 * dimensions as cblas takes them (ta: A stored (K, M) with lda; tb: B stored (N, K) with
 * ldb), operands of type `dt` (f32 or bf16), C f32; accumulate: a sum post-op (beta = 1).
 * Transposes and leading dimensions are memory-descriptor strides, never copies. The
 * fp32 GEMM (gemm.c) and the bf16 matmul (matmul_bf16.c) keep one per shape. */
typedef struct dnn_matmul {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;  /* without buffers: dnn_matmul_run attaches them */
} dnn_matmul;
void dnn_matmul_init(dnn_matmul *m, dnnl_data_type_t dt, int M, int N, int K, bool ta, int lda, bool tb, int ldb,
                     int ldc, bool accumulate);
void dnn_matmul_run(const dnn_matmul *m, const void *a, const void *b, float *c);
void dnn_matmul_free(dnn_matmul *m);

/* Plain-loop layout converters for (N, C, HW) tensors, C % dnn_block() == 0, OpenMP over
 * images and channel blocks. dst and src must not overlap. */
void dnn_nchw_to_blocked(float *dst, const float *src, int N, int C, int HW);
void dnn_blocked_to_nchw(float *dst, const float *src, int N, int C, int HW);

#endif
