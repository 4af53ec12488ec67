/* kachedb_radix.accel._radix -- the C twin of reference.RadixTree: shared declarations.
 *
 * Layout (see accel/DESIGN.md for the full story):
 *
 *   per block id (arrays of num_blocks entries, calloc'd once, so pages of ids never
 *   used stay untouched): the block's pin count and stamp.
 *
 *   edges: the tokens and block ids of an edge lie contiguously in a reference-counted
 *   PChunk, shared by the writer's node, the published versions of that node and the
 *   two halves of a split; the walk compares a whole edge with one memcmp.  The tokens
 *   are stored once, for the writer and every snapshot alike.
 *
 *   nodes: one pool of fixed 24-byte records indexed by uint32, with a free list: the
 *   writer's parent links, edges and child counts.
 *
 *   children: found through the published shape (below), which the writer keeps for
 *   its snapshots anyway: each node's current published version lists its children in
 *   an array sorted by first block (up to 15) or a hash trie keyed by the child's first
 *   block.  The block hash is NH (UMAC's universal hash) over the B tokens with 32-bit
 *   keys drawn per tree from os.urandom, so colliding blocks cannot be crafted without
 *   the keys (collision probability <= 2**-32 per pair).
 *
 *   eviction: an indexed 4-ary min-heap of the evictable leaves keyed by
 *   (stamp of the tail block, tail block id) -- the reference's order -- updated in
 *   place whenever a leaf's tail, pin or children change; O(log h) per change.
 *
 *   published shape (snapshot.c): a persistent, reference-counted version of the shape
 *   that snapshots read (PNodes over the same chunks, children in a persistent hash
 *   trie), changed in place only where no snapshot can reach, else path-copied; the
 *   reader registry and the quarantine of blocks freed under readers.
 *
 * The units (each a compiled file with its own header; see accel/DESIGN.md "Sources"):
 * _radix.c (tree.h: the writer, the RadixTree type, module init), walk.c (walk.h: the
 * writer's lookups), policy.c (policy.h), events.c (events.h), snapshot.c (snapshot.h;
 * shape.h: the published shape's encoding), inspect.c (inspect.h), alloc.c (alloc.h),
 * objects.c (objects.h), tokens.c (tokens.h), router.c, and, in a test build only,
 * corrupt.c (corrupt.h).  This header holds what they all share: the layout, the module
 * globals, the inline block hash and compare.
 *
 * The GIL is held for the whole of every writer call; nothing inside a mutation runs Python
 * code or allocates a GC-tracked object (leases are allocated before any tree state
 * is read), so re-entrant calls from finalizers cannot observe a half-done change.
 */
#ifndef ACCEL_RADIX_H
#define ACCEL_RADIX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Internal functions are hidden: no PLT indirection between the extension's own files. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)

#endif

#define NIL 0xFFFFFFFFu
#define NODE_FREE 0xFFFFFFFEu
/* Block ids and node indices are uint32; NIL and NODE_FREE are reserved. */
#define MAX_POOL 0x7FFFFFFFu

/* ------------------------------------------------------------------ module globals */

typedef struct {
    PyObject *TokenTypeError;
    PyObject *TokenRangeError;
    PyObject *TokenLayoutError;
    PyObject *InvalidArgumentError;
    PyObject *OutOfBlocksError;
    PyObject *DoubleFreeError;
    PyObject *ForeignBlockError;
    PyObject *LeaseReleasedError;
    PyObject *ForeignLeaseError;
    PyObject *InvariantViolation;
    PyObject *ReaderLeftError;
    PyObject *as_token_list; /* reference.tokens.as_token_list (slow path) */
    PyObject *TreeStats;     /* reference.results.TreeStats */
    PyObject *render_dump;   /* reference.render.render_dump */
    PyObject *urandom;       /* os.urandom */
    PyObject *dump_format;   /* reference.dump.DUMP_FORMAT */
    PyObject *check_policy;  /* reference.policies.check_policy */
    PyObject *event_hasher;  /* reference.events.event_hasher */
    PyObject *decode_batch;  /* reference.events.decode_batch */
    /* the router index (router.c) */
    PyObject *BlockHasher, *KVEventBatch, *BlockStored, *BlockRemoved, *AllBlocksCleared,
        *decode_for_router, *RoutedStored, *RoutedRemoved, *RoutedCleared, *EventDecodeError,
        *Applied;
    /* interned strings */
    PyObject *s_tokens, *s_namespace, *s_pin, *s_priority, *s_retain_for;
    PyObject *s_format, *s_block_size, *s_num_blocks, *s_clock, *s_free, *s_namespaces,
        *s_children, *s_blocks, *s_pins, *s_stamps, *s_quarantine, *s_version, *s_policy,
        *s_name, *s_options, *s_lru, *s_cache_salt;
} Globals;

extern Globals G;

/* ------------------------------------------------------------------ allocator */

typedef struct {
    uint64_t *bits;    /* bit i set: block i is free */
    uint64_t *summary; /* bit w set: bits[w] != 0 */
    uint32_t num_blocks;
    uint32_t nwords;
    uint32_t nsummary;
    uint32_t free_count;
    uint32_t hint; /* no summary word below hint is nonzero */
} BitAlloc;

/* ------------------------------------------------------------------ chunks and the published shape
 *
 * A PChunk holds `cap` blocks: cap * B tokens, then cap block ids.  Entries below
 * `used` are never written again (a reader may be reading them without the GIL); the
 * writer appends past `used`, and lowers `used` only when no snapshot object is alive
 * and no clone shares the chunks (pctx_sole).
 *
 * The published shape is the persistent, reference-counted tree that snapshots read
 * (see snapshot.c and DESIGN.md).  Reachable from a snapshot means immutable: the writer
 * changes a PNode, a trie node or a PRoots in place only when it is the sole owner of
 * the whole path to it (every reference count on the path is 1); otherwise it copies
 * the path first.  Reference counts are plain integers: every change happens under the
 * GIL, and readers that run without the GIL never read or write them. */

typedef struct PChunk {
    uint32_t rc;    /* writer nodes and PNodes using it */
    uint32_t used;  /* blocks written; entries past it are never read by anyone */
    uint32_t cap;   /* blocks allocated */
    uint32_t tok[]; /* cap * B tokens, then cap block ids (a 12-byte header: every
                       load of tokens is unaligned-safe) */
} PChunk;

static inline uint32_t *chunk_ids(PChunk *c, uint32_t B) { return c->tok + (size_t)c->cap * B; }

static inline size_t chunk_bytes(uint32_t cap, uint32_t B) {
    return sizeof(PChunk) + (size_t)cap * (B + 1u) * sizeof(uint32_t);
}

/* A chunk of `cap` blocks, one reference; NULL on failure (no exception set). */
static inline PChunk *chunk_new(uint32_t cap, uint32_t B) {
    PChunk *c = PyMem_Malloc(chunk_bytes(cap, B));
    if (c == NULL) return NULL;
    c->rc = 1;
    c->used = 0;
    c->cap = cap;
    return c;
}

static inline void chunk_decref(PChunk *c) {
    if (c != NULL && --c->rc == 0) PyMem_Free(c);
}

/* The children of a published node with many children: a persistent hash array mapped
 * trie (32-way, five bits of the child's first-block hash per level) whose entries are
 * child PNodes or deeper trie nodes; below the last level (the 64 bits used up) a node
 * lists colliding children.  Reference-counted like PNodes, so a path copy of a PNode
 * shares its trie and copying the trie's own path costs O(log fan-out), never
 * O(fan-out).  A few children sit in a sorted array instead (snapshot.c). */
typedef struct HNode {
    uint32_t total;   /* in the trie's top node: the owner's children (first, like an
                         array's count, so both say how many); 0 below the top */
    uint32_t rc;
    uint32_t bitmap;  /* slots present (a collision node: 0) */
    uint32_t leafmap; /* of those, which hold a child PNode rather than a trie node */
    uint16_t n;       /* entries */
    uint16_t cap;     /* entries allocated (doubling, so adding is amortized O(1)) */
    void *e[];        /* PNode * or HNode *, in slot order */
} HNode;

/* 32 bytes (pymalloc's 32-byte class: no rounding, no record across two cache lines). */
typedef struct PNode {
    uint32_t rc;
    uint32_t count; /* blocks on this version's edge: chunk entries off .. off+count-1 */
    uint32_t off;
    uint32_t nid;   /* the writer's node (meaningful in the writer's current version) */
    union {
        PChunk *chunk;      /* NULL for a root */
        struct PNode *link; /* free stack while being released */
    };
    void *kids; /* NULL: no children; else a block whose first uint32 is their count: up
                   to KIDS_SMALL, a sorted array; more, the top node of an HNode trie */
} PNode;

typedef struct {
    PyObject *ns; /* exact str, or NULL for the default namespace */
    PNode *root;
} PRoot;

typedef struct {
    Py_ssize_t rc;
    uint32_t n, cap;
    PRoot *r; /* sorted: the default namespace first, then by name */
} PRoots;

/* Shared by a tree, its clones and all their snapshots: the block-hash keys, which a
 * snapshot needs to look children up (and a clone, which shares the published shape's
 * tries), and the count of those holders.  With one holder -- the writer alone, no
 * snapshot object alive and no clone -- every PNode the writer holds is uniquely owned
 * and is changed in place (pctx_sole). */
typedef struct {
    Py_ssize_t rc; /* holders: trees (a tree and its clones) and snapshot objects */
    uint32_t B;
    uint64_t parent_mix;
    uint32_t keys[]; /* NH keys: B + 1 words */
} PCtx;

/* Whether the writer is the published shape's only holder (no snapshot, no clone). */
static inline int pctx_sole(const PCtx *c) { return c->rc == 1; }

static inline const uint32_t *pn_tokens(const PNode *p, uint32_t B) {
    return p->chunk->tok + (size_t)p->off * B;
}
static inline const uint32_t *pn_ids(const PNode *p, uint32_t B) {
    return chunk_ids(p->chunk, B) + p->off;
}

/* ------------------------------------------------------------------ tree */

/* The writer's record of a node: its parent, its edge and how many children it has --
 * everything eviction and the checks need without the published shape.  The walk does
 * not read it: children are found through the node's current published version, in the
 * parallel array TreeObject.pub. */
typedef struct {
    uint32_t parent;    /* NIL for a root, NODE_FREE for a free record */
    uint32_t nblocks;   /* 0 for a root */
    uint32_t off;       /* edge: chunk entries off..off+nblocks-1; a root: its namespace
                           slot; a free record: the next free one */
    uint32_t nchildren;
    PChunk *chunk;      /* the edge's storage (NULL for a root), one reference */
} Node;

/* 12 bytes: the tail's eviction key packed in 64 bits (pol_rank, policy.c) and the leaf.
 * The key's tie-break, the tail block id, is read from the node only when two ranks are
 * equal (with the clock advanced once per call, two leaf tails never share a stamp,
 * R-LRU-4, nor a birth time). */
typedef struct __attribute__((packed, aligned(4))) {
    uint64_t key;
    uint32_t node;
} HeapEntry;

/* ------------------------------------------------------------------ eviction policies
 *
 * The reference's kachedb_radix.reference.policies, in C (policy.c): each block's state
 * for the tree's policy, in arrays of num_blocks entries allocated for that policy only,
 * and the key packed in one uint64 ordered as the reference's tuple (pol_rank): */
enum { POL_LRU, POL_LFU, POL_FIFO, POL_PRIORITY, POL_SLRU };

/* A lazily deleted binary min-heap of (key, block): the priority policy's pending
 * expiries (key: until) and the SLRU protected segment's recency (key: stamp). */
typedef struct __attribute__((packed, aligned(4))) {
    uint64_t key;
    uint32_t block;
} KEntry;

typedef struct {
    KEntry *e;
    size_t n, cap;
} KHeap;

typedef struct {
    int kind;
    PyObject *name;    /* the policy's name (str) */
    PyObject *options; /* its options in force, from reference.policies.check_policy */
    PyObject *ns_prio; /* priority: dict of namespace -> default priority; else NULL */
    uint32_t default_prio;
    uint32_t *hits;     /* lfu */
    uint64_t *born;     /* fifo */
    uint8_t *prio;      /* priority: the block's priority, */
    uint8_t *fallback;  /*   what it falls back to, */
    uint64_t *until;    /*   and when (0: never) */
    uint8_t *prot;      /* slru: 1 in the protected segment */
    uint64_t prot_count, prot_cap;
    uint32_t *owner;    /* priority, slru: the node last filed under this tail block */
    KHeap pending;
} Policy;

typedef struct {
    PyObject *ns;  /* exact str, or NULL for the default namespace (None) */
    uint32_t node; /* NIL: slot unused */
} RootSlot;

/* KV events (events.c, events.h): the per-block hashes and the encoded events not yet
 * taken; NULL with events off. */
struct EvState;

typedef struct {
    uint64_t epoch;
    uint32_t n;
} QBatch;

struct LeaseObject;

typedef struct {
    PyObject_HEAD
    uint32_t B;
    uint32_t num_blocks;
    /* per block id */
    uint32_t *pins;
    uint64_t *stamps;
    Policy pol;
    BitAlloc alloc;
    /* chunks reserved by insert's preparation phase for its mutation phase */
    PChunk *res_new; /* a new child's edge */
    PChunk *res_ext; /* an extended leaf's edge, when it cannot grow in place */
    /* nodes */
    Node *nodes;
    /* Each node's index in the eviction heap (NIL if not queued), apart from the node
     * records: a sift writes one per level, and a dense array keeps those writes in
     * cache where 24-byte records spread them over many more lines. */
    uint32_t *heap_pos;
    PNode **pub; /* each node's current published-shape version (if shadow_ok) */
    uint32_t nodes_cap;
    uint32_t nodes_len; /* high-water mark */
    uint32_t free_node; /* head of the free list */
    uint32_t live_nodes; /* non-root nodes (the reference's _nodes) */
    uint32_t leaves;     /* non-root nodes without children: a bound on the heap's length */
    uint64_t seed; /* the block-hash keys were drawn from it (they live in pctx) */
    /* eviction heap */
    HeapEntry *heap;
    uint32_t heap_len;
    uint32_t heap_cap;
    /* namespaces */
    uint32_t default_root;
    PyObject *ns_roots; /* dict: exact str -> int (node index) */
    RootSlot *roots;
    uint32_t roots_cap;
    uint32_t roots_len;
    /* counters */
    uint64_t clock;
    uint64_t cached;
    uint64_t pinned;
    uint64_t lease_ids;
    /* live leases: intrusive doubly linked list, one strong reference each */
    struct LeaseObject *lease_head;
    Py_ssize_t nleases;
    /* scratch */
    uint32_t *scratch_tok;
    size_t scratch_tok_cap;
    uint32_t *scratch_path;
    size_t scratch_path_cap;
    int tok_busy;
    PyObject *weakrefs;
    /* publication (R-SNAP-1): the published shape mirrors the writer's shape */
    uint64_t version;
    PRoots *proots;
    PCtx *pctx;
    int shadow_ok; /* 0 after an allocation failure: rebuilt by the next snapshot() */
    uint32_t *anc; /* scratch: a node's ancestors */
    size_t anc_cap;
    /* reader epochs and quarantine (R-EPOCH-*) */
    uint64_t epochs;  /* last epoch number drawn (readers and frees share it) */
    uint64_t *readers; /* registered epochs, ascending */
    uint64_t *reader_versions; /* the version each registered reader sees (R-EPOCH-5) */
    Py_ssize_t nreaders, readers_cap;
    QBatch *qb;        /* quarantine batches qb[qb_head .. qb_len), epoch order */
    size_t qb_head, qb_len, qb_cap;
    uint32_t *qids;    /* their ids, qids[qid_head .. qid_len) */
    size_t qid_head, qid_len, qid_cap;
    uint64_t quarantined;
    struct EvState *ev; /* KV events (R-EVENT-*); NULL: events off */
} TreeObject;

/* router.c, the router index (it includes this header only) */
extern PyTypeObject RouterIndex_Type;
int router_init(void);

/* ------------------------------------------------------------------ objects */

/* A lease's block ids and tokens: one allocation, reference-counted so that a clone's
 * copy of a live lease shares them (they never change). */
typedef struct LeaseStore {
    size_t rc;
    uint32_t v[]; /* count ids, then count * B tokens */
} LeaseStore;

typedef struct LeaseObject {
    PyObject_HEAD
    TreeObject *tree; /* strong; NULL once cleared by the GC */
    struct LeaseObject *lprev, *lnext;
    int linked;
    int released;
    uint64_t id;
    PyObject *ns; /* None or exact str */
    uint32_t B;
    uint32_t count;    /* blocks */
    struct LeaseStore *store; /* the ids and tokens below; shared with the lease's copies
                                 in clones of the tree */
    uint32_t *blocks;  /* count ids, then count * B tokens, in store */
    uint32_t *tokens;
    PyObject *tokens_tuple;
} LeaseObject;

typedef struct {
    PyObject_VAR_HEAD /* ob_size: number of block ids */
    Py_ssize_t length;
    PyObject *lease;
    uint32_t ids[1];
} MatchResultObject;

typedef struct {
    PyObject_VAR_HEAD /* ob_size: nblocks + nalloc + nevict */
    Py_ssize_t length;
    Py_ssize_t reused;
    Py_ssize_t nblocks;
    Py_ssize_t nalloc;
    Py_ssize_t nevict;
    PyObject *lease;
    uint32_t ids[1];
} InsertResultObject;

typedef struct {
    PyObject_HEAD
    PyObject *owner;
    const uint32_t *ids;
    Py_ssize_t n;
} BlocksObject;

/* ------------------------------------------------------------------ hashing and comparing blocks */

/* NH (the UMAC hash): sum over token pairs of (m[2i] + k[2i]) * (m[2i+1] + k[2i+1]),
 * additions mod 2**32, products and sum mod 2**64.  For a random key, two different
 * blocks collide with probability <= 2**-32; B = 1 is injective.  SSE2 (baseline on
 * x86-64) does four tokens per step: one add, one shift, one 32x32->64 multiply. */
static inline __attribute__((always_inline)) uint64_t nh_hash_n(const uint32_t *m,
                                                                const uint32_t *k, uint32_t B) {
    uint64_t acc = 0;
    uint32_t i = 0;
#if defined(__SSE2__)
    __m128i vacc = _mm_setzero_si128();
    for (uint32_t chunk = 0; chunk < B / 4u; chunk++, i += 4) {
        __m128i s = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(m + i)),
                                  _mm_loadu_si128((const __m128i *)(k + i)));
        vacc = _mm_add_epi64(vacc, _mm_mul_epu32(s, _mm_srli_epi64(s, 32)));
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes, vacc);
    acc = lanes[0] + lanes[1];
#endif
    for (; i + 1 < B; i += 2)
        acc += (uint64_t)(uint32_t)(m[i] + k[i]) * (uint64_t)(uint32_t)(m[i + 1] + k[i + 1]);
    if (B & 1u) acc += (uint64_t)(uint32_t)(m[B - 1] + k[B - 1]) * (uint64_t)k[B];
    return acc;
}

/* Whether two runs of n tokens are equal: branch-free (a block is short; libc
 * memcmp's call and dispatch cost more than the compare itself). */
static inline __attribute__((always_inline)) int tokens_equal_n(const uint32_t *a,
                                                                const uint32_t *b, uint32_t n) {
    uint32_t i = 0;
    uint64_t diff = 0;
#if defined(__SSE2__)
    __m128i vdiff = _mm_setzero_si128();
    for (uint32_t chunk = 0; chunk < n / 4u; chunk++, i += 4)
        vdiff = _mm_or_si128(vdiff, _mm_xor_si128(_mm_loadu_si128((const __m128i *)(a + i)),
                                                  _mm_loadu_si128((const __m128i *)(b + i))));
    diff = (uint64_t)(_mm_movemask_epi8(_mm_cmpeq_epi8(vdiff, _mm_setzero_si128())) ^ 0xFFFF);
#endif
    for (; i < n; i++) diff |= (uint64_t)(a[i] ^ b[i]);
    return diff == 0;
}

/* The default block size gets its own fully unrolled copy (a constant trip count). */
static inline uint64_t nh_hash(const uint32_t *m, const uint32_t *k, uint32_t B) {
    return B == 16 ? nh_hash_n(m, k, 16) : nh_hash_n(m, k, B);
}

static inline int tokens_equal(const uint32_t *a, const uint32_t *b, uint32_t n) {
    return n == 16 ? tokens_equal_n(a, b, 16) : tokens_equal_n(a, b, n);
}

/* The avalanche (murmur3's fmix64) that follows NH. */
static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* The keyed hash of one block, independent of its parent: the published tries file a
 * node's children by it. */
static inline uint64_t keyed_block_hash(const uint32_t *keys, uint64_t mix, const uint32_t *blk,
                                        uint32_t B) {
    return fmix64(nh_hash(blk, keys, B) + mix);
}

/* splitmix64: the block-hash keys are drawn from a tree's seed by it. */
static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The n NH keys (B + 1 for blocks of B) and the parent mix drawn from `seed`. */
static inline void derive_keys(uint64_t seed, uint32_t *keys, uint32_t n, uint64_t *parent_mix) {
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++) keys[i] = (uint32_t)(splitmix64(&s) >> 32);
    keys[n - 1] |= 1u; /* the pad key of an odd block size must not be 0 */
    *parent_mix = splitmix64(&s);
}

/* ------------------------------------------------------------------ node records */

/* A writer node's edge, in its chunk. */
static inline const uint32_t *node_tok(const TreeObject *t, const Node *x) {
    return x->chunk->tok + (size_t)x->off * t->B;
}
static inline const uint32_t *node_ids(const TreeObject *t, const Node *x) {
    return chunk_ids(x->chunk, t->B) + x->off;
}
static inline uint32_t node_last(const TreeObject *t, const Node *x) {
    return node_ids(t, x)[x->nblocks - 1];
}

/* The value of an int (the caller has checked PyLong_Check), with *overflow set to +1 or
 * -1 when it does not fit in a long long.  Cannot fail: PyLong_AsLongLongAndOverflow
 * raises only for an object that is not an int (on which it calls __index__). */
static inline long long int_value(PyObject *obj, int *overflow) {
    return PyLong_AsLongLongAndOverflow(obj, overflow);
}

/* ------------------------------------------------------------------ the test hooks' undo log
 *
 * An undo log of the bytes a _corrupt_check hook changes: put() saves and overwrites,
 * undo() restores in reverse order.  Here, not in corrupt.h, because router.c (whose
 * RouterIndex has a hook of its own) includes this header only. */

typedef struct {
    void *at;
    unsigned char old[16];
    size_t size;
} UndoEntry;

typedef struct {
    UndoEntry e[8];
    int n;
    struct PNode *temp; /* a temporary PNode copy, freed by undo() */
} Undo;

static inline void put(Undo *u, void *at, const void *value, size_t size) {
    UndoEntry *e = &u->e[u->n++];
    e->at = at;
    e->size = size;
    memcpy(e->old, at, size);
    memcpy(at, value, size);
}

#define PUT(u, lvalue, value)                                  \
    do {                                                       \
        __typeof__(lvalue) put_value_ = (value);               \
        put((u), &(lvalue), &put_value_, sizeof(put_value_));  \
    } while (0)

static inline void undo(Undo *u) {
    while (u->n > 0) {
        UndoEntry *e = &u->e[--u->n];
        memcpy(e->at, e->old, e->size);
    }
    PyMem_Free(u->temp);
    u->temp = NULL;
}

/* The pending InvariantViolation's message, the error consumed; None if none is pending;
 * NULL (the error kept) for any other error (inspect.c). */
PyObject *violation_message(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
