/* kachedb_radix.accel._radix.RouterIndex -- the C twin of
 * kachedb_radix.reference.router.RouterIndex (R-ROUTE-*): which workers hold which blocks,
 * kept from their KV events.
 *
 * Layout.  One open-addressing table of *entries*: a key is (hash, medium), its value the
 * set of workers holding that hash on that medium, a bitmask of `words` uint64 (workers
 * are numbered by slot, 64 a word).  The columns are apart (keys, tags, masks), so a probe
 * reads 8 + 1 bytes a slot and one mask only on a hit:
 *
 *   keys[i]   the hash's 64 bits: an int hash as uint64 (two's complement when
 *             negative), a bytes hash as its interned id (below)
 *   tags[i]   0: empty; else TAG_USED | TAG_NEG (a negative int) | TAG_BYTES (an interned
 *             bytes hash) | the medium's id (5 bits: MAX_MEDIA media)
 *   masks[i * words ...]  the holders
 *
 * Robin Hood linear probing (an element's distance from its home is never less than
 * its predecessor's, so a miss stops early) with backward-shift deletion (no
 * tombstones).  The capacity is any integer: the home slot is the key's 64-bit mix
 * times the capacity, high 64 bits (Lemire's range reduction), so a table past 2**20
 * slots grows by 1.25x at a load of 7/8 and its load stays between 0.7 and 0.875 -- at
 * 17 bytes a slot for up to 64 workers, at most 24.3 bytes per distinct (hash, medium),
 * fewer per holder-block when workers share prefixes; a smaller one doubles.
 *
 * Bytes hashes (BlockHasher(wire="bytes")) are interned: a dict from the bytes to a
 * small id, the id's bytes and the number of table slots naming it; an id whose last
 * slot goes is forgotten.  Media likewise get ids (never forgotten, as the reference's
 * set of media never shrinks).
 *
 * apply() reads a batch in two passes: the first checks the whole batch against the
 * schema and turns every hash into its key (a malformed batch changes nothing but the
 * worker's loss, as in the reference); the second applies the events.  Costs: an event
 * O(its blocks) expected; a query O(n * media) probes plus one per worker leaving;
 * clearing a worker, its holdings and the dump O(capacity).
 *
 * Invariants (check_invariants): every used slot's mask is non-empty and names live
 * workers only; each worker's entry count is the number of masks naming it; every slot
 * sits where Robin Hood probing puts it (no empty slot and no shorter distance between
 * its home and it); `len` counts the used slots; every interned bytes id's count is the
 * number of slots naming it; every medium id is below the number of media. */

#include "radix.h"

#define TAG_USED 0x80u
#define TAG_NEG 0x40u
#define TAG_BYTES 0x20u
#define TAG_MEDIUM 0x1Fu
#define R_MAX_MEDIA 32u
/* Masks of up to 64 words: 4,096 workers an index. */
#define R_MAX_WORDS 64u
/* The counters, in the reference's COUNTERS order. */
enum {
    C_BATCHES, C_EVENTS, C_STORED, C_REMOVED, C_DUPLICATE_STORES, C_UNKNOWN_PARENTS,
    C_UNKNOWN_REMOVALS, C_REPEATS, C_GAPS, C_RESTARTS, C_MALFORMED, C_LOST, C_CLEARS, NCOUNT
};
static const char *const COUNTER_NAMES[NCOUNT] = {
    "batches", "events", "stored", "removed", "duplicate_stores", "unknown_parents",
    "unknown_removals", "repeats", "gaps", "restarts", "malformed", "lost", "clears",
};

typedef struct {
    PyObject *key;     /* the worker (strong); NULL: the slot is free */
    uint64_t order;    /* when first seen: workers() lists them in this order */
    uint64_t expected; /* the next sequence number */
    uint64_t entries;  /* (hash, medium) entries held */
    uint64_t counts[NCOUNT];
    int stale;
} RWorker;

/* A parsed event (apply's first pass): its kind, medium and keys in the scratch. */
typedef struct {
    int kind; /* 1 stored, 2 removed, 3 cleared */
    uint8_t medium;
    int has_parent;
    uint64_t parent;
    uint8_t parent_flags;
    size_t first, n; /* keys scratch[first .. first+n) */
} REvent;

typedef struct {
    PyObject_HEAD
    PyObject *hasher;
    uint32_t B;
    /* the table */
    uint64_t *keys;
    uint8_t *tags;
    uint64_t *masks;
    size_t cap, len;
    uint32_t words; /* mask words a slot: 64 workers each, at most R_MAX_WORDS */
    uint64_t *carry; /* 3 * words: r_place's two masks in flight, r_store's new one */
    /* workers */
    RWorker *w;
    uint32_t nw;        /* worker slots in use or freed (w[0 .. nw)) */
    uint32_t wcap;
    uint32_t live;      /* workers */
    uint64_t next_order;
    PyObject *slot_of;  /* dict: worker -> int slot */
    /* media */
    PyObject *media;      /* dict: medium -> int id */
    PyObject *medium_of[R_MAX_MEDIA]; /* id -> medium (strong) */
    uint32_t nmedia;
    /* interned bytes hashes */
    PyObject *bytes_ids; /* dict: bytes -> int id */
    PyObject **bytes_of; /* id -> bytes (strong), NULL: free */
    uint64_t *bytes_rc;  /* id -> slots naming it; a free id: the next free one */
    uint64_t *bytes_next; /* id -> the next id named by no slot, NOT_QUEUED if not listed */
    uint64_t nbytes, bytes_cap, bytes_free; /* free ids: a list through bytes_rc, NIL64 ends */
    uint64_t bytes_zero; /* ids that no slot may name any more: swept after each call */
    /* apply's scratch */
    uint64_t *sk;
    uint8_t *sf;
    size_t scap;
    REvent *se;
    size_t secap;
    PyObject *weakrefs;
} RouterObject;

#define NIL64 UINT64_MAX
#define NOT_QUEUED (UINT64_MAX - 1u)

static PyObject *s_events, *s_block_hashes, *s_parent_block_hash, *s_medium, *s_chain,
    *s_external, *b_sorted, *b_repr, *kw_key_repr;
/* The outcomes without a gap, made once (an Applied is immutable). */
static PyObject *o_applied, *o_repeat, *o_restart, *o_malformed;

/* ------------------------------------------------------------------ the table */

/* The key's 64-bit mix: Fibonacci hashing (one multiply spreads every bit of k, the
 * tag's in the top byte, into the high bits that the range reduction below reads). */
static inline uint64_t r_mix(uint64_t k, uint8_t tag) {
    return (k ^ ((uint64_t)tag << 56)) * 0x9E3779B97F4A7C15ULL;
}

static inline size_t r_home(const RouterObject *r, uint64_t k, uint8_t tag) {
    return (size_t)(((__uint128_t)r_mix(k, tag) * r->cap) >> 64);
}

static inline size_t r_dist(const RouterObject *r, size_t i) {
    size_t h = r_home(r, r->keys[i], r->tags[i]);
    return i >= h ? i - h : i + r->cap - h;
}

static inline uint64_t *r_mask(const RouterObject *r, size_t i) {
    return r->masks + i * r->words;
}

static inline void mask_copy(uint64_t *dst, const uint64_t *src, uint32_t words) {
    if (words == 1) {
        *dst = *src;
    } else {
        memcpy(dst, src, words * sizeof(uint64_t));
    }
}

/* The slot of (k, tag), or SIZE_MAX. */
static size_t r_find(const RouterObject *r, uint64_t k, uint8_t tag) {
    if (r->len == 0) return SIZE_MAX;
    size_t i = r_home(r, k, tag), d = 0;
    for (;;) {
        uint8_t t = r->tags[i];
        if (t == 0) return SIZE_MAX;
        if (t == tag && r->keys[i] == k) return i;
        if (r_dist(r, i) < d) return SIZE_MAX;
        if (++i == r->cap) i = 0;
        d++;
    }
}

static size_t r_place_from(RouterObject *r, uint64_t k, uint8_t tag, const uint64_t *mask,
                           size_t i, size_t d);

/* Place (k, tag, mask) known to be absent; room is guaranteed.  Returns its slot. */
static size_t r_place(RouterObject *r, uint64_t k, uint8_t tag, const uint64_t *mask) {
    return r_place_from(r, k, tag, mask, r_home(r, k, tag), 0);
}

/* r_place's probe from slot i at distance d from the key's home (the key is absent and
 * no slot before i on its probe sequence can take it). */
static size_t r_place_from(RouterObject *r, uint64_t k, uint8_t tag, const uint64_t *mask,
                           size_t i, size_t d) {
    const uint32_t W = r->words;
    uint64_t *cm = r->carry, *sm = r->carry + W;
    mask_copy(cm, mask, W);
    size_t placed = SIZE_MAX;
    for (;;) {
        if (r->tags[i] == 0) {
            r->keys[i] = k;
            r->tags[i] = tag;
            mask_copy(r_mask(r, i), cm, W);
            if (placed == SIZE_MAX) placed = i;
            break;
        }
        size_t rd = r_dist(r, i);
        if (rd < d) { /* the richer resident moves on; the carried one takes its slot */
            uint64_t k2 = r->keys[i];
            uint8_t t2 = r->tags[i];
            mask_copy(sm, r_mask(r, i), W);
            r->keys[i] = k;
            r->tags[i] = tag;
            mask_copy(r_mask(r, i), cm, W);
            if (placed == SIZE_MAX) placed = i;
            k = k2;
            tag = t2;
            uint64_t *tmp = cm;
            cm = sm;
            sm = tmp;
            d = rd;
        }
        if (++i == r->cap) i = 0;
        d++;
    }
    r->len++;
    return placed;
}

/* Worker slot s stores (k, tag): 1 a new entry for it, 0 it held it already.  One probe
 * sequence finds the key or, where Robin Hood order shows it absent, inserts it.  Room
 * is guaranteed. */
static int r_store(RouterObject *r, uint64_t k, uint8_t tag, uint32_t s) {
    size_t i = r_home(r, k, tag), d = 0;
    for (;;) {
        uint8_t t = r->tags[i];
        if (t == 0 || r_dist(r, i) < d) break; /* absent: it goes here */
        if (t == tag && r->keys[i] == k) {
            uint64_t *m = r_mask(r, i), bit = (uint64_t)1 << (s & 63);
            if (m[s >> 6] & bit) return 0;
            m[s >> 6] |= bit;
            return 1;
        }
        if (++i == r->cap) i = 0;
        d++;
    }
    uint64_t *one = r->carry + 2u * r->words; /* a third scratch mask */
    memset(one, 0, r->words * sizeof(uint64_t));
    one[s >> 6] = (uint64_t)1 << (s & 63);
    r_place_from(r, k, tag, one, i, d);
    return 1;
}

/* Remove slot i, shifting its cluster's later members back. */
static void r_delete(RouterObject *r, size_t i) {
    for (;;) {
        size_t j = i + 1 == r->cap ? 0 : i + 1;
        if (r->tags[j] == 0 || r_dist(r, j) == 0) break;
        r->keys[i] = r->keys[j];
        r->tags[i] = r->tags[j];
        mask_copy(r_mask(r, i), r_mask(r, j), r->words);
        i = j;
    }
    r->tags[i] = 0;
    r->len--;
}

/* Rebuild the table with `cap` slots of `words` mask words.  -1 (MemoryError) changes
 * nothing. */
static int r_rebuild(RouterObject *r, size_t cap, uint32_t words) {
    uint64_t *keys = PyMem_Malloc(cap * sizeof(uint64_t));
    uint8_t *tags = PyMem_Calloc(cap, 1);
    uint64_t *masks = PyMem_Calloc(cap * words, sizeof(uint64_t));
    uint64_t *carry = PyMem_Malloc(3u * words * sizeof(uint64_t));
    if (!keys || !tags || !masks || !carry) {
        PyMem_Free(keys);
        PyMem_Free(tags);
        PyMem_Free(masks);
        PyMem_Free(carry);
        PyErr_NoMemory();
        return -1;
    }
    RouterObject old = *r;
    r->keys = keys;
    r->tags = tags;
    r->masks = masks;
    r->carry = carry;
    r->cap = cap;
    r->len = 0;
    r->words = words;
    uint64_t wide[64];
    for (size_t i = 0; i < old.cap; i++) {
        if (old.tags[i] == 0) continue;
        memset(wide, 0, words * sizeof(uint64_t));
        memcpy(wide, old.masks + i * old.words, old.words * sizeof(uint64_t));
        r_place(r, old.keys[i], old.tags[i], wide);
    }
    PyMem_Free(old.keys);
    PyMem_Free(old.tags);
    PyMem_Free(old.masks);
    PyMem_Free(old.carry);
    return 0;
}

/* Room for `more` new slots at a load of at most 7/8: a small table doubles (its rebuilds
 * then cost one move per entry in all), a big one grows by 1.25x (its load stays at or
 * above 0.7, so its bytes per entry at or below 17 / 0.7). */
#define R_BIG_TABLE ((size_t)1 << 20)
static int r_reserve(RouterObject *r, size_t more) {
    size_t need = r->len + more;
    if (need * 8u <= r->cap * 7u) return 0;
    size_t cap = r->cap < 16u ? 16u : r->cap;
    while (need * 8u > cap * 7u) cap += cap < R_BIG_TABLE ? cap : cap / 4u;
    return r_rebuild(r, cap, r->words);
}

/* ------------------------------------------------------------------ keys of hashes */

/* The key of an event's hash: 1 done, 0 not a hash (the batch is malformed), -1 error.
 * A bytes hash not interned yet is interned with no slot naming it (dropped at the end
 * of the call if none comes to). */
static int r_intern(RouterObject *r, PyObject *h, uint64_t *k);

/* An int's sign and, if it has at most 64 bits, its magnitude: 1 it fits, 0 it does
 * not, -1 an error.  CPython 3.11-3.13 store 30-bit digits (PYLONG_BITS_IN_DIGIT 30 on
 * every platform we build for), so a hash is read off its digits in a few instructions;
 * the public API (bit length, then the masked value) is the fallback elsewhere. */
static inline int long_magnitude(PyObject *h, int *sign, uint64_t *mag) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && PYLONG_BITS_IN_DIGIT == 30
    const PyLongObject *v = (const PyLongObject *)h;
#if PY_VERSION_HEX >= 0x030C0000
    uintptr_t tag = v->long_value.lv_tag;
    size_t n = (size_t)(tag >> 3);
    *sign = 1 - (int)(tag & 3);
    const digit *d = v->long_value.ob_digit;
#else
    Py_ssize_t size = Py_SIZE(v);
    size_t n = (size_t)(size < 0 ? -size : size);
    *sign = size < 0 ? -1 : size > 0;
    const digit *d = v->ob_digit;
#endif
    if (n > 3 || (n == 3 && d[2] >> 4)) return 0; /* 3 digits: 90 bits, 64 if d[2] < 16 */
    uint64_t m = 0;
    for (size_t i = n; i-- > 0;) m = (m << 30) | d[i];
    *mag = m;
    return 1;
#else
    *sign = _PyLong_Sign(h);
    size_t bits = _PyLong_NumBits(h);
    if (bits == (size_t)-1) return -1;
    if (bits > 64) return 0;
    uint64_t low = PyLong_AsUnsignedLongLongMask(h);
    *mag = *sign < 0 ? (uint64_t)0 - low : low;
    return 1;
#endif
}

static int r_key(RouterObject *r, PyObject *h, uint64_t *k, uint8_t *flags) {
    if (PyLong_CheckExact(h) || (PyLong_Check(h) && !PyBool_Check(h))) {
        /* [-2**63, 2**64): a magnitude of at most 64 bits, and for a negative one of 64
         * bits exactly 2**63.  The key is the low 64 bits in two's complement. */
        int sign = 0;
        uint64_t mag = 0;
        int fits = long_magnitude(h, &sign, &mag);
        if (fits < 0) return -1;
        if (!fits || (sign < 0 && mag > (uint64_t)1 << 63)) return 0;
        *k = sign < 0 ? (uint64_t)0 - mag : mag;
        *flags = sign < 0 ? TAG_NEG : 0;
        return 1;
    }
    if (!PyBytes_Check(h)) return 0;
    PyObject *exact = PyBytes_CheckExact(h)
                          ? Py_NewRef(h)
                          : PyBytes_FromStringAndSize(PyBytes_AS_STRING(h), PyBytes_GET_SIZE(h));
    if (exact == NULL) return -1;
    int got = r_intern(r, exact, k);
    Py_DECREF(exact);
    if (got < 0) return -1;
    *flags = TAG_BYTES;
    return 1;
}

static inline void r_bytes_queue(RouterObject *r, uint64_t id) {
    if (r->bytes_next[id] != NOT_QUEUED) return;
    r->bytes_next[id] = r->bytes_zero;
    r->bytes_zero = id;
}

/* The id of exact bytes h, interned if new (and queued: dropped after the call unless a
 * slot comes to name it).  0, or -1 with the exception set. */
static int r_intern(RouterObject *r, PyObject *h, uint64_t *k) {
    PyObject *id = PyDict_GetItemWithError(r->bytes_ids, h);
    if (id == NULL) {
        if (PyErr_Occurred()) return -1;
        if (r->bytes_free == NIL64 && r->nbytes == r->bytes_cap) {
            uint64_t cap = r->bytes_cap ? r->bytes_cap * 2u : 64u;
            PyObject **of = PyMem_Realloc(r->bytes_of, cap * sizeof(PyObject *));
            if (of == NULL) goto oom;
            r->bytes_of = of;
            uint64_t *rc = PyMem_Realloc(r->bytes_rc, cap * sizeof(uint64_t));
            if (rc == NULL) goto oom;
            r->bytes_rc = rc;
            uint64_t *next = PyMem_Realloc(r->bytes_next, cap * sizeof(uint64_t));
            if (next == NULL) goto oom;
            r->bytes_next = next;
            r->bytes_cap = cap;
        }
        uint64_t n = r->bytes_free != NIL64 ? r->bytes_free : r->nbytes;
        PyObject *nid = PyLong_FromUnsignedLongLong(n);
        if (nid == NULL) return -1;
        int bad = PyDict_SetItem(r->bytes_ids, h, nid);
        Py_DECREF(nid);
        if (bad < 0) return -1;
        if (n == r->bytes_free) {
            r->bytes_free = r->bytes_rc[n];
        } else {
            r->nbytes++;
        }
        r->bytes_of[n] = Py_NewRef(h);
        r->bytes_rc[n] = 0;
        r->bytes_next[n] = NOT_QUEUED;
        r_bytes_queue(r, n);
        *k = n;
    } else {
        *k = PyLong_AsUnsignedLongLong(id);
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* The hash object a key names (a new reference). */
static PyObject *r_hash_object(const RouterObject *r, uint64_t k, uint8_t tag) {
    if (tag & TAG_BYTES) return Py_NewRef(r->bytes_of[k]);
    if (tag & TAG_NEG) return PyLong_FromLongLong((long long)k);
    return PyLong_FromUnsignedLongLong(k);
}

static void r_bytes_release(RouterObject *r, uint64_t id) {
    PyObject *b = r->bytes_of[id];
    if (PyDict_DelItem(r->bytes_ids, b) < 0) PyErr_Clear(); /* an exact bytes key: cannot fail */
    Py_DECREF(b);
    r->bytes_of[id] = NULL;
    r->bytes_rc[id] = r->bytes_free;
    r->bytes_free = id;
}

/* Forget the interned bytes no slot names any more (at the end of a call: an id freed
 * inside a batch may be named again by a later event of it). */
static void r_bytes_sweep(RouterObject *r) {
    while (r->bytes_zero != NIL64) {
        uint64_t id = r->bytes_zero;
        r->bytes_zero = r->bytes_next[id];
        r->bytes_next[id] = NOT_QUEUED;
        if (r->bytes_of[id] != NULL && r->bytes_rc[id] == 0) r_bytes_release(r, id);
    }
}

/* ------------------------------------------------------------------ workers and media */

static int r_medium_id(RouterObject *r, PyObject *medium, uint8_t *out, int add) {
    PyObject *id = PyDict_GetItemWithError(r->media, medium);
    if (id != NULL) {
        *out = (uint8_t)PyLong_AsLong(id);
        return 1;
    }
    if (PyErr_Occurred()) return -1;
    if (!add || r->nmedia >= R_MAX_MEDIA) return 0;
    uint32_t n = r->nmedia;
    PyObject *nid = PyLong_FromUnsignedLong(n);
    if (nid == NULL) return -1;
    int bad = PyDict_SetItem(r->media, medium, nid);
    Py_DECREF(nid);
    if (bad < 0) return -1;
    r->medium_of[n] = Py_NewRef(medium);
    r->nmedia++;
    *out = (uint8_t)n;
    return 1;
}

/* The slot of `worker`, or -1 (none: *found 0; an error: the exception set). */
static Py_ssize_t r_worker(RouterObject *r, PyObject *worker) {
    PyObject *slot = PyDict_GetItemWithError(r->slot_of, worker);
    if (slot == NULL) return -1;
    return PyLong_AsSsize_t(slot);
}

static Py_ssize_t r_worker_known(RouterObject *r, PyObject *worker) {
    Py_ssize_t s = r_worker(r, worker);
    if (s < 0 && !PyErr_Occurred())
        PyErr_Format(G.InvalidArgumentError, "no worker %R in this index", worker);
    return s;
}

/* The slot of `worker`, made if new (setdefault; *created says so). */
static Py_ssize_t r_worker_add(RouterObject *r, PyObject *worker, int *created) {
    *created = 0;
    Py_ssize_t s = r_worker(r, worker);
    if (s >= 0 || PyErr_Occurred()) return s;
    uint32_t slot = r->nw;
    for (uint32_t i = 0; i < r->nw; i++)
        if (r->w[i].key == NULL) {
            slot = i;
            break;
        }
    if (slot == r->nw) {
        if (r->nw == r->wcap) {
            uint32_t cap = r->wcap ? r->wcap * 2u : 8u;
            RWorker *w = PyMem_Realloc(r->w, cap * sizeof(RWorker));
            if (w == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            r->w = w;
            r->wcap = cap;
        }
        if (slot >= 64u * r->words) { /* a mask word more for every slot */
            if (r->words == R_MAX_WORDS) {
                PyErr_Format(G.InvalidArgumentError,
                             "an index holds at most %u workers (accel)", 64u * R_MAX_WORDS);
                return -1;
            }
            if (r_rebuild(r, r->cap ? r->cap : 16u, r->words + 1u) < 0) return -1;
        }
    }
    PyObject *n = PyLong_FromUnsignedLong(slot);
    if (n == NULL) return -1;
    int bad = PyDict_SetItem(r->slot_of, worker, n);
    Py_DECREF(n);
    if (bad < 0) return -1;
    RWorker *x = &r->w[slot];
    memset(x, 0, sizeof(*x));
    x->key = Py_NewRef(worker);
    x->order = r->next_order++;
    if (slot == r->nw) r->nw++;
    r->live++;
    *created = 1;
    return (Py_ssize_t)slot;
}

/* Undo r_worker_add's making of worker slot s (a call that then failed): nothing held. */
static void r_worker_unadd(RouterObject *r, uint32_t s) {
    if (PyDict_DelItem(r->slot_of, r->w[s].key) < 0) PyErr_Clear(); /* hashed before: no code fails */
    Py_CLEAR(r->w[s].key);
    r->live--;
}

/* Forget the media given ids since there were `before` (a call that did not apply). */
static void r_media_undo(RouterObject *r, uint32_t before) {
    while (r->nmedia > before) {
        PyObject *medium = r->medium_of[--r->nmedia];
        if (PyDict_DelItem(r->media, medium) < 0) PyErr_Clear(); /* None or an exact str */
        Py_DECREF(medium);
    }
}

static inline int mask_has(const uint64_t *m, uint32_t s) { return (int)((m[s >> 6] >> (s & 63)) & 1u); }

static inline int mask_empty(const uint64_t *m, uint32_t words) {
    for (uint32_t i = 0; i < words; i++)
        if (m[i]) return 0;
    return 1;
}

/* Drop every entry of worker slot s (its cause -- a clear, a restart, a loss -- is
 * counted by the caller).  O(capacity). */
static void r_clear(RouterObject *r, uint32_t s) {
    RWorker *x = &r->w[s];
    if (x->entries == 0 || r->len == 0) return;
    /* Start just past an empty slot: a deletion shifts only later members of a cluster
     * back, never across an empty slot, so nothing is skipped or seen twice. */
    size_t start = 0;
    while (r->tags[start] != 0) start++;
    size_t i = start + 1 == r->cap ? 0 : start + 1;
    for (size_t seen = 0; seen < r->cap && x->entries > 0;) {
        if (r->tags[i] != 0 && mask_has(r_mask(r, i), s)) {
            uint64_t *m = r_mask(r, i);
            m[s >> 6] &= ~((uint64_t)1 << (s & 63));
            x->entries--;
            if (mask_empty(m, r->words)) {
                uint8_t tag = r->tags[i];
                uint64_t k = r->keys[i];
                r_delete(r, i);
                if ((tag & TAG_BYTES) && --r->bytes_rc[k] == 0) r_bytes_queue(r, k);
                continue; /* slot i holds the next member now, if any */
            }
        }
        if (++i == r->cap) i = 0;
        seen++;
    }
}

static void r_lose(RouterObject *r, uint32_t s) {
    r->w[s].counts[C_LOST]++;
    r_clear(r, s);
    r->w[s].stale = 1;
}

/* Whether worker s holds hash (k, flags) on any medium. */
static int r_holds_any(const RouterObject *r, uint32_t s, uint64_t k, uint8_t flags) {
    for (uint32_t m = 0; m < r->nmedia; m++) {
        size_t i = r_find(r, k, (uint8_t)(TAG_USED | flags | m));
        if (i != SIZE_MAX && mask_has(r_mask(r, i), s)) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ apply */

static int r_scratch(RouterObject *r, size_t keys, size_t events) {
    if (keys > r->scap) {
        size_t cap = r->scap * 2u > keys ? r->scap * 2u : keys;
        if (cap < 64u) cap = 64u;
        uint64_t *k = PyMem_Realloc(r->sk, cap * sizeof(uint64_t));
        if (k == NULL) goto oom;
        r->sk = k;
        uint8_t *f = PyMem_Realloc(r->sf, cap);
        if (f == NULL) goto oom;
        r->sf = f;
        r->scap = cap;
    }
    if (events > r->secap) {
        size_t cap = events < 16u ? 16u : events;
        REvent *e = PyMem_Realloc(r->se, cap * sizeof(REvent));
        if (e == NULL) goto oom;
        r->se = e;
        r->secap = cap;
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* The first pass: check `events` against the schema and fill the scratch.  1 valid, 0
 * malformed, -1 error.  New media are given ids (undone by the caller when malformed). */
static int r_parse(RouterObject *r, PyObject *events, Py_ssize_t *nev) {
    if (!PyList_Check(events)) return 0;
    Py_ssize_t n = PyList_GET_SIZE(events);
    if (r_scratch(r, 0, (size_t)n) < 0) return -1;
    size_t at = 0;
    for (Py_ssize_t e = 0; e < n; e++) {
        /* Read through the list each time: a struct's attribute runs no code, but the
         * list is checked anyway, not trusted to keep its length. */
        if (e >= PyList_GET_SIZE(events)) return 0;
        PyObject *ev = PyList_GET_ITEM(events, e);
        REvent *x = &r->se[e];
        memset(x, 0, sizeof(*x));
        /* A decoded payload's events (what a router reads of them, reference/router/wire.py)
         * or the schema's own structs (a batch built in-process). */
        PyTypeObject *type = Py_TYPE(ev);
        if (type == (PyTypeObject *)G.RoutedCleared || type == (PyTypeObject *)G.AllBlocksCleared) {
            x->kind = 3;
            continue;
        }
        if (type == (PyTypeObject *)G.RoutedStored || type == (PyTypeObject *)G.BlockStored)
            x->kind = 1;
        else if (type == (PyTypeObject *)G.RoutedRemoved || type == (PyTypeObject *)G.BlockRemoved)
            x->kind = 2;
        else
            return 0;
        PyObject *medium = PyObject_GetAttr(ev, s_medium);
        if (medium == NULL) return -1;
        int got = (medium == Py_None || PyUnicode_Check(medium))
                      ? r_medium_id(r, medium, &x->medium, 1)
                      : 0;
        Py_DECREF(medium);
        if (got <= 0) return got;
        if (x->kind == 1) {
            PyObject *parent = PyObject_GetAttr(ev, s_parent_block_hash);
            if (parent == NULL) return -1;
            if (parent != Py_None) {
                x->has_parent = 1;
                got = r_key(r, parent, &x->parent, &x->parent_flags);
            }
            Py_DECREF(parent);
            if (got <= 0) return got;
        }
        PyObject *hashes = PyObject_GetAttr(ev, s_block_hashes);
        if (hashes == NULL) return -1;
        x->first = at;
        Py_ssize_t m = PyList_Check(hashes) ? PyList_GET_SIZE(hashes) : -1;
        if (m < 0) {
            Py_DECREF(hashes);
            return 0;
        }
        if (r_scratch(r, at + (size_t)m, 0) < 0) {
            Py_DECREF(hashes);
            return -1;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            got = r_key(r, PyList_GET_ITEM(hashes, j), &r->sk[at + j], &r->sf[at + j]);
            if (got <= 0) {
                Py_DECREF(hashes);
                return got;
            }
        }
        Py_DECREF(hashes);
        x->n = (size_t)m;
        at += (size_t)m;
    }
    *nev = n;
    return 1;
}

/* The second pass: apply the parsed events of worker slot s.  Room for every store was
 * reserved.  Cannot fail. */
static void r_apply_events(RouterObject *r, uint32_t s, Py_ssize_t nev) {
    RWorker *x = &r->w[s];
    for (Py_ssize_t e = 0; e < nev; e++) {
        const REvent *ev = &r->se[e];
        x->counts[C_EVENTS]++;
        if (ev->kind == 3) {
            x->counts[C_CLEARS]++;
            r_clear(r, s);
            x->stale = 0;
            continue;
        }
        if (ev->kind == 1 && ev->has_parent && !r_holds_any(r, s, ev->parent, ev->parent_flags))
            x->counts[C_UNKNOWN_PARENTS]++;
        for (size_t j = ev->first; j < ev->first + ev->n; j++) {
            uint8_t tag = (uint8_t)(TAG_USED | r->sf[j] | ev->medium);
            uint64_t k = r->sk[j];
            if (ev->kind == 1) {
                size_t before = r->len;
                if (!r_store(r, k, tag, s)) {
                    x->counts[C_DUPLICATE_STORES]++;
                    continue;
                }
                if ((tag & TAG_BYTES) && r->len > before) r->bytes_rc[k]++;
                x->entries++;
                x->counts[C_STORED]++;
            } else {
                size_t i = r_find(r, k, tag);
                if (i == SIZE_MAX || !mask_has(r_mask(r, i), s)) {
                    x->counts[C_UNKNOWN_REMOVALS]++;
                    continue;
                }
                uint64_t *m = r_mask(r, i);
                m[s >> 6] &= ~((uint64_t)1 << (s & 63));
                if (mask_empty(m, r->words)) {
                    r_delete(r, i);
                    if ((tag & TAG_BYTES) && --r->bytes_rc[k] == 0) r_bytes_queue(r, k);
                }
                x->entries--;
                x->counts[C_REMOVED]++;
            }
        }
    }
}

/* Positional-or-keyword arguments of a METH_FASTCALL | METH_KEYWORDS call: out[i] for
 * names[i], required below `required`, else left as given (a default).  -1: TypeError. */
static int fc_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                   const char *const *names, int n, int required, PyObject **out) {
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < n && PyUnicode_CompareWithASCIIString(key, names[j]) != 0) j++;
        if (j == n || j < nargs) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated argument %R", fname, key);
            return -1;
        }
        out[j] = args[nargs + i];
    }
    for (int j = 0; j < required; j++)
        if (out[j] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, names[j]);
            return -1;
        }
    return 0;
}

static int parse_seq(PyObject *obj, uint64_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) goto bad;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow < 0 || (overflow == 0 && v < 0)) goto bad;
    if (overflow > 0) {
        PyErr_Format(G.InvalidArgumentError, "a sequence number above 2**63 is not supported, got %R", obj);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
bad:
    PyErr_Format(G.InvalidArgumentError, "a sequence number is an int >= 0, got %R", obj);
    return -1;
}

static PyObject *r_gap(uint64_t first, uint64_t last) {
    return PyObject_CallFunction(G.Applied, "s(KK)", "gap", (unsigned long long)first,
                                 (unsigned long long)last);
}

static PyObject *Router_apply(RouterObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    static const char *const names[] = {"worker", "seq", "batch"};
    PyObject *a[3] = {NULL, NULL, NULL};
    if (fc_args("apply", args, nargs, kwnames, names, 3, 3, a) < 0) return NULL;
    PyObject *worker = a[0], *batch = a[2];
    uint64_t seq;
    if (parse_seq(a[1], &seq) < 0) return NULL;
    int is_bytes = PyBytes_Check(batch);
    if (!is_bytes && !PyObject_TypeCheck(batch, (PyTypeObject *)G.KVEventBatch)) {
        PyErr_Format(G.InvalidArgumentError,
                     "a batch is a KVEventBatch or its payload bytes, got %s",
                     Py_TYPE(batch)->tp_name);
        return NULL;
    }
    int created;
    uint32_t media_before = self->nmedia;
    Py_ssize_t s = r_worker_add(self, worker, &created);
    if (s < 0) return NULL;
    uint64_t expected = self->w[s].expected;
    PyObject *decoded = NULL, *events = NULL, *res = NULL;
    if (seq < expected && seq != 0) {
        res = Py_NewRef(o_repeat);
        self->w[s].counts[C_REPEATS]++;
        return res;
    }
    if (seq > expected) {
        if ((res = r_gap(expected, seq - 1)) == NULL) goto error;
        self->w[s].counts[C_GAPS]++;
        return res;
    }
    int restart = seq == 0 && expected > 0;
    if (is_bytes) {
        decoded = PyObject_CallOneArg(G.decode_for_router, batch);
        if (decoded == NULL) {
            if (!PyErr_ExceptionMatches(G.EventDecodeError)) goto error;
            PyErr_Clear();
        }
        batch = decoded;
    }
    int valid = 0;
    Py_ssize_t nev = 0;
    if (batch != NULL) {
        events = PyObject_GetAttr(batch, s_events);
        if (events == NULL) goto error;
        valid = r_parse(self, events, &nev);
        if (valid < 0) goto error;
    }
    /* The stores' room (every one may be new) before anything changes. */
    size_t stores = 0;
    for (Py_ssize_t e = 0; valid && e < nev; e++)
        if (self->se[e].kind == 1) stores += self->se[e].n;
    if (valid && r_reserve(self, stores) < 0) goto error;
    res = Py_NewRef(!valid ? o_malformed : restart ? o_restart : o_applied);
    Py_XDECREF(events);
    Py_XDECREF(decoded);
    /* ---- nothing below fails */
    RWorker *x = &self->w[s]; /* the worker table may have moved (a new worker) */
    if (!valid) {
        /* Malformed: media named by this batch alone are forgotten (as the reference
         * adds a batch's media only when it applies it). */
        r_media_undo(self, media_before);
        x->counts[C_MALFORMED]++;
        x->expected = seq + 1;
        r_lose(self, (uint32_t)s);
        r_bytes_sweep(self);
        return res;
    }
    if (restart) {
        x->counts[C_RESTARTS]++;
        r_clear(self, (uint32_t)s);
        x->stale = 0;
    }
    x->expected = seq + 1;
    x->counts[C_BATCHES]++;
    r_apply_events(self, (uint32_t)s, nev);
    r_bytes_sweep(self);
    return res;
error: /* nothing changed: what the call made is undone */
    Py_XDECREF(events);
    Py_XDECREF(decoded);
    r_media_undo(self, media_before);
    r_bytes_sweep(self);
    if (created) r_worker_unadd(self, (uint32_t)s);
    return NULL;
}

static PyObject *Router_lost(RouterObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    static const char *const names[] = {"worker", "resume_at"};
    PyObject *a[2] = {NULL, NULL};
    if (fc_args("lost", args, nargs, kwnames, names, 2, 2, a) < 0) return NULL;
    uint64_t resume;
    if (parse_seq(a[1], &resume) < 0) return NULL;
    int created;
    Py_ssize_t s = r_worker_add(self, a[0], &created);
    if (s < 0) return NULL;
    self->w[s].expected = resume;
    r_lose(self, (uint32_t)s);
    r_bytes_sweep(self);
    Py_RETURN_NONE;
}

static PyObject *Router_remove_worker(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    if (PyDict_DelItem(self->slot_of, worker) < 0) return NULL;
    r_clear(self, (uint32_t)s);
    r_bytes_sweep(self);
    RWorker *x = &self->w[s];
    Py_CLEAR(x->key);
    self->live--;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ queries */

/* Set out[worker] = depth for every worker slot in mask word w's bits `bits`. */
static int r_emit(RouterObject *self, PyObject *out, uint32_t w, uint64_t bits, Py_ssize_t depth) {
    if (!bits) return 0;
    PyObject *value = PyLong_FromSsize_t(depth); /* a cached small int up to 256 */
    if (value == NULL) return -1;
    while (bits) {
        uint32_t s = w * 64u + (uint32_t)__builtin_ctzll(bits);
        bits &= bits - 1;
        if (PyDict_SetItem(out, self->w[s].key, value) < 0) {
            Py_DECREF(value);
            return -1;
        }
    }
    Py_DECREF(value);
    return 0;
}

/* How far ahead a query prefetches the home slots of its next hashes: a big table's
 * probes are cache misses, and these overlap. */
#define R_PREFETCH 4

/* r_depths for the common case: up to 64 workers, one medium.  The dict is made once
 * the first hash's holders are known, sized for them (they are all it can hold). */
static PyObject *r_depths_one(RouterObject *self, const uint64_t *k, const uint8_t *f,
                              Py_ssize_t n) {
    const uint8_t used = (uint8_t)TAG_USED;
    size_t i = r_find(self, k[0], (uint8_t)(used | f[0]));
    uint64_t active = i == SIZE_MAX ? 0 : self->masks[i];
    PyObject *out = _PyDict_NewPresized(__builtin_popcountll(active));
    if (out == NULL || active == 0) return out;
    Py_ssize_t d = 1;
    for (; d < n && active; d++) {
        if (d + R_PREFETCH < n) {
            size_t ahead = r_home(self, k[d + R_PREFETCH], (uint8_t)(used | f[d + R_PREFETCH]));
            __builtin_prefetch(&self->keys[ahead]);
            __builtin_prefetch(&self->tags[ahead]);
        }
        i = r_find(self, k[d], (uint8_t)(used | f[d]));
        uint64_t here = i == SIZE_MAX ? 0 : self->masks[i];
        if (r_emit(self, out, 0, active & ~here, d) < 0) goto fail;
        active &= here;
    }
    if (r_emit(self, out, 0, active, d) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* Depths for keys k[0..n) (flags f): into a new dict.  Per hash, the holders' masks of
 * every medium are ORed (a hash on any medium counts); the workers still holding every
 * hash so far are ANDed; those that drop out get the depth they reached. */
static PyObject *r_depths(RouterObject *self, const uint64_t *k, const uint8_t *f, Py_ssize_t n) {
    const uint32_t W = self->words, nm = self->nmedia;
    if (W == 1 && nm == 1 && n > 0) return r_depths_one(self, k, f, n);
    PyObject *out = PyDict_New();
    if (out == NULL || n == 0 || self->live == 0) return out;
    uint64_t active[R_MAX_WORDS], here[R_MAX_WORDS];
    /* No Python code runs but the dict's (its keys, the workers, were hashed when added;
     * setting an item runs no __eq__ of theirs unless two hashes collide): the workers do
     * not change while a query runs. */
    for (Py_ssize_t d = 0; d < n; d++) {
        if (d + R_PREFETCH < n) {
            size_t ahead = r_home(self, k[d + R_PREFETCH], (uint8_t)(TAG_USED | f[d + R_PREFETCH]));
            __builtin_prefetch(&self->keys[ahead]);
            __builtin_prefetch(&self->tags[ahead]);
        }
        for (uint32_t w = 0; w < W; w++) here[w] = 0;
        for (uint32_t m = 0; m < nm; m++) {
            size_t i = r_find(self, k[d], (uint8_t)(TAG_USED | f[d] | m));
            if (i != SIZE_MAX) {
                const uint64_t *mk = r_mask(self, i);
                for (uint32_t w = 0; w < W; w++) here[w] |= mk[w];
            }
        }
        int any = 0;
        for (uint32_t w = 0; w < W; w++) {
            uint64_t leaving = d == 0 ? 0 : active[w] & ~here[w];
            active[w] = d == 0 ? here[w] : active[w] & here[w];
            any |= active[w] != 0;
            /* the workers holding every block so far but not this one */
            if (r_emit(self, out, w, leaving, d) < 0) goto fail;
        }
        if (!any) return out;
    }
    for (uint32_t w = 0; w < W; w++)
        if (r_emit(self, out, w, active[w], n) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Router_query_hashes(RouterObject *self, PyObject *hashes) {
    PyObject *seq = PySequence_Fast(hashes, "hashes must be a sequence of block hashes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    if (r_scratch(self, (size_t)n, 0) < 0) goto done;
    /* Every item is checked (as the reference does) before the first that no event can
     * carry -- an int out of range, bytes never stored -- cuts the query short. */
    Py_ssize_t usable = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = items[i];
        uint64_t key = 0;
        uint8_t flags = 0;
        int got = 0;
        if (PyLong_Check(h) && !PyBool_Check(h)) {
            int sign = 0;
            uint64_t mag = 0;
            int fits = long_magnitude(h, &sign, &mag);
            if (fits < 0) goto done;
            got = fits && !(sign < 0 && mag > (uint64_t)1 << 63);
            key = sign < 0 ? (uint64_t)0 - mag : mag;
            flags = sign < 0 ? TAG_NEG : 0;
        } else if (PyBytes_Check(h)) {
            PyObject *id = usable < i ? NULL : PyDict_GetItemWithError(self->bytes_ids, h);
            if (id == NULL && PyErr_Occurred()) goto done;
            got = id != NULL;
            key = got ? PyLong_AsUnsignedLongLong(id) : 0;
            flags = TAG_BYTES;
        } else {
            PyErr_Format(G.InvalidArgumentError,
                         "a block hash is an int or bytes, got %.100s at position %zd",
                         Py_TYPE(h)->tp_name, i);
            goto done;
        }
        if (!got && usable == n) usable = i; /* held by no worker: the depths stop here */
        self->sk[i] = key;
        self->sf[i] = flags;
    }
    out = r_depths(self, self->sk, self->sf, usable);
done:
    Py_DECREF(seq);
    return out;
}

static PyObject *Router_query_tokens(RouterObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"tokens", "namespace"};
    PyObject *vals[2] = {NULL, Py_None};
    if (fc_args("query_tokens", args, nargs, kwnames, names, 2, 1, vals) < 0) return NULL;
    PyObject *tokens = PyObject_CallOneArg(G.as_token_list, vals[0]);
    if (tokens == NULL) return NULL;
    PyObject *B = PyLong_FromUnsignedLong(self->B);
    PyObject *chain = B == NULL ? NULL
                                : PyObject_CallMethodObjArgs(self->hasher, s_chain, tokens, B,
                                                             vals[1], NULL);
    Py_XDECREF(B);
    Py_DECREF(tokens);
    if (chain == NULL) return NULL;
    PyObject *external = PyObject_GetAttr(self->hasher, s_external);
    PyObject *hashes = NULL, *out = NULL;
    if (external != NULL) {
        Py_ssize_t n = PyList_GET_SIZE(chain);
        hashes = PyList_New(n);
        for (Py_ssize_t i = 0; hashes != NULL && i < n; i++) {
            PyObject *h = PyObject_CallOneArg(external, PyList_GET_ITEM(chain, i));
            if (h == NULL) {
                Py_CLEAR(hashes);
                break;
            }
            PyList_SET_ITEM(hashes, i, h);
        }
    }
    if (hashes != NULL) out = Router_query_hashes(self, hashes);
    Py_XDECREF(hashes);
    Py_XDECREF(external);
    Py_DECREF(chain);
    return out;
}

/* ------------------------------------------------------------------ reads */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static PyObject *Router_workers(RouterObject *self, PyObject *unused) {
    (void)unused;
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    /* In the order first seen: the live slots sorted by their order stamps. */
    uint64_t *idx = PyMem_Malloc((self->nw ? self->nw : 1) * sizeof(uint64_t));
    if (idx == NULL) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    uint32_t n = 0;
    for (uint32_t s = 0; s < self->nw; s++) /* order < 2**48 (a worker a call), slot < 2**16 */
        if (self->w[s].key != NULL) idx[n++] = (self->w[s].order << 16) | s;
    qsort(idx, n, sizeof(uint64_t), cmp_u64);
    for (uint32_t i = 0; i < n; i++)
        if (PyList_Append(list, self->w[idx[i] & 0xFFFFu].key) < 0) {
            Py_CLEAR(list);
            break;
        }
    PyMem_Free(idx);
    return list;
}

static PyObject *Router_is_stale(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    return PyBool_FromLong(self->w[s].stale);
}

static PyObject *Router_expected(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    return PyLong_FromUnsignedLongLong(self->w[s].expected);
}

static PyObject *Router_held(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    return PyLong_FromUnsignedLongLong(self->w[s].entries);
}

/* Worker slot s's entries as a list of (hash, medium). */
static PyObject *r_entries(RouterObject *self, uint32_t s) {
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < self->cap; i++) {
        if (self->tags[i] == 0 || !mask_has(r_mask(self, i), s)) continue;
        PyObject *h = r_hash_object(self, self->keys[i], self->tags[i]);
        PyObject *medium = self->medium_of[self->tags[i] & TAG_MEDIUM];
        PyObject *entry = h == NULL ? NULL : PyTuple_Pack(2, h, medium);
        Py_XDECREF(h);
        if (entry == NULL || PyList_Append(list, entry) < 0) Py_CLEAR(list);
        Py_XDECREF(entry);
    }
    return list;
}

static PyObject *Router_holdings(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    PyObject *list = r_entries(self, (uint32_t)s);
    if (list == NULL) return NULL;
    PyObject *set = PySet_New(list);
    Py_DECREF(list);
    return set;
}

static PyObject *r_counts(const RWorker *x) {
    PyObject *d = PyDict_New();
    for (int c = 0; d != NULL && c < NCOUNT; c++) {
        PyObject *v = PyLong_FromUnsignedLongLong(x->counts[c]);
        if (v == NULL || PyDict_SetItemString(d, COUNTER_NAMES[c], v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *Router_counts(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    return r_counts(&self->w[s]);
}

static Py_ssize_t Router_len(RouterObject *self) {
    /* Distinct hashes held by any worker: a hash on two media is one. */
    if (self->nmedia <= 1) return (Py_ssize_t)self->len;
    Py_ssize_t n = 0;
    for (size_t i = 0; i < self->cap; i++) {
        if (self->tags[i] == 0) continue;
        uint8_t m = self->tags[i] & TAG_MEDIUM, flags = self->tags[i] & (TAG_NEG | TAG_BYTES);
        int first = 1; /* counted at its lowest medium id */
        for (uint8_t o = 0; o < m && first; o++)
            first = r_find(self, self->keys[i], (uint8_t)(TAG_USED | flags | o)) == SIZE_MAX;
        n += first;
    }
    return n;
}

static PyObject *Router_get_holder_blocks(RouterObject *self, void *unused) {
    (void)unused;
    uint64_t n = 0;
    for (uint32_t s = 0; s < self->nw; s++)
        if (self->w[s].key != NULL) n += self->w[s].entries;
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *Router_get_hasher(RouterObject *self, void *unused) {
    (void)unused;
    return Py_NewRef(self->hasher);
}

static PyObject *Router_get_block_size(RouterObject *self, void *unused) {
    (void)unused;
    return PyLong_FromUnsignedLong(self->B);
}

static PyObject *Router_dump(RouterObject *self, PyObject *unused) {
    PyObject *order = Router_workers(self, unused);
    if (order == NULL) return NULL;
    PyObject *workers = PyList_New(0), *out = NULL;
    if (workers == NULL) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order); i++) {
        PyObject *key = PyList_GET_ITEM(order, i);
        Py_ssize_t s = r_worker_known(self, key);
        if (s < 0) goto done;
        RWorker *x = &self->w[s];
        PyObject *entries = r_entries(self, (uint32_t)s);
        if (entries == NULL) goto done;
        PyObject *call = PyTuple_Pack(1, entries);
        PyObject *ordered = call ? PyObject_Call(b_sorted, call, kw_key_repr) : NULL;
        Py_XDECREF(call);
        Py_DECREF(entries);
        PyObject *counts = ordered ? r_counts(x) : NULL;
        PyObject *d = counts ? Py_BuildValue("{s:O,s:K,s:O,s:O,s:O}", "worker", key, "expected",
                                             (unsigned long long)x->expected, "stale",
                                             x->stale ? Py_True : Py_False, "counts", counts,
                                             "entries", ordered)
                             : NULL;
        Py_XDECREF(counts);
        Py_XDECREF(ordered);
        if (d == NULL || PyList_Append(workers, d) < 0) {
            Py_XDECREF(d);
            goto done;
        }
        Py_DECREF(d);
    }
    out = Py_BuildValue("{s:O}", "workers", workers);
done:
    Py_XDECREF(workers);
    Py_DECREF(order);
    return out;
}

static PyObject *r_violation(const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(G.InvariantViolation, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

static PyObject *Router_check_invariants(RouterObject *self, PyObject *unused) {
    (void)unused;
    uint64_t *counted = PyMem_Calloc(self->nw ? self->nw : 1, sizeof(uint64_t));
    uint64_t *refs = PyMem_Calloc(self->nbytes ? self->nbytes : 1, sizeof(uint64_t));
    if (counted == NULL || refs == NULL) {
        PyMem_Free(counted);
        PyMem_Free(refs);
        return PyErr_NoMemory();
    }
    PyObject *bad = NULL;
    size_t used = 0;
    uint32_t nm = self->nmedia;
    for (size_t i = 0; i < self->cap && bad == NULL; i++) {
        uint8_t t = self->tags[i];
        if (t == 0) continue;
        used++;
        const uint64_t *m = r_mask(self, i);
        if (!(t & TAG_USED) || (t & TAG_MEDIUM) >= nm) {
            r_violation("slot %zu has a bad tag %u", i, (unsigned)t);
            bad = Py_None;
            break;
        }
        if (mask_empty(m, self->words)) {
            r_violation("slot %zu is held by no worker", i);
            bad = Py_None;
            break;
        }
        for (uint32_t s = 0; s < 64u * self->words; s++) {
            if (!mask_has(m, s)) continue;
            if (s >= self->nw || self->w[s].key == NULL) {
                r_violation("slot %zu names worker slot %u, which is free", i, s);
                bad = Py_None;
                break;
            }
            counted[s]++;
        }
        if (t & TAG_BYTES) {
            if (self->keys[i] >= self->nbytes || self->bytes_of[self->keys[i]] == NULL) {
                r_violation("slot %zu names bytes id %llu, which is free", i,
                            (unsigned long long)self->keys[i]);
                bad = Py_None;
                break;
            }
            refs[self->keys[i]]++;
        }
        /* Robin Hood: from its home to it, no empty slot and no poorer resident. */
        size_t h = r_home(self, self->keys[i], t), d = r_dist(self, i);
        for (size_t j = h, e = 0; e < d; e++, j = j + 1 == self->cap ? 0 : j + 1) {
            if (self->tags[j] == 0 || r_dist(self, j) < e) {
                r_violation("slot %zu is not where probing puts it", i);
                bad = Py_None;
                break;
            }
            if (self->tags[j] == t && self->keys[j] == self->keys[i]) {
                r_violation("slots %zu and %zu hold the same key", j, i);
                bad = Py_None;
                break;
            }
        }
    }
    if (bad == NULL && used != self->len)
        bad = r_violation("%zu slots used, %zu counted", used, self->len);
    for (uint32_t s = 0; bad == NULL && s < self->nw; s++) {
        if (self->w[s].key != NULL && counted[s] != self->w[s].entries)
            bad = r_violation("worker %R holds %llu entries, counted %llu", self->w[s].key,
                              (unsigned long long)counted[s],
                              (unsigned long long)self->w[s].entries);
    }
    for (uint64_t id = 0; bad == NULL && id < self->nbytes; id++) {
        if (self->bytes_of[id] != NULL && refs[id] == 0)
            bad = r_violation("bytes id %llu is named by no slot", (unsigned long long)id);
        else if (self->bytes_of[id] != NULL && self->bytes_rc[id] != refs[id])
            bad = r_violation("bytes id %llu is named by %llu slots, counted %llu",
                              (unsigned long long)id, (unsigned long long)refs[id],
                              (unsigned long long)self->bytes_rc[id]);
    }
    if (bad == NULL && PyDict_GET_SIZE(self->slot_of) != (Py_ssize_t)self->live)
        bad = r_violation("%zd workers registered, %u live", PyDict_GET_SIZE(self->slot_of),
                          self->live);
    PyMem_Free(counted);
    PyMem_Free(refs);
    if (bad != NULL || PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* The _corrupt_check test hook: break one invariant in place, run check_invariants(),
 * undo, and return the InvariantViolation's message (None if the check missed it). */
static const char *const R_KINDS[] = {
    "bad_tag", "empty_mask", "free_worker", "bytes_free", "misplaced", "duplicate",
    "len", "entries", "bytes_unnamed", "bytes_rc", "registry", NULL,
};

static PyObject *Router_corrupt_kinds(PyObject *cls, PyObject *unused) {
    (void)cls;
    (void)unused;
    PyObject *list = PyList_New(0);
    for (const char *const *k = R_KINDS; list != NULL && *k != NULL; k++) {
        PyObject *name = PyUnicode_FromString(*k);
        if (name == NULL || PyList_Append(list, name) < 0) Py_CLEAR(list);
        Py_XDECREF(name);
    }
    return list;
}

/* The first used slot (optionally: a bytes one; one followed by a used slot of another
 * home, so that swapping the two puts one before its home). */
static size_t r_some_slot(const RouterObject *r, int bytes, int followed) {
    for (size_t i = 0; i < r->cap; i++) {
        if (r->tags[i] == 0 || (bytes && !(r->tags[i] & TAG_BYTES))) continue;
        size_t j = i + 1 == r->cap ? 0 : i + 1;
        if (followed && (r->tags[j] == 0 || r_home(r, r->keys[i], r->tags[i]) ==
                                                 r_home(r, r->keys[j], r->tags[j])))
            continue;
        return i;
    }
    return SIZE_MAX;
}

static PyObject *Router_corrupt_check(RouterObject *self, PyObject *arg) {
    const char *kind = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (kind == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "kind must be a str");
        return NULL;
    }
    Undo u = {.n = 0, .temp = NULL};
    int bytes = strcmp(kind, "bytes_free") == 0 || strcmp(kind, "bytes_rc") == 0 ||
                strcmp(kind, "bytes_unnamed") == 0;
    size_t i = r_some_slot(self, bytes, strcmp(kind, "misplaced") == 0);
    if (i == SIZE_MAX && strcmp(kind, "registry") != 0) {
        PyErr_Format(PyExc_ValueError, "this index has no slot to show %s", kind);
        return NULL;
    }
    uint64_t *m = i == SIZE_MAX ? NULL : r_mask(self, i);
    if (strcmp(kind, "bad_tag") == 0) {
        PUT(&u, self->tags[i], (uint8_t)(self->tags[i] | TAG_MEDIUM));
    } else if (strcmp(kind, "empty_mask") == 0) {
        for (uint32_t w = 0; w < self->words; w++) PUT(&u, m[w], (uint64_t)0);
    } else if (strcmp(kind, "free_worker") == 0) {
        uint32_t far = 64u * self->words - 1u;
        PUT(&u, m[far >> 6], m[far >> 6] | ((uint64_t)1 << (far & 63)));
    } else if (strcmp(kind, "bytes_free") == 0) {
        PUT(&u, self->keys[i], self->nbytes + 7u);
    } else if (strcmp(kind, "misplaced") == 0) {
        size_t j = i + 1 == self->cap ? 0 : i + 1; /* swap with the next: out of order */
        uint64_t ki = self->keys[i], kj = self->keys[j];
        uint8_t ti = self->tags[i], tj = self->tags[j];
        PUT(&u, self->keys[i], kj);
        PUT(&u, self->keys[j], ki);
        PUT(&u, self->tags[i], tj);
        PUT(&u, self->tags[j], ti);
    } else if (strcmp(kind, "duplicate") == 0) {
        size_t j = i + 1 == self->cap ? 0 : i + 1;
        if (self->tags[j] != 0) {
            PyErr_SetString(PyExc_ValueError, "no empty slot after the first: cannot show duplicate");
            return NULL;
        }
        PUT(&u, self->keys[j], self->keys[i]);
        PUT(&u, self->tags[j], self->tags[i]);
        PUT(&u, r_mask(self, j)[0], m[0]);
        PUT(&u, self->len, self->len + 1u);
    } else if (strcmp(kind, "len") == 0) {
        PUT(&u, self->len, self->len + 1u);
    } else if (strcmp(kind, "entries") == 0) {
        uint32_t s = (uint32_t)__builtin_ctzll(m[0] ? m[0] : 1u);
        PUT(&u, self->w[s].entries, self->w[s].entries + 1u);
    } else if (strcmp(kind, "bytes_unnamed") == 0) {
        if (self->nbytes == self->bytes_cap) {
            PyErr_SetString(PyExc_ValueError, "no room for another id: cannot show bytes_unnamed");
            return NULL;
        }
        /* One more live id, which no slot names (its bytes: the first slot's, borrowed). */
        PUT(&u, self->bytes_of[self->nbytes], self->bytes_of[self->keys[i]]);
        PUT(&u, self->bytes_rc[self->nbytes], (uint64_t)0);
        PUT(&u, self->nbytes, self->nbytes + 1u);
    } else if (strcmp(kind, "bytes_rc") == 0) {
        PUT(&u, self->bytes_rc[self->keys[i]], self->bytes_rc[self->keys[i]] + 1u);
    } else if (strcmp(kind, "registry") == 0) {
        PUT(&u, self->live, self->live + 1u);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown kind %R", arg);
        return NULL;
    }
    PyObject *r = Router_check_invariants(self, NULL);
    undo(&u);
    if (r != NULL) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    return violation_message();
}

static PyObject *Router_memory_bytes(RouterObject *self, PyObject *unused) {
    (void)unused;
    size_t table = self->cap * (sizeof(uint64_t) + 1u + self->words * sizeof(uint64_t));
    size_t workers = self->wcap * sizeof(RWorker);
    size_t interned = self->bytes_cap * (sizeof(PyObject *) + 2u * sizeof(uint64_t));
    size_t scratch = self->scap * 9u + self->secap * sizeof(REvent);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n}", "table", (Py_ssize_t)table, "workers",
                         (Py_ssize_t)workers, "interned", (Py_ssize_t)interned, "scratch",
                         (Py_ssize_t)scratch, "slots", (Py_ssize_t)self->cap, "total",
                         (Py_ssize_t)(table + workers + interned + scratch + sizeof(*self)));
}

/* ------------------------------------------------------------------ the type */

static PyObject *Router_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"hasher", "block_size", NULL};
    PyObject *hasher = Py_None, *b_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:RouterIndex", kwlist, &hasher, &b_obj))
        return NULL;
    uint32_t B = 16;
    if (b_obj != NULL) {
        int overflow = 0;
        long long v = PyLong_Check(b_obj) && !PyBool_Check(b_obj)
                          ? PyLong_AsLongLongAndOverflow(b_obj, &overflow)
                          : 0;
        if (overflow || v < 1 || v > (1 << 24)) {
            PyErr_Format(G.InvalidArgumentError, "block_size must be an int >= 1, got %R", b_obj);
            return NULL;
        }
        B = (uint32_t)v;
    }
    RouterObject *r = (RouterObject *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    r->B = B;
    r->words = 1;
    r->bytes_free = NIL64;
    r->bytes_zero = NIL64;
    r->hasher = hasher == Py_None ? PyObject_CallNoArgs(G.BlockHasher) : Py_NewRef(hasher);
    r->slot_of = PyDict_New();
    r->media = PyDict_New();
    r->bytes_ids = PyDict_New();
    if (!r->hasher || !r->slot_of || !r->media || !r->bytes_ids ||
        r_rebuild(r, 16u, 1u) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static int Router_traverse(RouterObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->hasher);
    Py_VISIT(self->slot_of);
    Py_VISIT(self->media);
    for (uint32_t m = 0; m < self->nmedia; m++) Py_VISIT(self->medium_of[m]);
    for (uint32_t s = 0; s < self->nw; s++) Py_VISIT(self->w[s].key);
    return 0;
}

static int Router_clear(RouterObject *self) {
    Py_CLEAR(self->hasher);
    Py_CLEAR(self->slot_of);
    Py_CLEAR(self->media);
    for (uint32_t m = 0; m < self->nmedia; m++) Py_CLEAR(self->medium_of[m]);
    self->nmedia = 0;
    for (uint32_t s = 0; s < self->nw; s++) Py_CLEAR(self->w[s].key);
    self->live = 0;
    return 0;
}

static void Router_dealloc(RouterObject *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    Router_clear(self);
    for (uint64_t id = 0; id < self->nbytes; id++) Py_XDECREF(self->bytes_of[id]);
    Py_XDECREF(self->bytes_ids);
    PyMem_Free(self->bytes_of);
    PyMem_Free(self->bytes_rc);
    PyMem_Free(self->bytes_next);
    PyMem_Free(self->keys);
    PyMem_Free(self->tags);
    PyMem_Free(self->masks);
    PyMem_Free(self->carry);
    PyMem_Free(self->w);
    PyMem_Free(self->sk);
    PyMem_Free(self->sf);
    PyMem_Free(self->se);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Router_repr(RouterObject *self) {
    return PyUnicode_FromFormat("<accel.RouterIndex: %u workers, %zu entries in %zu slots>",
                                self->live, self->len, self->cap);
}

static PyMethodDef Router_methods[] = {
    {"apply", (PyCFunction)(void (*)(void))Router_apply, METH_FASTCALL | METH_KEYWORDS,
     "apply($self, worker, seq, batch)\n--\n\n"
     "Apply ``worker``'s batch number ``seq`` by the sequence rules (R-ROUTE-1,\n"
     "R-ROUTE-2); ``batch`` may be the payload bytes. O(events in the batch).\n\n"
     "Raises:\n    InvalidArgumentError: ``seq`` is not an int >= 0, or ``batch`` is neither\n"
     "        bytes nor a :class:`KVEventBatch` (nothing changes). Also for a 4,097th worker."},
    {"lost", (PyCFunction)(void (*)(void))Router_lost, METH_FASTCALL | METH_KEYWORDS,
     "lost($self, worker, resume_at)\n--\n\n"
     "The batches before ``resume_at`` cannot be had: clear ``worker``'s entries,\n"
     "mark it stale and expect ``resume_at`` next (R-ROUTE-2); a worker not seen yet\n"
     "starts stale. O(slots of the table).\n\n"
     "Raises:\n    InvalidArgumentError: a bad number (nothing changes). Also for a 4,097th worker."},
    {"remove_worker", (PyCFunction)Router_remove_worker, METH_O,
     "remove_worker($self, worker, /)\n--\n\n"
     "Forget ``worker`` and everything it holds. O(slots of the table).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"query_hashes", (PyCFunction)Router_query_hashes, METH_O,
     "query_hashes($self, hashes, /)\n--\n\n"
     "Each worker's matched depth, in blocks, for a request whose blocks have the\n"
     "external hashes ``hashes`` (path order); workers with depth 0 are left out\n"
     "(R-ROUTE-4). A hash no event can carry (an int out of msgpack's range) is held\n"
     "by no worker. O(n * m) probes for m media, the holders' masks ANDed 64 workers a word.\n\n"
     "Raises:\n    InvalidArgumentError: a hash is neither an int nor bytes (nothing changes)."},
    {"query_tokens", (PyCFunction)(void (*)(void))Router_query_tokens,
     METH_FASTCALL | METH_KEYWORDS,
     "query_tokens($self, tokens, namespace=None)\n--\n\n"
     ":meth:`query_hashes` for the whole blocks of ``tokens`` in ``namespace``,\n"
     "hashed as the workers hash them. O(n * m) for n tokens.\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*)."},
    {"workers", (PyCFunction)Router_workers, METH_NOARGS,
     "workers($self, /)\n--\n\nEvery worker seen, in the order first seen. O(w log w)."},
    {"is_stale", (PyCFunction)Router_is_stale, METH_O,
     "is_stale($self, worker, /)\n--\n\n"
     "Whether ``worker``'s entries are only a subset of its blocks (R-ROUTE-2). O(1).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"expected", (PyCFunction)Router_expected, METH_O,
     "expected($self, worker, /)\n--\n\n"
     "The sequence number ``worker``'s next batch should have. O(1).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"holdings", (PyCFunction)Router_holdings, METH_O,
     "holdings($self, worker, /)\n--\n\n"
     "``worker``'s entries: (hash, medium) pairs. O(slots of the table).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"held", (PyCFunction)Router_held, METH_O,
     "held($self, worker, /)\n--\n\n"
     "How many entries ``worker`` holds. O(1).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"counts", (PyCFunction)Router_counts, METH_O,
     "counts($self, worker, /)\n--\n\n"
     "``worker``'s counters (:data:`COUNTERS`). O(1).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"dump", (PyCFunction)Router_dump, METH_NOARGS,
     "dump($self, /)\n--\n\n"
     "Plain data: every worker's expected number, staleness, counters and entries\n"
     "(sorted), in the order first seen. O(w * slots + entries log entries)."},
    {"check_invariants", (PyCFunction)Router_check_invariants, METH_NOARGS,
     "check_invariants($self, /)\n--\n\n"
     "Assert the module's invariants. O(slots * (probe length + mask words * 64)).\n\n"
     "Raises:\n    InvariantViolation: one is broken (a bug, never bad input)."},
    {"_corrupt_check", (PyCFunction)Router_corrupt_check, METH_O,
     "_corrupt_check($self, kind, /)\n--\n\n"
     "Test hook: break one invariant in place (``kind``, one of ``_corrupt_kinds()``), run\n"
     "check_invariants(), undo every change and return the InvariantViolation's message, or\n"
     "None if the check let the break pass.\n\n"
     "Raises:\n    ValueError: an unknown kind, or one this index's state cannot show.\n"
     "    TypeError: ``kind`` is not a str."},
    {"_corrupt_kinds", (PyCFunction)Router_corrupt_kinds, METH_NOARGS | METH_CLASS,
     "_corrupt_kinds($cls, /)\n--\n\nTest hook: the kinds _corrupt_check breaks."},
    {"memory_bytes", (PyCFunction)Router_memory_bytes, METH_NOARGS,
     "memory_bytes($self, /)\n--\n\n"
     "Bytes held by the index's own C allocations, by part, and its table's slots. O(1)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Router_getset[] = {
    {"hasher", (getter)Router_get_hasher, NULL,
     "How the workers name blocks (to turn a query's tokens into hashes).", NULL},
    {"block_size", (getter)Router_get_block_size, NULL, "The workers' B.", NULL},
    {"holder_blocks", (getter)Router_get_holder_blocks, NULL,
     "Entries over all workers (a block held by k workers counts k times). O(w).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Router_as_sequence = {
    .sq_length = (lenfunc)Router_len,
};

PyTypeObject RouterIndex_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.RouterIndex",
    .tp_basicsize = sizeof(RouterObject),
    .tp_dealloc = (destructor)Router_dealloc,
    .tp_repr = (reprfunc)Router_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RouterIndex(hasher=None, block_size=16)\n--\n\n"
              "Blocks by hash -> the workers holding them, from many workers' event streams.\n\n"
              "Args:\n"
              "    hasher: how the workers name blocks (to turn a query's tokens into hashes).\n"
              "    block_size: the workers' B (likewise).\n\n"
              "Cost: applying an event is O(its blocks) expected, one probe of an open-addressing\n"
              "table a block; a query O(n * m) probes for n hashes on m media, the holders'\n"
              "masks ANDed 64 workers a word. At most 4,096 workers. One thread at a time.",
    .tp_traverse = (traverseproc)Router_traverse,
    .tp_clear = (inquiry)Router_clear,
    .tp_weaklistoffset = offsetof(RouterObject, weakrefs),
    .tp_methods = Router_methods,
    .tp_getset = Router_getset,
    .tp_as_sequence = &Router_as_sequence,
    .tp_new = Router_new,
};

/* Called by the module's init: the interned attribute names, the builtins the dump uses. */
int router_init(void) {
    PyObject *builtins = PyEval_GetBuiltins(); /* borrowed: no import, no allocation */
    const char *names[] = {"sorted", "repr"};
    PyObject **slots[] = {&b_sorted, &b_repr};
    for (int i = 0; i < 2; i++) {
        if (*slots[i] != NULL) continue; /* a retried init kept it */
        PyObject *name = PyUnicode_InternFromString(names[i]);
        if (name == NULL) return -1;
        PyObject *found = PyDict_GetItemWithError(builtins, name);
        Py_DECREF(name);
        if (found == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ImportError, "no builtin %s", names[i]);
            return -1;
        }
        *slots[i] = Py_NewRef(found);
    }
    if (kw_key_repr == NULL && (kw_key_repr = Py_BuildValue("{s:O}", "key", b_repr)) == NULL)
        return -1;
    const char *outcomes[] = {"applied", "repeat", "restart", "malformed"};
    PyObject **made[] = {&o_applied, &o_repeat, &o_restart, &o_malformed};
    for (int i = 0; i < 4; i++)
        if (*made[i] == NULL && (*made[i] = PyObject_CallFunction(G.Applied, "s", outcomes[i])) == NULL)
            return -1;
    return (s_events = PyUnicode_InternFromString("events")) != NULL &&
                   (s_block_hashes = PyUnicode_InternFromString("block_hashes")) != NULL &&
                   (s_parent_block_hash = PyUnicode_InternFromString("parent_block_hash")) !=
                       NULL &&
                   (s_medium = PyUnicode_InternFromString("medium")) != NULL &&
                   (s_chain = PyUnicode_InternFromString("chain")) != NULL &&
                   (s_external = PyUnicode_InternFromString("external")) != NULL
               ? 0
               : -1;
}
