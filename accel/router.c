/* kachedb_radix.accel._radix.RouterIndex -- the C twin of
 * kachedb_radix.reference.router.RouterIndex (R-ROUTE-*): which workers hold which blocks,
 * and how many copies of each, kept from their KV events.
 *
 * Layout.  One open-addressing table of 13-byte slots, one a distinct (hash, medium):
 *
 *   key   the hash's 64 bits: an int hash as uint64 (two's complement when negative),
 *         a bytes hash as its interned id (below)
 *   tag   0: empty; else TAG_USED | TAG_NEG (a negative int) | TAG_BYTES (an interned
 *         bytes hash) | the medium's id (5 bits: MAX_MEDIA media)
 *   val   the holders: one worker inline (its slot in 12 bits, its copies in the next
 *         19), or a *holder set* in a pool of records (V_SET | class | record index)
 *
 * so a block held by one worker costs one slot whatever the number of workers.  A set's
 * class is the smallest that fits its holders: arrays of 16-bit worker slots with a
 * count (3, 7, 15, 31 or 63 members: 8 to 128 bytes), used while smaller than a bitmask
 * of every worker (`words` uint64s, 64 workers a word), then the bitmask.  Copies beyond
 * the first of a set's member live in `extras`, a small table keyed by (key, tag,
 * worker): vLLM's duplicate blocks are rare, so the common sets carry none.
 *
 * Robin Hood linear probing (an element's distance from its home is never less than its
 * predecessor's, so a miss stops early) with backward-shift deletion (no tombstones).
 * The home slot is the key's 64-bit mix times the capacity, high 64 bits (Lemire's range
 * reduction); a table past 2**20 slots grows by 1.2x at a load of 4/5, so its load stays
 * between 0.667 and 0.8: 16.3 to 19.5 bytes per distinct (hash, medium).  The slots sit in
 * the mix's order, so a rebuild writes the new table in sequence, a slot a key.
 *
 * Clearing a worker costs what it holds, not the table: each worker keeps a list of the
 * *fingerprints* of the keys it stored (the mix's high 32 bits, 4 bytes an entry).  A
 * fingerprint f names a home region -- f * capacity >> 32 is the home of every key with
 * that fingerprint, or the slot before it -- whatever the table's size and however
 * Robin Hood has moved its slots, so a clear visits, per fingerprint, the few slots of
 * that region and drops the worker from those it holds.  A removal leaves its
 * fingerprint behind (a region with nothing of the worker's is visited for nothing);
 * the list is compacted (sorted, deduplicated, the dead dropped) when it grows past
 * twice the worker's entries.  Per holder-block held by one worker: 13 / load + 4 bytes.
 *
 * Bytes hashes (BlockHasher(wire="bytes")) are interned: a dict from the bytes to a
 * small id, the id's bytes and the number of table slots naming it; an id whose last
 * slot goes is forgotten.  Media likewise get ids (never forgotten, as the reference's
 * set of media never shrinks).
 *
 * apply() reads a batch in two passes: the first checks the whole batch against the
 * schema and turns every hash into its key (a payload's msgpack is read here directly
 * when it is in the shape vLLM's encoder writes, int hashes and media already known;
 * anything else is decoded by reference.router.wire, the reference's decoder), and
 * reserves all the second pass may need -- table room, pool records, extras, the
 * worker's fingerprints -- so a malformed batch or a MemoryError changes nothing; the
 * second applies the events and cannot fail.  Its pool reserve is exact enough: one
 * worker's batch adds at most one holder to a set, so a set grows at most one class
 * (from a record counted before the batch, or back into one it left in the batch);
 * a set shrinks one class at a time when holders leave, taking a record only where the
 * batch's remaining growth cannot need it (else it stays a size too big).
 *
 * Costs: an event O(its blocks) expected; a query O(n * media) probes plus, per hash,
 * its set's members or mask words; clearing or removing a worker O(its fingerprints *
 * the probe length); its holdings O(the same); the dump O(entries log entries).
 *
 * Invariants (check_invariants): every used slot's tag names a known medium; its holders
 * are live workers, an inline one with 1..MAX_COPIES copies, a set with 2 or more
 * distinct members in a record of its class that no other slot names and that fits
 * them; every record is named by one slot or on its pool's free list; every extras
 * entry names a member of a set slot with 2..MAX_COPIES copies; each worker's entry
 * count is the number of slots naming it, and each of those slots' fingerprints is in
 * its list; every slot sits where Robin Hood probing puts it (no empty slot and no
 * shorter distance between its home and it, no two slots of one key); `len` counts the
 * used slots; every interned bytes id's count is the number of slots naming it; every
 * medium id is below the number of media. */

#include "radix.h"
#include "events.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define TAG_USED 0x80u
#define TAG_NEG 0x40u
#define TAG_BYTES 0x20u
#define TAG_MEDIUM 0x1Fu
#define R_MAX_MEDIA 32u
/* Masks of up to 64 words: 4,096 workers an index (a worker slot is 12 bits). */
#define R_MAX_WORDS 64u
/* The copies of one (hash, worker, medium) counted (R-ROUTE-5): a store past it adds none. */
#define R_MAX_COPIES 65535u

/* A slot's val: inline (bit 31 clear) or a holder set. */
#define V_SET 0x80000000u
#define V_WORKER 0xFFFu
#define V_COPIES_SHIFT 12
#define V_CLASS_SHIFT 28
#define V_INDEX 0x0FFFFFFFu
#define R_MAX_RECORDS V_INDEX

static inline uint32_t v_inline(uint32_t s, uint32_t copies) {
    return s | (copies << V_COPIES_SHIFT);
}
static inline uint32_t v_worker(uint32_t v) { return v & V_WORKER; }
static inline uint32_t v_copies(uint32_t v) { return (v >> V_COPIES_SHIFT) & 0x7FFFFu; }
static inline uint32_t v_class(uint32_t v) { return (v >> V_CLASS_SHIFT) & 7u; }
static inline uint32_t v_index(uint32_t v) { return v & V_INDEX; }
static inline uint32_t v_set(uint32_t c, uint32_t i) {
    return V_SET | (c << V_CLASS_SHIFT) | i;
}

/* Holder-set classes: arrays 0..4 (a u16 count, then 3, 7, 15, 31, 63 u16 members: 8 to
 * 128 bytes) and the bitmask. */
#define N_ARRAYS 5u
#define C_MASK 5u
#define N_POOLS 6u
static inline uint32_t array_cap(uint32_t c) { return (4u << c) - 1u; }

/* The counters, in the reference's COUNTERS order. */
enum {
    C_BATCHES, C_EVENTS, C_STORED, C_REMOVED, C_DUPLICATE_STORES, C_UNKNOWN_PARENTS,
    C_UNKNOWN_REMOVALS, C_REPEATS, C_GAPS, C_RESTARTS, C_MALFORMED, C_LOST, C_CLEARS,
    C_REPORTS, NCOUNT
};
static const char *const COUNTER_NAMES[NCOUNT] = {
    "batches", "events", "stored", "removed", "duplicate_stores", "unknown_parents",
    "unknown_removals", "repeats", "gaps", "restarts", "malformed", "lost", "clears",
    "reports",
};

typedef struct __attribute__((packed)) {
    uint64_t key;
    uint32_t val;
    uint8_t tag;
} RSlot;

typedef struct {
    PyObject *key;     /* the worker (strong); NULL: the slot is free */
    uint64_t order;    /* when first seen: workers() lists them in this order */
    uint64_t expected; /* the next sequence number */
    uint64_t entries;  /* (hash, medium) entries held */
    uint64_t counts[NCOUNT];
    uint32_t *refs;    /* the fingerprints of the keys it stored (some stale) */
    size_t nrefs, refcap;
    int stale;
} RWorker;

/* Records of one holder-set class. */
typedef struct {
    unsigned char *data;
    size_t size;        /* bytes a record */
    uint32_t cap;       /* records allocated */
    uint32_t top;       /* records ever handed out: [0, top) are live or free */
    uint32_t free_head; /* NIL: none (a free record's first 4 bytes: the next) */
    uint32_t nfree;
    uint32_t live;
    /* During apply's second pass: how many records this batch's growth may still take
     * (its reserve, plus one per set that left the class in the batch, less one per set
     * that grew into it). */
    int64_t need;
} RPool;

/* A copy count of 2 or more of one member of a set. */
typedef struct {
    uint64_t key;
    uint32_t copies; /* 0: the entry is empty */
    uint16_t worker;
    uint8_t tag;
    uint8_t pad;
} RExtra;

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
    RSlot *slots;
    size_t cap, len;
    uint32_t words; /* bitmask words: 64 workers each, at most R_MAX_WORDS */
    RPool pool[N_POOLS];
    RExtra *xs;
    size_t xcap, xlen; /* xcap: 0 or a power of two */
    uint32_t xbits;
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
    uint64_t *here; /* 2 * R_MAX_WORDS: a query's masks */
    PyObject *weakrefs;
} RouterObject;

#define NIL64 UINT64_MAX
#define NOT_QUEUED (UINT64_MAX - 1u)

static PyObject *s_events, *s_block_hashes, *s_parent_block_hash, *s_medium, *s_chain,
    *s_external, *b_sorted, *b_repr, *kw_key_repr;
/* The outcomes without a gap, made once (an Applied is immutable). */
static PyObject *o_applied, *o_repeat, *o_restart, *o_malformed;

/* ------------------------------------------------------------------ big allocations */

/* Ask for huge pages on a big table (Linux's transparent huge pages in "madvise" mode):
 * its probes are random, and a TLB miss costs about as much as the cache miss. */
static void r_advise(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)1 << 21;
    if (bytes < 4 * huge) return;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

/* ------------------------------------------------------------------ the table */

/* The key's 64-bit mix: Fibonacci hashing (one multiply spreads every bit of k, the
 * tag's in the top byte, into the high bits that the range reduction below reads). */
static inline uint64_t r_mix(uint64_t k, uint8_t tag) {
    return (k ^ ((uint64_t)tag << 56)) * 0x9E3779B97F4A7C15ULL;
}

static inline size_t r_home(const RouterObject *r, uint64_t k, uint8_t tag) {
    return (size_t)(((__uint128_t)r_mix(k, tag) * r->cap) >> 64);
}

/* A key's fingerprint: its mix's high 32 bits.  Its home is f * cap >> 32 or the next. */
static inline uint32_t r_fp(uint64_t k, uint8_t tag) { return (uint32_t)(r_mix(k, tag) >> 32); }

static inline size_t r_fp_home(const RouterObject *r, uint32_t f) {
    return (size_t)(((uint64_t)f * r->cap) >> 32);
}

static inline size_t r_dist(const RouterObject *r, size_t i) {
    size_t h = r_home(r, r->slots[i].key, r->slots[i].tag);
    return i >= h ? i - h : i + r->cap - h;
}

/* The slot of (k, tag), or SIZE_MAX. */
static size_t r_find(const RouterObject *r, uint64_t k, uint8_t tag) {
    if (r->len == 0) return SIZE_MAX;
    size_t i = r_home(r, k, tag), d = 0;
    for (;;) {
        const RSlot *sl = &r->slots[i];
        if (sl->tag == 0) return SIZE_MAX;
        if (sl->tag == tag && sl->key == k) return i;
        if (r_dist(r, i) < d) return SIZE_MAX;
        if (++i == r->cap) i = 0;
        d++;
    }
}

/* Insert (k, tag, val), known to be absent, at slot i: the first slot of its probe
 * sequence that is empty or holds a key of a later home.  The run from i to the next
 * empty slot moves one slot on (it stays in home order, each a slot further from its
 * home: Robin Hood's order, kept without computing a distance); room is guaranteed.
 * Returns the slot the run ended in (i itself when it was empty). */
static size_t r_insert_at(RouterObject *r, size_t i, uint64_t k, uint8_t tag, uint32_t val) {
    size_t e = i;
    while (r->slots[e].tag != 0) e = e + 1 == r->cap ? 0 : e + 1;
    if (e >= i) {
        memmove(&r->slots[i + 1], &r->slots[i], (e - i) * sizeof(RSlot));
    } else { /* the run wraps around the end */
        memmove(&r->slots[1], &r->slots[0], e * sizeof(RSlot));
        r->slots[0] = r->slots[r->cap - 1];
        memmove(&r->slots[i + 1], &r->slots[i], (r->cap - 1 - i) * sizeof(RSlot));
    }
    RSlot *sl = &r->slots[i];
    sl->key = k;
    sl->tag = tag;
    sl->val = val;
    r->len++;
    return e;
}

/* Insert (k, tag, val), known to be absent, where probing puts it; returns the slot its
 * run ended in (see r_insert_at). */
static size_t r_place(RouterObject *r, uint64_t k, uint8_t tag, uint32_t val) {
    size_t i = r_home(r, k, tag), d = 0;
    while (r->slots[i].tag != 0 && r_dist(r, i) >= d) {
        if (++i == r->cap) i = 0;
        d++;
    }
    return r_insert_at(r, i, k, tag, val);
}

/* Remove slot i, shifting its cluster's later members back. */
static void r_delete(RouterObject *r, size_t i) {
    for (;;) {
        size_t j = i + 1 == r->cap ? 0 : i + 1;
        if (r->slots[j].tag == 0 || r_dist(r, j) == 0) break;
        r->slots[i] = r->slots[j];
        i = j;
    }
    r->slots[i].tag = 0;
    r->len--;
}

/* Rebuild the table with `cap` slots.  -1 (MemoryError) changes nothing.
 *
 * The old slots are read from the start of a cluster (just past an empty slot) around
 * the table: in their homes' order, which is the mix's, which is the new homes' order
 * too -- but for keys of one old home, in any order.  So each key is written at its
 * new home or just past the key written before it, one slot write and no probing; a key
 * whose new home comes before the previous key's (one old home's disorder), or that
 * would run into the first key written (the order wraps around), is inserted by probing
 * instead.  Positions are counted from the first key's slot on (so past `cap` for those
 * written around the end). */
static int r_rebuild(RouterObject *r, size_t cap) {
    RSlot *slots = PyMem_Calloc(cap, sizeof(RSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r_advise(slots, cap * sizeof(RSlot));
    RSlot *old = r->slots;
    size_t old_cap = r->cap, old_len = r->len;
    r->slots = slots;
    r->cap = cap;
    r->len = 0;
    if (old_len > 0) {
        size_t p = 0;
        while (old[p].tag != 0) p++;
        uint64_t mix0 = 0;
        size_t start = 0, last = 0, last_home = 0; /* positions counted from start */
        for (size_t n = 0; n < old_cap; n++) {
            if (++p == old_cap) p = 0;
            const RSlot *o = &old[p];
            if (o->tag == 0) continue;
            uint64_t mix = r_mix(o->key, o->tag);
            size_t home = (size_t)(((__uint128_t)mix * cap) >> 64);
            if (r->len == 0) {
                mix0 = mix;
                start = last = last_home = home;
                slots[home] = *o;
                r->len = 1;
                continue;
            }
            if (mix < mix0) home += cap; /* past the end, around */
            size_t at = home > last + 1 ? home : last + 1;
            if (home >= last_home && at < start + cap) {
                slots[at >= cap ? at - cap : at] = *o;
                r->len++;
                last = at;
                last_home = home;
                continue;
            }
            size_t end = r_place(r, o->key, o->tag, o->val);
            if (end < start) end += cap;
            if (end > last) last = end;
        }
    }
    PyMem_Free(old);
    return 0;
}

/* Room for `more` new slots at a load of at most R_LOAD: a small table doubles (its
 * rebuilds then cost one move per entry in all), a big one grows by R_GROWTH (its load
 * stays at or above R_LOAD / R_GROWTH: 0.667, so its bytes per entry at most 13 / 0.667,
 * 19.5).  The load trades memory for inserts: a new key moves the run after its place
 * up to the next empty slot, on average (1 + 1 / (1 - load)**2) / 2 slots (12.5 at 0.8,
 * 50 at 0.9).  Fingerprints name a home through a 32-bit multiply: at most 2**32 - 1
 * slots. */
#define R_BIG_TABLE ((size_t)1 << 20)
#define R_MAX_SLOTS ((size_t)UINT32_MAX)
#define R_LOAD_NUM 4u /* R_LOAD = 4/5 */
#define R_LOAD_DEN 5u
#define R_GROWTH_DEN 5u /* R_GROWTH = 1 + 1/5 */
static inline int r_roomy(size_t need, size_t cap) {
    return need < cap && need * R_LOAD_DEN <= cap * R_LOAD_NUM;
}
static int r_reserve(RouterObject *r, size_t more) {
    size_t need = r->len + more;
    if (r_roomy(need, r->cap)) return 0;
    size_t cap = r->cap < 16u ? 16u : r->cap;
    while (!r_roomy(need, cap)) cap += cap < R_BIG_TABLE ? cap : cap / R_GROWTH_DEN;
    if (cap > R_MAX_SLOTS) {
        if (!r_roomy(need, R_MAX_SLOTS)) {
            PyErr_NoMemory();
            return -1;
        }
        cap = R_MAX_SLOTS;
    }
    return r_rebuild(r, cap);
}

/* ------------------------------------------------------------------ pools of holder sets */

static inline uint16_t *r_arr(const RouterObject *r, uint32_t c, uint32_t i) {
    return (uint16_t *)(r->pool[c].data + (size_t)i * r->pool[c].size);
}

static inline uint64_t *r_bm(const RouterObject *r, uint32_t i) {
    return (uint64_t *)(r->pool[C_MASK].data + (size_t)i * r->pool[C_MASK].size);
}

static inline uint32_t p_available(const RPool *p) { return p->nfree + (p->cap - p->top); }

/* Grow pool p so that `more` records are available: 0, or -1 (with MemoryError set
 * when `raise`) changing nothing. */
static int p_grow(RPool *p, uint32_t more, int raise) {
    if (p_available(p) >= more) return 0;
    uint64_t cap = (uint64_t)p->top + more - p->nfree;
    uint64_t grown = (uint64_t)p->cap + p->cap / 2u + 16u;
    if (grown > cap) cap = grown;
    if (cap > R_MAX_RECORDS) cap = R_MAX_RECORDS;
    if (cap < (uint64_t)p->top + more - p->nfree) goto fail;
    unsigned char *data = PyMem_Realloc(p->data, (size_t)cap * p->size);
    if (data == NULL) goto fail;
    p->data = data;
    p->cap = (uint32_t)cap;
    return 0;
fail:
    if (raise) PyErr_NoMemory();
    return -1;
}

/* A record of pool p (available: p_available(p) > 0). */
static uint32_t p_take(RPool *p) {
    uint32_t i;
    if (p->nfree > 0) {
        i = p->free_head;
        memcpy(&p->free_head, p->data + (size_t)i * p->size, sizeof(uint32_t));
        p->nfree--;
    } else {
        i = p->top++;
    }
    p->live++;
    return i;
}

static void p_give(RPool *p, uint32_t i) {
    memcpy(p->data + (size_t)i * p->size, &p->free_head, sizeof(uint32_t));
    p->free_head = i;
    p->nfree++;
    p->live--;
}

/* A record for a set growing into class c: the batch reserved it (or a set left the
 * class earlier in the batch and freed one).  Cannot fail. */
static uint32_t r_take_grow(RouterObject *r, uint32_t c) {
    RPool *p = &r->pool[c];
    if (p_available(p) == 0 && p_grow(p, 1, 0) < 0)
        Py_FatalError("kachedb_radix.accel.RouterIndex: a set grew past its reserve");
    p->need--;
    return p_take(p);
}

/* A record for a set shrinking into class c, if one is spare (the batch's growth cannot
 * need it; the pool may grow for it, failing quietly): its index, or NIL. */
static uint32_t r_take_shrink(RouterObject *r, uint32_t c) {
    RPool *p = &r->pool[c];
    int64_t need = p->need > 0 ? p->need : 0;
    if ((int64_t)p_available(p) <= need && p_grow(p, (uint32_t)need + 1u, 0) < 0) return NIL;
    if ((int64_t)p_available(p) <= need) return NIL;
    return p_take(p);
}

/* A set left class c (to a smaller one, or to one holder): its record goes back. */
static void r_give(RouterObject *r, uint32_t c, uint32_t i) {
    p_give(&r->pool[c], i);
    r->pool[c].need++;
}

/* The array classes an index of `words` mask words uses: those smaller than a mask. */
static inline uint32_t r_narrays(const RouterObject *r) {
    uint32_t n = 0;
    while (n < N_ARRAYS && (1u << n) < r->words) n++;
    return n;
}

/* The class of a new set (two holders). */
static inline uint32_t r_first_class(const RouterObject *r) {
    return r_narrays(r) > 0 ? 0u : C_MASK;
}

/* Widen every bitmask record to `words` words (a worker slot past 64 * words).  -1
 * (MemoryError) changes nothing. */
static int r_widen(RouterObject *r, uint32_t words) {
    RPool *p = &r->pool[C_MASK];
    size_t size = (size_t)words * sizeof(uint64_t);
    unsigned char *data = NULL;
    if (p->cap > 0) {
        data = PyMem_Calloc(p->cap, size);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (uint32_t i = 0; i < p->top; i++)
            memcpy(data + (size_t)i * size, p->data + (size_t)i * p->size, p->size);
    }
    PyMem_Free(p->data);
    p->data = data;
    p->size = size;
    r->words = words;
    return 0;
}

/* Queue interned bytes id `id` to be forgotten after the call unless a slot names it again. */
static inline void r_bytes_queue(RouterObject *r, uint64_t id);

/* ------------------------------------------------------------------ extra copies */

static inline size_t x_home(const RouterObject *r, uint64_t k, uint8_t tag, uint32_t s) {
    uint64_t h = (r_mix(k, tag) ^ ((uint64_t)s * 0xC2B2AE3D27D4EB4FULL)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> (64u - r->xbits));
}

/* The entry of (k, tag, s), or SIZE_MAX. */
static size_t x_find(const RouterObject *r, uint64_t k, uint8_t tag, uint32_t s) {
    if (r->xlen == 0) return SIZE_MAX;
    size_t mask = r->xcap - 1u;
    for (size_t i = x_home(r, k, tag, s);; i = (i + 1u) & mask) {
        const RExtra *x = &r->xs[i];
        if (x->copies == 0) return SIZE_MAX;
        if (x->key == k && x->tag == tag && x->worker == s) return i;
    }
}

/* Set (k, tag, s)'s copies to `copies` (>= 2), adding the entry if new: room reserved. */
static void x_put(RouterObject *r, uint64_t k, uint8_t tag, uint32_t s, uint32_t copies) {
    size_t mask = r->xcap - 1u;
    for (size_t i = x_home(r, k, tag, s);; i = (i + 1u) & mask) {
        RExtra *x = &r->xs[i];
        if (x->copies == 0) {
            x->key = k;
            x->tag = tag;
            x->worker = (uint16_t)s;
            x->copies = copies;
            r->xlen++;
            return;
        }
        if (x->key == k && x->tag == tag && x->worker == s) {
            x->copies = copies;
            return;
        }
    }
}

/* Remove entry i, shifting later members of its cluster that may take its place. */
static void x_delete(RouterObject *r, size_t i) {
    size_t mask = r->xcap - 1u;
    r->xs[i].copies = 0;
    r->xlen--;
    for (size_t j = (i + 1u) & mask; r->xs[j].copies != 0; j = (j + 1u) & mask) {
        size_t h = x_home(r, r->xs[j].key, r->xs[j].tag, r->xs[j].worker);
        /* j may move to the hole at i when its home is not cyclically in (i, j]. */
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays) continue;
        r->xs[i] = r->xs[j];
        r->xs[j].copies = 0;
        i = j;
    }
}

/* (k, tag, s)'s copies as a set member: its extras entry's, else 1; the entry dropped
 * when `take`. */
static uint32_t x_copies(RouterObject *r, uint64_t k, uint8_t tag, uint32_t s, int take) {
    size_t i = x_find(r, k, tag, s);
    if (i == SIZE_MAX) return 1;
    uint32_t copies = r->xs[i].copies;
    if (take) x_delete(r, i);
    return copies;
}

/* Room for `more` new entries at a load of at most 3/4.  -1 (MemoryError) changes nothing. */
static int x_reserve(RouterObject *r, size_t more) {
    if (more == 0 || (r->xlen + more) * 4u <= r->xcap * 3u) return 0;
    size_t cap = r->xcap ? r->xcap : 16u;
    uint32_t bits = r->xcap ? r->xbits : 4u;
    while ((r->xlen + more) * 4u > cap * 3u) {
        cap *= 2u;
        bits++;
    }
    RExtra *xs = PyMem_Calloc(cap, sizeof(RExtra));
    if (xs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    RExtra *old = r->xs;
    size_t old_cap = r->xcap;
    r->xs = xs;
    r->xcap = cap;
    r->xbits = bits;
    r->xlen = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].copies != 0) x_put(r, old[i].key, old[i].tag, old[i].worker, old[i].copies);
    PyMem_Free(old);
    return 0;
}

/* ------------------------------------------------------------------ holders of a slot */

static inline int mask_has(const uint64_t *m, uint32_t s) { return (int)((m[s >> 6] >> (s & 63)) & 1u); }

static inline uint32_t mask_count(const uint64_t *m, uint32_t words) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < words; i++) n += (uint32_t)__builtin_popcountll(m[i]);
    return n;
}

/* Whether worker slot s holds slot val's entry. */
static int r_holds(const RouterObject *r, uint32_t v, uint32_t s) {
    if (!(v & V_SET)) return v_worker(v) == s;
    uint32_t c = v_class(v);
    if (c == C_MASK) return s < 64u * r->words && mask_has(r_bm(r, v_index(v)), s);
    const uint16_t *a = r_arr(r, c, v_index(v));
    for (uint32_t j = 1; j <= a[0]; j++)
        if (a[j] == s) return 1;
    return 0;
}

/* Worker slot s's copies of slot i's entry (it holds it). */
static uint32_t r_copies_at(RouterObject *r, size_t i, uint32_t s) {
    const RSlot *sl = &r->slots[i];
    if (!(sl->val & V_SET)) return v_copies(sl->val);
    return x_copies(r, sl->key, sl->tag, s, 0);
}

/* Set worker slot s's copies of slot i's entry (it holds it) to `copies` >= 1. */
static void r_set_copies(RouterObject *r, size_t i, uint32_t s, uint32_t copies) {
    RSlot *sl = &r->slots[i];
    if (!(sl->val & V_SET)) {
        sl->val = v_inline(s, copies);
    } else if (copies > 1) {
        x_put(r, sl->key, sl->tag, s, copies);
    } else {
        size_t x = x_find(r, sl->key, sl->tag, s);
        if (x != SIZE_MAX) x_delete(r, x);
    }
}

/* Fill the new set record (class c, index i) with the members of `members` (n of them). */
static void r_fill(RouterObject *r, uint32_t c, uint32_t i, const uint16_t *members, uint32_t n) {
    if (c == C_MASK) {
        uint64_t *b = r_bm(r, i);
        memset(b, 0, r->pool[C_MASK].size);
        for (uint32_t j = 0; j < n; j++) b[members[j] >> 6] |= (uint64_t)1 << (members[j] & 63);
        return;
    }
    uint16_t *a = r_arr(r, c, i);
    a[0] = (uint16_t)n;
    memcpy(a + 1, members, n * sizeof(uint16_t));
}

/* The members of slot val's set into out (room for all): how many. */
static uint32_t r_members(const RouterObject *r, uint32_t v, uint16_t *out) {
    uint32_t c = v_class(v), n = 0;
    if (c == C_MASK) {
        const uint64_t *b = r_bm(r, v_index(v));
        for (uint32_t w = 0; w < r->words; w++)
            for (uint64_t bits = b[w]; bits; bits &= bits - 1)
                out[n++] = (uint16_t)(w * 64u + (uint32_t)__builtin_ctzll(bits));
        return n;
    }
    const uint16_t *a = r_arr(r, c, v_index(v));
    memcpy(out, a + 1, a[0] * sizeof(uint16_t));
    return a[0];
}

/* Worker slot s joins slot i's holders (it held none of it), with one copy.  The set
 * grows a class when full, from the batch's reserve.  Cannot fail. */
static void r_join(RouterObject *r, size_t i, uint32_t s) {
    RSlot *sl = &r->slots[i];
    uint32_t v = sl->val;
    uint16_t members[64u * R_MAX_WORDS];
    if (!(v & V_SET)) { /* one holder: a set of two */
        uint32_t u = v_worker(v), copies = v_copies(v);
        uint32_t c = r_first_class(r), idx = r_take_grow(r, c);
        members[0] = (uint16_t)u;
        members[1] = (uint16_t)s;
        r_fill(r, c, idx, members, 2);
        sl->val = v_set(c, idx);
        if (copies > 1) x_put(r, sl->key, sl->tag, u, copies);
        return;
    }
    uint32_t c = v_class(v), idx = v_index(v);
    if (c == C_MASK) {
        r_bm(r, idx)[s >> 6] |= (uint64_t)1 << (s & 63);
        return;
    }
    uint16_t *a = r_arr(r, c, idx);
    if (a[0] < array_cap(c)) {
        a[++a[0]] = (uint16_t)s;
        return;
    }
    uint32_t n = r_members(r, v, members);
    members[n++] = (uint16_t)s;
    uint32_t c2 = c + 1u < r_narrays(r) ? c + 1u : C_MASK, idx2 = r_take_grow(r, c2);
    r_fill(r, c2, idx2, members, n);
    r_give(r, c, idx);
    r->slots[i].val = v_set(c2, idx2);
}

/* Worker slot s leaves slot i's holders, every copy: 1 if the slot went (s was its only
 * holder; the next member of its cluster, if any, is in slot i now), else 0.  A set of
 * one becomes inline; a set that fits one class down moves there if a record is spare.
 * Cannot fail. */
static int r_leave(RouterObject *r, size_t i, uint32_t s) {
    RSlot *sl = &r->slots[i];
    uint32_t v = sl->val;
    if (!(v & V_SET)) {
        uint8_t tag = sl->tag;
        uint64_t k = sl->key;
        r_delete(r, i);
        if ((tag & TAG_BYTES) && --r->bytes_rc[k] == 0) r_bytes_queue(r, k);
        return 1;
    }
    if (r->xlen) x_copies(r, sl->key, sl->tag, s, 1);
    uint32_t c = v_class(v), idx = v_index(v), n;
    uint16_t members[64u * R_MAX_WORDS];
    if (c == C_MASK) {
        r_bm(r, idx)[s >> 6] &= ~((uint64_t)1 << (s & 63));
        n = mask_count(r_bm(r, idx), r->words);
    } else {
        uint16_t *a = r_arr(r, c, idx);
        for (uint32_t j = 1; j <= a[0]; j++)
            if (a[j] == s) {
                a[j] = a[a[0]];
                break;
            }
        n = --a[0];
    }
    if (n == 1) { /* inline again, with the last holder's copies */
        r_members(r, sl->val, members);
        uint32_t u = members[0];
        uint32_t copies = r->xlen ? x_copies(r, sl->key, sl->tag, u, 1) : 1;
        r_give(r, c, idx);
        sl->val = v_inline(u, copies);
        return 0;
    }
    uint32_t narrays = r_narrays(r), down = C_MASK;
    if (c == C_MASK && narrays > 0 && n <= array_cap(narrays - 1u)) down = narrays - 1u;
    else if (c != C_MASK && c > 0 && n <= array_cap(c - 1u)) down = c - 1u;
    if (down == C_MASK) return 0;
    uint32_t idx2 = r_take_shrink(r, down);
    if (idx2 == NIL) return 0; /* none spare: it stays a size too big */
    r_members(r, sl->val, members);
    r_fill(r, down, idx2, members, n);
    r_give(r, c, idx);
    sl->val = v_set(down, idx2);
    return 0;
}

/* ------------------------------------------------------------------ fingerprints */

/* The slots whose key has fingerprint f and that worker slot s holds: with `drop`,
 * s leaves each (every copy: its entries count falls by one each); else the first
 * stops the walk.  How many were found. */
static size_t r_region(RouterObject *r, uint32_t f, uint32_t s, int drop) {
    if (r->len == 0) return 0;
    size_t i = r_fp_home(r, f), found = 0;
    for (size_t e = 0;;) {
        const RSlot *sl = &r->slots[i];
        if (sl->tag == 0) break;
        size_t d = r_dist(r, i);
        if (d + 1u < e) break; /* its home is past f's region: so is every later one's */
        if (d <= e && r_fp(sl->key, sl->tag) == f && r_holds(r, sl->val, s)) {
            found++;
            if (!drop) return found;
            r->w[s].entries--;
            if (r_leave(r, i, s)) continue; /* slot i holds the cluster's next member now */
        }
        if (++i == r->cap) i = 0;
        e++;
    }
    return found;
}

static void u32_sift(uint32_t *a, size_t start, size_t n) {
    size_t root = start;
    while (2u * root + 1u < n) {
        size_t child = 2u * root + 1u;
        if (child + 1u < n && a[child] < a[child + 1u]) child++;
        if (a[root] >= a[child]) return;
        uint32_t t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

/* Sort in place (heapsort: no allocation, O(n log n)): when no scratch can be had. */
static void u32_sort(uint32_t *a, size_t n) {
    if (n < 2) return;
    for (size_t start = n / 2u; start-- > 0;) u32_sift(a, start, n);
    for (size_t end = n - 1u; end > 0; end--) {
        uint32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        u32_sift(a, 0, end);
    }
}

/* Sort a[0..n) with the help of tmp[0..n): LSD radix sort, a byte a pass. O(n). */
static void u32_radix(uint32_t *a, uint32_t *tmp, size_t n) {
    uint32_t *from = a, *to = tmp;
    for (unsigned shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (size_t j = 0; j < n; j++) count[((from[j] >> shift) & 0xFFu) + 1u]++;
        for (unsigned b = 0; b < 256; b++) count[b + 1] += count[b];
        for (size_t j = 0; j < n; j++) to[count[(from[j] >> shift) & 0xFFu]++] = from[j];
        uint32_t *swap = from;
        from = to;
        to = swap;
    }
    /* Four passes: the sorted keys are back in a. */
}

/* Worker slot s's fingerprints, sorted, once each, the dead dropped: O(n) with a scratch
 * buffer of n, O(n log n) in place (heapsort) when none can be had.  Sorted, they also
 * walk the table in order when the worker is cleared. */
static void r_compact(RouterObject *r, uint32_t s) {
    RWorker *x = &r->w[s];
    uint32_t *tmp = PyMem_Malloc((x->nrefs ? x->nrefs : 1) * sizeof(uint32_t));
    if (tmp != NULL) {
        u32_radix(x->refs, tmp, x->nrefs);
        PyMem_Free(tmp);
    } else {
        u32_sort(x->refs, x->nrefs);
    }
    size_t kept = 0;
    for (size_t j = 0; j < x->nrefs; j++) {
        uint32_t f = x->refs[j];
        if (kept > 0 && x->refs[kept - 1u] == f) continue;
        if (r_region(r, f, s, 0)) x->refs[kept++] = f;
    }
    x->nrefs = kept;
}

/* Room for `more` fingerprints of worker slot s, compacting first when the stale ones
 * would outnumber the live.  -1 (MemoryError) changes nothing the caller can see. */
static int r_refs_reserve(RouterObject *r, uint32_t s, size_t more) {
    RWorker *x = &r->w[s];
    if (x->nrefs + more > 2u * (x->entries + more) + 256u) r_compact(r, s);
    if (x->nrefs + more <= x->refcap) return 0;
    size_t cap = x->refcap + x->refcap / 8u + 64u;
    if (cap < x->nrefs + more) cap = x->nrefs + more;
    uint32_t *refs = PyMem_Realloc(x->refs, cap * sizeof(uint32_t));
    if (refs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    x->refs = refs;
    x->refcap = cap;
    return 0;
}

/* Drop every entry of worker slot s (its cause -- a clear, a restart, a loss -- is
 * counted by the caller).  O(its fingerprints * probe length). */
static void r_clear(RouterObject *r, uint32_t s) {
    RWorker *x = &r->w[s];
    for (size_t j = 0; j < x->nrefs && x->entries > 0; j++) r_region(r, x->refs[j], s, 1);
    x->nrefs = 0;
}

/* Free the fingerprint list of a worker slot that holds nothing (outside a batch). */
static void r_refs_free(RouterObject *r, uint32_t s) {
    RWorker *x = &r->w[s];
    PyMem_Free(x->refs);
    x->refs = NULL;
    x->nrefs = x->refcap = 0;
}

/* ------------------------------------------------------------------ stores and removals */

enum { STORE_NEW, STORE_COPY, STORE_CAPPED };

/* Worker slot s stores (k, tag): a new entry for it, a copy more, or a copy past the
 * cap.  One probe sequence finds the key or, where Robin Hood order shows it absent,
 * inserts it.  Room is reserved. */
static int r_store(RouterObject *r, uint64_t k, uint8_t tag, uint32_t s) {
    size_t i = r_home(r, k, tag), d = 0;
    for (;;) {
        const RSlot *sl = &r->slots[i];
        uint8_t t = sl->tag;
        if (t == 0 || r_dist(r, i) < d) break; /* absent: it goes here */
        if (t == tag && sl->key == k) {
            if (!r_holds(r, sl->val, s)) {
                r_join(r, i, s);
                return STORE_NEW;
            }
            uint32_t copies = r_copies_at(r, i, s);
            if (copies >= R_MAX_COPIES) return STORE_CAPPED;
            r_set_copies(r, i, s, copies + 1u);
            return STORE_COPY;
        }
        if (++i == r->cap) i = 0;
        d++;
    }
    r_insert_at(r, i, k, tag, v_inline(s, 1));
    if (tag & TAG_BYTES) r->bytes_rc[k]++;
    return STORE_NEW;
}

/* Worker slot s removes one copy of (k, tag): 0 it held none. */
static int r_remove(RouterObject *r, uint64_t k, uint8_t tag, uint32_t s) {
    size_t i = r_find(r, k, tag);
    if (i == SIZE_MAX || !r_holds(r, r->slots[i].val, s)) return 0;
    uint32_t copies = r_copies_at(r, i, s);
    if (copies > 1) {
        r_set_copies(r, i, s, copies - 1u);
    } else {
        r->w[s].entries--;
        r_leave(r, i, s);
    }
    return 1;
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
            if (r_widen(r, r->words + 1u) < 0) return -1;
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


static void r_lose(RouterObject *r, uint32_t s) {
    r->w[s].counts[C_LOST]++;
    r_clear(r, s);
    r->w[s].stale = 1;
}

/* Whether worker slot s holds hash (k, flags) on any medium. */
static int r_holds_any(const RouterObject *r, uint32_t s, uint64_t k, uint8_t flags) {
    for (uint32_t m = 0; m < r->nmedia; m++) {
        size_t i = r_find(r, k, (uint8_t)(TAG_USED | flags | m));
        if (i != SIZE_MAX && r_holds(r, r->slots[i].val, s)) return 1;
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
        size_t cap = r->secap * 2u > events ? r->secap * 2u : events;
        if (cap < 16u) cap = 16u;
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

/* The first pass for a batch object (or a payload the reference's decoder read): check
 * `events` against the schema and fill the scratch.  1 valid, 0 malformed, -1 error.
 * New media are given ids (undone by the caller when malformed). */
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

/* How far ahead the second pass and a query prefetch the home slots of their next keys:
 * a big table's probes are cache misses, and these overlap. */
#define R_PREFETCH 8
/* The keys of an event whose home slots its parse prefetches. */
#define R_PREFETCH_PARSE 16u

/* A macro: GCC finds a function that only prefetches "pure" and drops its calls. */
#define r_prefetch(r, k, tag)                                        \
    do {                                                             \
        const RSlot *pf_slot_ = &(r)->slots[r_home((r), (k), (tag))]; \
        __builtin_prefetch(pf_slot_);                                \
        __builtin_prefetch((const char *)pf_slot_ + 63);             \
    } while (0)

/* ---- the payload read directly: the msgpack vLLM's encoder writes.
 *
 * A batch is an array [ts, events] or [ts, events, data_parallel_rank]; an event a map
 * whose first key is "type" ("BlockStored", "BlockRemoved" or "AllBlocksCleared"), then
 * the fields in any order.  The reader takes exactly what the reference's decoder
 * (reference/router/wire.py, msgspec) reads -- ts a float, block_hashes ints in
 * [-2**63, 2**64), a store's parent_block_hash an int or nil, medium a str or nil,
 * the rank an int or nil -- and steps over every other field, checking it is msgpack.
 * It gives up (the reference's decoder then reads the payload, and decides) on anything
 * else: bytes hashes, an int ts, a medium not seen before, a field twice, an unknown
 * type, an ext value, a str that is not UTF-8, nesting past 32, trailing bytes, a field
 * missing.  So it never takes a payload the reference's decoder refuses, and takes the
 * common ones without making a Python object a hash. */

typedef struct {
    const unsigned char *p, *end;
} MP;

static inline uint64_t be_read(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* A header of `n` bytes more after the type byte: its length field, or 0 if truncated. */
static inline int mp_len(MP *m, int n, uint64_t *len) {
    if (m->end - m->p < n) return 0;
    *len = be_read(m->p, n);
    m->p += n;
    return 1;
}

/* An array: 1 and its length, else 0 (nothing read). */
static int mp_array(MP *m, uint64_t *n) {
    if (m->p >= m->end) return 0;
    unsigned char b = *m->p;
    if ((b & 0xF0u) == 0x90u) {
        m->p++;
        *n = b & 0x0Fu;
        return 1;
    }
    const unsigned char *at = m->p;
    m->p++;
    if (b == 0xDCu && mp_len(m, 2, n)) return 1;
    if (b == 0xDDu && mp_len(m, 4, n)) return 1;
    m->p = at;
    return 0;
}

static int mp_map(MP *m, uint64_t *n) {
    if (m->p >= m->end) return 0;
    unsigned char b = *m->p;
    if ((b & 0xF0u) == 0x80u) {
        m->p++;
        *n = b & 0x0Fu;
        return 1;
    }
    const unsigned char *at = m->p;
    m->p++;
    if (b == 0xDEu && mp_len(m, 2, n)) return 1;
    if (b == 0xDFu && mp_len(m, 4, n)) return 1;
    m->p = at;
    return 0;
}

/* Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as Python decodes. */
static int utf8_ok(const unsigned char *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80u) {
            i++;
            continue;
        }
        int more;
        uint32_t cp, min;
        if ((c & 0xE0u) == 0xC0u) more = 1, cp = c & 0x1Fu, min = 0x80u;
        else if ((c & 0xF0u) == 0xE0u) more = 2, cp = c & 0x0Fu, min = 0x800u;
        else if ((c & 0xF8u) == 0xF0u) more = 3, cp = c & 0x07u, min = 0x10000u;
        else return 0;
        if (n - i <= (uint64_t)more) return 0;
        for (int j = 1; j <= more; j++) {
            unsigned char t = s[i + (uint64_t)j];
            if ((t & 0xC0u) != 0x80u) return 0;
            cp = (cp << 6) | (t & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFFu || (cp >= 0xD800u && cp <= 0xDFFFu)) return 0;
        i += (uint64_t)more + 1u;
    }
    return 1;
}

/* A str: 1 and its bytes (valid UTF-8), else 0 (nothing read). */
static int mp_str(MP *m, const unsigned char **s, uint64_t *len) {
    if (m->p >= m->end) return 0;
    const unsigned char *at = m->p;
    unsigned char b = *m->p++;
    uint64_t n;
    if ((b & 0xE0u) == 0xA0u) n = b & 0x1Fu;
    else if (!((b == 0xD9u && mp_len(m, 1, &n)) || (b == 0xDAu && mp_len(m, 2, &n)) ||
               (b == 0xDBu && mp_len(m, 4, &n)))) {
        m->p = at;
        return 0;
    }
    if ((uint64_t)(m->end - m->p) < n || !utf8_ok(m->p, n)) {
        m->p = at;
        return 0;
    }
    *s = m->p;
    *len = n;
    m->p += n;
    return 1;
}

/* An int: 1, its key (the low 64 bits) and flags (TAG_NEG when negative), else 0. */
static int mp_int(MP *m, uint64_t *k, uint8_t *flags) {
    if (m->p >= m->end) return 0;
    unsigned char b = *m->p;
    if (b <= 0x7Fu) {
        m->p++;
        *k = b;
        *flags = 0;
        return 1;
    }
    if (b >= 0xE0u) {
        m->p++;
        *k = (uint64_t)(int64_t)(int8_t)b;
        *flags = TAG_NEG;
        return 1;
    }
    int n;
    int sign;
    switch (b) {
    case 0xCCu: n = 1, sign = 0; break;
    case 0xCDu: n = 2, sign = 0; break;
    case 0xCEu: n = 4, sign = 0; break;
    case 0xCFu: n = 8, sign = 0; break;
    case 0xD0u: n = 1, sign = 1; break;
    case 0xD1u: n = 2, sign = 1; break;
    case 0xD2u: n = 4, sign = 1; break;
    case 0xD3u: n = 8, sign = 1; break;
    default: return 0;
    }
    if (m->end - m->p < 1 + n) return 0;
    uint64_t v = be_read(m->p + 1, n);
    m->p += 1 + n;
    if (sign && n < 8 && (v >> (8 * n - 1)) & 1u) v |= ~(uint64_t)0 << (8 * n); /* extend */
    *k = v;
    *flags = sign && (v >> 63) ? TAG_NEG : 0;
    return 1;
}

/* Step over one value: 1, else 0 (one we do not take: see above). */
static int mp_skip(MP *m, int depth) {
    if (m->p >= m->end || depth > 32) return 0;
    unsigned char b = *m->p;
    uint64_t n, k;
    uint8_t f;
    const unsigned char *s;
    if (b <= 0x7Fu || b >= 0xE0u || (b >= 0xCCu && b <= 0xD3u)) return mp_int(m, &k, &f);
    if ((b & 0xE0u) == 0xA0u || (b >= 0xD9u && b <= 0xDBu)) return mp_str(m, &s, &n);
    if ((b & 0xF0u) == 0x90u || b == 0xDCu || b == 0xDDu) {
        if (!mp_array(m, &n)) return 0;
        for (uint64_t i = 0; i < n; i++)
            if (!mp_skip(m, depth + 1)) return 0;
        return 1;
    }
    if ((b & 0xF0u) == 0x80u || b == 0xDEu || b == 0xDFu) {
        if (!mp_map(m, &n)) return 0;
        for (uint64_t i = 0; i < 2u * n; i++)
            if (!mp_skip(m, depth + 1)) return 0;
        return 1;
    }
    m->p++;
    switch (b) {
    case 0xC0u: case 0xC2u: case 0xC3u: return 1;            /* nil, false, true */
    case 0xCAu: return mp_len(m, 4, &n);                     /* float32 */
    case 0xCBu: return mp_len(m, 8, &n);                     /* float64 */
    case 0xC4u: case 0xC5u: case 0xC6u:                      /* bin */
        if (!mp_len(m, b == 0xC4u ? 1 : b == 0xC5u ? 2 : 4, &n)) return 0;
        if ((uint64_t)(m->end - m->p) < n) return 0;
        m->p += n;
        return 1;
    default: return 0;                                       /* ext, 0xC1 */
    }
}

static inline int mp_is(const unsigned char *s, uint64_t n, const char *word) {
    size_t len = strlen(word);
    return n == len && memcmp(s, word, len) == 0;
}

/* The id of a medium the index knows, from its UTF-8 (nil: s NULL): 1, else 0. */
static int r_medium_known(RouterObject *r, const unsigned char *s, uint64_t n, uint8_t *id) {
    for (uint32_t i = 0; i < r->nmedia; i++) {
        PyObject *medium = r->medium_of[i];
        if (s == NULL) {
            if (medium == Py_None) {
                *id = (uint8_t)i;
                return 1;
            }
            continue;
        }
        if (medium == Py_None || !PyUnicode_IS_ASCII(medium)) continue; /* ASCII: its bytes */
        if ((uint64_t)PyUnicode_GET_LENGTH(medium) == n &&
            memcmp(PyUnicode_DATA(medium), s, (size_t)n) == 0) {
            *id = (uint8_t)i;
            return 1;
        }
    }
    return 0;
}

/* The first pass on a payload, read directly: 1 valid (the scratch filled), 0 given up
 * (nothing changed), -1 error. */
static int r_fast_parse(RouterObject *r, const unsigned char *buf, size_t size, Py_ssize_t *nev) {
    MP m = {buf, buf + size};
    uint64_t n, events;
    if (!mp_array(&m, &n) || n < 2 || n > 3) return 0;
    if (m.p >= m.end || (*m.p != 0xCBu && *m.p != 0xCAu) || !mp_skip(&m, 0)) return 0; /* ts */
    if (!mp_array(&m, &events) || events > (uint64_t)PY_SSIZE_T_MAX / 2u) return 0;
    /* Each event takes a byte at least: a count beyond the payload is a lie. */
    if (events > size || r_scratch(r, 0, (size_t)events) < 0) return events > size ? 0 : -1;
    size_t at = 0;
    for (uint64_t e = 0; e < events; e++) {
        REvent *x = &r->se[e];
        memset(x, 0, sizeof(*x));
        uint64_t fields, len;
        const unsigned char *s;
        if (!mp_map(&m, &fields) || fields == 0 || !mp_str(&m, &s, &len) || !mp_is(s, len, "type"))
            return 0;
        if (!mp_str(&m, &s, &len)) return 0;
        if (mp_is(s, len, "BlockStored")) x->kind = 1;
        else if (mp_is(s, len, "BlockRemoved")) x->kind = 2;
        else if (mp_is(s, len, "AllBlocksCleared")) x->kind = 3;
        else return 0;
        int seen_hashes = 0, seen_parent = 0, seen_medium = 0;
        for (uint64_t j = 1; j < fields; j++) {
            if (!mp_str(&m, &s, &len) || mp_is(s, len, "type")) return 0;
            if (x->kind != 3 && mp_is(s, len, "block_hashes")) {
                uint64_t count;
                if (seen_hashes++ || !mp_array(&m, &count) || count > (uint64_t)(m.end - m.p))
                    return 0;
                if (r_scratch(r, at + (size_t)count, 0) < 0) return -1;
                x = &r->se[e];
                x->first = at;
                for (uint64_t h = 0; h < count; h++)
                    if (!mp_int(&m, &r->sk[at + h], &r->sf[at + h])) return 0;
                x->n = (size_t)count;
                at += (size_t)count;
            } else if (x->kind == 1 && mp_is(s, len, "parent_block_hash")) {
                if (seen_parent++) return 0;
                if (m.p < m.end && *m.p == 0xC0u) {
                    m.p++;
                } else {
                    if (!mp_int(&m, &x->parent, &x->parent_flags)) return 0;
                    x->has_parent = 1;
                }
            } else if (x->kind != 3 && mp_is(s, len, "medium")) {
                if (seen_medium++) return 0;
                if (m.p < m.end && *m.p == 0xC0u) {
                    m.p++;
                    if (!r_medium_known(r, NULL, 0, &x->medium)) return 0;
                } else {
                    if (!mp_str(&m, &s, &len) || !r_medium_known(r, s, len, &x->medium)) return 0;
                }
            } else if (!mp_skip(&m, 1)) {
                return 0;
            }
        }
        if (x->kind != 3 && (!seen_hashes || !seen_medium || (x->kind == 1 && !seen_parent)))
            return 0;
        /* The second pass's first probes of this event, started now. */
        for (size_t h = x->first; h < x->first + x->n && h < x->first + R_PREFETCH_PARSE; h++)
            r_prefetch(r, r->sk[h], (uint8_t)(TAG_USED | r->sf[h] | x->medium));
    }
    if (n == 3) { /* data_parallel_rank */
        uint64_t k;
        uint8_t f;
        if (m.p < m.end && *m.p == 0xC0u) m.p++;
        else if (!mp_int(&m, &k, &f)) return 0;
    }
    if (m.p != m.end) return 0;
    *nev = (Py_ssize_t)events;
    return 1;
}

/* Everything the second pass may need for worker slot s's parsed events, reserved.
 * -1 (MemoryError) changes nothing the caller can see. */
static int r_prepare(RouterObject *r, uint32_t s, Py_ssize_t nev) {
    size_t stores = 0;
    for (Py_ssize_t e = 0; e < nev; e++)
        if (r->se[e].kind == 1) stores += r->se[e].n;
    for (uint32_t c = 0; c < N_POOLS; c++) r->pool[c].need = 0;
    if (stores == 0) return 0;
    if (r_reserve(r, stores) < 0 || x_reserve(r, stores) < 0 || r_refs_reserve(r, s, stores) < 0)
        return -1;
    /* A set grows at most one class in one worker's batch: into the first class from
     * one holder, into class c from class c - 1 (or back into one it left). */
    uint32_t narrays = r_narrays(r), first = r_first_class(r);
    for (uint32_t c = 0; c < N_POOLS; c++) {
        uint64_t bound;
        if (c == first) bound = r->len;
        else if (c == C_MASK) bound = narrays > 0 ? r->pool[narrays - 1u].live : 0;
        else if (c < narrays) bound = r->pool[c - 1u].live;
        else bound = 0;
        if (bound > stores) bound = stores;
        if (bound > R_MAX_RECORDS) bound = R_MAX_RECORDS;
        if (p_grow(&r->pool[c], (uint32_t)bound, 1) < 0) return -1;
        r->pool[c].need = (int64_t)bound;
    }
    return 0;
}

/* Whether store event ev (with no parent) of worker slot s is a report (R-ROUTE-5): it
 * names at least one block and worker s holds every one of them on its medium (vLLM's
 * announcement of the blocks a request reused), so it adds no copy.  O(ev->n). */
static int r_is_report(const RouterObject *r, uint32_t s, const REvent *ev) {
    if (ev->n == 0) return 0;
    for (size_t j = ev->first; j < ev->first + ev->n; j++) {
        size_t i = r_find(r, r->sk[j], (uint8_t)(TAG_USED | r->sf[j] | ev->medium));
        if (i == SIZE_MAX || !r_holds(r, r->slots[i].val, s)) return 0;
    }
    return 1;
}

/* The second pass: apply the parsed events of worker slot s.  Everything was reserved.
 * Cannot fail. */
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
        const size_t end = ev->first + ev->n;
        if (ev->kind == 1 && !ev->has_parent && r_is_report(r, s, ev)) {
            x->counts[C_REPORTS]++; /* R-ROUTE-5: held blocks announced again, no copy */
            continue;
        }
        if (ev->kind == 1 && ev->has_parent && !r_holds_any(r, s, ev->parent, ev->parent_flags))
            x->counts[C_UNKNOWN_PARENTS]++;
        for (size_t j = ev->first; j < end && j < ev->first + R_PREFETCH; j++)
            r_prefetch(r, r->sk[j], (uint8_t)(TAG_USED | r->sf[j] | ev->medium));
        for (size_t j = ev->first; j < end; j++) {
            if (j + R_PREFETCH < end)
                r_prefetch(r, r->sk[j + R_PREFETCH],
                           (uint8_t)(TAG_USED | r->sf[j + R_PREFETCH] | ev->medium));
            uint8_t tag = (uint8_t)(TAG_USED | r->sf[j] | ev->medium);
            uint64_t k = r->sk[j];
            if (ev->kind == 1) {
                int got = r_store(r, k, tag, s);
                if (got != STORE_NEW) {
                    x->counts[C_DUPLICATE_STORES]++;
                    continue;
                }
                x->entries++;
                x->counts[C_STORED]++;
                x->refs[x->nrefs++] = r_fp(k, tag);
            } else if (r_remove(r, k, tag, s)) {
                x->counts[C_REMOVED]++;
            } else {
                x->counts[C_UNKNOWN_REMOVALS]++;
            }
        }
    }
    for (uint32_t c = 0; c < N_POOLS; c++) r->pool[c].need = 0;
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
    int valid = 0;
    Py_ssize_t nev = 0;
    if (is_bytes) {
        valid = r_fast_parse(self, (const unsigned char *)PyBytes_AS_STRING(batch),
                             (size_t)PyBytes_GET_SIZE(batch), &nev);
        if (valid < 0) goto error;
        if (!valid) {
            decoded = PyObject_CallOneArg(G.decode_for_router, batch);
            if (decoded == NULL) {
                if (!PyErr_ExceptionMatches(G.EventDecodeError)) goto error;
                PyErr_Clear();
            }
            batch = decoded;
        }
    }
    if (!valid && batch != NULL) {
        events = PyObject_GetAttr(batch, s_events);
        if (events == NULL) goto error;
        valid = r_parse(self, events, &nev);
        if (valid < 0) goto error;
    }
    /* Everything the events may need, before anything changes. */
    if (valid && r_prepare(self, (uint32_t)s, nev) < 0) goto error;
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
    r_refs_free(self, (uint32_t)s);
    r_bytes_sweep(self);
    Py_RETURN_NONE;
}

static PyObject *Router_remove_worker(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    if (PyDict_DelItem(self->slot_of, worker) < 0) return NULL;
    r_clear(self, (uint32_t)s);
    r_refs_free(self, (uint32_t)s);
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

/* A table of at most this many slots (426 KB) is taken to be in the caches (a core's L2
 * here): queries do not prefetch. */
#define R_CACHED_SLOTS ((size_t)1 << 15)

/* Slot val's holders as one mask word (an index of one word: a set is a bitmask). */
static inline uint64_t r_word(const RouterObject *self, uint32_t v) {
    if (!(v & V_SET)) return (uint64_t)1 << v_worker(v);
    return r_bm(self, v_index(v))[0];
}

/* The holders of key k (flags f) on every medium, mask words lo..hi of them, into here
 * (those words zeroed first). */
static inline void r_here(const RouterObject *self, uint64_t k, uint8_t f, uint64_t *here,
                          uint32_t lo, uint32_t hi) {
    for (uint32_t w = lo; w <= hi; w++) here[w] = 0;
    for (uint32_t m = 0; m < self->nmedia; m++) {
        size_t i = r_find(self, k, (uint8_t)(TAG_USED | f | m));
        if (i == SIZE_MAX) continue;
        uint32_t v = self->slots[i].val;
        if (!(v & V_SET)) {
            uint32_t s = v_worker(v);
            if ((s >> 6) >= lo && (s >> 6) <= hi) here[s >> 6] |= (uint64_t)1 << (s & 63);
        } else if (v_class(v) == C_MASK) {
            const uint64_t *b = r_bm(self, v_index(v));
            for (uint32_t w = lo; w <= hi; w++) here[w] |= b[w];
        } else {
            const uint16_t *a = r_arr(self, v_class(v), v_index(v));
            for (uint32_t j = 1; j <= a[0]; j++)
                if ((a[j] >> 6) >= lo && (a[j] >> 6) <= hi)
                    here[a[j] >> 6] |= (uint64_t)1 << (a[j] & 63);
        }
    }
}

/* r_depths for the common case: up to 64 workers, one medium (a set is a mask word). */
static PyObject *r_depths_one(RouterObject *self, const uint64_t *k, const uint8_t *f,
                              Py_ssize_t n) {
    const int far = self->cap > R_CACHED_SLOTS; /* prefetching pays only past the caches */
    size_t i = r_find(self, k[0], (uint8_t)(TAG_USED | f[0]));
    uint64_t active = i == SIZE_MAX ? 0 : r_word(self, self->slots[i].val);
    PyObject *out = _PyDict_NewPresized(__builtin_popcountll(active));
    if (out == NULL || active == 0) return out;
    Py_ssize_t d = 1;
    for (; d < n && active; d++) {
        if (far && d + R_PREFETCH < n)
            r_prefetch(self, k[d + R_PREFETCH], (uint8_t)(TAG_USED | f[d + R_PREFETCH]));
        i = r_find(self, k[d], (uint8_t)(TAG_USED | f[d]));
        uint64_t here = i == SIZE_MAX ? 0 : r_word(self, self->slots[i].val);
        if (r_emit(self, out, 0, active & ~here, d) < 0) goto fail;
        active &= here;
    }
    if (r_emit(self, out, 0, active, d) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* Slot val's holders in mask word w. */
static inline uint64_t r_word_at(const RouterObject *self, uint32_t v, uint32_t w) {
    if (!(v & V_SET)) {
        uint32_t s = v_worker(v);
        return (s >> 6) == w ? (uint64_t)1 << (s & 63) : 0;
    }
    if (v_class(v) == C_MASK) return r_bm(self, v_index(v))[w];
    const uint16_t *a = r_arr(self, v_class(v), v_index(v));
    uint64_t bits = 0;
    for (uint32_t j = 1; j <= a[0]; j++)
        if ((a[j] >> 6) == w) bits |= (uint64_t)1 << (a[j] & 63);
    return bits;
}

/* The rest of a one-medium query from key d on, when only mask word w still holds
 * matching workers (`active`): into out.  0, or -1 with the exception set. */
static int r_depths_word(RouterObject *self, PyObject *out, const uint64_t *k, const uint8_t *f,
                         Py_ssize_t n, Py_ssize_t d, uint32_t w, uint64_t active) {
    const int far = self->cap > R_CACHED_SLOTS;
    for (; d < n && active; d++) {
        if (far && d + R_PREFETCH < n)
            r_prefetch(self, k[d + R_PREFETCH], (uint8_t)(TAG_USED | f[d + R_PREFETCH]));
        size_t i = r_find(self, k[d], (uint8_t)(TAG_USED | f[d]));
        uint64_t here = i == SIZE_MAX ? 0 : r_word_at(self, self->slots[i].val, w);
        if (r_emit(self, out, w, active & ~here, d) < 0) return -1;
        active &= here;
    }
    return r_emit(self, out, w, active, d);
}

/* Depths for keys k[0..n) (flags f): into a new dict.  Per hash, the holders of every
 * medium are ORed (a hash on any medium counts); the workers still holding every hash
 * so far are ANDed; those that drop out get the depth they reached.  Only the mask words
 * that still hold a matching worker are read (a request matched by a few of a fleet's
 * workers costs what those words cost).  The dict is made once the first hash's holders
 * are known, sized for them (they are all it can hold). */
static PyObject *r_depths(RouterObject *self, const uint64_t *k, const uint8_t *f, Py_ssize_t n) {
    if (n == 0 || self->len == 0) return PyDict_New();
    if (self->words == 1 && self->nmedia == 1) return r_depths_one(self, k, f, n);
    const int far = self->cap > R_CACHED_SLOTS;
    uint64_t *active = self->here, *here = self->here + R_MAX_WORDS;
    uint32_t lo = 0, hi = self->words - 1u;
    r_here(self, k[0], f[0], active, lo, hi);
    PyObject *out = _PyDict_NewPresized(mask_count(active, self->words));
    if (out == NULL) return NULL;
    /* No Python code runs but the dict's (its keys, the workers, were hashed when added;
     * setting an item runs no __eq__ of theirs unless two hashes collide): the workers do
     * not change while a query runs. */
    Py_ssize_t d = 1;
    for (;;) {
        while (lo <= hi && active[lo] == 0) lo++;
        while (hi > lo && active[hi] == 0) hi--;
        if (lo > hi || d == n) break;
        if (lo == hi && self->nmedia == 1) { /* one word left: the word's own loop */
            if (r_depths_word(self, out, k, f, n, d, lo, active[lo]) < 0) goto fail;
            return out;
        }
        if (far && d + R_PREFETCH < n)
            r_prefetch(self, k[d + R_PREFETCH], (uint8_t)(TAG_USED | f[d + R_PREFETCH]));
        r_here(self, k[d], f[d], here, lo, hi);
        for (uint32_t w = lo; w <= hi; w++) {
            /* the workers holding every block so far but not this one */
            if (r_emit(self, out, w, active[w] & ~here[w], d) < 0) goto fail;
            active[w] &= here[w];
        }
        d++;
    }
    for (uint32_t w = lo; w <= hi && lo < self->words; w++)
        if (r_emit(self, out, w, active[w], d) < 0) goto fail;
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

static PyObject *Router_hash_chain(RouterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    static const char *const names[] = {"tokens", "namespace", "parent"};
    PyObject *vals[3] = {NULL, Py_None, Py_None};
    if (fc_args("hash_chain", args, nargs, kwnames, names, 3, 1, vals) < 0) return NULL;
    return ev_hash_chain(self->hasher, vals[2], vals[0], self->B, vals[1]);
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

/* Worker slot s's entries: a dict (hash, medium) -> copies, found through its
 * fingerprints (a fingerprint twice, or two keys of one, find an entry twice: the dict
 * keeps it once).  O(its fingerprints * probe length). */
static PyObject *r_entries(RouterObject *self, uint32_t s) {
    PyObject *out = PyDict_New();
    RWorker *x = &self->w[s];
    for (size_t j = 0; out != NULL && j < x->nrefs && self->len > 0; j++) {
        uint32_t f = x->refs[j];
        size_t i = r_fp_home(self, f);
        for (size_t e = 0;; e++, i = i + 1 == self->cap ? 0 : i + 1) {
            const RSlot *sl = &self->slots[i];
            if (sl->tag == 0) break;
            size_t d = r_dist(self, i);
            if (d + 1u < e) break;
            if (d > e || r_fp(sl->key, sl->tag) != f || !r_holds(self, sl->val, s)) continue;
            PyObject *h = r_hash_object(self, sl->key, sl->tag);
            PyObject *medium = self->medium_of[sl->tag & TAG_MEDIUM];
            PyObject *entry = h == NULL ? NULL : PyTuple_Pack(2, h, medium);
            PyObject *copies = PyLong_FromUnsignedLong(r_copies_at(self, i, s));
            Py_XDECREF(h);
            if (entry == NULL || copies == NULL || PyDict_SetItem(out, entry, copies) < 0)
                Py_CLEAR(out);
            Py_XDECREF(entry);
            Py_XDECREF(copies);
            if (out == NULL) break;
        }
    }
    return out;
}

static PyObject *Router_holdings(RouterObject *self, PyObject *worker) {
    Py_ssize_t s = r_worker_known(self, worker);
    if (s < 0) return NULL;
    PyObject *entries = r_entries(self, (uint32_t)s);
    if (entries == NULL) return NULL;
    PyObject *set = PySet_New(entries);
    Py_DECREF(entries);
    return set;
}

static PyObject *Router_copies(RouterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    static const char *const names[] = {"worker", "block_hash", "medium"};
    PyObject *a[3] = {NULL, NULL, NULL};
    if (fc_args("copies", args, nargs, kwnames, names, 3, 3, a) < 0) return NULL;
    Py_ssize_t s = r_worker_known(self, a[0]);
    if (s < 0) return NULL;
    PyObject *h = a[1], *medium = a[2];
    if (PyBool_Check(h) || !(PyLong_Check(h) || PyBytes_Check(h))) {
        PyErr_Format(G.InvalidArgumentError, "a block hash is an int or bytes, got %.100s",
                     Py_TYPE(h)->tp_name);
        return NULL;
    }
    uint64_t k = 0;
    uint8_t flags = 0, m = 0;
    int got = medium == Py_None || PyUnicode_Check(medium) ? r_medium_id(self, medium, &m, 0) : 0;
    if (got < 0) return NULL;
    if (got && PyLong_Check(h)) {
        int sign = 0;
        uint64_t mag = 0;
        int fits = long_magnitude(h, &sign, &mag);
        if (fits < 0) return NULL;
        got = fits && !(sign < 0 && mag > (uint64_t)1 << 63);
        k = sign < 0 ? (uint64_t)0 - mag : mag;
        flags = sign < 0 ? TAG_NEG : 0;
    } else if (got) {
        PyObject *id = PyDict_GetItemWithError(self->bytes_ids, h);
        if (id == NULL && PyErr_Occurred()) return NULL;
        got = id != NULL;
        k = got ? PyLong_AsUnsignedLongLong(id) : 0;
        flags = TAG_BYTES;
    }
    size_t i = got ? r_find(self, k, (uint8_t)(TAG_USED | flags | m)) : SIZE_MAX;
    if (i == SIZE_MAX || !r_holds(self, self->slots[i].val, (uint32_t)s)) return PyLong_FromLong(0);
    return PyLong_FromUnsignedLong(r_copies_at(self, i, (uint32_t)s));
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
        uint8_t t = self->slots[i].tag;
        if (t == 0) continue;
        uint8_t m = t & TAG_MEDIUM, flags = t & (TAG_NEG | TAG_BYTES);
        int first = 1; /* counted at its lowest medium id */
        for (uint8_t o = 0; o < m && first; o++)
            first = r_find(self, self->slots[i].key, (uint8_t)(TAG_USED | flags | o)) == SIZE_MAX;
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

/* sorted(iterable, key=repr): a new list. */
static PyObject *r_sorted(PyObject *iterable) {
    PyObject *call = PyTuple_Pack(1, iterable);
    PyObject *out = call ? PyObject_Call(b_sorted, call, kw_key_repr) : NULL;
    Py_XDECREF(call);
    return out;
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
        PyObject *extra = PyList_New(0); /* (hash, medium, copies) of the entries held twice+ */
        PyObject *k, *v;
        Py_ssize_t at = 0;
        while (extra != NULL && PyDict_Next(entries, &at, &k, &v)) {
            if (PyLong_AsLong(v) < 2) continue;
            PyObject *t = PyTuple_Pack(3, PyTuple_GET_ITEM(k, 0), PyTuple_GET_ITEM(k, 1), v);
            if (t == NULL || PyList_Append(extra, t) < 0) Py_CLEAR(extra);
            Py_XDECREF(t);
        }
        PyObject *ordered = extra ? r_sorted(entries) : NULL;
        PyObject *copies = ordered ? r_sorted(extra) : NULL;
        Py_XDECREF(extra);
        Py_DECREF(entries);
        PyObject *counts = copies ? r_counts(x) : NULL;
        PyObject *d = counts ? Py_BuildValue("{s:O,s:K,s:O,s:O,s:O,s:O}", "worker", key,
                                             "expected", (unsigned long long)x->expected,
                                             "stale", x->stale ? Py_True : Py_False, "counts",
                                             counts, "entries", ordered, "copies", copies)
                             : NULL;
        Py_XDECREF(counts);
        Py_XDECREF(ordered);
        Py_XDECREF(copies);
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

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The check of one used slot i's holders: NULL, or a violation (set). */
static PyObject *r_check_holders(RouterObject *self, size_t i, uint64_t *counted,
                                 uint8_t **named, uint32_t **sorted_refs) {
    const RSlot *sl = &self->slots[i];
    uint32_t v = sl->val;
    uint16_t members[64u * R_MAX_WORDS];
    uint32_t n;
    if (!(v & V_SET)) {
        uint32_t copies = v_copies(v);
        if (copies < 1 || copies > R_MAX_COPIES)
            return r_violation("slot %zu's holder has %u copies", i, copies);
        members[0] = (uint16_t)v_worker(v);
        n = 1;
    } else {
        uint32_t c = v_class(v), idx = v_index(v);
        if (c > C_MASK || (c != C_MASK && c >= r_narrays(self)) || idx >= self->pool[c].top)
            return r_violation("slot %zu names record %u of class %u, which is not one", i, idx, c);
        if (named[c][idx]++)
            return r_violation("slot %zu names record %u of class %u, another slot's", i, idx, c);
        if (c != C_MASK && r_arr(self, c, idx)[0] > array_cap(c))
            return r_violation("slot %zu's set overflows its record", i);
        n = r_members(self, v, members);
        if (n < 2) return r_violation("slot %zu's set has %u member", i, n);
        for (uint32_t a = 0; a < n; a++)
            for (uint32_t b = a + 1; b < n; b++)
                if (members[a] == members[b])
                    return r_violation("slot %zu's set names worker slot %u twice", i,
                                       (unsigned)members[a]);
    }
    uint32_t f = r_fp(sl->key, sl->tag);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t s = members[j];
        if (s >= self->nw || self->w[s].key == NULL)
            return r_violation("slot %zu names worker slot %u, which is free", i, s);
        counted[s]++;
        RWorker *x = &self->w[s];
        if (bsearch(&f, sorted_refs[s], x->nrefs, sizeof(uint32_t), cmp_u32) == NULL)
            return r_violation("slot %zu is missing from worker %R's fingerprints", i, x->key);
    }
    return NULL;
}

static PyObject *Router_check_invariants(RouterObject *self, PyObject *unused) {
    (void)unused;
    PyObject *bad = NULL;
    uint64_t *counted = PyMem_Calloc(self->nw ? self->nw : 1, sizeof(uint64_t));
    uint64_t *refs = PyMem_Calloc(self->nbytes ? self->nbytes : 1, sizeof(uint64_t));
    uint32_t **sorted_refs = PyMem_Calloc(self->nw ? self->nw : 1, sizeof(uint32_t *));
    uint8_t *named[N_POOLS] = {NULL};
    int oom = counted == NULL || refs == NULL || sorted_refs == NULL;
    for (uint32_t c = 0; !oom && c < N_POOLS; c++)
        oom = (named[c] = PyMem_Calloc(self->pool[c].top ? self->pool[c].top : 1, 1)) == NULL;
    for (uint32_t s = 0; !oom && s < self->nw; s++) {
        RWorker *x = &self->w[s];
        if (x->key == NULL || x->nrefs == 0) continue;
        if ((sorted_refs[s] = PyMem_Malloc(x->nrefs * sizeof(uint32_t))) == NULL) oom = 1;
        else {
            memcpy(sorted_refs[s], x->refs, x->nrefs * sizeof(uint32_t));
            qsort(sorted_refs[s], x->nrefs, sizeof(uint32_t), cmp_u32);
        }
    }
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    size_t used = 0;
    uint32_t nm = self->nmedia;
    for (size_t i = 0; i < self->cap && bad == NULL && !PyErr_Occurred(); i++) {
        const RSlot *sl = &self->slots[i];
        uint8_t t = sl->tag;
        if (t == 0) continue;
        used++;
        if (!(t & TAG_USED) || (t & TAG_MEDIUM) >= nm) {
            bad = r_violation("slot %zu has a bad tag %u", i, (unsigned)t);
            break;
        }
        if (t & TAG_BYTES) {
            if (sl->key >= self->nbytes || self->bytes_of[sl->key] == NULL) {
                bad = r_violation("slot %zu names bytes id %llu, which is free", i,
                                  (unsigned long long)sl->key);
                break;
            }
            refs[sl->key]++;
        }
        /* Robin Hood: from its home to it, no empty slot and no poorer resident. */
        size_t h = r_home(self, sl->key, t), d = r_dist(self, i);
        for (size_t j = h, e = 0; e < d; e++, j = j + 1 == self->cap ? 0 : j + 1) {
            if (self->slots[j].tag == 0 || r_dist(self, j) < e) {
                bad = r_violation("slot %zu is not where probing puts it", i);
                break;
            }
            if (self->slots[j].tag == t && self->slots[j].key == sl->key) {
                bad = r_violation("slots %zu and %zu hold the same key", j, i);
                break;
            }
        }
        if (!PyErr_Occurred()) r_check_holders(self, i, counted, named, sorted_refs);
    }
    if (PyErr_Occurred()) goto done;
    if (used != self->len) {
        bad = r_violation("%zu slots used, %zu counted", used, self->len);
        goto done;
    }
    for (uint32_t s = 0; s < self->nw; s++) {
        if (self->w[s].key != NULL && counted[s] != self->w[s].entries) {
            bad = r_violation("worker %R holds %llu entries, counted %llu", self->w[s].key,
                              (unsigned long long)counted[s],
                              (unsigned long long)self->w[s].entries);
            goto done;
        }
    }
    /* Every record: named by one slot, or on its pool's free list (once). */
    for (uint32_t c = 0; c < N_POOLS; c++) {
        RPool *p = &self->pool[c];
        uint32_t live = 0, free = 0;
        for (uint32_t idx = 0; idx < p->top; idx++) live += named[c][idx] != 0;
        for (uint32_t idx = p->free_head; free < p->nfree; free++) {
            if (idx >= p->top || named[c][idx]) {
                bad = r_violation("class %u's free list names record %u, which is not free", c, idx);
                goto done;
            }
            named[c][idx] = 1;
            memcpy(&idx, p->data + (size_t)idx * p->size, sizeof(uint32_t));
        }
        if (live != p->live || live + p->nfree != p->top || p->top > p->cap) {
            bad = r_violation("class %u counts %u records live and %u free of %u, found %u live",
                              c, p->live, p->nfree, p->top, live);
            goto done;
        }
    }
    /* Every extras entry: a member of a set slot, 2 copies or more. */
    size_t xfound = 0;
    for (size_t i = 0; i < self->xcap; i++) {
        const RExtra *x = &self->xs[i];
        if (x->copies == 0) continue;
        xfound++;
        size_t at = r_find(self, x->key, x->tag);
        if (x->copies < 2 || x->copies > R_MAX_COPIES || at == SIZE_MAX ||
            !(self->slots[at].val & V_SET) || !r_holds(self, self->slots[at].val, x->worker) ||
            x_find(self, x->key, x->tag, x->worker) != i) {
            bad = r_violation("extras entry %zu (worker slot %u, %u copies) is not a set member's",
                              i, (unsigned)x->worker, x->copies);
            goto done;
        }
    }
    if (xfound != self->xlen) {
        bad = r_violation("%zu extras entries, %zu counted", xfound, self->xlen);
        goto done;
    }
    for (uint64_t id = 0; id < self->nbytes; id++) {
        if (self->bytes_of[id] != NULL && refs[id] == 0) {
            bad = r_violation("bytes id %llu is named by no slot", (unsigned long long)id);
            goto done;
        }
        if (self->bytes_of[id] != NULL && self->bytes_rc[id] != refs[id]) {
            bad = r_violation("bytes id %llu is named by %llu slots, counted %llu",
                              (unsigned long long)id, (unsigned long long)refs[id],
                              (unsigned long long)self->bytes_rc[id]);
            goto done;
        }
    }
    if (PyDict_GET_SIZE(self->slot_of) != (Py_ssize_t)self->live)
        bad = r_violation("%zd workers registered, %u live", PyDict_GET_SIZE(self->slot_of),
                          self->live);
done:
    PyMem_Free(counted);
    PyMem_Free(refs);
    for (uint32_t s = 0; sorted_refs != NULL && s < self->nw; s++) PyMem_Free(sorted_refs[s]);
    PyMem_Free(sorted_refs);
    for (uint32_t c = 0; c < N_POOLS; c++) PyMem_Free(named[c]);
    if (bad != NULL || PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

#ifdef KACHEDB_RADIX_TEST_HOOKS /* the test build only (accel/DESIGN.md, "Test hooks") */
/* The _corrupt_check test hook: break one invariant in place, run check_invariants(),
 * undo, and return the InvariantViolation's message (None if the check missed it). */
static const char *const R_KINDS[] = {
    "bad_tag", "free_worker", "bytes_free", "misplaced", "duplicate", "len", "entries",
    "bytes_unnamed", "bytes_rc", "registry", "copies", "set_small", "set_twice", "record",
    "free_list", "extra", "fingerprint", "record_twice", "overflow", "free_live",
    "extras_count", NULL,
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

enum { SOME_ANY, SOME_BYTES, SOME_FOLLOWED, SOME_INLINE, SOME_ARRAY, SOME_SET };

/* The first used slot of a kind: any; a bytes one; one followed by a used slot of
 * another home (so that swapping the two puts one before its home); an inline one; one
 * with an array set; one with any set. */
static size_t r_some_slot(const RouterObject *r, int kind) {
    for (size_t i = 0; i < r->cap; i++) {
        const RSlot *sl = &r->slots[i];
        if (sl->tag == 0) continue;
        if (kind == SOME_BYTES && !(sl->tag & TAG_BYTES)) continue;
        if (kind == SOME_INLINE && (sl->val & V_SET)) continue;
        if (kind == SOME_SET && !(sl->val & V_SET)) continue;
        if (kind == SOME_ARRAY && (!(sl->val & V_SET) || v_class(sl->val) == C_MASK)) continue;
        size_t j = i + 1 == r->cap ? 0 : i + 1;
        if (kind == SOME_FOLLOWED &&
            (r->slots[j].tag == 0 ||
             r_home(r, sl->key, sl->tag) == r_home(r, r->slots[j].key, r->slots[j].tag)))
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
    const char *const *known = R_KINDS;
    while (*known != NULL && strcmp(*known, kind) != 0) known++;
    if (*known == NULL) {
        PyErr_Format(PyExc_ValueError, "unknown kind %R", arg);
        return NULL;
    }
    Undo u = {.n = 0, .temp = NULL};
    int some = SOME_ANY;
    if (!strcmp(kind, "bytes_free") || !strcmp(kind, "bytes_rc") || !strcmp(kind, "bytes_unnamed"))
        some = SOME_BYTES;
    else if (!strcmp(kind, "misplaced")) some = SOME_FOLLOWED;
    else if (!strcmp(kind, "copies") || !strcmp(kind, "free_worker")) some = SOME_INLINE;
    else if (!strcmp(kind, "set_small") || !strcmp(kind, "set_twice") ||
             !strcmp(kind, "overflow"))
        some = SOME_ARRAY;
    else if (!strcmp(kind, "record") || !strcmp(kind, "extra") || !strcmp(kind, "record_twice") ||
             !strcmp(kind, "free_live"))
        some = SOME_SET;
    size_t i = r_some_slot(self, some);
    if (i == SIZE_MAX && strcmp(kind, "registry") != 0 && strcmp(kind, "free_list") != 0 &&
        strcmp(kind, "extras_count") != 0) {
        PyErr_Format(PyExc_ValueError, "this index has no slot to show %s", kind);
        return NULL;
    }
    RSlot *sl = i == SIZE_MAX ? NULL : &self->slots[i];
    if (!strcmp(kind, "bad_tag")) {
        PUT(&u, sl->tag, (uint8_t)(sl->tag | TAG_MEDIUM));
    } else if (!strcmp(kind, "free_worker")) {
        PUT(&u, sl->val, v_inline(V_WORKER, v_copies(sl->val)));
    } else if (!strcmp(kind, "bytes_free")) {
        PUT(&u, sl->key, self->nbytes + 7u);
    } else if (!strcmp(kind, "misplaced")) {
        size_t j = i + 1 == self->cap ? 0 : i + 1; /* swap with the next: out of order */
        RSlot a = self->slots[i], b = self->slots[j];
        PUT(&u, self->slots[i], b);
        PUT(&u, self->slots[j], a);
    } else if (!strcmp(kind, "duplicate")) {
        size_t j = i + 1 == self->cap ? 0 : i + 1;
        if (self->slots[j].tag != 0) {
            PyErr_SetString(PyExc_ValueError, "no empty slot after the first: cannot show duplicate");
            return NULL;
        }
        PUT(&u, self->slots[j], self->slots[i]);
        PUT(&u, self->len, self->len + 1u);
    } else if (!strcmp(kind, "len")) {
        PUT(&u, self->len, self->len + 1u);
    } else if (!strcmp(kind, "entries")) {
        uint32_t s = sl->val & V_SET ? 0 : v_worker(sl->val);
        while (self->w[s].key == NULL) s++;
        PUT(&u, self->w[s].entries, self->w[s].entries + 1u);
    } else if (!strcmp(kind, "bytes_unnamed")) {
        if (self->nbytes == self->bytes_cap) {
            PyErr_SetString(PyExc_ValueError, "no room for another id: cannot show bytes_unnamed");
            return NULL;
        }
        /* One more live id, which no slot names (its bytes: the first slot's, borrowed). */
        PUT(&u, self->bytes_of[self->nbytes], self->bytes_of[sl->key]);
        PUT(&u, self->bytes_rc[self->nbytes], (uint64_t)0);
        PUT(&u, self->nbytes, self->nbytes + 1u);
    } else if (!strcmp(kind, "bytes_rc")) {
        PUT(&u, self->bytes_rc[sl->key], self->bytes_rc[sl->key] + 1u);
    } else if (!strcmp(kind, "registry")) {
        PUT(&u, self->live, self->live + 1u);
    } else if (!strcmp(kind, "copies")) {
        PUT(&u, sl->val, v_inline(v_worker(sl->val), 0));
    } else if (!strcmp(kind, "set_small")) {
        uint16_t *a = r_arr(self, v_class(sl->val), v_index(sl->val));
        PUT(&u, a[0], (uint16_t)1);
    } else if (!strcmp(kind, "set_twice")) {
        uint16_t *a = r_arr(self, v_class(sl->val), v_index(sl->val));
        PUT(&u, a[2], a[1]);
    } else if (!strcmp(kind, "record")) {
        uint32_t c = v_class(sl->val);
        PUT(&u, sl->val, v_set(c, self->pool[c].top + 3u));
    } else if (!strcmp(kind, "free_list")) {
        uint32_t c = 0;
        while (c < N_POOLS && self->pool[c].live == 0) c++;
        if (c == N_POOLS) {
            PyErr_SetString(PyExc_ValueError, "no live record: cannot show free_list");
            return NULL;
        }
        PUT(&u, self->pool[c].live, self->pool[c].live + 1u);
    } else if (!strcmp(kind, "extra")) {
        if (self->xlen == 0) {
            PyErr_SetString(PyExc_ValueError, "no extras entry: cannot show extra");
            return NULL;
        }
        size_t x = 0;
        while (self->xs[x].copies == 0) x++;
        PUT(&u, self->xs[x].copies, (uint32_t)1);
    } else if (!strcmp(kind, "record_twice")) { /* a second set slot names the first's record */
        size_t j = i + 1;
        while (j < self->cap && !(self->slots[j].tag != 0 && (self->slots[j].val & V_SET))) j++;
        if (j == self->cap) {
            PyErr_SetString(PyExc_ValueError, "one set slot only: cannot show record_twice");
            return NULL;
        }
        PUT(&u, self->slots[j].val, sl->val);
    } else if (!strcmp(kind, "overflow")) {
        uint32_t c = v_class(sl->val);
        PUT(&u, r_arr(self, c, v_index(sl->val))[0], (uint16_t)(array_cap(c) + 1u));
    } else if (!strcmp(kind, "free_live")) { /* the free list names a live record */
        uint32_t c = v_class(sl->val);
        PUT(&u, self->pool[c].free_head, v_index(sl->val));
        PUT(&u, self->pool[c].nfree, self->pool[c].nfree + 1u);
        PUT(&u, self->pool[c].live, self->pool[c].live - 1u);
    } else if (!strcmp(kind, "extras_count")) {
        PUT(&u, self->xlen, self->xlen + 1u);
    } else { /* fingerprint: a worker's list loses one */
        uint32_t s = 0;
        while (s < self->nw && (self->w[s].key == NULL || self->w[s].nrefs == 0)) s++;
        if (s == self->nw) {
            PyErr_SetString(PyExc_ValueError, "no fingerprints: cannot show fingerprint");
            return NULL;
        }
        RWorker *x = &self->w[s];
        /* Every copy of the first fingerprint, overwritten with one of no slot's. */
        uint32_t f = x->refs[0], other = f ^ 0x80000000u;
        size_t n = 0;
        for (size_t j = 0; j < x->nrefs; j++) n += x->refs[j] == f;
        if (n > 8) {
            PyErr_SetString(PyExc_ValueError, "a fingerprint held 9 times: cannot show fingerprint");
            return NULL;
        }
        for (size_t j = 0; j < x->nrefs; j++)
            if (x->refs[j] == f) PUT(&u, x->refs[j], other);
    }
    PyObject *r = Router_check_invariants(self, NULL);
    undo(&u);
    if (r != NULL) {
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    return violation_message();
}
#endif

static PyObject *Router_memory_bytes(RouterObject *self, PyObject *unused) {
    (void)unused;
    size_t table = self->cap * sizeof(RSlot);
    size_t sets = 0;
    for (uint32_t c = 0; c < N_POOLS; c++) sets += (size_t)self->pool[c].cap * self->pool[c].size;
    size_t extras = self->xcap * sizeof(RExtra);
    size_t fingerprints = 0;
    for (uint32_t s = 0; s < self->nw; s++) fingerprints += self->w[s].refcap * sizeof(uint32_t);
    size_t workers = self->wcap * sizeof(RWorker);
    size_t interned = self->bytes_cap * (sizeof(PyObject *) + 2u * sizeof(uint64_t));
    size_t scratch = self->scap * 9u + self->secap * sizeof(REvent) +
                     2u * R_MAX_WORDS * sizeof(uint64_t);
    size_t total = table + sets + extras + fingerprints + workers + interned + scratch +
                   sizeof(*self);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "table", (Py_ssize_t)table,
                         "sets", (Py_ssize_t)sets, "extras", (Py_ssize_t)extras, "fingerprints",
                         (Py_ssize_t)fingerprints, "workers", (Py_ssize_t)workers, "interned",
                         (Py_ssize_t)interned, "scratch", (Py_ssize_t)scratch, "slots",
                         (Py_ssize_t)self->cap, "total", (Py_ssize_t)total);
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
    for (uint32_t c = 0; c < N_POOLS; c++) {
        r->pool[c].size = c == C_MASK ? sizeof(uint64_t) : (size_t)8u << c;
        r->pool[c].free_head = NIL;
    }
    r->here = PyMem_Calloc(2u * R_MAX_WORDS, sizeof(uint64_t));
    r->hasher = hasher == Py_None ? PyObject_CallNoArgs(G.BlockHasher) : Py_NewRef(hasher);
    r->slot_of = PyDict_New();
    r->media = PyDict_New();
    r->bytes_ids = PyDict_New();
    if (!r->hasher || !r->slot_of || !r->media || !r->bytes_ids || r->here == NULL ||
        r_rebuild(r, 16u) < 0) {
        if (r->here == NULL && !PyErr_Occurred()) PyErr_NoMemory();
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
    PyMem_Free(self->slots);
    for (uint32_t c = 0; c < N_POOLS; c++) PyMem_Free(self->pool[c].data);
    PyMem_Free(self->xs);
    for (uint32_t s = 0; s < self->nw; s++) PyMem_Free(self->w[s].refs);
    PyMem_Free(self->w);
    PyMem_Free(self->here);
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
     "starts stale. O(its fingerprints * probe length).\n\n"
     "Raises:\n    InvalidArgumentError: a bad number (nothing changes). Also for a 4,097th worker."},
    {"remove_worker", (PyCFunction)Router_remove_worker, METH_O,
     "remove_worker($self, worker, /)\n--\n\n"
     "Forget ``worker`` and everything it holds. O(its fingerprints * probe length).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"query_hashes", (PyCFunction)Router_query_hashes, METH_O,
     "query_hashes($self, hashes, /)\n--\n\n"
     "Each worker's matched depth, in blocks, for a request whose blocks have the\n"
     "external hashes ``hashes`` (path order); workers with depth 0 are left out\n"
     "(R-ROUTE-4). A hash no event can carry (an int out of msgpack's range) is held\n"
     "by no worker. O(n * m) probes for m media, plus each hash's holder set; the\n"
     "workers still matching ANDed 64 a word.\n\n"
     "Raises:\n    InvalidArgumentError: a hash is neither an int nor bytes (nothing changes)."},
    {"hash_chain", (PyCFunction)(void (*)(void))Router_hash_chain, METH_FASTCALL | METH_KEYWORDS,
     "hash_chain($self, tokens, namespace=None, parent=None)\n--\n\n"
     "The (internal, external) hashes of every whole block of ``tokens``, hashed as the\n"
     "workers hash them: from a root, the first block salted by ``namespace`` (under the\n"
     "hasher's salt rule), or after the block whose internal hash is ``parent`` (then\n"
     "``namespace`` is not read). O(n) for n tokens.\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*).\n"
     "    InvalidArgumentError: ``namespace`` is neither None nor a str.\n"
     "    TypeError: ``parent`` is not an internal hash of the scheme."},
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
     "``worker``'s entries: (hash, medium) pairs. O(its fingerprints * probe length).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker."},
    {"copies", (PyCFunction)(void (*)(void))Router_copies, METH_FASTCALL | METH_KEYWORDS,
     "copies($self, worker, block_hash, medium)\n--\n\n"
     "How many copies of ``block_hash`` on ``medium`` ``worker`` holds (R-ROUTE-5); 0 when\n"
     "none. O(1).\n\n"
     "Raises:\n    InvalidArgumentError: an unknown worker, or a hash neither an int nor bytes."},
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
     "Plain data: every worker's expected number, staleness, counters, entries\n"
     "(sorted) and the copies of those it holds more than once (``(hash, medium,\n"
     "copies)``, sorted), in the order first seen. O(entries log entries)."},
    {"check_invariants", (PyCFunction)Router_check_invariants, METH_NOARGS,
     "check_invariants($self, /)\n--\n\n"
     "Assert the module's invariants. O(slots * probe length + fingerprints log fingerprints).\n\n"
     "Raises:\n    InvariantViolation: one is broken (a bug, never bad input)."},
#ifdef KACHEDB_RADIX_TEST_HOOKS
    {"_corrupt_check", (PyCFunction)Router_corrupt_check, METH_O,
     "_corrupt_check($self, kind, /)\n--\n\n"
     "Test hook: break one invariant in place (``kind``, one of ``_corrupt_kinds()``), run\n"
     "check_invariants(), undo every change and return the InvariantViolation's message, or\n"
     "None if the check let the break pass.\n\n"
     "Raises:\n    ValueError: an unknown kind, or one this index's state cannot show.\n"
     "    TypeError: ``kind`` is not a str."},
    {"_corrupt_kinds", (PyCFunction)Router_corrupt_kinds, METH_NOARGS | METH_CLASS,
     "_corrupt_kinds($cls, /)\n--\n\nTest hook: the kinds _corrupt_check breaks."},
#endif
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
              "table a block; a query O(n * m) probes for n hashes on m media plus their holder\n"
              "sets; clearing or removing a worker O(what it holds). At most 4,096 workers.\n"
              "One thread at a time.",
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
