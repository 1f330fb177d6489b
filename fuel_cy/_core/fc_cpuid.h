/* What this CPU and its OS let a process execute: cpuid for the instruction sets, xgetbv for the
 * register state the OS saves (an AVX-512 CPU under an OS that does not save zmm state must not
 * run AVX-512 code).  Compiled for the baseline (no -march), so it runs on any x86-64 CPU.
 * Feature names are Linux's /proc/cpuinfo spellings.  Hand-written; used by fuel_cy/_cpuid.pyx. */
#ifndef FUEL_CY_FC_CPUID_H
#define FUEL_CY_FC_CPUID_H
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#define FC_X86 1
#include <cpuid.h>
#else
#define FC_X86 0
#endif

enum {
    FC_F_PNI, FC_F_SSSE3, FC_F_SSE4_1, FC_F_SSE4_2, FC_F_POPCNT, FC_F_CX16, FC_F_AVX, FC_F_AVX2,
    FC_F_FMA, FC_F_F16C, FC_F_BMI1, FC_F_BMI2, FC_F_ABM, FC_F_MOVBE, FC_F_AVX512F, FC_F_AVX512CD,
    FC_F_AVX512BW, FC_F_AVX512DQ, FC_F_AVX512VL, FC_F_AVX512IFMA, FC_F_AVX512VBMI,
    FC_F_AVX512_VBMI2, FC_F_AVX512_VNNI, FC_F_AVX512_BITALG, FC_F_AVX512_VPOPCNTDQ,
    FC_F_AVX512_BF16, FC_F_AVX512_FP16, FC_F_AVX_VNNI, FC_F_GFNI, FC_F_VAES, FC_F_VPCLMULQDQ,
    FC_F_PCLMULQDQ, FC_F_AES, FC_F_SHA_NI, FC_F_ADX, FC_F_AMX_TILE, FC_F_AMX_BF16, FC_F_AMX_INT8,
    FC_F_COUNT
};

static const char* const fc_feature_names[FC_F_COUNT] = {
    "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "avx", "avx2",
    "fma", "f16c", "bmi1", "bmi2", "abm", "movbe", "avx512f", "avx512cd",
    "avx512bw", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "gfni", "vaes", "vpclmulqdq",
    "pclmulqdq", "aes", "sha_ni", "adx", "amx_tile", "amx_bf16", "amx_int8",
};

#if FC_X86
static inline uint64_t fc_xgetbv0(void) {
    uint32_t eax, edx;
    /* the xgetbv opcode, for assemblers that do not know the mnemonic */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

/* Fills have[FC_F_COUNT] with 0/1 and vendor[13] with the cpuid vendor string ("" off x86). */
static inline void fc_cpu_features(unsigned char* have, char* vendor, unsigned* family, unsigned* model) {
    memset(have, 0, FC_F_COUNT);
    vendor[0] = 0;
    *family = 0;
    *model = 0;
#if FC_X86
    unsigned a, b, c, d, max_leaf, max_ext;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d)) return;
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    __cpuid(1, a, b, c, d);
    unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    if (fam == 0xf) fam += (a >> 20) & 0xff;
    if (fam == 0x6 || fam >= 0xf) mod += ((a >> 16) & 0xf) << 4;
    *family = fam;
    *model = mod;
    unsigned c1 = c;
    have[FC_F_PNI] = c1 & 1;
    have[FC_F_PCLMULQDQ] = (c1 >> 1) & 1;
    have[FC_F_SSSE3] = (c1 >> 9) & 1;
    have[FC_F_CX16] = (c1 >> 13) & 1;
    have[FC_F_SSE4_1] = (c1 >> 19) & 1;
    have[FC_F_SSE4_2] = (c1 >> 20) & 1;
    have[FC_F_MOVBE] = (c1 >> 22) & 1;
    have[FC_F_POPCNT] = (c1 >> 23) & 1;
    have[FC_F_AES] = (c1 >> 25) & 1;
    /* The OS must save the wider registers on a context switch (XCR0), else they are unusable. */
    int osxsave = (c1 >> 27) & 1;
    uint64_t xcr0 = osxsave ? fc_xgetbv0() : 0;
    int os_avx = (xcr0 & 0x6) == 0x6;                  /* XMM and YMM state */
    int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;   /* opmask, ZMM_Hi256, Hi16_ZMM */
    int os_amx = (xcr0 & 0x60000) == 0x60000;          /* XTILECFG, XTILEDATA */
    if (os_avx) {
        have[FC_F_AVX] = (c1 >> 28) & 1;
        have[FC_F_FMA] = (c1 >> 12) & 1;
        have[FC_F_F16C] = (c1 >> 29) & 1;
    }
    if (max_leaf >= 7) {
        unsigned b7, c7, d7, a71 = 0;
        __cpuid_count(7, 0, a, b7, c7, d7);
        unsigned sub = a;
        if (sub >= 1) {
            unsigned x, y, z;
            __cpuid_count(7, 1, a71, x, y, z);
        }
        have[FC_F_BMI1] = (b7 >> 3) & 1;
        have[FC_F_BMI2] = (b7 >> 8) & 1;
        have[FC_F_ADX] = (b7 >> 19) & 1;
        have[FC_F_SHA_NI] = (b7 >> 29) & 1;
        if (os_avx) {
            have[FC_F_AVX2] = (b7 >> 5) & 1;
            have[FC_F_GFNI] = (c7 >> 8) & 1;
            have[FC_F_VAES] = (c7 >> 9) & 1;
            have[FC_F_VPCLMULQDQ] = (c7 >> 10) & 1;
            have[FC_F_AVX_VNNI] = (a71 >> 4) & 1;
        }
        if (os_avx512) {
            have[FC_F_AVX512F] = (b7 >> 16) & 1;
            have[FC_F_AVX512DQ] = (b7 >> 17) & 1;
            have[FC_F_AVX512IFMA] = (b7 >> 21) & 1;
            have[FC_F_AVX512CD] = (b7 >> 28) & 1;
            have[FC_F_AVX512BW] = (b7 >> 30) & 1;
            have[FC_F_AVX512VL] = (b7 >> 31) & 1;
            have[FC_F_AVX512VBMI] = (c7 >> 1) & 1;
            have[FC_F_AVX512_VBMI2] = (c7 >> 6) & 1;
            have[FC_F_AVX512_VNNI] = (c7 >> 11) & 1;
            have[FC_F_AVX512_BITALG] = (c7 >> 12) & 1;
            have[FC_F_AVX512_VPOPCNTDQ] = (c7 >> 14) & 1;
            have[FC_F_AVX512_FP16] = (d7 >> 23) & 1;
            have[FC_F_AVX512_BF16] = (a71 >> 5) & 1;
        }
        if (os_amx) {
            have[FC_F_AMX_BF16] = (d7 >> 22) & 1;
            have[FC_F_AMX_TILE] = (d7 >> 24) & 1;
            have[FC_F_AMX_INT8] = (d7 >> 25) & 1;
        }
    }
    __cpuid(0x80000000, max_ext, b, c, d);
    if (max_ext >= 0x80000001) {
        __cpuid(0x80000001, a, b, c, d);
        have[FC_F_ABM] = (c >> 5) & 1;
    }
#endif
}

#endif
