/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; init and final xor 0xFFFFFFFF), the
 * checksum of iSCSI, ext4, Btrfs, SCTP and RocksDB. check value: crc32c("123456789") == 0xE3069283.
 *
 * x86-64 with SSE4.2 and ARMv8 with the CRC32 extension (every ARMv8.1 core, and most ARMv8.0
 * ones: Graviton, Ampere, Apple) use the CRC32C instructions, picked at run time so the
 * extension stays portable (x86: cpuid; Linux on ARM: getauxval(AT_HWCAP) & HWCAP_CRC32; other
 * ARM systems: only when the compiler targets the extension, __ARM_FEATURE_CRC32, or on Apple,
 * whose ARM cores all have it). Everything else uses a slicing-by-8 table. Why CRC-32C and not
 * zlib's CRC-32: see docs/wire-format.md, "Checksum".
 */
#ifndef TOKENWIRE_CRC32C_H
#define TOKENWIRE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "byteorder.h"

/* ARMv8 CRC32 path: the ACLE intrinsics (clang: its builtins) in a function compiled for the
 * extension. */
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#  define TWCRC_ARM 1
#  include <arm_acle.h>
#  if defined(__linux__)
#    include <sys/auxv.h>
#    ifndef HWCAP_CRC32
#      define HWCAP_CRC32 (1 << 7)   /* the kernel's bit, for C libraries that do not define it */
#    endif
#  endif
/* clang's arm_acle.h declares __crc32cb/__crc32cd only when the whole unit targets CRC32; its
 * builtins work in a function that does. */
#  if defined(__clang__)
#    define TWCRC_ARM_TARGET __attribute__((target("crc")))
#    define TWCRC_CB(crc, byte) __builtin_arm_crc32cb((crc), (byte))
#    define TWCRC_CD(crc, word) __builtin_arm_crc32cd((crc), (word))
#  else
#    define TWCRC_ARM_TARGET __attribute__((target("+crc")))
#    define TWCRC_CB(crc, byte) __crc32cb((crc), (byte))
#    define TWCRC_CD(crc, word) __crc32cd((crc), (word))
#  endif
#else
#  define TWCRC_ARM 0
#endif

static uint32_t twcrc_table[8][256];
static int twcrc_have_hw = 0;       /* set by twcrc_init(), called once at module import */

static inline void twcrc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        twcrc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            twcrc_table[t][i] = (twcrc_table[t - 1][i] >> 8) ^ twcrc_table[0][twcrc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    twcrc_have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#elif TWCRC_ARM && defined(__linux__)
    twcrc_have_hw = (getauxval(AT_HWCAP) & HWCAP_CRC32) ? 1 : 0;
#elif TWCRC_ARM && (defined(__ARM_FEATURE_CRC32) || defined(__APPLE__))
    twcrc_have_hw = 1;
#else
    twcrc_have_hw = 0;
#endif
}

/* Software path (any byte order: bytes are fed one at a time or as little-endian words). */
static inline uint32_t twcrc_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = (crc >> 8) ^ twcrc_table[0][(crc ^ *p++) & 0xFF]; n--; }
    while (n >= 8) {
        uint32_t lo = tw_load_le32(p);
        uint32_t hi = tw_load_le32(p + 4);
        lo ^= crc;
        crc = twcrc_table[7][lo & 0xFF] ^ twcrc_table[6][(lo >> 8) & 0xFF] ^
              twcrc_table[5][(lo >> 16) & 0xFF] ^ twcrc_table[4][lo >> 24] ^
              twcrc_table[3][hi & 0xFF] ^ twcrc_table[2][(hi >> 8) & 0xFF] ^
              twcrc_table[1][(hi >> 16) & 0xFF] ^ twcrc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ twcrc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* One stream of 8-byte CRC32 instructions (3-cycle latency: ~2.7 bytes/cycle). Interleaving three
 * streams would be ~3x faster but needs a CRC combine step; not worth it while the checksum is
 * optional and runs at several GB/s already (docs/wire-format.md has the figures). */
__attribute__((target("sse4.2")))
static inline uint32_t twcrc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    while (n >= 32) {
        uint64_t a, b, d, e;
        memcpy(&a, p, 8); memcpy(&b, p + 8, 8); memcpy(&d, p + 16, 8); memcpy(&e, p + 24, 8);
        c = __builtin_ia32_crc32di(c, a);
        c = __builtin_ia32_crc32di(c, b);
        c = __builtin_ia32_crc32di(c, d);
        c = __builtin_ia32_crc32di(c, e);
        p += 32;
        n -= 32;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c = __builtin_ia32_crc32di(c, a);
        p += 8;
        n -= 8;
    }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

#if TWCRC_ARM
/* The same on ARMv8's CRC32CB / CRC32CX (little-endian 8-byte words, as the CRC wants them: the
 * 64-bit load is byte-swapped on a big-endian host by tw_load_le64). */
TWCRC_ARM_TARGET
static inline uint32_t twcrc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = TWCRC_CB(crc, *p++); n--; }
    while (n >= 32) {
        crc = TWCRC_CD(crc, tw_load_le64(p));
        crc = TWCRC_CD(crc, tw_load_le64(p + 8));
        crc = TWCRC_CD(crc, tw_load_le64(p + 16));
        crc = TWCRC_CD(crc, tw_load_le64(p + 24));
        p += 32;
        n -= 32;
    }
    while (n >= 8) {
        crc = TWCRC_CD(crc, tw_load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--) crc = TWCRC_CB(crc, *p++);
    return crc;
}
#endif

/* CRC-32C of n bytes at p. */
static inline uint32_t tw_crc32c(const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
#if (defined(__x86_64__) && defined(__GNUC__)) || TWCRC_ARM
    if (twcrc_have_hw) return ~twcrc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~twcrc_sw(0xFFFFFFFFu, p, n);
}

/* Same, forced onto the portable table path (for tests: both paths must agree). */
static inline uint32_t tw_crc32c_portable(const void *data, size_t n) {
    return ~twcrc_sw(0xFFFFFFFFu, (const uint8_t *)data, n);
}

#endif /* TOKENWIRE_CRC32C_H */
