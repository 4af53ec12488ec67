/* The published shape, snapshots and readers (reference/snapshot.py; accel/DESIGN.md).
 *
 * The writer's records (node records, per-block pins and stamps) are overwritten by
 * later writes, so snapshots cannot point into them.  Beside them the tree keeps a
 * *published shape*: a persistent, reference-counted tree of PNodes under a PRoots
 * (namespace -> root PNode), which is also the writer's child index (each PNode names
 * its writer node).  A PNode's edge is a range of a
 * PChunk -- the very chunk the writer's node keeps its tokens and ids in: chunks are
 * written only past their `used` mark, which no range of any node version covers, so
 * sharing them never lets a reader see a change.  A PNode's children sit in a
 * sorted array (up to 15) or a persistent hash array mapped trie (HNode, see radix.h)
 * keyed by the keyed hash of the child's first block.
 *
 * Every change of the writer's shape is mirrored here by a sh_* call.  A PNode, a trie
 * node or PRoots is changed in place only when the writer owns the whole path to it
 * (every reference count on it is 1); otherwise the path is copied first (pn_unique for
 * PNodes, trie_own for trie nodes).  Copying a PNode shares its chunk and its trie, so a
 * path copy costs O(depth * log fan-out).  With no snapshot object alive and no clone
 * (pctx_sole) every count is 1, so the writer skips the path walk entirely.  A clone
 * shares the published shape as a snapshot does: for each of the two trees the other is
 * one more holder, so each path-copies what the other can still reach.
 *
 * snapshot() increfs the current PRoots: O(1).  All reference counting happens under
 * the GIL; a snapshot match that runs without the GIL only reads PNodes, trie nodes and
 * chunks (never their counts), and its snapshot keeps everything it can reach alive.
 *
 * An allocation failure while mirroring never fails the writer's call: the published
 * shape is dropped (shadow_ok = 0), the rest of the call finds children by scanning the
 * node records, and the next match, insert, release, snapshot() or reader() rebuilds it
 * from the writer's records first, raising MemoryError (and changing nothing) if that
 * fails too.  The chunks are the writer's: dropping the published shape never loses a
 * token.
 */
#include "snapshot.h"

#include <stdlib.h>

#include "objects.h"
#include "shape.h"
#include "tokens.h"
#include "walk.h"

/* Token counts from which a snapshot match releases the GIL. */
#define NOGIL_MIN_TOKENS 4096

/* ------------------------------------------------------------------ the children trie */

static inline uint32_t h_bit(uint64_t hash, uint32_t depth) {
    return 1u << ((uint32_t)(hash >> (depth * H_BITS)) & 31u);
}

/* Set bits below `bit`: the entry's index.  Hand-written: the baseline x86-64 build
 * has no POPCNT instruction, and __builtin_popcount would call a libgcc routine. */
static inline uint32_t h_pos(uint32_t bitmap, uint32_t bit) {
    uint32_t v = bitmap & (bit - 1u);
    v = v - ((v >> 1) & 0x55555555u);
    v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
    return (((v + (v >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24;
}

static inline uint64_t child_key(const PCtx *ctx, const uint32_t *blk) {
    return keyed_block_hash(ctx->keys, ctx->parent_mix, blk, ctx->B);
}

static inline size_t hn_bytes(uint32_t n) { return sizeof(HNode) + (size_t)n * sizeof(void *); }

static HNode *hn_new(uint32_t n) {
    HNode *h = PyMem_Malloc(hn_bytes(n));
    if (h == NULL) return NULL;
    h->total = 0;
    h->rc = 1;
    h->bitmap = h->leafmap = 0;
    h->n = h->cap = (uint16_t)n;
    return h;
}

/* The child whose first block is blk (hash `hash`), or NULL.  Reads only: safe without
 * the GIL on any version a snapshot holds.  O(log32 fan-out + B). */
static const PNode *trie_find(const HNode *h, uint64_t hash, const uint32_t *blk, uint32_t B) {
    for (uint32_t depth = 0; h != NULL; depth++) {
        if (depth == H_LEVELS) {
            for (uint32_t i = 0; i < h->n; i++)
                if (tokens_equal(pn_tokens(h->e[i], B), blk, B)) return h->e[i];
            return NULL;
        }
        uint32_t bit = h_bit(hash, depth);
        if (!(h->bitmap & bit)) return NULL;
        void *e = h->e[h_pos(h->bitmap, bit)];
        if (h->leafmap & bit) {
            const PNode *c = e;
            return tokens_equal(pn_tokens(c, B), blk, B) ? c : NULL;
        }
        h = e;
    }
    return NULL;
}

/* Drop one reference to trie node h; child PNodes whose count reaches 0 are pushed on
 * *stack (linked through `link`) for the caller to release. */
static void hn_decref(HNode *h, uint32_t depth, PNode **stack) {
    if (h == NULL || --h->rc > 0) return;
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++) {
        if (hn_next_is_leaf(h, depth, &rest)) {
            PNode *c = h->e[i];
            if (--c->rc == 0) {
                chunk_decref(c->chunk);
                c->link = *stack;
                *stack = c;
            }
        } else {
            hn_decref(h->e[i], depth + 1u, stack); /* at most H_LEVELS deep */
        }
    }
    PyMem_Free(h);
}

/* A copy of h owned by the writer: one more reference to everything it holds. */
static HNode *hn_copy(const HNode *h, uint32_t depth) {
    HNode *c = hn_new(h->n);
    if (c == NULL) return NULL;
    c->total = h->total;
    c->bitmap = h->bitmap;
    c->leafmap = h->leafmap;
    memcpy(c->e, h->e, (size_t)h->n * sizeof(void *));
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++) {
        if (hn_next_is_leaf(h, depth, &rest))
            ((PNode *)h->e[i])->rc++;
        else
            ((HNode *)h->e[i])->rc++;
    }
    return c;
}

/* Make *where (a trie node reachable only through writer-owned nodes) writer-owned:
 * copy it if shared.  NULL on allocation failure (nothing changed). */
static HNode *trie_own(HNode **where, uint32_t depth) {
    HNode *h = *where;
    if (h->rc == 1) return h;
    HNode *c = hn_copy(h, depth);
    if (c == NULL) return NULL;
    h->rc--; /* still referenced elsewhere: never 0 here */
    *where = c;
    return c;
}

/* Open (grow) or close a gap at entry `at` of writer-owned *where.  Growing doubles the
 * allocation when it is full; closing never reallocates (a removal is a memmove).  -1 on
 * allocation failure when growing (nothing changed). */
static int hn_resize(HNode **where, uint32_t at, int grow) {
    HNode *h = *where;
    uint32_t n = h->n;
    if (grow) {
        if (n == h->cap) {
            uint32_t cap = n ? 2u * n : 2u;
            if (cap > UINT16_MAX) return -1; /* a collision list that long: give up */
            HNode *g = PyMem_Realloc(h, hn_bytes(cap));
            if (g == NULL) return -1;
            g->cap = (uint16_t)cap;
            *where = h = g;
        }
        memmove(h->e + at + 1, h->e + at, (size_t)(n - at) * sizeof(void *));
        h->n = (uint16_t)(n + 1u);
    } else {
        memmove(h->e + at, h->e + at + 1, (size_t)(n - at - 1u) * sizeof(void *));
        h->n = (uint16_t)(n - 1u);
    }
    return 0;
}

/* A trie node at `depth` holding children a and b (hashes ha, hb), nested as deep as
 * their hashes agree; a's and b's references move into it.  NULL on allocation failure
 * (nothing changed). */
static HNode *hn_pair(PNode *a, uint64_t ha, PNode *b, uint64_t hb, uint32_t depth) {
    HNode *chain[H_LEVELS + 1u] = {NULL};
    uint32_t last = depth;
    while (last < H_LEVELS && h_bit(ha, last) == h_bit(hb, last)) last++;
    for (uint32_t d = depth; d <= last; d++) {
        chain[d] = hn_new(d == last ? 2u : 1u);
        if (chain[d] == NULL) {
            while (d-- > depth) PyMem_Free(chain[d]);
            return NULL;
        }
    }
    for (uint32_t d = depth; d < last; d++) {
        chain[d]->bitmap = h_bit(ha, d);
        chain[d]->e[0] = chain[d + 1u];
    }
    HNode *h = chain[last];
    int a_first = 1;
    if (last < H_LEVELS) {
        uint32_t ba = h_bit(ha, last), bb = h_bit(hb, last);
        h->bitmap = h->leafmap = ba | bb;
        a_first = ba < bb;
    }
    h->e[a_first ? 0 : 1] = a;
    h->e[a_first ? 1 : 0] = b;
    return chain[depth];
}

/* Add child c (its first block hashes to `hash`; the caller's reference moves into the
 * trie) to the trie at *root, which a writer-owned PNode holds.  Copies shared trie
 * nodes on the way down.  -1 on allocation failure (the trie stays consistent and c's
 * reference stays with the caller). */
static int trie_add(HNode **root, uint64_t hash, PNode *c, const PCtx *ctx) {
    HNode **where = root;
    for (uint32_t depth = 0;; depth++) {
        if (*where == NULL) {
            HNode *h = hn_new(1);
            if (h == NULL) return -1;
            h->bitmap = h->leafmap = h_bit(hash, depth);
            h->e[0] = c;
            *where = h;
            return 0;
        }
        HNode *h = trie_own(where, depth);
        if (h == NULL) return -1;
        if (depth == H_LEVELS) {
            uint32_t n = h->n;
            if (hn_resize(where, n, 1) < 0) return -1;
            (*where)->e[n] = c;
            return 0;
        }
        uint32_t bit = h_bit(hash, depth), at = h_pos(h->bitmap, bit);
        if (!(h->bitmap & bit)) {
            if (hn_resize(where, at, 1) < 0) return -1;
            h = *where;
            h->bitmap |= bit;
            h->leafmap |= bit;
            h->e[at] = c;
            return 0;
        }
        if (h->leafmap & bit) {
            /* The slot holds another child: both move one level down. */
            PNode *other = h->e[at];
            HNode *sub = hn_pair(other, child_key(ctx, pn_tokens(other, ctx->B)), c, hash,
                                 depth + 1u);
            if (sub == NULL) return -1;
            h->e[at] = sub;
            h->leafmap &= ~bit;
            return 0;
        }
        where = (HNode **)&h->e[at];
    }
}

/* The slot holding the child whose first block is blk in the trie at *root (a
 * writer-owned PNode's), every trie node on the way made writer-owned; NULL if there is
 * no such child, or if an allocation failed. */
static void **trie_slot(HNode **root, uint64_t hash, const uint32_t *blk, uint32_t B) {
    HNode **where = root;
    for (uint32_t depth = 0; *where != NULL; depth++) {
        HNode *h = trie_own(where, depth);
        if (h == NULL) return NULL;
        if (depth == H_LEVELS) {
            for (uint32_t i = 0; i < h->n; i++)
                if (tokens_equal(pn_tokens(h->e[i], B), blk, B)) return &h->e[i];
            return NULL;
        }
        uint32_t bit = h_bit(hash, depth);
        if (!(h->bitmap & bit)) return NULL;
        void **e = &h->e[h_pos(h->bitmap, bit)];
        if (h->leafmap & bit) return tokens_equal(pn_tokens(*e, B), blk, B) ? e : NULL;
        where = (HNode **)e;
    }
    return NULL;
}

/* Remove the child whose first block is blk from the trie at *where (at `depth`),
 * copying shared nodes on the way down.  A trie node left empty is freed, and one left
 * holding a single child is replaced by that child, so the trie stays as shallow as
 * its hashes need.  Returns the removed child (the trie's reference moves to the
 * caller); NULL if absent or an allocation failed. */
static PNode *trie_take(HNode **where, uint32_t depth, uint64_t hash, const uint32_t *blk,
                        uint32_t B) {
    HNode *h = trie_own(where, depth);
    if (h == NULL) return NULL;
    PNode *gone;
    uint32_t at, bit = 0;
    if (depth == H_LEVELS) {
        for (at = 0; at < h->n; at++)
            if (tokens_equal(pn_tokens(h->e[at], B), blk, B)) break;
        if (at == h->n) return NULL;
        gone = h->e[at];
    } else {
        bit = h_bit(hash, depth);
        if (!(h->bitmap & bit)) return NULL;
        at = h_pos(h->bitmap, bit);
        if (h->leafmap & bit) {
            if (!tokens_equal(pn_tokens(h->e[at], B), blk, B)) return NULL;
            gone = h->e[at];
        } else {
            HNode **below = (HNode **)&h->e[at];
            gone = trie_take(below, depth + 1u, hash, blk, B);
            if (gone == NULL) return NULL;
            HNode *s = *below;
            if (s->n > 0) {
                if (s->n == 1 && (depth + 1u == H_LEVELS || s->leafmap != 0)) {
                    h->e[at] = s->e[0]; /* a lone child moves up into the slot */
                    h->leafmap |= bit;
                    PyMem_Free(s);
                }
                return gone;
            }
            PyMem_Free(s); /* emptied: its slot goes too */
        }
    }
    if (depth < H_LEVELS) {
        h->bitmap &= ~bit;
        h->leafmap &= ~bit;
    }
    hn_resize(where, at, 0);
    return gone;
}

/* Call fn on every child in the trie (any order). */
static void trie_each(const HNode *h, uint32_t depth, void (*fn)(const PNode *, void *),
                      void *arg) {
    if (h == NULL) return;
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++) {
        if (hn_next_is_leaf(h, depth, &rest))
            fn(h->e[i], arg);
        else
            trie_each(h->e[i], depth + 1u, fn, arg);
    }
}

/* Bytes of the trie's nodes. */
static size_t trie_bytes(const HNode *h, uint32_t depth) {
    if (h == NULL) return 0;
    size_t total = hn_bytes(h->cap);
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++)
        if (!hn_next_is_leaf(h, depth, &rest)) total += trie_bytes(h->e[i], depth + 1u);
    return total;
}

/* ------------------------------------------------------------------ a node's children
 *
 * Up to KIDS_SMALL children sit in a sorted array: a lookup is a binary search on the
 * children's first tokens and one block comparison, no hashing -- the fastest for the
 * fan-outs trees mostly have.  More children go into the trie: O(log32 fan-out) per
 * lookup or change, however many there are.  The count of children says which; the
 * representation changes exactly when the count crosses KIDS_SMALL.  A PNode's copy
 * copies its array (at most KIDS_SMALL entries) and shares its trie.
 *
 * The array is one allocation of n child pointers followed by their n first tokens,
 * sorted by the child's first block (element-wise): 12 bytes a child, no header, and
 * the keys a binary search reads lie together.  Its count rides in the low bits of the
 * PNode's `kids` pointer (allocations are 16-byte aligned on 64-bit platforms), so a
 * lookup reads it with the pointer, and a PNode needs no field for it; a trie's top
 * node (low bits 0) keeps the count in `total`. */

static inline HNode **kids_trie(PNode *p) { return (HNode **)&p->kids; }

/* A block for an array of n children; NULL on failure, or (never on the platforms we
 * build for) if it is not aligned enough to carry the count. */
static void *arr_alloc(uint32_t n) {
    void *a = PyMem_Malloc(arr_bytes(n));
    if (a != NULL && ((uintptr_t)a & KIDS_TAG) != 0) {
        PyMem_Free(a);
        return NULL;
    }
    return a;
}

static inline void kids_set_arr(PNode *p, void *arr, uint32_t n) {
    p->kids = arr == NULL ? NULL : (void *)((uintptr_t)arr | n);
}

static inline int block_cmp(const uint32_t *a, const uint32_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The index of the entry whose first block is blk in the sorted array `arr` of n, or
 * -(insertion point) - 1. */
static inline __attribute__((always_inline)) Py_ssize_t arr_find(void *arr, uint32_t n,
                                                                 const uint32_t *blk,
                                                                 uint32_t B) {
    PNode *const *nodes = arr_nodes(arr);
    const uint32_t *keys = arr_keys(arr, n);
    Py_ssize_t lo = 0, hi = n;
    const uint32_t key = blk[0];
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int c;
        if (keys[mid] != key) {
            c = keys[mid] < key ? -1 : 1;
        } else {
            /* Equal first tokens mostly mean the block we look for: test equality with
             * SIMD first, order token by token only when they differ. */
            const uint32_t *tk = pn_tokens(nodes[mid], B);
            c = tokens_equal(tk, blk, B) ? 0 : block_cmp(tk + 1, blk + 1, B - 1);
        }
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}

/* p's child whose first block is blk, or NULL.  Reads only.  Inlined into the walk; the
 * other callers share one copy (kids_find). */
static inline __attribute__((always_inline)) const PNode *kids_find_inline(const PNode *p,
                                                                           const PCtx *ctx,
                                                                           const uint32_t *blk) {
    const uint32_t B = ctx->B;
    uintptr_t w = kids_word(p);
    uint32_t n = kids_tag(w);
    if (n == 0) return w == 0 ? NULL : trie_find((const HNode *)w, child_key(ctx, blk), blk, B);
    void *arr = kids_ptr(w);
    Py_ssize_t i = arr_find(arr, n, blk, B);
    return i >= 0 ? arr_nodes(arr)[i] : NULL;
}

static const PNode *kids_find(const PNode *p, const PCtx *ctx, const uint32_t *blk) {
    return kids_find_inline(p, ctx, blk);
}

/* The slot holding writer-owned p's child whose first block is blk (the trie path made
 * the writer's on the way); NULL if absent, or if an allocation failed. */
static void **kids_slot(PNode *p, const PCtx *ctx, const uint32_t *blk) {
    const uint32_t B = ctx->B;
    uintptr_t w = kids_word(p);
    uint32_t n = kids_tag(w);
    if (n == 0) return w == 0 ? NULL : trie_slot(kids_trie(p), child_key(ctx, blk), blk, B);
    void *arr = kids_ptr(w);
    Py_ssize_t i = arr_find(arr, n, blk, B);
    return i >= 0 ? (void **)&arr_nodes(arr)[i] : NULL;
}

static uint32_t g_kid_B; /* the GIL serialises every sort */

static int cmp_by_first_block(const void *a, const void *b) {
    const PNode *x = *(PNode *const *)a, *y = *(PNode *const *)b;
    return block_cmp(pn_tokens(x, g_kid_B), pn_tokens(y, g_kid_B), g_kid_B);
}

static void collect_child(const PNode *c, void *arg) {
    PNode ***at = arg;
    **at = (PNode *)c;
    (*at)++;
}

/* A new array of the n children nodes[0..n) (sorted), or NULL on allocation failure. */
static void *arr_new(PNode *const *nodes, uint32_t n, uint32_t B) {
    void *a = arr_alloc(n);
    if (a == NULL) return NULL;
    uint32_t *keys = arr_keys(a, n);
    for (uint32_t i = 0; i < n; i++) keys[i] = pn_tokens(nodes[i], B)[0];
    memcpy(arr_nodes(a), nodes, (size_t)n * sizeof(PNode *));
    return a;
}

/* Add child c to writer-owned p (c's reference moves in).  -1 on allocation failure
 * (nothing changed; the reference stays with the caller). */
static int kids_add(PNode *p, const PCtx *ctx, PNode *c) {
    const uint32_t B = ctx->B;
    const uint32_t *first = pn_tokens(c, B);
    const uint32_t n = pn_nkids(p);
    if (n < KIDS_SMALL) {
        /* A new array one entry larger (at most KIDS_SMALL entries: cheap to rebuild). */
        PNode *all[KIDS_SMALL];
        void *old = kids_ptr(kids_word(p));
        size_t at = 0;
        if (n > 0) {
            at = (size_t)(-arr_find(old, n, first, B) - 1);
            memcpy(all, arr_nodes(old), at * sizeof(PNode *));
            memcpy(all + at + 1, arr_nodes(old) + at, (n - at) * sizeof(PNode *));
        }
        all[at] = c;
        void *a = arr_new(all, n + 1u, B);
        if (a == NULL) return -1;
        PyMem_Free(old);
        kids_set_arr(p, a, n + 1u);
        return 0;
    }
    if (n == KIDS_SMALL) {
        /* The array overflows: move everything into a new trie.  Until it is complete the
         * array keeps its references, so undoing is one decref of the partial trie. */
        void *old = kids_ptr(kids_word(p));
        PNode **k = arr_nodes(old);
        HNode *trie = NULL;
        for (uint32_t i = 0; i <= KIDS_SMALL; i++) {
            PNode *e = i < KIDS_SMALL ? k[i] : c;
            if (i < KIDS_SMALL) e->rc++;
            if (trie_add(&trie, child_key(ctx, pn_tokens(e, B)), e, ctx) < 0) {
                if (i < KIDS_SMALL) e->rc--;
                PNode *none = NULL;
                hn_decref(trie, 0, &none); /* drops only the references added here */
                return -1;
            }
        }
        for (uint32_t i = 0; i < KIDS_SMALL; i++) k[i]->rc--;
        PyMem_Free(old);
        trie->total = KIDS_SMALL + 1u;
        p->kids = trie;
        return 0;
    }
    if (trie_add(kids_trie(p), child_key(ctx, first), c, ctx) < 0) return -1;
    (*kids_trie(p))->total++;
    return 0;
}

/* Remove writer-owned p's child whose first block is blk; returns it (the reference
 * moves to the caller), NULL if absent or an allocation failed (nothing changed that a
 * reader could see). */
static PNode *kids_take(PNode *p, const PCtx *ctx, const uint32_t *blk) {
    const uint32_t B = ctx->B;
    const uint32_t n = pn_nkids(p);
    if (n == 0) return NULL;
    if (n <= KIDS_SMALL) {
        void *a = kids_ptr(kids_word(p));
        Py_ssize_t i = arr_find(a, n, blk, B);
        if (i < 0) return NULL;
        PNode **nodes = arr_nodes(a);
        PNode *gone = nodes[i];
        if (n == 1) {
            PyMem_Free(a);
            p->kids = NULL;
            return gone;
        }
        /* Close the gap in place: the n - 1 pointers, then the keys move down to follow
         * them (the head first, then the tail: both moves go towards lower addresses, and
         * the head's destination ends before the tail's source begins). */
        const uint32_t *okeys = arr_keys(a, n);
        uint32_t *keys = arr_keys(a, n - 1u);
        size_t at = (size_t)i;
        memmove(nodes + at, nodes + at + 1, (n - 1u - at) * sizeof(PNode *));
        memmove(keys, okeys, at * sizeof(uint32_t));
        memmove(keys + at, okeys + at + 1, (n - 1u - at) * sizeof(uint32_t));
        void *s = PyMem_Realloc(a, arr_bytes(n - 1u));
        if (s != NULL && ((uintptr_t)s & KIDS_TAG) == 0) a = s; /* else keep the larger block */
        kids_set_arr(p, a, n - 1u);
        return gone;
    }
    /* Back to an array at KIDS_SMALL children (the count says which it is): allocated
     * first, so that step cannot fail once the child is out of the trie. */
    void *arr = NULL;
    if (n == KIDS_SMALL + 1u && (arr = arr_alloc(KIDS_SMALL)) == NULL) return NULL;
    PNode *gone = trie_take(kids_trie(p), 0, child_key(ctx, blk), blk, B);
    if (gone == NULL) {
        PyMem_Free(arr);
        return NULL;
    }
    HNode *top = *kids_trie(p);
    if (--top->total == KIDS_SMALL) {
        /* The array takes a reference to each child, the trie drops its own. */
        PNode *kept[KIDS_SMALL], **at = kept;
        trie_each(top, 0, collect_child, &at);
        g_kid_B = B;
        qsort(kept, KIDS_SMALL, sizeof(PNode *), cmp_by_first_block);
        uint32_t *keys = arr_keys(arr, KIDS_SMALL);
        for (uint32_t i = 0; i < KIDS_SMALL; i++) {
            kept[i]->rc++;
            keys[i] = pn_tokens(kept[i], B)[0];
        }
        memcpy(arr_nodes(arr), kept, sizeof(kept));
        PNode *none = NULL;
        hn_decref(top, 0, &none);
        kids_set_arr(p, arr, KIDS_SMALL);
    }
    return gone;
}

/* Drop p's references to its children (p is being freed); children left without one
 * go on *stack. */
static void kids_release(PNode *p, PNode **stack) {
    uint32_t n = pn_nkids(p);
    if (n == 0) return;
    if (n > KIDS_SMALL) {
        hn_decref(*kids_trie(p), 0, stack);
        return;
    }
    void *a = kids_ptr(kids_word(p));
    PNode **k = arr_nodes(a);
    for (uint32_t i = 0; i < n; i++) {
        PNode *c = k[i];
        if (--c->rc == 0) {
            chunk_decref(c->chunk);
            c->link = *stack;
            *stack = c;
        }
    }
    PyMem_Free(a);
}

/* Call fn on each of p's children (any order). */
static void kids_each(const PNode *p, void (*fn)(const PNode *, void *), void *arg) {
    uint32_t n = pn_nkids(p);
    if (n > KIDS_SMALL) {
        trie_each(p->kids, 0, fn, arg);
        return;
    }
    PNode **k = n ? arr_nodes(kids_ptr(kids_word(p))) : NULL;
    for (uint32_t i = 0; i < n; i++) fn(k[i], arg);
}

static size_t kids_bytes(const PNode *p) {
    uint32_t n = pn_nkids(p);
    return n > KIDS_SMALL ? trie_bytes(p->kids, 0) : arr_bytes(n);
}

/* A one-child node's child (dump's chains). */
static inline const PNode *kids_only(const PNode *p) {
    return arr_nodes(kids_ptr(kids_word(p)))[0];
}

/* ------------------------------------------------------------------ published nodes */

PNode *pn_new(void) {
    PNode *p = PyMem_Malloc(sizeof(PNode));
    if (p == NULL) return NULL;
    memset(p, 0, sizeof(PNode));
    p->rc = 1;
    return p;
}

/* Free p (count already 0, chunk already released) and everything only it kept alive;
 * iterative over PNodes, so a deep tree cannot overflow the C stack. */
static void pn_free_tree(PNode *p) {
    PNode *stack = p;
    p->link = NULL;
    while (stack != NULL) {
        PNode *x = stack;
        stack = x->link;
        kids_release(x, &stack);
        PyMem_Free(x);
    }
}

/* Drop one reference; frees what becomes unreachable. */
static void pn_decref(PNode *p) {
    if (p == NULL || --p->rc > 0) return;
    chunk_decref(p->chunk);
    pn_free_tree(p);
}

/* A new version of p owned by the writer: shares the chunk and a trie of children,
 * copies an array of them (one more reference to each child). */
static PNode *pn_copy(const PNode *p) {
    PNode *c = pn_new();
    if (c == NULL) return NULL;
    if (kids_in_trie(p)) {
        c->kids = p->kids;
        ((HNode *)c->kids)->rc++;
    } else if (p->kids != NULL) {
        uint32_t n = pn_nkids(p);
        void *from = kids_ptr(kids_word(p)), *a = arr_alloc(n);
        if (a == NULL) {
            PyMem_Free(c);
            return NULL;
        }
        memcpy(a, from, arr_bytes(n));
        for (uint32_t i = 0; i < n; i++) arr_nodes(from)[i]->rc++;
        kids_set_arr(c, a, n);
    }
    c->nid = p->nid;
    c->count = p->count;
    c->off = p->off;
    c->chunk = p->chunk;
    if (c->chunk) c->chunk->rc++;
    return c;
}

/* ------------------------------------------------------------------ roots */

static PRoots *proots_new(uint32_t cap) {
    PRoots *r = PyMem_Malloc(sizeof(PRoots));
    if (r == NULL) return NULL;
    r->rc = 1;
    r->n = 0;
    r->cap = cap ? cap : 1;
    r->r = PyMem_Malloc((size_t)r->cap * sizeof(PRoot));
    if (r->r == NULL) {
        PyMem_Free(r);
        return NULL;
    }
    return r;
}

static void proots_decref(PRoots *r) {
    if (r == NULL || --r->rc > 0) return;
    for (uint32_t i = 0; i < r->n; i++) {
        Py_XDECREF(r->r[i].ns);
        pn_decref(r->r[i].root);
    }
    PyMem_Free(r->r);
    PyMem_Free(r);
}

/* Namespace order: the default (NULL) first, then by code points. Exact strs only, so
 * PyUnicode_Compare runs no Python code and cannot fail. */
static int ns_cmp(PyObject *a, PyObject *b) {
    if (a == NULL) return b == NULL ? 0 : -1;
    if (b == NULL) return 1;
    return PyUnicode_Compare(a, b);
}

static PRoots *proots_unique(TreeObject *t) {
    PRoots *R = t->proots;
    if (R->rc == 1) return R;
    PRoots *c = proots_new(R->n + 1u);
    if (c == NULL) return NULL;
    for (uint32_t i = 0; i < R->n; i++) {
        c->r[i].ns = R->r[i].ns;
        Py_XINCREF(c->r[i].ns);
        c->r[i].root = R->r[i].root;
        c->r[i].root->rc++;
    }
    c->n = R->n;
    R->rc--;
    t->proots = c;
    return c;
}

/* ------------------------------------------------------------------ lifecycle */

/* The context shared with snapshots, holding the block-hash keys drawn from `seed`, and
 * an empty published shape. */
int shadow_init(TreeObject *t, uint64_t seed) {
    const uint32_t B = t->B;
    t->pctx = PyMem_Malloc(sizeof(PCtx) + ((size_t)B + 1u) * sizeof(uint32_t));
    t->proots = proots_new(4);
    if (t->pctx == NULL || t->proots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->pctx->rc = 1;
    t->pctx->B = B;
    derive_keys(seed, t->pctx->keys, B + 1u, &t->pctx->parent_mix);
    t->shadow_ok = 1;
    return 0;
}

static void pctx_decref(PCtx *c) {
    if (c != NULL && --c->rc == 0) PyMem_Free(c);
}

void shadow_fini(TreeObject *t) {
    proots_decref(t->proots);
    t->proots = NULL;
    t->shadow_ok = 0;
    pctx_decref(t->pctx);
    t->pctx = NULL;
    PyMem_Free(t->anc);
    t->anc = NULL;
}

void shadow_drop(TreeObject *t) {
    proots_decref(t->proots);
    t->proots = NULL;
    t->shadow_ok = 0;
}

static int cmp_proot(const void *a, const void *b) {
    return ns_cmp(((const PRoot *)a)->ns, ((const PRoot *)b)->ns);
}

/* Build the published shape afresh from the writer's structures (after a drop). The
 * PNodes share the writer's chunks: only the shape is built. */
int shadow_rebuild(TreeObject *t) {
    const uint32_t N = t->nodes_len;
    PNode **made = PyMem_Calloc((size_t)N + 1u, sizeof(PNode *));
    PRoots *R = proots_new(t->roots_len + 1u);
    if (made == NULL || R == NULL) goto oom;
    for (uint32_t n = 0; n < N; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        PNode *p = made[n] = pn_new();
        if (p == NULL) goto oom;
        p->nid = n;
        if (x->parent == NIL) continue;
        p->chunk = x->chunk;
        p->chunk->rc++;
        p->off = x->off;
        p->count = x->nblocks;
    }
    /* Each made node holds a reference of its own until the end, so a failure part way
     * leaves every one of them freeable by one pn_decref. */
    for (uint32_t n = 0; n < N; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent >= NODE_FREE) continue;
        PNode *parent = made[x->parent], *c = made[n];
        c->rc++; /* the parent's reference */
        if (kids_add(parent, t->pctx, c) < 0) {
            c->rc--;
            goto oom;
        }
    }
    /* ---- nothing below fails */
    for (uint32_t n = 0; n < N; n++) {
        if (made[n] == NULL) continue;
        t->pub[n] = made[n];
        if (t->nodes[n].parent != NIL) made[n]->rc--; /* now only its parent's trie */
    }
    for (uint32_t i = 0; i < t->roots_len; i++) {
        R->r[i].ns = t->roots[i].ns;
        Py_XINCREF(R->r[i].ns);
        R->r[i].root = made[t->roots[i].node];
    }
    R->n = t->roots_len;
    qsort(R->r, R->n, sizeof(PRoot), cmp_proot);
    PyMem_Free(made);
    t->proots = R;
    t->shadow_ok = 1;
    return 0;
oom:
    if (made != NULL) {
        /* Roots first: freeing a root frees what only it keeps alive, and the nodes still
         * held by their own reference survive until their turn. */
        for (uint32_t n = 0; n < N; n++)
            if (made[n] != NULL) pn_decref(made[n]);
        PyMem_Free(made);
    }
    if (R != NULL) {
        PyMem_Free(R->r);
        PyMem_Free(R);
    }
    PyErr_NoMemory();
    return -1;
}

/* ------------------------------------------------------------------ mirroring changes */

static PRoot *proot_entry(PRoots *R, const PNode *root) {
    for (uint32_t i = 0; i < R->n; i++)
        if (R->r[i].root == root) return &R->r[i];
    return NULL;
}

/* The writer-owned version of writer node n's PNode, path-copying from the roots down
 * where anything on the path is shared; *parent_out (optional) gets the parent's
 * writer-owned version (NULL for a root).  NULL: the published shape is not kept. */
static PNode *pn_unique(TreeObject *t, uint32_t n, PNode **parent_out) {
    if (!t->shadow_ok) return NULL;
    if (pctx_sole(t->pctx)) {
        /* No snapshot alive, no clone: every count is 1 (shadow_check verifies this). */
        if (parent_out != NULL) {
            uint32_t pa = t->nodes[n].parent;
            *parent_out = pa == NIL ? NULL : t->pub[pa];
        }
        return t->pub[n];
    }
    const uint32_t B = t->B;
    size_t depth = 0;
    for (uint32_t m = n; m != NIL; m = t->nodes[m].parent) {
        if (depth == t->anc_cap) {
            size_t cap = t->anc_cap ? t->anc_cap * 2u : 64u;
            uint32_t *a = PyMem_Realloc(t->anc, cap * sizeof(uint32_t));
            if (a == NULL) goto oom;
            t->anc = a;
            t->anc_cap = cap;
        }
        t->anc[depth++] = m;
    }
    PRoots *R = proots_unique(t);
    if (R == NULL) goto oom;
    uint32_t root = t->anc[depth - 1];
    PNode *cur = t->pub[root];
    if (cur->rc > 1) {
        PRoot *entry = proot_entry(R, cur);
        PNode *c = pn_copy(cur);
        if (c == NULL) goto oom;
        cur->rc--;
        entry->root = c;
        t->pub[root] = cur = c;
    }
    PNode *parent = NULL;
    for (size_t i = depth - 1; i-- > 0;) {
        uint32_t m = t->anc[i];
        PNode *old = t->pub[m];
        /* Own the trie path first: a trie node shared with an older version holds one
         * reference to `old` however many versions share it, so only once the path is
         * the writer's does old's count say whether anything else can reach it.  The
         * slot exists (the shapes agree): NULL means an allocation failed. */
        const uint32_t *first = pn_tokens(old, B);
        void **slot = kids_slot(cur, t->pctx, first);
        if (slot == NULL) goto oom;
        if (old->rc > 1) {
            PNode *c = pn_copy(old);
            if (c == NULL) goto oom;
            old->rc--;
            *slot = c;
            t->pub[m] = old = c;
        }
        parent = cur;
        cur = old;
    }
    if (parent_out != NULL) *parent_out = parent;
    return cur;
oom:
    shadow_drop(t);
    return NULL;
}

void sh_root_create(TreeObject *t, uint32_t r, PyObject *ns) {
    if (!t->shadow_ok) return;
    PRoots *R = proots_unique(t);
    if (R == NULL) goto oom;
    if (R->n == R->cap) {
        uint32_t cap = R->cap * 2u;
        PRoot *e = PyMem_Realloc(R->r, (size_t)cap * sizeof(PRoot));
        if (e == NULL) goto oom;
        R->r = e;
        R->cap = cap;
    }
    PNode *p = pn_new();
    if (p == NULL) goto oom;
    uint32_t at = 0;
    while (at < R->n && ns_cmp(R->r[at].ns, ns) < 0) at++;
    memmove(R->r + at + 1, R->r + at, (size_t)(R->n - at) * sizeof(PRoot));
    R->r[at].ns = ns;
    Py_XINCREF(ns);
    R->r[at].root = p;
    R->n++;
    p->nid = r;
    t->pub[r] = p;
    return;
oom:
    shadow_drop(t);
}

void sh_root_delete(TreeObject *t, uint32_t r) {
    if (!t->shadow_ok) return;
    PRoots *R = proots_unique(t);
    if (R == NULL) {
        shadow_drop(t);
        return;
    }
    PRoot *e = proot_entry(R, t->pub[r]);
    PyObject *ns = e->ns;
    PNode *root = e->root;
    size_t at = (size_t)(e - R->r);
    memmove(R->r + at, R->r + at + 1, (size_t)(R->n - at - 1u) * sizeof(PRoot));
    R->n--;
    pn_decref(root);
    Py_XDECREF(ns);
}

void sh_attach(TreeObject *t, uint32_t parent, uint32_t c) {
    const Node *x = &t->nodes[c];
    PNode *P = pn_unique(t, parent, NULL);
    if (P == NULL) return;
    PNode *C = pn_new();
    if (C == NULL) goto oom;
    C->chunk = x->chunk;
    C->chunk->rc++;
    C->off = x->off;
    C->count = x->nblocks;
    C->nid = c;
    if (kids_add(P, t->pctx, C) < 0) {
        pn_decref(C);
        goto oom;
    }
    t->pub[c] = C;
    return;
oom:
    shadow_drop(t);
}

void sh_extend(TreeObject *t, uint32_t n) {
    const Node *x = &t->nodes[n];
    PNode *P = pn_unique(t, n, NULL);
    if (P == NULL) return;
    if (P->chunk != x->chunk) {
        /* The writer moved the edge into a bigger chunk. */
        chunk_decref(P->chunk);
        P->chunk = x->chunk;
        P->chunk->rc++;
    }
    P->off = x->off;
    P->count = x->nblocks;
}

PNode *sh_split(TreeObject *t, uint32_t x, uint32_t at, uint32_t u) {
    const uint32_t B = t->B;
    PNode *PP = NULL;
    PNode *X = pn_unique(t, x, &PP);
    if (X == NULL) return NULL;
    const uint32_t *first = pn_tokens(X, B);
    void **slot = kids_slot(PP, t->pctx, first);
    PNode *U = slot != NULL ? pn_new() : NULL;
    if (U == NULL) goto oom;
    U->chunk = X->chunk;
    U->chunk->rc++;
    U->off = X->off;
    U->count = at;
    U->nid = u;
    /* X's reference moves from the parent's trie into U's; U takes X's place there
     * (same first block: same key, same slot). */
    X->off += at;
    X->count -= at;
    if (kids_add(U, t->pctx, X) < 0) {
        X->off -= at;
        X->count += at;
        pn_decref(U);
        goto oom;
    }
    *slot = U;
    return U;
oom:
    shadow_drop(t);
    return NULL;
}

void sh_trim(TreeObject *t, uint32_t n) {
    PNode *N = pn_unique(t, n, NULL);
    if (N != NULL) N->count--;
}

void sh_remove_leaf(TreeObject *t, uint32_t n) {
    if (!t->shadow_ok) return;
    PNode *P = pn_unique(t, t->nodes[n].parent, NULL);
    if (P == NULL) return;
    const uint32_t *first = pn_tokens(t->pub[n], t->B);
    PNode *gone = kids_take(P, t->pctx, first);
    if (gone == NULL) {
        shadow_drop(t);
        return;
    }
    pn_decref(gone);
}

/* ------------------------------------------------------------------ checks and memory */

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            PyErr_Format(G.InvariantViolation, __VA_ARGS__);  \
            return -1;                                        \
        }                                                     \
    } while (0)

/* Whether k is the current published version of one of writer node owner's children. */
static int is_current_child(const TreeObject *t, const PNode *k, uint32_t owner) {
    return k->nid < t->nodes_len && t->nodes[k->nid].parent == owner && t->pub[k->nid] == k;
}

/* One trie node (and below), checked against the trie's owner `owner` (whose trie is
 * `top`): every child is found from the top by its own hash, is a current published
 * version of one of the writer's children of `owner`; counts are positive (1 with no
 * snapshot alive); no trie node is empty, and none below the top holds a lone child. */
static int trie_check(TreeObject *t, const HNode *top, const HNode *h, uint32_t depth,
                      uint32_t owner, int sole, uint32_t *seen) {
    const uint32_t B = t->B;
    CHECK(h->rc >= 1 && (!sole || h->rc == 1), "node %u: trie node shared with no snapshot or clone alive",
          owner);
    CHECK(h->n >= 1 && h->n <= h->cap, "node %u: empty or overfull trie node", owner);
    CHECK(depth == 0 ? h->total > KIDS_SMALL : h->total == 0, "node %u: a trie node's count is %u",
          owner, h->total);
    if (depth < H_LEVELS) {
        CHECK((h->bitmap ? h_pos(h->bitmap, 0x80000000u) + (h->bitmap >> 31) : 0) == h->n &&
                  (h->leafmap & ~h->bitmap) == 0,
              "node %u: trie node bitmaps disagree with its %u entries", owner, h->n);
        CHECK(depth == 0 || h->n > 1 || h->leafmap == 0, "node %u: a lone child below the top",
              owner);
    } else {
        CHECK(h->bitmap == 0 && h->leafmap == 0 && h->n >= 2, "node %u: bad collision node", owner);
    }
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++) {
        if (!hn_next_is_leaf(h, depth, &rest)) {
            if (trie_check(t, top, h->e[i], depth + 1u, owner, sole, seen) < 0) return -1;
            continue;
        }
        const PNode *k = h->e[i];
        CHECK(k->count >= 1 && k->chunk != NULL, "node %u: a child without an edge", owner);
        const uint32_t *first = pn_tokens(k, B);
        CHECK(trie_find(top, child_key(t->pctx, first), first, B) == k,
              "node %u: child filed under a wrong hash", owner);
        CHECK(is_current_child(t, k, owner), "node %u: published child is not current", owner);
        (*seen)++;
    }
    return 0;
}

/* The published shape equals the writer's shape (R-SNAP-1), node by node, and shares
 * its chunks; with no snapshot or clone alive every reference count is 1 (what lets the writer
 * skip path copying). */
int shadow_check(TreeObject *t) {
    if (!t->shadow_ok) return 0; /* dropped after an allocation failure: rebuilt on demand */
    const int sole = pctx_sole(t->pctx);
    PRoots *R = t->proots;
    CHECK(!sole || R->rc == 1, "published roots shared with no snapshot or clone alive");
    CHECK(R->n == t->roots_len, "published shape has %u namespaces, the tree %u", R->n,
          t->roots_len);
    for (uint32_t i = 0; i < R->n; i++) {
        if (i > 0) CHECK(ns_cmp(R->r[i - 1].ns, R->r[i].ns) < 0, "published namespaces unsorted");
        uint32_t r = tree_root_of(t, R->r[i].ns);
        CHECK(r != NIL && t->pub[r] == R->r[i].root, "published root of %R is stale",
              R->r[i].ns ? R->r[i].ns : Py_None);
        CHECK(R->r[i].root->count == 0 && R->r[i].root->chunk == NULL, "published root has an edge");
    }
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        const PNode *p = t->pub[n];
        CHECK(p != NULL && p->rc >= 1, "node %u has no published version", n);
        CHECK(!sole || p->rc == 1, "node %u's published version is shared with no snapshot or clone alive", n);
        CHECK(p->count == x->nblocks, "node %u: published edge of %u blocks, writer %u", n, p->count,
              x->nblocks);
        const uint32_t nkids = pn_nkids(p);
        CHECK(nkids == x->nchildren, "node %u: %u published children, writer %u", n, nkids,
              x->nchildren);
        CHECK(p->kids == NULL || nkids > 0, "node %u: an empty block of children", n);
        if (kids_in_trie(p)) {
            uint32_t seen = 0;
            if (trie_check(t, p->kids, p->kids, 0, n, sole, &seen) < 0) return -1;
            CHECK(seen == nkids, "node %u: its trie holds %u children, not %u", n, seen, nkids);
        } else if (p->kids != NULL) {
            void *a = kids_ptr(kids_word(p));
            PNode **k = arr_nodes(a);
            const uint32_t *keys = arr_keys(a, nkids);
            for (uint32_t i = 0; i < nkids; i++) {
                const PNode *c = k[i];
                CHECK(c->count >= 1 && c->chunk != NULL && keys[i] == pn_tokens(c, t->B)[0],
                      "node %u: bad child key", n);
                if (i > 0)
                    CHECK(block_cmp(pn_tokens(k[i - 1], t->B), pn_tokens(c, t->B), t->B) < 0,
                          "node %u: published children unsorted", n);
                CHECK(is_current_child(t, c, n), "node %u: published child is not current", n);
            }
        }
        CHECK(p->nid == n, "node %u: its published version names node %u", n, p->nid);
        if (x->parent == NIL) continue;
        CHECK(p->chunk == x->chunk && p->off == x->off,
              "node %u: published edge not in the writer's chunk", n);
        /* The writer's lookups: the parent's version finds this one by its first block
         * (with the counts equal above, published children and writer children match
         * one to one). */
        CHECK(t->pub[x->parent] != NULL && kids_find(t->pub[x->parent], t->pctx, node_tok(t, x)) == p,
              "node %u is not found under its parent's published version", n);
    }
    return 0;
}

/* Bytes of the shape the writer currently publishes: PNodes, tries, roots, the context.
 * The chunks are the writer's, counted with its nodes. */
size_t shadow_bytes(TreeObject *t) {
    size_t total = sizeof(PCtx) + ((size_t)t->B + 1u) * sizeof(uint32_t);
    if (!t->shadow_ok) return total;
    total += sizeof(PRoots) + (size_t)t->proots->cap * sizeof(PRoot);
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        total += sizeof(PNode) + kids_bytes(t->pub[n]);
    }
    return total;
}

typedef struct {
    PyObject_HEAD
    PRoots *roots;
    PCtx *ctx;
    uint32_t B;
    uint64_t version;
    uint64_t clock;
} SnapshotObject;

typedef struct {
    SnapshotObject snap;
    TreeObject *tree; /* strong, as in the reference */
    uint64_t epoch;
    int left;
} ReaderObject;

static int readers_reserve(TreeObject *t) {
    if (t->nreaders < t->readers_cap) return 0;
    Py_ssize_t cap = t->readers_cap ? t->readers_cap * 2 : 8;
    uint64_t *r = PyMem_Realloc(t->readers, (size_t)cap * sizeof(uint64_t));
    if (r == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->readers = r;
    uint64_t *v = PyMem_Realloc(t->reader_versions, (size_t)cap * sizeof(uint64_t));
    if (v == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->reader_versions = v;
    t->readers_cap = cap;
    return 0;
}

PyObject *tree_snapshot(TreeObject *t, int reader) {
    if (!t->shadow_ok && shadow_rebuild(t) < 0) return NULL;
    if (reader && readers_reserve(t) < 0) return NULL;
    PyTypeObject *type = reader ? &Reader_Type : &Snapshot_Type;
    SnapshotObject *s = PyObject_New(SnapshotObject, type);
    if (s == NULL) return NULL;
    /* ---- nothing below fails or runs Python code */
    if (reader) {
        /* Draw the epoch and register first, then load the published version. */
        ReaderObject *r = (ReaderObject *)s;
        r->epoch = ++t->epochs;
        t->reader_versions[t->nreaders] = t->version;
        t->readers[t->nreaders++] = r->epoch;
        r->tree = (TreeObject *)Py_NewRef((PyObject *)t);
        r->left = 0;
    }
    s->roots = t->proots;
    s->roots->rc++;
    s->ctx = t->pctx;
    s->ctx->rc++;
    s->B = t->B;
    s->version = t->version;
    s->clock = t->clock;
    return (PyObject *)s;
}

void reader_leave(TreeObject *t, uint64_t epoch) {
    Py_ssize_t lo = 0, hi = t->nreaders;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t->readers[mid] < epoch)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->nreaders && t->readers[lo] == epoch) {
        memmove(t->readers + lo, t->readers + lo + 1,
                (size_t)(t->nreaders - lo - 1) * sizeof(uint64_t));
        memmove(t->reader_versions + lo, t->reader_versions + lo + 1,
                (size_t)(t->nreaders - lo - 1) * sizeof(uint64_t));
        t->nreaders--;
    }
}

static void Snapshot_dealloc(SnapshotObject *self) {
    pctx_decref(self->ctx);
    proots_decref(self->roots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void Reader_dealloc(ReaderObject *self) {
    /* An unreferenced reader leaves by itself (R-EPOCH-5), like the reference's
     * finalizer. This runs in whichever thread drops the last reference, possibly inside
     * a writer call's preparation phase (a collection triggered by an allocation there
     * can free a cycle holding the reader), and at interpreter shutdown. reader_leave is
     * plain C on the tree this reader keeps alive: no Python code, no allocation, no
     * lock, nothing that can fail, and every writer step that reads the registry reads
     * it after its last allocation (DESIGN.md, "Readers and quarantine"). */
    if (self->tree != NULL && !self->left) {
        self->left = 1;
        reader_leave(self->tree, self->epoch);
    }
    Py_XDECREF(self->tree);
    Snapshot_dealloc(&self->snap);
}

/* n block ids from src to dst, four a step: an edge's ids are a few hundred bytes, for
 * which libc's memcpy (its dispatch, its size classes) costs several times the copy. */
static inline void copy_ids(uint32_t *dst, const uint32_t *src, Py_ssize_t n) {
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4)
        _mm_storeu_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
#endif
    for (; i < n; i++) dst[i] = src[i];
}

/* Follow tok's first `limit` blocks down one published version; ids go to out. Reads
 * only immutable data, so it runs without the GIL. */
/* The published walk (R-MATCH-1) from `node`: the matched block ids go to out; returns
 * how many.  *last gets the last node visited (NULL if none) and *last_used how many of
 * its blocks matched.  Reads only PNodes and chunks: safe without the GIL on any version
 * a snapshot holds, and the writer's own walk (over its current version). */
static inline __attribute__((always_inline)) Py_ssize_t pn_walk(const PNode *node,
                                                                const PCtx *ctx,
                                                                const uint32_t *tok,
                                                                Py_ssize_t limit, uint32_t *out,
                                                                const PNode **last,
                                                                uint32_t *last_used) {
    const uint32_t B = ctx->B;
    Py_ssize_t matched = 0;
    const PNode *at = NULL; /* the last node and its blocks matched, kept in registers: */
    uint32_t used = 0;      /* stores through the out pointers could alias `out` */
    while (node != NULL && matched < limit) {
        const uint32_t *blk = tok + (size_t)matched * B;
        const PNode *c = kids_find_inline(node, ctx, blk);
        if (c == NULL) break;
        const PChunk *chunk = c->chunk;
        const uint32_t *ids = chunk->tok + (size_t)chunk->cap * B + c->off;
        Py_ssize_t taken = 1;
        if (c->count == 1) { /* a one-block node: its block is the one just found */
            out[matched] = ids[0];
        } else {
            Py_ssize_t usable = limit - matched;
            if ((Py_ssize_t)c->count < usable) usable = c->count;
            const uint32_t *edge = chunk->tok + (size_t)c->off * B;
            taken = usable;
            if (usable > 1 && memcmp(edge + B, blk + B, (size_t)(usable - 1) * B * 4u) != 0) {
                taken = 1;
                while (tokens_equal(edge + (size_t)taken * B, blk + (size_t)taken * B, B)) taken++;
            }
            copy_ids(out + matched, ids, taken);
        }
        matched += taken;
        at = c;
        used = (uint32_t)taken;
        node = taken == (Py_ssize_t)c->count ? c : NULL;
    }
    *last = at;
    *last_used = used;
    return matched;
}

/* The writer's walk (tree_walk) while the published shape is kept: over the writer's
 * current version, which equals its own shape node by node. */
Py_ssize_t pub_walk(TreeObject *t, uint32_t root, const uint32_t *tok, Py_ssize_t limit,
                    uint32_t *out, uint32_t *last_node, uint32_t *last_used) {
    const PNode *last;
    Py_ssize_t matched = pn_walk(root == NIL ? NULL : t->pub[root], t->pctx, tok, limit, out,
                                 &last, last_used);
    *last_node = last != NULL ? last->nid : NIL;
    return matched;
}

/* The writer's child lookup while the published shape is kept. */
uint32_t pub_child(TreeObject *t, uint32_t parent, const uint32_t *blk) {
    const PNode *c = kids_find(t->pub[parent], t->pctx, blk);
    return c != NULL ? c->nid : NIL;
}

/* A snapshot's walk: one copy of pn_walk for both of Snapshot_match's paths (with and
 * without the GIL). */
static __attribute__((noinline)) Py_ssize_t snap_walk(const PNode *root, const PCtx *ctx,
                                                      const uint32_t *tok, Py_ssize_t limit,
                                                      uint32_t *out, const PNode **last,
                                                      uint32_t *last_used) {
    return pn_walk(root, ctx, tok, limit, out, last, last_used);
}

static PNode *snap_root(SnapshotObject *self, PyObject *ns) {
    PRoots *R = self->roots;
    for (uint32_t i = 0; i < R->n; i++) {
        PyObject *name = R->r[i].ns;
        if (ns == Py_None ? name == NULL : (name != NULL && PyUnicode_Compare(name, ns) == 0))
            return R->r[i].root;
    }
    return NULL;
}

static PyObject *Snapshot_match(SnapshotObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    PyObject *tokens_obj = NULL, *ns = Py_None;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError,
                     "match() takes from 1 to 2 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (nargs >= 1) tokens_obj = args[0];
    if (nargs >= 2) ns = args[1];
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            if (nargs < 2 && PyUnicode_Compare(key, G.s_namespace) == 0) {
                ns = args[nargs + i];
            } else if (nargs < 1 && PyUnicode_Compare(key, G.s_tokens) == 0) {
                tokens_obj = args[nargs + i];
            } else {
                PyErr_Format(PyExc_TypeError,
                             "match() got an unexpected or repeated keyword argument '%U'", key);
                return NULL;
            }
        }
    }
    if (tokens_obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "match() missing required argument 'tokens'");
        return NULL;
    }
    Tokens tk;
    if (tokens_get_plain(tokens_obj, &tk) < 0) return NULL;
    if (ns != Py_None && !PyUnicode_Check(ns)) {
        tokens_release(NULL, &tk);
        PyErr_Format(G.InvalidArgumentError, "namespace must be None or a str, got %s %R",
                     Py_TYPE(ns)->tp_name, ns);
        return NULL;
    }
    const uint32_t B = self->B;
    Py_ssize_t limit = tk.n / B;
    uint32_t *out = PyMem_Malloc((size_t)(limit ? limit : 1) * sizeof(uint32_t));
    if (out == NULL) {
        tokens_release(NULL, &tk);
        return PyErr_NoMemory();
    }
    const PNode *root = snap_root(self, ns), *last;
    uint32_t last_used;
    Py_ssize_t matched;
    if (tk.n >= NOGIL_MIN_TOKENS) {
        /* The snapshot (held by this call) keeps every PNode it reaches alive and
         * unchanged; the tokens are owned or a held buffer view. */
        Py_INCREF(self);
        Py_BEGIN_ALLOW_THREADS
        matched = snap_walk(root, self->ctx, tk.data, limit, out, &last, &last_used);
        Py_END_ALLOW_THREADS
        Py_DECREF(self);
    } else {
        matched = snap_walk(root, self->ctx, tk.data, limit, out, &last, &last_used);
    }
    tokens_release(NULL, &tk);
    MatchResultObject *res = match_result_new(matched);
    if (res != NULL) {
        memcpy(res->ids, out, (size_t)matched * sizeof(uint32_t));
        res->length = matched * (Py_ssize_t)B;
    }
    PyMem_Free(out);
    return (PyObject *)res;
}

static PyObject *Snapshot_namespaces(SnapshotObject *self, PyObject *unused) {
    (void)unused;
    PyObject *names = PyList_New(self->roots->n);
    if (names == NULL) return NULL;
    for (uint32_t i = 0; i < self->roots->n; i++) {
        PyObject *ns = self->roots->r[i].ns;
        PyList_SET_ITEM(names, i, Py_NewRef(ns ? ns : Py_None));
    }
    return names;
}

/* One canonical edge: n's blocks and those of its one-child chain; *end its last node. */
static PyObject *pedge(const PNode *n, uint32_t B, const PNode **end) {
    size_t total = 0;
    const PNode *m = n;
    for (;;) {
        total += m->count;
        if (pn_nkids(m) != 1) break;
        m = kids_only(m);
    }
    *end = m;
    PyObject *tokens = PyList_New((Py_ssize_t)(total * B));
    PyObject *blocks = PyList_New((Py_ssize_t)total);
    PyObject *children = PyList_New(0);
    PyObject *d = NULL;
    if (!tokens || !blocks || !children) goto done;
    Py_ssize_t i = 0;
    for (m = n;; m = kids_only(m)) {
        const uint32_t *tk = pn_tokens(m, B), *ids = pn_ids(m, B);
        for (uint32_t j = 0; j < m->count; j++, i++) {
            for (uint32_t q = 0; q < B; q++) {
                PyObject *v = PyLong_FromUnsignedLong(tk[(size_t)j * B + q]);
                if (v == NULL) goto done;
                PyList_SET_ITEM(tokens, i * (Py_ssize_t)B + q, v);
            }
            PyObject *bv = PyLong_FromUnsignedLong(ids[j]);
            if (bv == NULL) goto done;
            PyList_SET_ITEM(blocks, i, bv);
        }
        if (m == *end) break;
    }
    d = PyDict_New();
    if (d == NULL) goto done;
    if (PyDict_SetItem(d, G.s_tokens, tokens) < 0 || PyDict_SetItem(d, G.s_blocks, blocks) < 0 ||
        PyDict_SetItem(d, G.s_children, children) < 0)
        Py_CLEAR(d);
done:
    Py_XDECREF(tokens);
    Py_XDECREF(blocks);
    Py_XDECREF(children);
    return d;
}

typedef struct {
    const PNode *node;
    PyObject *target; /* borrowed: owned by the result being built */
} PDumpItem;

typedef struct {
    PDumpItem *at;
    PyObject *target;
} PDumpFill;

static void push_child(const PNode *c, void *arg) {
    PDumpFill *f = arg;
    *f->at++ = (PDumpItem){c, f->target};
}

/* Dump order: a node's children by their first block's tokens, element-wise.  The
 * stack pops the last pushed first, so they are pushed in descending order. */
static uint32_t g_dump_B;

static int cmp_dump_desc(const void *a, const void *b) {
    const PNode *x = ((const PDumpItem *)a)->node, *y = ((const PDumpItem *)b)->node;
    return -block_cmp(pn_tokens(x, g_dump_B), pn_tokens(y, g_dump_B), g_dump_B);
}

static PyObject *Snapshot_dump(SnapshotObject *self, PyObject *unused) {
    (void)unused;
    const uint32_t B = self->B;
    PyObject *spaces = PyList_New(0), *result = NULL;
    PDumpItem *stack = NULL;
    size_t top = 0, cap = 0;
    if (spaces == NULL) return NULL;
    for (uint32_t r = 0; r < self->roots->n; r++) {
        const PRoot *e = &self->roots->r[r];
        PyObject *children = PyList_New(0);
        PyObject *space = children ? Py_BuildValue("{s:O,s:O}", "namespace",
                                                   e->ns ? e->ns : Py_None, "children", children)
                                   : NULL;
        Py_XDECREF(children); /* owned by space */
        if (space == NULL || PyList_Append(spaces, space) < 0) {
            Py_XDECREF(space);
            goto done;
        }
        Py_DECREF(space);
        const PNode *from = e->root;
        PyObject *into = children;
        for (;;) {
            const uint32_t nkids = pn_nkids(from);
            size_t need = top + nkids;
            if (need > cap) {
                size_t ncap = cap ? cap : 64;
                while (ncap < need) ncap *= 2;
                PDumpItem *s = PyMem_Realloc(stack, ncap * sizeof(PDumpItem));
                if (s == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                stack = s;
                cap = ncap;
            }
            PDumpFill fill = {stack + top, into};
            kids_each(from, push_child, &fill);
            g_dump_B = B; /* the GIL serialises every caller */
            qsort(stack + top, nkids, sizeof(PDumpItem), cmp_dump_desc);
            top += nkids;
            if (top == 0) break;
            PDumpItem item = stack[--top];
            const PNode *end;
            PyObject *d = pedge(item.node, B, &end);
            if (d == NULL || PyList_Append(item.target, d) < 0) {
                Py_XDECREF(d);
                goto done;
            }
            into = PyDict_GetItem(d, G.s_children);
            Py_DECREF(d);
            from = end;
        }
    }
    result = Py_BuildValue("{s:O,s:I,s:K,s:K,s:O}", "format", G.dump_format, "block_size", B,
                           "version", (unsigned long long)self->version, "clock",
                           (unsigned long long)self->clock, "namespaces", spaces);
done:
    PyMem_Free(stack);
    Py_DECREF(spaces);
    return result;
}

static PyObject *Snapshot_get_version(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->version);
}
static PyObject *Snapshot_get_clock(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->clock);
}
static PyObject *Snapshot_get_block_size(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->B);
}

static PyObject *Snapshot_repr(SnapshotObject *self) {
    return PyUnicode_FromFormat("<accel.Snapshot version=%llu clock=%llu>",
                                (unsigned long long)self->version, (unsigned long long)self->clock);
}

/* The docstrings repeat reference/snapshot.py's, word for word wherever the behaviour is
 * the same; tests/accel/test_docstrings.py lists every difference and its reason. */
static PyMethodDef Snapshot_methods[] = {
    {"match", (PyCFunction)(void (*)(void))Snapshot_match, METH_FASTCALL | METH_KEYWORDS,
     "match($self, tokens, namespace=None)\n--\n\n"
     "The longest whole-block prefix cached at this version (R-SNAP-2, R-MATCH-1).\n\n"
     "Stamps nothing and pins nothing; ``lease`` is always None. Cost: O(n).\n"
     "From 4,096 tokens on, the walk runs without the GIL (other threads, readers and\n"
     "the writer, run meanwhile); do not change a token buffer during the call.\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*).\n"
     "    InvalidArgumentError: ``namespace`` is not None or a str."},
    {"namespaces", (PyCFunction)Snapshot_namespaces, METH_NOARGS,
     "namespaces($self, /)\n--\n\n"
     "Namespaces holding blocks at this version, None first. O(r): they are kept sorted."},
    {"dump", (PyCFunction)Snapshot_dump, METH_NOARGS,
     "dump($self, /)\n--\n\n"
     "The canonical dump of this version's shape (R-SNAP-2, R-DUMP-2).\n\n"
     "Like ``RadixTree.dump()`` without the writer's bookkeeping (pins, stamps,\n"
     "free and quarantined blocks), plus the version number. O(cached tokens)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Snapshot_getset[] = {
    {"version", (getter)Snapshot_get_version, NULL, "The version number this snapshot shows. O(1).",
     NULL},
    {"clock", (getter)Snapshot_get_clock, NULL, "The tree's logical clock at this version. O(1).",
     NULL},
    {"block_size", (getter)Snapshot_get_block_size, NULL, "Tokens per block. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Snapshot_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.Snapshot",
    .tp_basicsize = sizeof(SnapshotObject),
    .tp_dealloc = (destructor)Snapshot_dealloc,
    .tp_repr = (reprfunc)Snapshot_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An immutable view of one published version of a tree (R-SNAP-2).\n\n"
              "Cost to take: O(1). Safe to use from any thread. Made only by\n"
              "``RadixTree.snapshot()``.",
    .tp_methods = Snapshot_methods,
    .tp_getset = Snapshot_getset,
};

static PyObject *Reader_leave(ReaderObject *self, PyObject *unused) {
    (void)unused;
    if (self->left) {
        PyErr_Format(G.ReaderLeftError, "reader %llu already left", (unsigned long long)self->epoch);
        return NULL;
    }
    self->left = 1;
    reader_leave(self->tree, self->epoch);
    Py_RETURN_NONE;
}

static PyObject *Reader_enter(ReaderObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef((PyObject *)self);
}

static PyObject *Reader_exit(ReaderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
        return NULL;
    }
    if (!self->left) return Reader_leave(self, NULL);
    Py_RETURN_NONE;
}

static PyObject *Reader_get_epoch(ReaderObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->epoch);
}
static PyObject *Reader_get_left(ReaderObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->left);
}

static PyObject *Reader_repr(ReaderObject *self) {
    return PyUnicode_FromFormat("<Reader epoch=%llu version=%llu %s>",
                                (unsigned long long)self->epoch,
                                (unsigned long long)self->snap.version,
                                self->left ? "left" : "inside");
}

static PyMethodDef Reader_methods[] = {
    {"leave", (PyCFunction)Reader_leave, METH_NOARGS,
     "leave($self, /)\n--\n\n"
     "Leave the epoch; quarantined blocks may return to the allocator. O(readers): the\n"
     "registry is an array sorted by epoch (a binary search, then the later entries move).\n\n"
     "Raises:\n    ReaderLeftError: the reader already left (R-EPOCH-4)."},
    {"__enter__", (PyCFunction)Reader_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n"},
    {"__exit__", (PyCFunction)(void (*)(void))Reader_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, traceback, /)\n--\n\n"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"epoch", (getter)Reader_get_epoch, NULL,
     "The epoch number this reader entered (read-only). O(1).", NULL},
    {"left", (getter)Reader_get_left, NULL, "Whether the reader has left. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Reader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_repr = (reprfunc)Reader_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_base = &Snapshot_Type,
    .tp_doc = "A snapshot inside a reader epoch: what it can see is not reused until it leaves.\n\n"
              "Use as a context manager, or call :meth:`leave` exactly once (R-EPOCH-1). A\n"
              "reader that is no longer referenced leaves by itself (R-EPOCH-5). Made only by\n"
              "``RadixTree.reader()``.",
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
};
