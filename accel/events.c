/* KV events (R-EVENT-*), the C twin's side of kachedb_radix.reference.events (events.h).
 *
 * With events on, the tree keeps per block id the block's digest under its scheme
 * (hashing.c), its external hash (what events carry, for an int wire) and whether it is
 * known; the invariant (ev_check) is the reference recorder's: the known blocks are
 * exactly the cached ones, each with the hash its path gives it.
 *
 * An operation encodes its events as it makes them, in its mutation phase, into room
 * reserved in its preparation phase: an insert hashes its new blocks -- each chained to
 * the one before it on its path, its parent's digest read from the table -- and writes
 * one BlockStored, an eviction one BlockRemoved (the evicted blocks' external hashes,
 * read from the table), both as vLLM 0.33's msgpack (R-EVENT-6) exactly as msgspec
 * encodes the reference's structs:
 *
 *   BlockStored   map16 of 8 or 9 entries: "type": "BlockStored", block_hashes,
 *                 parent_block_hash, token_ids, block_size, lora_id (nil), medium ("GPU"),
 *                 lora_name (nil), and extra_keys ([[namespace], nil, ...]) for a first
 *                 block in a named namespace;
 *   BlockRemoved  fixmap of 3: "type": "BlockRemoved", block_hashes, medium;
 *   AllBlocksCleared  fixmap of 1: "type": "AllBlocksCleared" (reset_prefix_cache, R-EVENT-7);
 *   a batch       [ts (float64: the clock), [events], nil] -- written when taken, around
 *                 the operation's encoded events.
 *
 * Integers take msgspec's shortest form (positive fixint, uint8..64; negative fixint,
 * int8..64), an external hash of wire="bytes" a bin.  take_event_payloads() hands the
 * batches over as those bytes, with no Python object per block; take_events() decodes
 * them into the reference's structs (reference.events.decode_batch). */
#include "events.h"

#include "objects.h"
#include "tokens.h"
#include "tree.h"

/* ------------------------------------------------------------------ msgpack */

/* A tag, then v in `bytes` (1, 2, 4 or 8) big-endian bytes. */
static inline uint8_t *mp_be(uint8_t *p, uint8_t tag, uint64_t v, int bytes) {
    *p++ = tag;
    switch (bytes) {
    case 1:
        *p = (uint8_t)v;
        break;
    case 2:
        put_be16(p, (uint32_t)v);
        break;
    case 4:
        put_be32(p, (uint32_t)v);
        break;
    default:
        put_be64(p, v);
        break;
    }
    return p + bytes;
}

static inline uint8_t *mp_uint(uint8_t *p, uint64_t v) {
    if (v < 0x80) {
        *p++ = (uint8_t)v;
        return p;
    }
    if (v < 0x100) return mp_be(p, 0xcc, v, 1);
    if (v < 0x10000) return mp_be(p, 0xcd, v, 2);
    if (v < 0x100000000ULL) return mp_be(p, 0xce, v, 4);
    return mp_be(p, 0xcf, v, 8);
}

static inline uint8_t *mp_int(uint8_t *p, int64_t v) {
    if (v >= 0) return mp_uint(p, (uint64_t)v);
    if (v >= -32) {
        *p++ = (uint8_t)(int8_t)v;
        return p;
    }
    if (v >= -128) return mp_be(p, 0xd0, (uint64_t)v, 1);
    if (v >= -32768) return mp_be(p, 0xd1, (uint64_t)v, 2);
    if (v >= -2147483648LL) return mp_be(p, 0xd2, (uint64_t)v, 4);
    return mp_be(p, 0xd3, (uint64_t)v, 8);
}

static inline uint8_t *mp_array(uint8_t *p, size_t n) {
    if (n < 16) {
        *p++ = (uint8_t)(0x90 | n);
        return p;
    }
    return n < 0x10000 ? mp_be(p, 0xdc, n, 2) : mp_be(p, 0xdd, n, 4);
}

static inline uint8_t *mp_str(uint8_t *p, const char *s, size_t n) {
    if (n < 32)
        *p++ = (uint8_t)(0xa0 | n);
    else if (n < 0x100)
        p = mp_be(p, 0xd9, n, 1);
    else if (n < 0x10000)
        p = mp_be(p, 0xda, n, 2);
    else
        p = mp_be(p, 0xdb, n, 4);
    memcpy(p, s, n);
    return p + n;
}

/* A string literal (a key or a constant value). */
#define MP_LIT(p, lit) mp_str((p), (lit), sizeof(lit) - 1u)

/* The most bytes one encoded hash takes (a bin8 of a SHA-256 digest). */
#define MP_HASH_MAX (2u + HS_MAX_DIGEST)
/* An encoded string's head, at most. */
#define MP_STR_HEAD 5u

/* Block b's external hash, encoded. */
static inline uint8_t *mp_hash(const struct EvState *ev, uint8_t *p, uint32_t b) {
    const HsScheme *s = &ev->scheme;
    if (s->wire_bytes) {
        p = mp_be(p, 0xc4, s->dlen, 1);
        memcpy(p, ev->dig + (size_t)b * s->dlen, s->dlen);
        return p + s->dlen;
    }
    return s->signed_ext ? mp_int(p, (int64_t)ev->ext[b]) : mp_uint(p, ev->ext[b]);
}

/* ------------------------------------------------------------------ the scheme */

static const struct {
    const char *name;
    int kind;
    uint32_t dlen;
} SCHEMES[] = {
    {"sha256_cbor", HS_SHA256_CBOR, 32},  {"xxhash_cbor", HS_XXHASH_CBOR, 16},
    {"sha256", HS_SHA256_PICKLE, 32},     {"xxhash", HS_XXHASH_PICKLE, 16},
    {"xxh3_64", HS_XXH3_64, 8},           {"dynamo", HS_DYNAMO, 16},
    {"sglang", HS_SGLANG, 32},
    {"sglang_dynamo", HS_SGLANG_DYNAMO, 32},
};

static inline int is_vllm(int kind) { return kind <= HS_XXHASH_PICKLE; }

/* The scheme a BlockHasher names (its scheme, wire and root).  -1 with the exception set. */
static int scheme_of(PyObject *hasher, HsScheme *s) {
    memset(s, 0, sizeof(*s));
    if (!Py_IS_TYPE(hasher, (PyTypeObject *)G.BlockHasher)) {
        PyErr_Format(G.InvalidArgumentError,
                     "the C twin hashes the schemes of BlockHasher itself, not of a %s",
                     Py_TYPE(hasher)->tp_name);
        return -1;
    }
    PyObject *name = PyObject_GetAttrString(hasher, "scheme");
    if (name == NULL) return -1;
    s->kind = -1;
    for (size_t i = 0; i < sizeof(SCHEMES) / sizeof(SCHEMES[0]); i++) {
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, SCHEMES[i].name) == 0) {
            s->kind = SCHEMES[i].kind;
            s->dlen = SCHEMES[i].dlen;
        }
    }
    if (s->kind < 0) {
        PyErr_Format(G.InvalidArgumentError, "the C twin has no hash scheme %R", name);
        Py_DECREF(name);
        return -1;
    }
    Py_DECREF(name);
    s->signed_ext = s->kind == HS_SGLANG || s->kind == HS_SGLANG_DYNAMO;
    /* A hasher that reads "" as no namespace (vLLM's and Dynamo's empty salt). */
    PyObject *empty = PyObject_GetAttrString(hasher, "empty_is_none");
    if (empty == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear(); /* a BlockHasher from before the option: "" is a namespace */
    } else {
        s->empty_is_none = PyObject_IsTrue(empty);
        Py_DECREF(empty);
        if (s->empty_is_none < 0) return -1;
    }
    if (!is_vllm(s->kind)) return 0;
    PyObject *wire = PyObject_GetAttrString(hasher, "wire");
    if (wire == NULL) return -1;
    s->wire_bytes = PyUnicode_Check(wire) && PyUnicode_CompareWithASCIIString(wire, "bytes") == 0;
    Py_DECREF(wire);
    PyObject *root = PyObject_GetAttrString(hasher, "root");
    if (root == NULL) return -1;
    int ok = PyBytes_Check(root) && PyBytes_GET_SIZE(root) == (Py_ssize_t)s->dlen;
    if (ok) memcpy(s->root, PyBytes_AS_STRING(root), s->dlen);
    else PyErr_Format(PyExc_SystemError, "BlockHasher.root is %R, not %u bytes", root, s->dlen);
    Py_DECREF(root);
    return ok ? 0 : -1;
}

/* The salt of a named namespace (UTF-8, and its seeds); -1 with UnicodeEncodeError. */
static int salt_of(const HsScheme *s, PyObject *ns, HsSalt *salt) {
    memset(salt, 0, sizeof(*salt));
    if (ns == NULL || ns == Py_None) {
        hs_salt_seeds(s, salt);
        return 0;
    }
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(ns, &n); /* kept by the str: cheap again */
    if (utf8 == NULL) return -1;
    salt->named = 1;
    salt->unsalted = n == 0 && s->empty_is_none;
    salt->utf8 = utf8;
    salt->len = (size_t)n;
    salt->is_tag = ns == G.s_cache_salt;
    hs_salt_seeds(s, salt);
    return 0;
}

/* ------------------------------------------------------------------ set-up and teardown */

static void ev_free(struct EvState *ev) {
    if (ev == NULL) return;
    Py_XDECREF(ev->hasher);
    PyMem_Free(ev->dig);
    PyMem_Free(ev->ext);
    PyMem_Free(ev->known);
    PyMem_Free(ev->wire);
    PyMem_Free(ev->batches);
    PyMem_Free(ev->scratch);
    PyMem_Free(ev);
}

static inline size_t known_words(uint32_t n) { return ((size_t)n + 63u) / 64u; }

/* The per-block tables of a tree of n blocks, zeroed (calloc: pages of ids never used
 * stay untouched). */
static int ev_tables(struct EvState *ev) {
    size_t n = ev->num_blocks;
    ev->dig = PyMem_Calloc(n, ev->scheme.dlen);
    ev->ext = ev->scheme.wire_bytes ? NULL : PyMem_Calloc(n, sizeof(uint64_t));
    ev->known = PyMem_Calloc(known_words(ev->num_blocks), sizeof(uint64_t));
    if (ev->dig == NULL || (ev->ext == NULL && !ev->scheme.wire_bytes) || ev->known == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

int ev_init(TreeObject *t, PyObject *events) {
    if (events == NULL || events == Py_None) return 0;
    PyObject *hasher = PyObject_CallOneArg(G.event_hasher, events);
    if (hasher == NULL) return -1;
    if (hasher == Py_None) {
        Py_DECREF(hasher);
        return 0;
    }
    struct EvState *ev = PyMem_Calloc(1, sizeof(struct EvState));
    if (ev == NULL) {
        Py_DECREF(hasher);
        PyErr_NoMemory();
        return -1;
    }
    ev->hasher = hasher;
    ev->B = t->B;
    ev->num_blocks = t->num_blocks;
    if (scheme_of(hasher, &ev->scheme) < 0 || ev_tables(ev) < 0) {
        ev_free(ev);
        return -1;
    }
    t->ev = ev;
    return 0;
}

void ev_fini(TreeObject *t) {
    ev_free(t->ev);
    t->ev = NULL;
}

/* ------------------------------------------------------------------ reserving room */

static int grow(void *where, size_t *cap, size_t need, size_t size, size_t first) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2u;
    void *p = PyMem_Realloc(*(void **)where, c * size);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *(void **)where = p;
    *cap = c;
    return 0;
}

/* The bytes a BlockRemoved of n blocks and a BlockStored of `stored` blocks (a name of
 * salt_len bytes) take at most. */
static size_t wire_bound(const struct EvState *ev, size_t removed, size_t stored, size_t salt_len) {
    size_t hash = ev->scheme.wire_bytes ? MP_HASH_MAX : 9u;
    size_t w = 0;
    if (removed > 0) w += 64u + removed * hash;
    if (stored > 0)
        w += 192u + hash + stored * (hash + 1u + 5u * (size_t)ev->B) + MP_STR_HEAD + salt_len;
    return w;
}

static int ev_reserve(struct EvState *ev, size_t bytes, size_t salt_len) {
    if (grow(&ev->wire, &ev->cap, ev->len + bytes + HS_SLACK, 1, 1024) < 0 ||
        grow(&ev->batches, &ev->bcap, ev->nbatches + 1u, sizeof(EvBatch), 16) < 0)
        return -1;
    size_t scratch = hs_scratch_bytes(&ev->scheme, ev->B, salt_len);
    return grow(&ev->scratch, &ev->scratch_cap, scratch ? scratch : 1u, 1, 64);
}

int ev_prepare_insert(TreeObject *t, PyObject *ns, Py_ssize_t needed, Py_ssize_t nevict) {
    struct EvState *ev = t->ev;
    HsSalt salt;
    if (salt_of(&ev->scheme, needed > 0 ? ns : NULL, &salt) < 0) return -1;
    if (ev_reserve(ev, wire_bound(ev, (size_t)nevict, (size_t)needed, salt.len), salt.len) < 0)
        return -1;
    ev->salt = salt;
    return 0;
}

int ev_prepare_evict(TreeObject *t, Py_ssize_t n) {
    return ev_reserve(t->ev, wire_bound(t->ev, (size_t)n, 0, 0), 0);
}

/* The bytes of an AllBlocksCleared: a fixmap of 1, its key and its tag. */
#define MP_CLEAR_BYTES (1u + 5u + 17u)

int ev_prepare_clear(TreeObject *t) { return ev_reserve(t->ev, MP_CLEAR_BYTES, 0); }

/* ------------------------------------------------------------------ logging (infallible) */

void ev_log_store(TreeObject *t, uint32_t parent, const uint32_t *ids, const uint32_t *tok,
                  Py_ssize_t n) {
    struct EvState *ev = t->ev;
    const HsScheme *s = &ev->scheme;
    const uint32_t B = ev->B, dlen = s->dlen;
    /* The salt the blocks are hashed with; the event names the namespace either way. */
    const HsSalt *ns = ev->salt.named && !ev->salt.unsalted ? &ev->salt : NULL;
    const uint8_t *prev = parent == NIL ? NULL : ev->dig + (size_t)parent * dlen;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t b = ids[i];
        uint8_t *d = ev->dig + (size_t)b * dlen;
        /* Only a path's first block is salted by its namespace (R-EVENT-2). */
        hs_block(s, prev, tok + (size_t)i * B, B, prev == NULL ? ns : NULL, ev->scratch, d);
        if (ev->ext != NULL) ev->ext[b] = hs_external(s, d, ns);
        ev->known[b >> 6] |= (uint64_t)1 << (b & 63);
        prev = d;
    }
    int extra = parent == NIL && ev->salt.named;
    uint8_t *p = ev->wire + ev->len;
    p = mp_be(p, 0xde, extra ? 9u : 8u, 2); /* map16, as msgspec writes a struct of 16 fields */
    p = MP_LIT(p, "type");
    p = MP_LIT(p, "BlockStored");
    p = MP_LIT(p, "block_hashes");
    p = mp_array(p, (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) p = mp_hash(ev, p, ids[i]);
    p = MP_LIT(p, "parent_block_hash");
    if (parent == NIL)
        *p++ = 0xc0;
    else
        p = mp_hash(ev, p, parent);
    p = MP_LIT(p, "token_ids");
    size_t ntok = (size_t)n * B;
    p = mp_array(p, ntok);
    p = put_uint32_forms(p, tok, ntok, 0x80, 0xcc, 0xcd, 0xce);
    p = MP_LIT(p, "block_size");
    p = mp_uint(p, B);
    p = MP_LIT(p, "lora_id");
    *p++ = 0xc0;
    p = MP_LIT(p, "medium");
    p = MP_LIT(p, "GPU");
    p = MP_LIT(p, "lora_name");
    *p++ = 0xc0;
    if (extra) { /* the namespace, untagged, as the first block's extra key */
        p = MP_LIT(p, "extra_keys");
        p = mp_array(p, (size_t)n);
        *p++ = 0x91;
        p = mp_str(p, ev->salt.utf8, ev->salt.len);
        for (Py_ssize_t i = 1; i < n; i++) *p++ = 0xc0;
    }
    ev->len = (size_t)(p - ev->wire);
    ev->open++;
}

void ev_log_remove(TreeObject *t, const uint32_t *ids, Py_ssize_t n) {
    struct EvState *ev = t->ev;
    uint8_t *p = ev->wire + ev->len;
    *p++ = 0x83;
    p = MP_LIT(p, "type");
    p = MP_LIT(p, "BlockRemoved");
    p = MP_LIT(p, "block_hashes");
    p = mp_array(p, (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        p = mp_hash(ev, p, ids[i]);
        ev->known[ids[i] >> 6] &= ~((uint64_t)1 << (ids[i] & 63));
    }
    p = MP_LIT(p, "medium");
    p = MP_LIT(p, "GPU");
    ev->len = (size_t)(p - ev->wire);
    ev->open++;
}

void ev_log_clear(TreeObject *t) {
    struct EvState *ev = t->ev;
    uint8_t *p = ev->wire + ev->len;
    *p++ = 0x81; /* a struct with no fields but its tag */
    p = MP_LIT(p, "type");
    p = MP_LIT(p, "AllBlocksCleared");
    memset(ev->known, 0, known_words(ev->num_blocks) * sizeof(uint64_t)); /* every hash forgotten */
    ev->len = (size_t)(p - ev->wire);
    ev->open++;
}

void ev_flush(TreeObject *t) {
    struct EvState *ev = t->ev;
    memset(&ev->salt, 0, sizeof(ev->salt)); /* its name belongs to the call that ends */
    if (ev->open == 0) return;
    ev->batches[ev->nbatches++] = (EvBatch){ev->mark, ev->len, t->clock, ev->open};
    ev->mark = ev->len;
    ev->open = 0;
}

/* ------------------------------------------------------------------ taking them */

/* The batches as payloads (a list of bytes), the state untouched; NULL with the exception. */
static PyObject *payloads(const struct EvState *ev) {
    PyObject *list = PyList_New((Py_ssize_t)ev->nbatches);
    for (size_t i = 0; list != NULL && i < ev->nbatches; i++) {
        const EvBatch *b = &ev->batches[i];
        size_t body = b->end - b->start;
        /* An operation emits at most two events: the array's head is one byte. */
        PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(1u + 9u + 1u + body + 1u));
        if (bytes == NULL) {
            Py_CLEAR(list);
            break;
        }
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(bytes);
        *p++ = 0x93; /* [ts, events, data_parallel_rank] */
        double ts = (double)b->clock;
        uint64_t bits;
        memcpy(&bits, &ts, sizeof(bits));
        p = mp_be(p, 0xcb, bits, 8);
        p = mp_array(p, b->nevents);
        memcpy(p, ev->wire + b->start, body);
        p += body;
        *p = 0xc0;
        PyList_SET_ITEM(list, (Py_ssize_t)i, bytes);
    }
    return list;
}

static void ev_taken(struct EvState *ev) {
    ev->nbatches = 0;
    ev->len = ev->mark = 0;
}

static int events_on(TreeObject *self) {
    if (self->ev != NULL) return 1;
    PyErr_SetString(G.InvalidArgumentError, "this tree emits no events: build it with events=True");
    return 0;
}

PyObject *Tree_take_event_payloads(TreeObject *self, PyObject *unused) {
    (void)unused;
    if (!events_on(self)) return NULL;
    PyObject *list = payloads(self->ev);
    if (list != NULL) ev_taken(self->ev);
    return list;
}

PyObject *Tree_take_events(TreeObject *self, PyObject *unused) {
    (void)unused;
    if (!events_on(self)) return NULL;
    PyObject *list = payloads(self->ev);
    if (list == NULL) return NULL;
    /* Decoded with no Python code of ours in between: nothing can log meanwhile. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *batch = PyObject_CallOneArg(G.decode_batch, PyList_GET_ITEM(list, i));
        if (batch == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, batch);
    }
    ev_taken(self->ev);
    return list;
}

PyObject *Tree_get_events(TreeObject *self, void *unused) {
    (void)unused;
    if (self->ev == NULL) Py_RETURN_NONE;
    return Py_NewRef(self->ev->hasher);
}

/* Block b's external hash, as the reference's hasher.external gives it. */
static PyObject *external_of(const struct EvState *ev, uint32_t b) {
    if (ev->scheme.wire_bytes)
        return PyBytes_FromStringAndSize((const char *)ev->dig + (size_t)b * ev->scheme.dlen,
                                         ev->scheme.dlen);
    if (ev->scheme.signed_ext) return PyLong_FromLongLong((long long)(int64_t)ev->ext[b]);
    return PyLong_FromUnsignedLongLong(ev->ext[b]);
}

PyObject *Tree_event_hash(TreeObject *self, PyObject *arg) {
    uint32_t b;
    if (!events_on(self) || tree_block_id(self, arg, &b) < 0) return NULL;
    if (!ev_known(self->ev, b)) Py_RETURN_NONE;
    return external_of(self->ev, b);
}

/* ------------------------------------------------------------------ the invariant */

/* The namespace salt of every root slot (the check's), computed once. */
static HsSalt *root_salts(TreeObject *t) {
    HsSalt *salts = PyMem_Calloc(t->roots_len ? t->roots_len : 1u, sizeof(HsSalt));
    if (salts == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (uint32_t i = 0; i < t->roots_len; i++) {
        if (salt_of(&t->ev->scheme, t->roots[i].ns, &salts[i]) < 0) {
            PyMem_Free(salts);
            return NULL;
        }
    }
    return salts;
}

int ev_check(TreeObject *t) {
    struct EvState *ev = t->ev;
    if (ev == NULL) return 0;
    if (ev->open != 0 || ev->len != ev->mark ||
        (ev->nbatches > 0 && ev->batches[ev->nbatches - 1].end != ev->mark)) {
        PyErr_SetString(G.InvariantViolation, "R-EVENT-5: events logged outside an operation");
        return -1;
    }
    const uint32_t NB = t->num_blocks, B = t->B, dlen = ev->scheme.dlen;
    uint64_t *cached = PyMem_Calloc(known_words(NB), sizeof(uint64_t));
    uint32_t *slot = PyMem_Malloc(((size_t)t->nodes_len + 1u) * sizeof(uint32_t));
    HsSalt *salts = root_salts(t);
    uint8_t want[HS_MAX_DIGEST];
    int status = -1;
    if (cached == NULL || slot == NULL || salts == NULL) {
        if (salts != NULL) PyErr_NoMemory();
        goto done;
    }
    size_t longest = 0;
    for (uint32_t i = 0; i < t->roots_len; i++)
        if (salts[i].len > longest) longest = salts[i].len;
    if (grow(&ev->scratch, &ev->scratch_cap, hs_scratch_bytes(&ev->scheme, B, longest) + 1u, 1,
             64) < 0)
        goto done;
    /* Each node's namespace (its root's slot), by climbing to the nearest known one. */
    for (uint32_t n = 0; n < t->nodes_len; n++) slot[n] = NIL;
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        if (t->nodes[n].parent >= NODE_FREE || slot[n] != NIL) continue;
        uint32_t x = n;
        while (t->nodes[x].parent != NIL && slot[x] == NIL) x = t->nodes[x].parent;
        uint32_t s = slot[x] != NIL ? slot[x] : t->nodes[x].off;
        for (uint32_t y = n; y != x; y = t->nodes[y].parent) slot[y] = s;
        slot[x] = s;
    }
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent >= NODE_FREE || x->parent == NIL) continue;
        const uint32_t *ids = node_ids(t, x), *tok = node_tok(t, x);
        const Node *up = &t->nodes[x->parent];
        const HsSalt *ns = salts[slot[n]].named && !salts[slot[n]].unsalted ? &salts[slot[n]] : NULL;
        const uint8_t *prev = up->parent == NIL ? NULL : ev->dig + (size_t)node_last(t, up) * dlen;
        for (uint32_t k = 0; k < x->nblocks; k++) {
            uint32_t b = ids[k];
            cached[b >> 6] |= (uint64_t)1 << (b & 63);
            hs_block(&ev->scheme, prev, tok + (size_t)k * B, B, prev == NULL ? ns : NULL,
                     ev->scratch, want);
            const uint8_t *have = ev->dig + (size_t)b * dlen;
            if (memcmp(want, have, dlen) != 0 ||
                (ev->ext != NULL && ev->ext[b] != hs_external(&ev->scheme, have, ns))) {
                PyErr_Format(G.InvariantViolation,
                             "R-EVENT-2: block %u has a hash its path does not give", b);
                goto done;
            }
            prev = have;
        }
    }
    for (size_t w = 0; w < known_words(NB); w++) {
        uint64_t diff = cached[w] ^ ev->known[w];
        if (diff != 0) {
            uint32_t b = (uint32_t)(w * 64u) + (uint32_t)__builtin_ctzll(diff);
            PyErr_Format(G.InvariantViolation, "R-EVENT-1: block %u is %s", b,
                         ev_known(ev, b) ? "known but not cached" : "cached without a hash");
            goto done;
        }
    }
    status = 0;
done:
    PyMem_Free(cached);
    PyMem_Free(slot);
    PyMem_Free(salts);
    return status;
}

/* ------------------------------------------------------------------ clones, memory */

static int dup_bytes(void *dst, const void *src, size_t n) {
    void *p = NULL;
    if (src != NULL) {
        if ((p = PyMem_Malloc(n ? n : 1u)) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(p, src, n);
    }
    *(void **)dst = p;
    return 0;
}

int ev_copy(struct EvState **dst, const struct EvState *src) {
    *dst = NULL;
    if (src == NULL) return 0;
    struct EvState *c = PyMem_Calloc(1, sizeof(struct EvState));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *c = *src;
    c->dig = NULL;
    c->ext = c->known = NULL;
    c->wire = c->scratch = NULL;
    c->batches = NULL;
    Py_INCREF(c->hasher);
    size_t n = src->num_blocks;
    if (dup_bytes(&c->dig, src->dig, n * src->scheme.dlen) < 0 ||
        dup_bytes(&c->ext, src->ext, n * sizeof(uint64_t)) < 0 ||
        dup_bytes(&c->known, src->known, known_words(src->num_blocks) * sizeof(uint64_t)) < 0 ||
        dup_bytes(&c->wire, src->wire, src->cap) < 0 ||
        dup_bytes(&c->batches, src->batches, src->bcap * sizeof(EvBatch)) < 0 ||
        dup_bytes(&c->scratch, src->scratch, src->scratch_cap) < 0) {
        ev_free(c);
        return -1;
    }
    *dst = c;
    return 0;
}

size_t ev_bytes(const struct EvState *ev) {
    if (ev == NULL) return 0;
    size_t n = ev->num_blocks;
    return sizeof(struct EvState) + n * ev->scheme.dlen + (ev->ext ? n * sizeof(uint64_t) : 0) +
           known_words(ev->num_blocks) * sizeof(uint64_t) + ev->cap + ev->bcap * sizeof(EvBatch) +
           ev->scratch_cap;
}

/* ------------------------------------------------------------------ the test hook */

/* ------------------------------------------------------------------ one block, a chain */

/* The (internal, external) hashes of the n tokens at tok after the block whose internal
 * hash is `parent` (Py_None: a path's first block), salted by `salt`, in the forms the reference's BlockHasher gives (block_hash, external).  scratch
 * has hs_scratch_bytes(s, n, salt->len) + 1 bytes.  NULL with an exception set: a parent
 * not of the scheme's form, or no memory. */
static PyObject *block_pair(const HsScheme *sp, PyObject *parent, const uint32_t *tok, uint32_t n,
                            const HsSalt *salt, uint8_t *scratch) {
    HsScheme s = *sp;
    HsSalt seed; /* the namespace seed SGLang's Dynamo format mixes in */
    memset(&seed, 0, sizeof(seed));
    uint8_t pd[HS_MAX_DIGEST];
    if (parent == Py_None) {
        if (s.kind == HS_SGLANG_DYNAMO && !salt->unsalted) seed = *salt;
    } else if (s.kind == HS_XXH3_64) {
        uint64_t v = PyLong_Check(parent) ? PyLong_AsUnsignedLongLong(parent) : 0;
        if (!PyLong_Check(parent) || PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "an xxh3_64 parent is an int in [0, 2**64)");
            return NULL;
        }
        for (int i = 0; i < 8; i++) pd[i] = (uint8_t)(v >> (8 * i));
    } else {
        Py_ssize_t len = PyBytes_Check(parent) ? PyBytes_GET_SIZE(parent) : -1;
        if (len != (Py_ssize_t)s.dlen && !(s.kind == HS_SGLANG_DYNAMO && len == 64)) {
            PyErr_Format(PyExc_TypeError, "a parent of this scheme is %u bytes", s.dlen);
            return NULL;
        }
        memcpy(pd, PyBytes_AS_STRING(parent), s.dlen);
        if (len == 64) { /* the seed its path's namespace carries */
            memcpy(seed.seed, PyBytes_AS_STRING(parent) + 32, 32);
            seed.named = 1;
        }
    }
    int seeded = s.kind == HS_SGLANG_DYNAMO && seed.named;
    uint8_t d[HS_MAX_DIGEST];
    hs_block(&s, parent == Py_None ? NULL : pd, tok, n,
             salt->named && !salt->unsalted ? salt : NULL, scratch, d);
    PyObject *internal;
    if (s.kind == HS_XXH3_64) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--) v = v << 8 | d[i];
        internal = PyLong_FromUnsignedLongLong(v);
    } else if (seeded) {
        uint8_t both[2 * HS_MAX_DIGEST];
        memcpy(both, d, 32);
        memcpy(both + 32, seed.seed, 32);
        internal = PyBytes_FromStringAndSize((const char *)both, 64);
    } else {
        internal = PyBytes_FromStringAndSize((const char *)d, s.dlen);
    }
    if (internal == NULL) return NULL;
    PyObject *external;
    if (s.wire_bytes) {
        external = Py_NewRef(internal);
    } else {
        uint64_t e = hs_external(&s, d, seeded ? &seed : NULL);
        external = s.signed_ext ? PyLong_FromLongLong((long long)(int64_t)e)
                                : PyLong_FromUnsignedLongLong(e);
    }
    if (external == NULL) {
        Py_DECREF(internal);
        return NULL;
    }
    return Py_BuildValue("(NN)", internal, external);
}

PyObject *ev_hash_chain(PyObject *hasher, PyObject *parent, PyObject *tokens, uint32_t B,
                        PyObject *salt_obj) {
    HsScheme s;
    if (scheme_of(hasher, &s) < 0) return NULL;
    if (salt_obj != Py_None && !PyUnicode_Check(salt_obj)) {
        PyErr_Format(G.InvalidArgumentError, "namespace must be None or a str, got %s %R",
                     Py_TYPE(salt_obj)->tp_name, salt_obj);
        return NULL;
    }
    HsSalt salt, none; /* the first block's salt (a path's first, from a root), the others' */
    if (salt_of(&s, parent == Py_None ? salt_obj : Py_None, &salt) < 0) return NULL;
    (void)salt_of(&s, Py_None, &none);
    Tokens tk;
    if (tokens_get_plain(tokens, &tk) < 0) return NULL;
    Py_ssize_t blocks = B ? tk.n / (Py_ssize_t)B : 0;
    PyObject *out = PyList_New(blocks);
    uint8_t *scratch = out == NULL ? NULL
                                   : PyMem_Malloc(hs_scratch_bytes(&s, B ? B : 1u, salt.len) + 1u);
    if (out != NULL && scratch == NULL) PyErr_NoMemory();
    PyObject *prev = parent;
    for (Py_ssize_t i = 0; scratch != NULL && i < blocks; i++) {
        PyObject *pair =
            block_pair(&s, prev, tk.data + (size_t)i * B, B, i == 0 ? &salt : &none, scratch);
        if (pair == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, pair);
        prev = PyTuple_GET_ITEM(pair, 0);
    }
    if (scratch == NULL) Py_CLEAR(out);
    PyMem_Free(scratch);
    tokens_release(NULL, &tk);
    return out;
}

/* _event_block_hash(hasher, parent, tokens, salt): the test hook over block_pair. */
PyObject *mod_event_block_hash(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_event_block_hash(hasher, parent, tokens, salt) takes 4 arguments");
        return NULL;
    }
    PyObject *parent = args[1], *salt_obj = args[3];
    HsScheme s;
    if (scheme_of(args[0], &s) < 0) return NULL;
    if (salt_obj != Py_None && !PyUnicode_Check(salt_obj)) {
        PyErr_SetString(PyExc_TypeError, "salt must be None or a str");
        return NULL;
    }
    HsSalt salt;
    if (salt_of(&s, salt_obj, &salt) < 0) return NULL;
    Tokens tk;
    if (tokens_get_plain(args[2], &tk) < 0) return NULL;
    if (tk.n < 1 || tk.n > (1 << 24)) {
        tokens_release(NULL, &tk);
        PyErr_SetString(PyExc_ValueError, "a block has 1 .. 2**24 tokens");
        return NULL;
    }
    uint8_t *scratch = PyMem_Malloc(hs_scratch_bytes(&s, (uint32_t)tk.n, salt.len) + 1u);
    if (scratch == NULL) {
        tokens_release(NULL, &tk);
        return PyErr_NoMemory();
    }
    PyObject *pair = block_pair(&s, parent, tk.data, (uint32_t)tk.n, &salt, scratch);
    PyMem_Free(scratch);
    tokens_release(NULL, &tk);
    return pair;
}
