/* alloc.c: the block allocator (reference/allocator.py), a two-level bitmap of the free
 * ids, used by the tree and exported as BlockAllocator. */
#ifndef ACCEL_ALLOC_H
#define ACCEL_ALLOC_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

int ba_init(BitAlloc *a, uint32_t num_blocks);
void ba_fini(BitAlloc *a);
/* dst (uninitialised) becomes an independent copy of src; -1 with MemoryError set. */
int ba_copy(BitAlloc *dst, const BitAlloc *src);
uint32_t ba_take_smallest(BitAlloc *a); /* precondition: free_count > 0 */
void ba_put(BitAlloc *a, uint32_t id);  /* precondition: id allocated */
size_t ba_bytes(const BitAlloc *a);
PyObject *ba_free_ids(const BitAlloc *a); /* list of ints, ascending */
/* The `count` (an int >= 0) smallest free ids, ascending, fewer when fewer are free;
 * NULL with InvalidArgumentError for another count. */
PyObject *ba_next_ids(const BitAlloc *a, PyObject *count);
/* Returns NULL when consistent, else a static message. */
const char *ba_check(const BitAlloc *a);

static inline int ba_is_free(const BitAlloc *a, uint32_t id) {
    return (int)((a->bits[id >> 6] >> (id & 63)) & 1u);
}

extern PyTypeObject BlockAllocator_Type;

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
