/* CRC-32C (tokenwire/include/tokenwire/crc32c.h): the path twcrc_init picks (the CRC32
 * instructions of x86 SSE4.2 or ARMv8 where the CPU has them) against the portable table path
 * and a bit-at-a-time reference, over every length 0..1100 at every start offset 0..15 of
 * pseudo-random bytes, plus the check value crc32c("123456789") == 0xE3069283.
 *
 *   crc32c_test [REQUIRE]   REQUIRE "hw": fail unless the instruction path was picked
 *
 * Prints "crc32c: hw" or "crc32c: portable", then "ok". .ci/cross runs it under qemu-aarch64
 * (which has the ARMv8 CRC32 instructions) and qemu-s390x (big-endian, portable path).
 */
#include <stdio.h>
#include <string.h>

#include "tokenwire/crc32c.h"

static uint32_t reference(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

int main(int argc, char **argv) {
    static uint8_t buf[1100 + 16];
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof buf; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(state >> 56);
    }
    twcrc_init();
    printf("crc32c: %s\n", twcrc_have_hw ? "hw" : "portable");
    if (argc > 1 && strcmp(argv[1], "hw") == 0 && !twcrc_have_hw) {
        printf("FAIL: the CRC32 instruction path was not picked\n");
        return 1;
    }
    if (tw_crc32c("123456789", 9) != 0xE3069283u ||
        tw_crc32c_portable("123456789", 9) != 0xE3069283u) {
        printf("FAIL: check value\n");
        return 1;
    }
    int failures = 0;
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n + off <= sizeof buf && n <= 1100; n++) {
            const uint32_t want = reference(buf + off, n);
            const uint32_t got = tw_crc32c(buf + off, n), port = tw_crc32c_portable(buf + off, n);
            if (got != want || port != want) {
                if (failures++ < 10)
                    printf("FAIL: offset %zu length %zu: picked %08x portable %08x want %08x\n",
                           off, n, (unsigned)got, (unsigned)port, (unsigned)want);
            }
        }
    if (failures) return 1;
    printf("ok\n");
    return 0;
}
