/* attention_kv — see attention_kv.h. Plain loops over HS-wide rows, which the compiler
 * vectorises; a decoding step is bound by reading the cache, not by arithmetic. */
#include "attention_kv.h"

#include <math.h>

#include "base/log.h"

void attention_kv_forward(float *out, const float *q, int ldq, const float *k, const float *v, int Tq, int Tk, int C,
                          int NH)
{
    CHECK(NH > 0 && C % NH == 0 && ldq >= C && Tq >= 0 && Tq <= Tk,
          "attention_kv: need C a multiple of NH, ldq >= C and 0 <= Tq <= Tk");
    int HS = C / NH, P = Tk - Tq;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < Tq; i++)
        for (int h = 0; h < NH; h++) {
            const float *qi = q + (size_t)i * ldq + (size_t)h * HS;
            float *o = out + (size_t)i * C + (size_t)h * HS;
            float m = -INFINITY, l = 0.0f;
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            for (int j = 0; j <= P + i; j++) {
                const float *kj = k + (size_t)j * C + (size_t)h * HS, *vj = v + (size_t)j * C + (size_t)h * HS;
                float s = 0.0f;
                for (int d = 0; d < HS; d++) s += qi[d] * kj[d];
                s *= scale;
                if (s > m) {  /* a new max: what was summed so far shrinks by exp(m_old - m_new) */
                    float r = expf(m - s);
                    l *= r;
                    for (int d = 0; d < HS; d++) o[d] *= r;
                    m = s;
                }
                float e = expf(s - m);
                l += e;
                for (int d = 0; d < HS; d++) o[d] += e * vj[d];
            }
            float inv = 1.0f / l;  /* l >= 1: the max term contributes exp(0) */
            for (int d = 0; d < HS; d++) o[d] *= inv;
        }
}
