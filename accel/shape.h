/* The published shape's encoding of a node's children (snapshot.c), shared with the test
 * hooks that break it on purpose (corrupt.c): a trie node's levels, the child array's
 * count in the low bits of its pointer, the array's layout.  See snapshot.c. */
#ifndef ACCEL_SHAPE_H
#define ACCEL_SHAPE_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define H_BITS 5u
/* Levels 0..12 consume the 64-bit hash five bits at a time; a node at depth H_LEVELS
 * (all bits used) lists the children whose hashes are equal. */
#define H_LEVELS 13u

/* Walking a trie node's entries in order: entry i sits at the i-th set bit of the
 * bitmap; it is a child PNode when that bit is set in leafmap (or below the last
 * level), else a deeper trie node.  `rest` holds the bits not walked yet. */
static inline int hn_next_is_leaf(const HNode *h, uint32_t depth, uint32_t *rest) {
    if (depth == H_LEVELS) return 1;
    uint32_t bit = *rest & -*rest;
    *rest &= *rest - 1u;
    return (h->leafmap & bit) != 0;
}

/* A PNode's `kids`: NULL (no children), a sorted array of up to KIDS_SMALL children
 * whose count rides in the pointer's low bits (allocations are 16-byte aligned on 64-bit
 * platforms), or the top node of a trie (low bits 0; its `total` is the count). */
#if SIZEOF_VOID_P >= 8
#define KIDS_TAG_BITS 4u
#else
#define KIDS_TAG_BITS 3u
#endif
#define KIDS_TAG ((uintptr_t)((1u << KIDS_TAG_BITS) - 1u))
#define KIDS_SMALL ((uint32_t)KIDS_TAG)

static inline uintptr_t kids_word(const PNode *p) { return (uintptr_t)p->kids; }
/* An array's count (1..KIDS_SMALL), or 0 for none or a trie. */
static inline uint32_t kids_tag(uintptr_t w) { return (uint32_t)(w & KIDS_TAG); }
static inline void *kids_ptr(uintptr_t w) { return (void *)(w & ~KIDS_TAG); }
static inline int kids_in_trie(const PNode *p) { return kids_word(p) != 0 && kids_tag(kids_word(p)) == 0; }
static inline uint32_t pn_nkids(const PNode *p) {
    uintptr_t w = kids_word(p);
    return w == 0 ? 0 : kids_tag(w) ? kids_tag(w) : ((const HNode *)w)->total;
}

/* The array: n child pointers, then their n first tokens. */
static inline size_t arr_bytes(uint32_t n) { return (size_t)n * (sizeof(PNode *) + sizeof(uint32_t)); }
static inline PNode **arr_nodes(void *arr) { return arr; }
static inline uint32_t *arr_keys(void *arr, uint32_t n) { return (uint32_t *)((PNode **)arr + n); }

/* A new PNode: zeroed, one reference; NULL on failure (no exception set). */
PNode *pn_new(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
