/* The wire readers and writers (tokenwire/include/tokenwire/wires.h) against plain reference
 * encoders written here: msgpack in each id's smallest form, protobuf varints, compact JSON.
 * Pseudo-random arrays of every length 0..300 in four mixes (uint16/uint32 ids only, with ids
 * below 256, with negative ids, every form at random) are written by the kernels, compared byte
 * for byte with the references, and read back; with the SSSE3 steps (where tww_init picks them)
 * and without, which must agree. The JSON writer also takes every digit-count edge at every
 * position of short vectors. A few malformed inputs must give their exact messages.
 *
 * Prints "wires: ssse3" or "wires: portable", then "ok". .ci/cross runs it under qemu-aarch64
 * and qemu-s390x (big-endian), where only the portable loops exist.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenwire/wires.h"

#define MAX_IDS 300

static uint64_t state = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 32);
}

static int32_t draw(int mix) {
    uint32_t r = next32();
    switch (mix) {
    case 0: return (int32_t)(256 + r % 151000u);                          /* uint16/uint32 */
    case 1: return r % 4 == 0 ? (int32_t)(r >> 8) % 256 : (int32_t)(256 + r % 151000u);
    case 2: return r % 5 == 0 ? -(int32_t)(r >> 12) : (int32_t)(r % 151000u);
    default: {
        static const int32_t edges[] = {0, 127, 128, 255, 256, 16383, 16384, 65535, 65536,
                                        2097151, 2097152, 268435456, 2147483647, -1, -32, -33,
                                        -128, -129, -32768, -32769, -2147483647 - 1};
        return r % 3 ? edges[(r >> 8) % (sizeof edges / sizeof edges[0])] : (int32_t)r;
    }
    }
}

static uint8_t *ref_be(uint8_t *o, uint8_t type, uint64_t v, int bytes) {
    *o++ = type;
    while (bytes--) *o++ = (uint8_t)(v >> (8 * bytes));
    return o;
}

static size_t ref_msgpack(const int32_t *ids, size_t n, uint8_t *o) {
    uint8_t *s = o;
    o = n < 16 ? ref_be(o, (uint8_t)(0x90 | n), 0, 0)
        : n < 65536 ? ref_be(o, 0xdc, n, 2) : ref_be(o, 0xdd, n, 4);
    for (size_t i = 0; i < n; i++) {
        int64_t v = ids[i];
        if (v >= 0)
            o = v < 128 ? ref_be(o, (uint8_t)v, 0, 0) : v < 256 ? ref_be(o, 0xcc, (uint64_t)v, 1)
                : v < 65536 ? ref_be(o, 0xcd, (uint64_t)v, 2) : ref_be(o, 0xce, (uint64_t)v, 4);
        else
            o = v >= -32 ? ref_be(o, (uint8_t)v, 0, 0) : v >= -128 ? ref_be(o, 0xd0, (uint64_t)v, 1)
                : v >= -32768 ? ref_be(o, 0xd1, (uint64_t)v, 2) : ref_be(o, 0xd2, (uint64_t)v, 4);
    }
    return (size_t)(o - s);
}

static uint8_t *ref_varint(uint8_t *o, uint64_t v) {
    for (; v >= 0x80; v >>= 7) *o++ = (uint8_t)(v | 0x80);
    *o++ = (uint8_t)v;
    return o;
}

static size_t ref_protobuf(const int32_t *ids, size_t n, uint8_t *o) {
    uint8_t payload[10 * MAX_IDS], *p = payload, *s = o;
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) p = ref_varint(p, (uint64_t)(int64_t)ids[i]);
    o = ref_varint(ref_varint(o, (2 << 3) | 2), (uint64_t)(p - payload));
    memcpy(o, payload, (size_t)(p - payload));
    return (size_t)(o - s) + (size_t)(p - payload);
}

static size_t ref_json(const int32_t *ids, size_t n, char *o) {
    size_t k = 0;
    o[k++] = '[';
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(o + k, i ? ",%ld" : "%ld", (long)ids[i]);
    o[k++] = ']';
    return k;
}

static int fail(const char *what, int mix, size_t n) {
    printf("FAILED: %s (mix %d, %zu ids)\n", what, mix, n);
    return 1;
}

/* Every array of one mix and length, written and read back on the current path. */
static int check_one(int mix, size_t n, const int32_t *ids, const uint64_t *table) {
    static uint8_t ref[12 * MAX_IDS + 16], got[12 * MAX_IDS + 16 + TWW_WRITE_SLACK];
    static int32_t back[MAX_IDS + 1];
    char msg[TWW_MSG_SIZE];
    size_t size, count, off, payload;
    uint8_t *exact;
    int bad;
    size = ref_msgpack(ids, n, ref);
    if (tww_msgpack_write(ids, n, got) != size || memcmp(got, ref, size))
        return fail("msgpack writer", mix, n);
    if (tww_msgpack_header(ref, size, &count, &off, msg, sizeof msg) || count != n ||
        tww_msgpack_items(ref, size, off, count, back, msg, sizeof msg) ||
        memcmp(back, ids, n * sizeof *ids))
        return fail("msgpack reader", mix, n);
    size = ref_protobuf(ids, n, ref);
    payload = tww_pb_payload_size(ids, n);
    if (tww_pb_size(n, 2, payload) != size) return fail("protobuf size", mix, n);
    /* Written into buffers of their exact size, so that a store past the end is an error
     * under AddressSanitizer: the field with its tag, and (field 0) the payload alone. */
    if (!(exact = malloc(size ? size : 1))) return fail("malloc", mix, n);
    tww_pb_write(ids, n, 2, payload, exact);
    bad = memcmp(exact, ref, size) != 0;
    free(exact);
    if (bad) return fail("protobuf writer", mix, n);
    if (tww_pb_size(n, 0, payload) != (n ? payload : 0)) return fail("protobuf size 0", mix, n);
    if (!(exact = malloc(payload ? payload : 1))) return fail("malloc", mix, n);
    tww_pb_write(ids, n, 0, payload, exact);
    bad = memcmp(exact, ref + (size - payload), payload) != 0;
    free(exact);
    if (bad) return fail("protobuf writer (payload alone)", mix, n);
    count = 0;
    if (tww_pb_read_field(ref, size, 2, back, &count, msg, sizeof msg) || count != n ||
        memcmp(back, ids, n * sizeof *ids))
        return fail("protobuf reader", mix, n);
    size = ref_json(ids, n, (char *)ref);
    if (tww_json_write(ids, n, table, got) != size || memcmp(got, ref, size))
        return fail(table ? "JSON writer (table)" : "JSON writer", mix, n);
    if (tww_json_read(ref, size, back, &count, msg, sizeof msg) || count != n ||
        memcmp(back, ids, n * sizeof *ids))
        return fail("JSON reader", mix, n);
    return 0;
}

/* The JSON writer of ids[0..n) with and without the table against the reference. */
static int check_json(const int32_t *ids, size_t n, const uint64_t *table) {
    static uint8_t ref[12 * MAX_IDS + 16], got[12 * MAX_IDS + 16 + TWW_WRITE_SLACK];
    size_t size = ref_json(ids, n, (char *)ref);
    if (tww_json_write(ids, n, NULL, got) != size || memcmp(got, ref, size)) return 1;
    if (tww_json_write(ids, n, table, got) != size || memcmp(got, ref, size)) return 1;
    return 0;
}

/* Each id on either side of a change in its digit count, of the table's end and of int32's
 * range, at every position of vectors of every length up to 57 (every position within the
 * writer's steps of four table ids and after the last), among table ids of mixed sizes. */
static int json_edges(const uint64_t *table) {
    static const int32_t edges[] = {
        0, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999, 100000, 999999, 1000000, 9999999,
        10000000, 99999999, 100000000, 999999999, 1000000000, 2147483647, 262143, 262144,
        -1, -9, -10, -99, -100, -99999999, -100000000, -999999999, -1000000000, -2147483647,
        -2147483647 - 1};
    static int32_t ids[MAX_IDS];
    size_t e, n, at, i, longest = 57;
    for (e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (n = 1; n <= longest; n++)
            for (at = 0; at < n; at++) {
                for (i = 0; i < n; i++) ids[i] = (int32_t)(next32() % 151000u) >> (i % 17);
                ids[at] = edges[e];
                if (check_json(ids, n, table)) {
                    printf("FAILED: JSON writer: %ld at %zu of %zu ids\n", (long)edges[e], at, n);
                    return 1;
                }
            }
    return 0;
}

static int check_error(const uint8_t *p, size_t n, const char *expected) {
    static int32_t out[64];
    char msg[TWW_MSG_SIZE];
    size_t count, off;
    if (tww_msgpack_header(p, n, &count, &off, msg, sizeof msg) == 0 &&
        tww_msgpack_items(p, n, off, count, out, msg, sizeof msg) == 0) {
        printf("FAILED: no error, expected: %s\n", expected);
        return 1;
    }
    if (strcmp(msg, expected)) {
        printf("FAILED: message %s\n  expected %s\n", msg, expected);
        return 1;
    }
    return 0;
}

/* 20 uint16/uint32 items (windows for the SSSE3 steps) with item 13 replaced by `item`. */
static size_t twenty_items(uint8_t *p, const uint8_t *item, size_t k) {
    size_t n = 0;
    p[n++] = 0xdc; p[n++] = 0; p[n++] = 20;
    for (int i = 0; i < 20; i++) {
        if (i == 13) { memcpy(p + n, item, k); n += k; continue; }
        if (i % 3) { p[n++] = 0xcd; p[n++] = 0x12; p[n++] = (uint8_t)i; }
        else { p[n++] = 0xce; p[n++] = 0; p[n++] = 1; p[n++] = 0x86; p[n++] = (uint8_t)i; }
    }
    return n;
}

static int errors(void) {
    static const uint8_t nil[] = {0xc0}, big[] = {0xce, 0x80, 0, 0, 0};
    static const uint8_t one[] = {0xce, 0, 0, 0, 1};
    uint8_t buf[128] = {0};
    size_t n;
    int bad = 0;
    n = twenty_items(buf, nil, 1);
    bad |= check_error(buf, n, "msgpack: item 13 at byte offset 52 is nil (type byte 0xc0), "
                               "not an integer");
    n = twenty_items(buf, big, 5);
    bad |= check_error(buf, n, "msgpack: item 13 at byte offset 52 is 2147483648, outside int32");
    n = twenty_items(buf, one, 5);
    bad |= check_error(buf, n - 1, "msgpack: truncated: item 19 at byte offset 76 needs 3 bytes, "
                                   "2 remain");
    bad |= check_error(buf, n + 1, "msgpack: 1 trailing bytes at byte offset 79, after the "
                                   "array's 20 items");
    return bad;
}

int main(void) {
    static int32_t ids[MAX_IDS];
    static uint64_t table[TWW_JSON_TABLE_IDS];
    int rounds, bad = 0;
    tww_init();
    tww_json_table_fill(table);
    printf("wires: %s\n", tww_have_ssse3 ? "ssse3" : "portable");
    for (rounds = 0; rounds < 2; rounds++) {       /* the path tww_init picked, then portable */
        for (int mix = 0; mix < 4; mix++)
            for (size_t n = 0; n <= MAX_IDS; n++) {
                for (size_t i = 0; i < n; i++) ids[i] = draw(mix);
                bad |= check_one(mix, n, ids, NULL);
                bad |= check_one(mix, n, ids, table);
                if (bad) return 1;
            }
        bad |= errors();
        bad |= json_edges(table);
        if (bad) return 1;
        tww_have_ssse3 = 0;
    }
    puts("ok");
    return 0;
}
