// cuda_emu_math — the device-side intrinsics of the CPU emulator (cuda_emu.h): integer
// and bit operations, floating-point intrinsics with one rounding each (the emulator
// builds with -ffp-contract=off), fp16 and bf16 with bit-exact round-to-nearest-even,
// and atomics on the emulated memory. Not a header of its own: cuda_emu.h includes it
// after the emulator's types and bit helpers (emu::to_bits, emu::from_bits).
#ifndef NEBULA_CUDA_EMU_MATH_H
#define NEBULA_CUDA_EMU_MATH_H

// ---- integer and bit intrinsics ----------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (x >> i & 1u) << (31 - i);
    return r;
}
inline float __uint_as_float(unsigned u) { return emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu::to_bits(f); }
inline float __int_as_float(int i) { return emu::from_bits<float>((unsigned)i); }
inline int __float_as_int(float f) { return (int)(unsigned)emu::to_bits(f); }
inline double __longlong_as_double(long long i) { return emu::from_bits<double>((uint64_t)i); }
inline long long __double_as_longlong(double d) { return (long long)emu::to_bits(d); }
template <class T> inline T __ldg(const T *p) { return *p; }

// CUDA's overloaded device min/max (host C++ has only std::min/max).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// ---- floating-point intrinsics (compile with -ffp-contract=off: each op rounds once) --
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// ---- fp16 and bf16 (bit-exact round to nearest even, subnormals kept) --------------
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
inline __half __float2half_rn(float f)
{
    uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return __half{ 0x7fffu };  // NaN: the hardware's canonical one
    if (a >= 0x477ff000u) return __half{ (unsigned short)(sign | 0x7c00u) };  // >= 65520: inf
    if (a >= 0x38800000u) {  // normal half
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return __half{ (unsigned short)(sign | (r >> 13)) };
    }
    if (a <= 0x33000000u) return __half{ (unsigned short)sign };  // <= 2^-25: ties to even 0
    uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);  // units of 2^-24
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return __half{ (unsigned short)(sign | q) };
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h)
{
    uint32_t sign = (uint32_t)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu;
    if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return __half{ u }; }
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{ 0x7fffu };
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{ (unsigned short)(u >> 16) };
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }

// ---- atomics (host atomics on the emulated global/shared memory) ------------------
template <class T> inline T __emu_atomic_add(T *p, T v)
{
    if constexpr (std::is_integral<T>::value) {
        return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    } else {
        T old = *p, sum;
        do sum = old + v;
        while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        return old;
    }
}
inline int atomicAdd(int *p, int v) { return __emu_atomic_add(p, v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __emu_atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return __emu_atomic_add(p, v); }
inline float atomicAdd(float *p, float v) { return __emu_atomic_add(p, v); }
inline double atomicAdd(double *p, double v) { return __emu_atomic_add(p, v); }
template <class T> inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicCAS(T *p, T cmp, T v)
{
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
template <class T> inline T atomicMax(T *p, T v)
{
    T old = *p;
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <class T> inline T atomicMin(T *p, T v)
{
    T old = *p;
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}

#endif
