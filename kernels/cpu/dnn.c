/* dnn — see dnn.h. */
#include "dnn.h"

#include "isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dnn_check(dnnl_status_t st, const char *call, const char *file, int line)
{
    if (st == dnnl_success) return;
    static const char *names[] = { "success", "out_of_memory", "invalid_arguments", "unimplemented",
                                   "iterator_ends", "runtime_error", "not_required" };
    const char *name = (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
    fprintf(stderr, "nebula: internal error: %s failed with oneDNN status %s (%d) at %s:%d\n", call, name, (int)st,
            file, line);
    abort();
}

static dnnl_engine_t engine;
static dnnl_stream_t stream;

int dnn_block(void) { return isa_channel_block(); }

/* oneDNN's tag of a layout, and its name (one table for dnn_md and dnn_layout_name) */
static void dnn_tag(dnn_layout l, dnnl_format_tag_t *tag, const char **name)
{
    if (l == DNN_NCHW) *tag = dnnl_nchw, *name = "nchw";
    else if (dnn_block() == 16) *tag = dnnl_nChw16c, *name = "nChw16c";
    else *tag = dnnl_nChw8c, *name = "nChw8c";
}

const char *dnn_layout_name(dnn_layout l)
{
    dnnl_format_tag_t tag;
    const char *name;
    dnn_tag(l, &tag, &name);
    return name;
}

void dnn_version(char *buf, size_t len)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, len, "%d.%d.%d (commit %s)", v->major, v->minor, v->patch, v->hash && v->hash[0] ? v->hash : "unknown");
}

dnnl_engine_t dnn_engine(void)
{
    if (!engine) {
        static const dnnl_cpu_isa_t max[ISA_LEVELS] = { dnnl_cpu_isa_sse41, dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core,
                                                        dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_all };
        /* fails only once a primitive exists (another engine's): then the first setting stays */
        (void)dnnl_set_max_cpu_isa(max[isa_active()]);
        DNN_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    }
    return engine;
}

dnnl_stream_t dnn_stream(void)
{
    if (!stream) DNN_CHECK(dnnl_stream_create(&stream, dnn_engine(), dnnl_stream_default_flags));
    return stream;
}

void dnn_md(dnnl_memory_desc_t *md, int N, int C, int H, int W, dnn_layout layout)
{
    dnn_md_typed(md, N, C, H, W, layout, dnnl_f32);
}

void dnn_md_typed(dnnl_memory_desc_t *md, int N, int C, int H, int W, dnn_layout layout, dnnl_data_type_t dt)
{
    dnnl_dims_t dims = { N, C, H, W };
    dnnl_format_tag_t tag;
    const char *name;
    dnn_tag(layout, &tag, &name);
    DNN_CHECK(dnnl_memory_desc_init_by_tag(md, 4, dims, dt, tag));
}

dnnl_memory_t dnn_mem(const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    DNN_CHECK(dnnl_memory_create(&m, md, dnn_engine(), DNNL_MEMORY_NONE));
    return m;
}

dnnl_primitive_attr_t dnn_sum_attr(bool sum)
{
    if (!sum) return NULL;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    DNN_CHECK(dnnl_post_ops_create(&po));
    DNN_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    DNN_CHECK(dnnl_primitive_attr_create(&attr));
    DNN_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    DNN_CHECK(dnnl_post_ops_destroy(po));
    return attr;
}

dnnl_primitive_t dnn_primitive(dnnl_primitive_desc_t pd)
{
    dnnl_primitive_t p;
    DNN_CHECK(dnnl_primitive_create(&p, pd));
    DNN_CHECK(dnnl_primitive_desc_destroy(pd));
    return p;
}

const char *dnn_impl(const_dnnl_primitive_desc_t pd)
{
    const char *s = "?";
    DNN_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
    return s;
}

void dnn_run(dnnl_primitive_t p, const dnn_arg *args, int nargs)
{
    dnnl_exec_arg_t ea[16];
    if (nargs > 16) dnn_check(dnnl_invalid_arguments, "dnn_run (more than 16 arguments)", __FILE__, __LINE__);
    for (int i = 0; i < nargs; i++) {
        DNN_CHECK(dnnl_memory_set_data_handle(args[i].mem, (void *)args[i].data));
        ea[i].arg = args[i].arg;
        ea[i].memory = args[i].mem;
    }
    dnnl_status_t st = dnnl_primitive_execute(p, dnn_stream(), nargs, ea);
    if (st != dnnl_success) {
        const_dnnl_primitive_desc_t pd = NULL;
        dnnl_primitive_get_primitive_desc(p, &pd);
        fprintf(stderr, "nebula: internal error: oneDNN primitive %s with %d arguments:", pd ? dnn_impl(pd) : "?",
                nargs);
        for (int i = 0; i < nargs; i++) {
            const dnnl_memory_desc_t *md = pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, args[i].arg) : NULL;
            fprintf(stderr, " %d%s", args[i].arg, md && md->ndims == 0 ? "(unused)" : "");
        }
        fprintf(stderr, "\n");
        DNN_CHECK(st);
    }
    DNN_CHECK(dnnl_stream_wait(dnn_stream()));
}

void dnn_nchw_to_blocked(float *dst, const float *src, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= (1 << 16))
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++) {
            const float *s = src + ((size_t)n * C + (size_t)cb * B) * HW;
            float *d = dst + ((size_t)n * CB + cb) * HW * B;
            for (int i = 0; i < HW; i++)
                for (int c = 0; c < B; c++) d[(size_t)i * B + c] = s[(size_t)c * HW + i];
        }
}

void dnn_blocked_to_nchw(float *dst, const float *src, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= (1 << 16))
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++) {
            const float *s = src + ((size_t)n * CB + cb) * HW * B;
            float *d = dst + ((size_t)n * C + (size_t)cb * B) * HW;
            for (int c = 0; c < B; c++)
                for (int i = 0; i < HW; i++) d[(size_t)c * HW + i] = s[(size_t)i * B + c];
        }
}

void dnn_matmul_init(dnn_matmul *m, dnnl_data_type_t dt, int M, int N, int K, bool ta, int lda, bool tb, int ldb,
                     int ldc, bool accumulate)
{
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = { M, K }, bd = { K, N }, cd = { M, N };
    dnnl_dims_t as = { ta ? 1 : lda, ta ? lda : 1 }, bs = { tb ? 1 : ldb, tb ? ldb : 1 }, cs = { ldc, 1 };
    DNN_CHECK(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt, as));
    DNN_CHECK(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt, bs));
    DNN_CHECK(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs));
    dnnl_matmul_desc_t md;
    DNN_CHECK(dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd));
    dnnl_primitive_attr_t attr = dnn_sum_attr(accumulate);
    dnnl_primitive_desc_t pd;
    DNN_CHECK(dnnl_primitive_desc_create(&pd, &md, attr, dnn_engine(), NULL));
    if (attr) DNN_CHECK(dnnl_primitive_attr_destroy(attr));
    m->prim = dnn_primitive(pd);
    m->a = dnn_mem(&amd);
    m->b = dnn_mem(&bmd);
    m->c = dnn_mem(&cmd);
}

void dnn_matmul_run(const dnn_matmul *m, const void *a, const void *b, float *c)
{
    dnn_arg args[3] = { { DNNL_ARG_SRC, m->a, a }, { DNNL_ARG_WEIGHTS, m->b, b }, { DNNL_ARG_DST, m->c, c } };
    dnn_run(m->prim, args, 3);
}

void dnn_matmul_free(dnn_matmul *m)
{
    dnnl_primitive_destroy(m->prim);
    dnnl_memory_destroy(m->a);
    dnnl_memory_destroy(m->b);
    dnnl_memory_destroy(m->c);
}
