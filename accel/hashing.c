/* The block hashes of KV events, in C (hashing.h): each scheme of
 * kachedb_radix.reference.events.hashing, written from what that module (and vLLM 0.33,
 * Dynamo, SGLang 0.5.23, whose schemes it states) computes.
 *
 * vLLM's schemes hash a serialisation of the triple (parent, tokens, extra):
 *
 *   CBOR (cbor2's canonical encoding): an array of three -- the parent digest as a byte
 *   string, the tokens as an array of unsigned ints (each in its shortest head), and the
 *   extra keys: null, or [["cache_salt", name]] for a path's first block in a named
 *   namespace.
 *
 *   pickle (CPython's C pickler, protocol 5): PROTO 5; then frames (FRAME + the frame's
 *   length as u64 little-endian, for frames of 4 bytes or more), a frame committed at the
 *   first opcode boundary -- the start of saving an object -- at which it holds 64 KiB or
 *   more, and a payload of 64 KiB or more written outside any frame.  The parent is
 *   SHORT_BINBYTES; the tokens a tuple (TUPLE1..3 for up to three, else MARK ... TUPLE), each
 *   BININT1 / BININT2 / BININT in the signed 32-bit range or LONG1 of five bytes; the extra
 *   NONE or the tuples of the salt, strings as SHORT_BINUNICODE or BINUNICODE; a MEMOIZE
 *   after every bytes, str and tuple (memo 0: the parent, 1: the tokens, 2: "cache_salt",
 *   so a name that *is* that object is the memo reference BINGET 2); STOP.
 *
 * The digest is SHA-256 (32 bytes) or XXH3-128 in canonical form (16 bytes, big-endian).
 * Dynamo's (xxh3_64, dynamo) and SGLang's hash the tokens as little-endian u32 directly;
 * dynamo seeds every block of a path with its namespace (1337 + XXH3-64 of the name,
 * seed 1), carried down the chain in the internal hash beside the sequence hash. */
#include "hashing.h"

#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init & co: no per-call lookup, unlike EVP */
#include <openssl/sha.h>

#define XXH_INLINE_ALL
#include "vendor/xxhash/xxhash.h"

/* Dynamo's XXH3 seed (reference: DYNAMO_SEED). */
#define DYNAMO_SEED 1337u
/* SGLang 0.5.23's tag of a namespace's seed in Dynamo's event format. */
static const char NAMESPACE_TAG[] = "sglang-kv-event-namespace-v1";
static const char CACHE_SALT[] = "cache_salt";

/* ------------------------------------------------------------------ byte order */

static inline void put_le32(uint8_t *p, uint32_t v) {
#if !PY_LITTLE_ENDIAN
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

/* The tokens as little-endian u32 bytes: the tokens themselves on a little-endian host,
 * else a copy in scratch. */
static inline const uint8_t *tokens_le(const uint32_t *tok, uint32_t B, uint8_t *scratch) {
#if PY_LITTLE_ENDIAN
    (void)B;
    (void)scratch;
    return (const uint8_t *)tok;
#else
    for (uint32_t i = 0; i < B; i++) put_le32(scratch + 4u * i, tok[i]);
    return scratch;
#endif
}

/* ------------------------------------------------------------------ digests */

static void sha256(const void *a, size_t alen, const void *b, size_t blen, uint8_t out[32]) {
    SHA256_CTX c;
    SHA256_Init(&c);
    if (alen) SHA256_Update(&c, a, alen);
    SHA256_Update(&c, b, blen);
    SHA256_Final(out, &c);
}

static void digest(const HsScheme *s, const uint8_t *data, size_t n, uint8_t *out) {
    if (s->kind == HS_SHA256_CBOR || s->kind == HS_SHA256_PICKLE) {
        sha256(NULL, 0, data, n, out);
    } else {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
        memcpy(out, c.digest, 16);
    }
}

/* ------------------------------------------------------------------ CBOR */

/* A head: major type and argument, in its shortest form (canonical). */
static inline uint8_t *cbor_head(uint8_t *p, uint8_t major, uint64_t v) {
    major = (uint8_t)(major << 5);
    if (v < 24) {
        *p++ = (uint8_t)(major | v);
    } else if (v < 0x100) {
        *p++ = major | 24u;
        *p++ = (uint8_t)v;
    } else if (v < 0x10000) {
        *p++ = major | 25u;
        put_be16(p, (uint32_t)v);
        p += 2;
    } else if (v < 0x100000000ULL) {
        *p++ = major | 26u;
        put_be32(p, (uint32_t)v);
        p += 4;
    } else {
        *p++ = major | 27u;
        put_be64(p, v);
        p += 8;
    }
    return p;
}

static size_t cbor_triple(const HsScheme *s, const uint8_t *parent, const uint32_t *tok,
                          uint32_t B, const HsSalt *salt, uint8_t *out) {
    uint8_t *p = out;
    *p++ = 0x83; /* an array of three */
    p = cbor_head(p, 2, s->dlen);
    memcpy(p, parent, s->dlen);
    p += s->dlen;
    p = cbor_head(p, 4, B);
    p = put_uint32_forms(p, tok, B, 24, 0x18, 0x19, 0x1a);
    if (salt == NULL) {
        *p++ = 0xf6; /* null */
    } else {
        *p++ = 0x81;
        *p++ = 0x82;
        p = cbor_head(p, 3, sizeof(CACHE_SALT) - 1u);
        memcpy(p, CACHE_SALT, sizeof(CACHE_SALT) - 1u);
        p += sizeof(CACHE_SALT) - 1u;
        p = cbor_head(p, 3, salt->len);
        memcpy(p, salt->utf8, salt->len);
        p += salt->len;
    }
    return (size_t)(p - out);
}

/* ------------------------------------------------------------------ pickle (protocol 5) */

#define PK_FRAME_TARGET 65536u
#define PK_FRAME_HEADER 9u

typedef struct {
    uint8_t *b;
    size_t len;
    size_t frame;  /* where the open frame's header is, or SIZE_MAX */
    int framing;
} Pickle;

/* Before a write: open a frame if none is (framing on). */
static inline uint8_t *pk_at(Pickle *k, size_t n) {
    if (k->framing && k->frame == SIZE_MAX) {
        k->frame = k->len;
        k->len += PK_FRAME_HEADER;
    }
    uint8_t *at = k->b + k->len;
    k->len += n;
    return at;
}

static inline void pk_byte(Pickle *k, uint8_t op) { *pk_at(k, 1) = op; }

static void pk_commit(Pickle *k) {
    if (k->frame == SIZE_MAX) return;
    size_t n = k->len - k->frame - PK_FRAME_HEADER;
    if (n >= 4) {
        k->b[k->frame] = 0x95; /* FRAME */
        put_le64(k->b + k->frame + 1, n);
    } else {
        memmove(k->b + k->frame, k->b + k->frame + PK_FRAME_HEADER, n);
        k->len -= PK_FRAME_HEADER;
    }
    k->frame = SIZE_MAX;
}

/* The start of saving an object: a frame of 64 KiB or more is committed. */
static inline void pk_boundary(Pickle *k) {
    if (k->frame != SIZE_MAX && k->len - k->frame - PK_FRAME_HEADER >= PK_FRAME_TARGET)
        pk_commit(k);
}

static inline void pk_int(Pickle *k, uint32_t v) {
    pk_boundary(k);
    if (v < 0x100) {
        uint8_t *p = pk_at(k, 2);
        p[0] = 'K'; /* BININT1 */
        p[1] = (uint8_t)v;
    } else if (v < 0x10000) {
        uint8_t *p = pk_at(k, 3);
        p[0] = 'M'; /* BININT2 */
        p[1] = (uint8_t)v;
        p[2] = (uint8_t)(v >> 8);
    } else if (v < 0x80000000u) {
        uint8_t *p = pk_at(k, 5);
        p[0] = 'J'; /* BININT */
        put_le32(p + 1, v);
    } else {
        uint8_t *p = pk_at(k, 7);
        p[0] = 0x8a; /* LONG1: five bytes, two's complement, the top one 0 */
        p[1] = 5;
        put_le32(p + 2, v);
        p[6] = 0;
    }
}

/* A str's save: SHORT_BINUNICODE or BINUNICODE (a payload of 64 KiB or more outside any
 * frame), then MEMOIZE. */
static void pk_str(Pickle *k, const char *utf8, size_t n) {
    pk_boundary(k);
    if (n < 0x100) {
        uint8_t *p = pk_at(k, 2 + n);
        p[0] = 0x8c;
        p[1] = (uint8_t)n;
        memcpy(p + 2, utf8, n);
    } else {
        int bypass = n >= PK_FRAME_TARGET;
        if (bypass) {
            pk_commit(k);
            k->framing = 0;
        }
        uint8_t *p = pk_at(k, 5 + n);
        p[0] = 'X';
        put_le32(p + 1, (uint32_t)n);
        memcpy(p + 5, utf8, n);
        k->framing = 1;
    }
    pk_byte(k, 0x94); /* MEMOIZE */
}

static size_t pickle_triple(const HsScheme *s, const uint8_t *parent, const uint32_t *tok,
                            uint32_t B, const HsSalt *salt, uint8_t *out) {
    Pickle k = {out, 0, SIZE_MAX, 0};
    out[0] = 0x80; /* PROTO 5 */
    out[1] = 5;
    k.len = 2;
    k.framing = 1;
    pk_boundary(&k); /* the triple */
    pk_boundary(&k); /* the parent */
    uint8_t *p = pk_at(&k, 2 + s->dlen + 1);
    p[0] = 'C'; /* SHORT_BINBYTES */
    p[1] = (uint8_t)s->dlen;
    memcpy(p + 2, parent, s->dlen);
    p[2 + s->dlen] = 0x94;
    pk_boundary(&k); /* the tokens */
    if (B > 3) pk_byte(&k, '('); /* MARK */
    for (uint32_t i = 0; i < B; i++) pk_int(&k, tok[i]);
    pk_byte(&k, B > 3 ? 't' : (uint8_t)(0x84 + B)); /* TUPLE, or TUPLE1..3 */
    pk_byte(&k, 0x94);
    pk_boundary(&k); /* the extra keys */
    if (salt == NULL) {
        pk_byte(&k, 'N');
    } else {
        pk_boundary(&k); /* ("cache_salt", name) */
        pk_str(&k, CACHE_SALT, sizeof(CACHE_SALT) - 1u);
        if (salt->is_tag) {
            pk_boundary(&k);
            p = pk_at(&k, 2);
            p[0] = 'h'; /* BINGET 2 */
            p[1] = 2;
        } else {
            pk_str(&k, salt->utf8, salt->len);
        }
        pk_byte(&k, 0x86); /* TUPLE2 */
        pk_byte(&k, 0x94);
        pk_byte(&k, 0x85); /* TUPLE1 */
        pk_byte(&k, 0x94);
    }
    pk_byte(&k, 0x87); /* TUPLE3 */
    pk_byte(&k, 0x94);
    pk_byte(&k, '.'); /* STOP */
    pk_commit(&k);
    return k.len;
}

/* ------------------------------------------------------------------ the schemes */

void hs_salt_seeds(const HsScheme *s, HsSalt *salt) {
    salt->xxh_seed = salt->dyn_seed = DYNAMO_SEED;
    memset(salt->seed, 0, sizeof(salt->seed));
    if (!salt->named || salt->unsalted) return;
    if (s->kind == HS_DYNAMO) {
        /* Dynamo's request salt: an empty name is no name (its salt_seed). */
        if (salt->len > 0) salt->dyn_seed = DYNAMO_SEED + XXH3_64bits_withSeed(salt->utf8, salt->len, 1);
    } else if (s->kind == HS_XXH3_64) {
        salt->xxh_seed = DYNAMO_SEED + XXH3_64bits(salt->utf8, salt->len);
    } else if (s->kind == HS_SGLANG_DYNAMO) {
        SHA256_CTX c;
        uint8_t head[sizeof(NAMESPACE_TAG) - 1u + 1u + 8u];
        memcpy(head, NAMESPACE_TAG, sizeof(NAMESPACE_TAG) - 1u);
        head[sizeof(NAMESPACE_TAG) - 1u] = 1;
        put_le64(head + sizeof(NAMESPACE_TAG), (uint64_t)salt->len);
        SHA256_Init(&c);
        SHA256_Update(&c, head, sizeof(head));
        SHA256_Update(&c, salt->utf8, salt->len);
        SHA256_Update(&c, "\0", 1);
        SHA256_Final(salt->seed, &c);
    }
}

size_t hs_scratch_bytes(const HsScheme *s, uint32_t B, size_t salt_len) {
    switch (s->kind) {
    case HS_SHA256_CBOR:
    case HS_XXHASH_CBOR:
        return 64u + 5u * (size_t)B + salt_len + HS_SLACK;
    case HS_SHA256_PICKLE:
    case HS_XXHASH_PICKLE: {
        size_t body = 64u + 7u * (size_t)B + salt_len;
        return body + PK_FRAME_HEADER * (body / PK_FRAME_TARGET + 4u);
    }
    default:
        return PY_LITTLE_ENDIAN ? 0 : 4u * (size_t)B;
    }
}

/* Dynamo's chain: the block's local hash (XXH3-64 of its tokens under `seed`), then, after
 * a parent (whose first 8 bytes are its sequence hash), XXH3-64 (seed 1337) of the two. */
static uint64_t dynamo_chain(const uint8_t *parent, const uint32_t *tok, uint32_t B, uint64_t seed,
                             uint8_t *scratch) {
    uint64_t h = XXH3_64bits_withSeed(tokens_le(tok, B, scratch), 4u * (size_t)B, seed);
    if (parent != NULL) {
        uint8_t pair[16];
        memcpy(pair, parent, 8);
        put_le64(pair + 8, h);
        h = XXH3_64bits_withSeed(pair, 16, DYNAMO_SEED);
    }
    return h;
}

void hs_block(const HsScheme *s, const uint8_t *parent, const uint32_t *tok, uint32_t B,
              const HsSalt *salt, uint8_t *scratch, uint8_t *out) {
    size_t n;
    switch (s->kind) {
    case HS_SHA256_CBOR:
    case HS_XXHASH_CBOR:
        n = cbor_triple(s, parent != NULL ? parent : s->root, tok, B, salt, scratch);
        digest(s, scratch, n, out);
        return;
    case HS_SHA256_PICKLE:
    case HS_XXHASH_PICKLE:
        n = pickle_triple(s, parent != NULL ? parent : s->root, tok, B, salt, scratch);
        digest(s, scratch, n, out);
        return;
    case HS_XXH3_64:
        put_le64(out, dynamo_chain(parent, tok, B, salt != NULL ? salt->xxh_seed : DYNAMO_SEED,
                                   scratch));
        return;
    case HS_DYNAMO: { /* the sequence hash, then the seed every block of its path takes */
        uint64_t seed = parent != NULL ? get_le64(parent + 8)
                                       : salt != NULL ? salt->dyn_seed : DYNAMO_SEED;
        put_le64(out, dynamo_chain(parent, tok, B, seed, scratch));
        put_le64(out + 8, seed);
        return;
    }
    default: /* SGLang: the parent's digest, then the tokens */
        sha256(parent, parent != NULL ? 32u : 0u, tokens_le(tok, B, scratch), 4u * (size_t)B, out);
        return;
    }
}

uint64_t hs_external(const HsScheme *s, const uint8_t *d, const HsSalt *ns) {
    switch (s->kind) {
    case HS_XXH3_64:
    case HS_DYNAMO: /* the sequence hash */
        return get_le64(d);
    case HS_SGLANG:
    case HS_SGLANG_DYNAMO:
        if (s->kind == HS_SGLANG_DYNAMO && ns != NULL && ns->named) {
            uint8_t mixed[32];
            sha256(ns->seed, 32, d, 8, mixed);
            return get_be64(mixed);
        }
        return get_be64(d);
    default: /* vLLM's int form: the digest's low 64 bits, big-endian */
        return get_be64(d + s->dlen - 8u);
    }
}
