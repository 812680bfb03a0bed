/* cpu_persona: run a program as if on an AMD EPYC, on an Intel CPU (issue 28).
 *
 * An LD_PRELOAD library. Its constructor turns on the kernel's CPUID faulting
 * (arch_prctl ARCH_SET_CPUID 0; Linux >= 4.12 on a CPU with the cpuid_fault flag),
 * so every CPUID instruction the process runs raises SIGSEGV; the handler runs the
 * real CPUID and answers as the persona's CPU would:
 *
 *   CPU_PERSONA=zen3   AMD EPYC 7003 (Milan): "AuthenticAMD", family 19h model 01h,
 *                      no AVX-512, no AMX, no AVX-VNNI
 *   CPU_PERSONA=zen4   AMD EPYC 9004 (Genoa): "AuthenticAMD", family 19h model 11h,
 *                      AVX-512 (with BF16), no AMX, no FP16, no VP2INTERSECT, no AVX-VNNI
 *   CPU_PERSONA=intel  the CPU as it is (the control: the same trap, no change)
 *
 * A zen persona also reports an EPYC's caches the AMD way (leaf 4 empty; leaves
 * 0x80000005/6 and 0x8000001D, with TopologyExtensions): 32 KiB L1d and L1i, an L2 of
 * 512 KiB (zen3) or 1 MiB (zen4) per core, a 32 MiB L3 per 8-core CCX. Libraries that
 * size their blocks by the cache (oneDNN, cpuinfo, MKL outside its reproducible mode)
 * then block as on that EPYC. CPU_PERSONA_CACHES=host keeps the host's cache leaves.
 *
 * Libraries that choose their kernels from CPUID after the process starts (MKL, oneDNN,
 * torch's CPU capability) then choose as on AMD. Not covered: what the dynamic loader and
 * glibc read before any constructor runs (glibc's string and math ifuncs), and the
 * instructions the hardware really has (an AVX-512 kernel chosen without asking still
 * runs). Exits 97 at start when the kernel or CPU cannot fault CPUID.
 *
 *   gcc -O2 -shared -fPIC -o libcpu_persona.so scripts/cpu_persona.c
 *   CPU_PERSONA=zen3 LD_PRELOAD=$PWD/libcpu_persona.so python ...
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_GET_CPUID 0x1011
#define ARCH_SET_CPUID 0x1012

enum persona { INTEL, ZEN3, ZEN4 };
static enum persona chosen = ZEN3;
static int amd_caches = 1;

#define BIT(n) (1u << (n))
/* CPUID.(7,0):EBX AVX-512 foundation and its extensions (F DQ IFMA PF ER CD BW VL). */
#define L7_EBX_AVX512 (BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31))
/* CPUID.(7,0):ECX VBMI VBMI2 VNNI BITALG VPOPCNTDQ. */
#define L7_ECX_AVX512 (BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14))
/* CPUID.(7,0):EDX 4VNNIW 4FMAPS VP2INTERSECT AMX-BF16 AVX512-FP16 AMX-TILE AMX-INT8. */
#define L7_EDX_AVX512 (BIT(2) | BIT(3))
#define L7_EDX_NOT_ZEN (BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25))
/* CPUID.(7,1):EAX AVX-VNNI, AVX512-BF16, AMX-FP16. */
#define L71_EAX_AVX_VNNI BIT(4)
#define L71_EAX_AVX512_BF16 BIT(5)
#define L71_EAX_AMX_FP16 BIT(21)

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static void amd_vendor(uint32_t r[4]) {
    r[1] = 0x68747541; /* "Auth" */
    r[3] = 0x69746e65; /* "enti" */
    r[2] = 0x444d4163; /* "cAMD" */
}

/* One cache in the format of leaves 4 and 0x8000001D. */
static void cache_leaf(uint32_t r[4], uint32_t type, uint32_t level, uint32_t kib, uint32_t ways,
                       uint32_t sharing) {
    uint32_t line = 64, sets = kib * 1024 / (ways * line);
    r[0] = type | level << 5 | 1u << 8 | (sharing - 1) << 14;
    r[1] = (ways - 1) << 22 | (line - 1);
    r[2] = sets - 1;
    r[3] = 0;
}

/* The EPYC's caches, the AMD way; returns 1 when the leaf was one of them. */
static int amd_cache(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    uint32_t l2 = chosen == ZEN3 ? 512 : 1024;
    switch (leaf) {
    case 4: /* reserved on AMD */
        r[0] = r[1] = r[2] = r[3] = 0;
        return 1;
    case 0x80000005: /* L1d and L1i: KiB, ways, lines per tag, line size */
        r[0] = r[1] = 0;
        r[2] = r[3] = 32u << 24 | 8u << 16 | 1u << 8 | 64;
        return 1;
    case 0x80000006: /* L2 (KiB, 8-way = 6) and L3 (512 KiB units, 16-way = 8) */
        r[0] = r[1] = 0;
        r[2] = l2 << 16 | 6u << 12 | 1u << 8 | 64;
        r[3] = 64u << 18 | 8u << 12 | 1u << 8 | 64;
        return 1;
    case 0x8000001D:
        if (sub == 0) cache_leaf(r, 1, 1, 32, 8, 2);
        else if (sub == 1) cache_leaf(r, 2, 1, 32, 8, 2);
        else if (sub == 2) cache_leaf(r, 3, 2, l2, 8, 2);
        else if (sub == 3) cache_leaf(r, 3, 3, 32768, 16, 16);
        else r[0] = r[1] = r[2] = r[3] = 0;
        return 1;
    default:
        return 0;
    }
}

static void as_persona(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (chosen == INTEL) return;
    if (amd_caches && amd_cache(leaf, sub, r)) return;
    if (amd_caches && leaf == 0x80000000u) r[0] = 0x80000021u; /* as far as an EPYC goes */
    if (amd_caches && leaf == 0x80000001u) r[2] |= BIT(6) | BIT(22); /* SSE4A, TopoExt */
    if (amd_caches && leaf > 0x80000008u && leaf <= 0x80000021u) {
        r[0] = r[1] = r[2] = r[3] = 0; /* beyond the host's leaves: nothing to report */
        return;
    }
    if (leaf == 0 || leaf == 0x80000000u) {
        amd_vendor(r);
    } else if (leaf == 1) {
        r[0] = chosen == ZEN3 ? 0x00A00F11u : 0x00A10F11u; /* family 19h */
    } else if (leaf == 7 && sub == 0) {
        r[3] &= ~L7_EDX_NOT_ZEN;
        if (chosen == ZEN3) {
            r[1] &= ~L7_EBX_AVX512;
            r[2] &= ~L7_ECX_AVX512;
            r[3] &= ~L7_EDX_AVX512;
        } else {
            r[1] &= ~(BIT(26) | BIT(27)); /* no PF, ER (Xeon Phi only) */
            r[3] &= ~L7_EDX_AVX512;
        }
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~(L71_EAX_AVX_VNNI | L71_EAX_AMX_FP16);
        if (chosen == ZEN3) r[0] &= ~L71_EAX_AVX512_BF16;
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) { /* not CPUID: a real fault, die as without us */
        signal(sig, SIG_DFL);
        return;
    }
    uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX], r[4];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    real_cpuid(leaf, sub, r);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    as_persona(leaf, sub, r);
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void install(void) {
    const char *name = getenv("CPU_PERSONA");
    if (name == NULL || strcmp(name, "zen3") == 0) chosen = ZEN3;
    else if (strcmp(name, "zen4") == 0) chosen = ZEN4;
    else if (strcmp(name, "intel") == 0) chosen = INTEL;
    else {
        fprintf(stderr, "cpu_persona: CPU_PERSONA=%s is not zen3, zen4 or intel\n", name);
        _exit(2);
    }
    const char *caches = getenv("CPU_PERSONA_CACHES");
    amd_caches = !(caches != NULL && strcmp(caches, "host") == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        perror("cpu_persona: this kernel or CPU cannot fault CPUID (arch_prctl ARCH_SET_CPUID)");
        _exit(97);
    }
}
