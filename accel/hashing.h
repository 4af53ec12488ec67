/* hashing.c: the block hashes KV events name blocks by, in C (R-EVENT-2): every scheme of
 * kachedb_radix.reference.events.hashing, byte for byte.
 *
 *   sha256_cbor, xxhash_cbor   SHA-256 / XXH3-128 of canonical CBOR [parent, [tokens], extra]
 *   sha256, xxhash             SHA-256 / XXH3-128 of the same triple pickled (protocol 5)
 *   xxh3_64, dynamo            Dynamo: XXH3-64 of the tokens (little-endian u32), chained
 *   sglang, sglang_dynamo      SHA-256 of the parent's digest and the tokens
 *
 * SHA-256 is OpenSSL's (libcrypto, linked: its SHA-NI code where the CPU has it); XXH3 is
 * xxHash's, vendored as one header (accel/vendor/xxhash/, BSD-2-Clause).  Pure functions
 * of their inputs: nothing here allocates, raises or touches a tree, so a writer's
 * mutation phase can hash. */
#ifndef ACCEL_HASHING_H
#define ACCEL_HASHING_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* ------------------------------------------------------------------ byte order, for the encoders */

static inline void put_be16(uint8_t *p, uint32_t v) {
    uint16_t x = __builtin_bswap16((uint16_t)v);
#if !PY_LITTLE_ENDIAN
    x = (uint16_t)v;
#endif
    memcpy(p, &x, 2);
}
static inline void put_be32(uint8_t *p, uint32_t v) {
#if PY_LITTLE_ENDIAN
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}
static inline void put_be64(uint8_t *p, uint64_t v) {
#if PY_LITTLE_ENDIAN
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}
static inline void put_le64(uint8_t *p, uint64_t v) {
#if !PY_LITTLE_ENDIAN
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}
static inline uint64_t get_be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if PY_LITTLE_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}
static inline uint64_t get_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if !PY_LITTLE_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* An unsigned int below 2**32 in one of four forms, chosen by its size: `tag0` for the
 * form that is the value itself (below `small`), then tag1 + 1 byte, tag2 + 2 bytes, tag3
 * + 4 bytes, all big-endian -- msgpack's (small 0x80: positive fixint, 0xcc, 0xcd, 0xce)
 * and CBOR's (small 24: the value in the head, 0x18, 0x19, 0x1a).  Written as one 8-byte
 * store and a length, so no branch depends on the value: the buffer needs 8 bytes of
 * room past the form.  Returns the end. */
static inline uint8_t *put_uint32_form(uint8_t *p, uint32_t v, uint32_t small, uint8_t tag1,
                                       uint8_t tag2, uint8_t tag3) {
#if PY_LITTLE_ENDIAN
    uint64_t w0 = v, w1 = tag1 | (uint64_t)v << 8,
             w2 = tag2 | (uint64_t)__builtin_bswap16((uint16_t)v) << 8,
             w3 = tag3 | (uint64_t)__builtin_bswap32(v) << 8;
    uint64_t w = v < small ? w0 : v < 0x100 ? w1 : v < 0x10000 ? w2 : w3;
    size_t n = 1u + (v >= small) + (v >= 0x100) + 2u * (v >= 0x10000);
    memcpy(p, &w, 8);
    return p + n;
#else
    if (v < small) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v < 0x100) {
        p[0] = tag1;
        p[1] = (uint8_t)v;
        return p + 2;
    }
    if (v < 0x10000) {
        p[0] = tag2;
        put_be16(p + 1, v);
        return p + 3;
    }
    p[0] = tag3;
    put_be32(p + 1, v);
    return p + 5;
#endif
}

/* The slack put_uint32_form needs past what it writes. */
#define HS_SLACK 8u

/* put_uint32_form for each of n values: four at a time, a group whose values all take
 * the same length written without choosing per value -- all 2**16 or more (five bytes:
 * the common case for token ids of a large vocabulary), or all in [2**8, 2**16) or more
 * (three or five: one choice) -- and any other group value by value. */
static inline uint8_t *put_uint32_forms(uint8_t *p, const uint32_t *v, size_t n, uint32_t small,
                                        uint8_t tag1, uint8_t tag2, uint8_t tag3) {
    size_t i = 0;
#if defined(__SSE2__) && PY_LITTLE_ENDIAN
    const __m128i zero = _mm_setzero_si128();
    for (; i + 4 <= n; i += 4) {
        __m128i x = _mm_loadu_si128((const __m128i *)(v + i));
        if (_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_srli_epi32(x, 16), zero)) == 0) {
            for (int k = 0; k < 4; k++, p += 5) {
                uint32_t be = __builtin_bswap32(v[i + (size_t)k]);
                p[0] = tag3;
                memcpy(p + 1, &be, 4);
            }
        } else if (_mm_movemask_epi8(_mm_cmpeq_epi32(_mm_srli_epi32(x, 8), zero)) == 0) {
            for (int k = 0; k < 4; k++) {
                uint32_t t = v[i + (size_t)k];
                uint64_t w = t >= 0x10000 ? (tag3 | (uint64_t)__builtin_bswap32(t) << 8)
                                          : (tag2 | (uint64_t)__builtin_bswap16((uint16_t)t) << 8);
                memcpy(p, &w, 8);
                p += t >= 0x10000 ? 5 : 3;
            }
        } else {
            for (int k = 0; k < 4; k++) p = put_uint32_form(p, v[i + (size_t)k], small, tag1, tag2, tag3);
        }
    }
#endif
    for (; i < n; i++) p = put_uint32_form(p, v[i], small, tag1, tag2, tag3);
    return p;
}

enum {
    HS_SHA256_CBOR,
    HS_XXHASH_CBOR,
    HS_SHA256_PICKLE,
    HS_XXHASH_PICKLE,
    HS_XXH3_64,
    HS_DYNAMO,
    HS_SGLANG,
    HS_SGLANG_DYNAMO,
};

/* The largest digest a block keeps (SHA-256's). */
#define HS_MAX_DIGEST 32u

/* A tree's scheme: which, its external form and, for vLLM's, the root hash. */
typedef struct {
    int kind;
    int wire_bytes;   /* vLLM's schemes with wire="bytes": events carry the digest */
    uint32_t dlen;    /* the digest a block keeps: 32 (SHA-256), 16 (XXH3-128; Dynamo's: its
                         sequence hash and its path's seed, u64s little-endian), 8 (xxh3_64:
                         the u64, little-endian) */
    int empty_is_none; /* the hasher hashes a namespace of "" as none */
    int signed_ext;   /* SGLang's external hashes are int64 */
    uint8_t root[HS_MAX_DIGEST]; /* vLLM's schemes: the root hash (dlen bytes) */
} HsScheme;

/* The namespace of the blocks being hashed. */
typedef struct {
    int named;          /* a named namespace (else the default one: no salt, no seed) */
    int unsalted;       /* ... that the hasher hashes as none ("" with empty_is_none) */
    const char *utf8;   /* its name, UTF-8 */
    size_t len;
    int is_tag;         /* the name is the very object "cache_salt" of a (("cache_salt",
                           name),) extra key: pickle writes it as a memo reference */
    uint64_t xxh_seed;  /* xxh3_64: a first block's seed, 1337 + XXH3-64(name) */
    uint64_t dyn_seed;  /* Dynamo's: its path's seed, 1337 + XXH3-64(name, seed 1) */
    uint8_t seed[32];   /* sglang_dynamo: the namespace's seed (SGLang's Dynamo format) */
} HsSalt;

/* Fill in the salt's seeds from its name (named, utf8, len, is_tag set). */
void hs_salt_seeds(const HsScheme *s, HsSalt *salt);

/* Bytes of scratch hs_block needs for a block of B tokens with a salt of salt_len bytes. */
size_t hs_scratch_bytes(const HsScheme *s, uint32_t B, size_t salt_len);

/* The digest of a block of B tokens after the block whose digest is `parent` (NULL: a
 * path's first block), salted by `salt` (non-NULL only for a first block in a named
 * namespace), into out[dlen]. */
void hs_block(const HsScheme *s, const uint8_t *parent, const uint32_t *tok, uint32_t B,
              const HsSalt *salt, uint8_t *scratch, uint8_t *out);

/* The external hash of digest d (an int wire): its bits (int64 for SGLang's). `ns` is the
 * block's namespace (SGLang's Dynamo format mixes its seed in; NULL: the default). */
uint64_t hs_external(const HsScheme *s, const uint8_t *d, const HsSalt *ns);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
