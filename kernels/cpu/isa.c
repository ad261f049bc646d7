/* isa — see isa.h. */
#include "isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ISA_X86 1
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

static const char *const names[ISA_LEVELS] = { "base", "avx2", "avx512", "avx512_bf16", "amx" };

static struct {
    pthread_once_t once;
    isa_level machine, active;
    bool from_env, env_ok;
    char env[32];
    char features[160], model[64];
} isa = { .once = PTHREAD_ONCE_INIT };

const char *isa_name(isa_level l) { return (unsigned)l < ISA_LEVELS ? names[l] : "?"; }

/* The level named by s, with "auto" as `machine`. */
static bool isa_parse_with(const char *s, isa_level machine, isa_level *out)
{
    if (!strcmp(s, "auto")) {
        *out = machine;
        return true;
    }
    for (int l = 0; l < ISA_LEVELS; l++)
        if (!strcmp(s, names[l])) {
            *out = (isa_level)l;
            return true;
        }
    return false;
}

bool isa_parse(const char *s, isa_level *out) { return isa_parse_with(s, isa_machine(), out); }

#ifdef ISA_X86
/* The tile data state needs the kernel's permission per process (Linux 5.16+). */
static bool amx_permitted(void)
{
#ifdef SYS_arch_prctl
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

static void cpu_model(char *buf, size_t len)
{
    unsigned r[12], a, b, c, d;
    buf[0] = '\0';
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000004) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = '\0';
    char *p = s;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n && p[n - 1] == ' ') p[--n] = '\0';
    snprintf(buf, len, "%s", p);
}
#endif

/* /proc/cpuinfo's model line, where CPUID has no brand string (other architectures). */
static void cpu_model_proc(char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon || (strncmp(line, "model name", 10) && strncmp(line, "Model", 5) && strncmp(line, "cpu model", 9)))
            continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = '\0';
        snprintf(buf, len, "%s", v);
        break;
    }
    if (f) fclose(f);
}

static void isa_detect(void)
{
    isa.machine = ISA_BASE;
    snprintf(isa.features, sizeof isa.features, "no AVX2");
#ifdef ISA_X86
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    bool vnni = __builtin_cpu_supports("avx512vnni"), bf16 = __builtin_cpu_supports("avx512bf16");
    bool fp16 = __builtin_cpu_supports("avx512fp16");
    bool amx_cpu = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                   __builtin_cpu_supports("amx-int8");
    bool amx = amx_cpu && amx_permitted();
    if (avx2) isa.machine = ISA_AVX2;
    if (avx512) isa.machine = ISA_AVX512;
    if (avx512 && vnni && bf16) isa.machine = ISA_AVX512_BF16;
    if (isa.machine == ISA_AVX512_BF16 && amx) isa.machine = ISA_AMX;
    if (avx2)
        snprintf(isa.features, sizeof isa.features, "AVX2 FMA%s%s%s%s%s", avx512 ? " AVX-512F/BW/VL/DQ" : ", no AVX-512",
                 avx512 && vnni ? " VNNI" : "", avx512 && bf16 ? " BF16" : "", avx512 && fp16 ? " FP16" : "",
                 amx ? " AMX" : amx_cpu ? ", AMX not permitted by the kernel" : avx512 ? ", no AMX" : "");
    cpu_model(isa.model, sizeof isa.model);
#elif defined(__aarch64__)
    /* One level, base, with NEON always (ARMv8-A); what else the kernel reports is for
     * the logs (Grace: SVE, SVE2, BF16). */
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    snprintf(isa.features, sizeof isa.features, "NEON%s%s%s", hw & HWCAP_SVE ? " SVE" : "",
             hw2 & HWCAP2_SVE2 ? " SVE2" : "", hw2 & HWCAP2_BF16 ? " BF16" : "");
#endif
    if (!isa.model[0]) cpu_model_proc(isa.model, sizeof isa.model);
    isa.active = isa.machine;
    isa.env_ok = true;
    const char *e = getenv("NEBULA_CPU_ISA");
    if (!e || !*e) return;
    snprintf(isa.env, sizeof isa.env, "%s", e);
    isa_level l;
    isa.from_env = true;
    isa.env_ok = isa_parse_with(e, isa.machine, &l) && l <= isa.machine;  /* isa_parse would wait on this once */
    if (isa.env_ok) isa.active = l;
}

isa_level isa_machine(void)
{
    pthread_once(&isa.once, isa_detect);
    return isa.machine;
}

bool isa_env_check(char *why, size_t len)
{
    pthread_once(&isa.once, isa_detect);
    if (isa.env_ok) return true;
    isa_level l;
    if (isa_parse(isa.env, &l))
        snprintf(why, len, "NEBULA_CPU_ISA=%s: this CPU runs %s at most (%s%s%s); use auto or a level up to %s",
                 isa.env, isa_name(isa.machine), isa.features, isa.model[0] ? "; " : "", isa.model,
                 isa_name(isa.machine));
    else
        snprintf(why, len, "NEBULA_CPU_ISA=%s is not an instruction-set level; use auto, base, avx2, avx512, "
                 "avx512_bf16 or amx (this CPU runs up to %s)", isa.env, isa_name(isa.machine));
    return false;
}

isa_level isa_active(void)
{
    char why[400];
    if (!isa_env_check(why, sizeof why)) {
        fprintf(stderr, "nebula: error: %s\n", why);
        exit(2);
    }
    return isa.active;
}

int isa_channel_block(void) { return isa_active() >= ISA_AVX512 ? 16 : 8; }

void isa_describe(char *buf, size_t len)
{
    isa_level l = isa_active();
    char how[96];
    if (!isa.from_env || l == isa.machine) snprintf(how, sizeof how, "the machine's best");
    else snprintf(how, sizeof how, "NEBULA_CPU_ISA=%s; the machine runs %s", isa.env, isa_name(isa.machine));
    snprintf(buf, len, "%s (%s; %s%s%s)", isa_name(l), how, isa.features, isa.model[0] ? "; " : "", isa.model);
}

const char *isa_cpu_model(void)
{
    pthread_once(&isa.once, isa_detect);
    return isa.model;
}
