/* policy.c: the eviction policies (R-POL-*), the C twin of kachedb_radix.reference.policies.
 * Each block's state for the tree's policy, the key eviction orders leaf tails by (packed
 * in one uint64, pol_rank), and the hooks a call runs in the reference's order.  The
 * hooks on every call's path (pol_reserve, pol_tick, pol_freed) are inline here: under
 * lru, the default, each is one predictable branch. */
#ifndef ACCEL_POLICY_H
#define ACCEL_POLICY_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* lfu's hit counts stop there (the key packs them in 20 bits). */
#define HITS_CAP ((1u << 20) - 1u)

/* The eviction key of block b under the tree's policy, packed (see policy.c). */
static inline uint64_t pol_rank(const TreeObject *t, uint32_t b) {
    const Policy *p = &t->pol;
    if (__builtin_expect(p->kind == POL_LRU, 1)) return t->stamps[b]; /* the default */
    switch (p->kind) {
    case POL_LFU:
        return ((uint64_t)p->hits[b] << 44) | t->stamps[b];
    case POL_FIFO:
        return p->born[b];
    case POL_PRIORITY:
        return ((uint64_t)p->prio[b] << 56) | t->stamps[b];
    default:
        return ((uint64_t)p->prot[b] << 63) | t->stamps[b];
    }
}

/* The lazy heap's order: (key, block). */
static inline int ke_less(const KEntry *a, const KEntry *b) {
    return a->key < b->key || (a->key == b->key && a->block < b->block);
}

/* What an insert asks: the priority q until `until` (0: never), and the namespace's
 * default it falls back to. */
typedef struct {
    uint8_t q;
    uint8_t fallback;
    uint64_t until;
} Ask;

/* Construction, copies, teardown.  -1 with an exception set. */
int pol_init(TreeObject *t, PyObject *name, PyObject *options);
void pol_fini(Policy *p);
int pol_copy(Policy *dst, const Policy *src, size_t n);

/* The retention an insert asks for (R-POL-5), checked as the reference's
 * check_retention.  -1 with InvalidArgumentError. */
int pol_ask(TreeObject *t, PyObject *priority, PyObject *retain_for, PyObject *ns, Ask *ask);

/* Room in the lazy heap for the entries one call may push (preparation phase). */
int pol_reserve_heap(TreeObject *t, Py_ssize_t blocks);
static inline int pol_reserve(TreeObject *t, Py_ssize_t blocks) {
    if (t->pol.kind != POL_PRIORITY && t->pol.kind != POL_SLRU) return 0;
    return pol_reserve_heap(t, blocks);
}

/* The clock advances (R-LRU-3); under priority, priorities whose time has come fall back
 * (R-POL-5, pol_expire).  Returns the new time. */
void pol_expire(TreeObject *t, uint64_t now);
static inline uint64_t pol_tick(TreeObject *t) {
    uint64_t now = ++t->clock;
    if (t->pol.kind == POL_PRIORITY) pol_expire(t, now);
    return now;
}

/* The hooks of a call's blocks, run after their stamps are the call's time. */
void pol_cached(TreeObject *t, const uint32_t *ids, Py_ssize_t n, uint64_t now, const Ask *ask);
void pol_found(TreeObject *t, const uint32_t *ids, Py_ssize_t n, const Ask *ask);
void pol_released_slru(TreeObject *t, const uint32_t *ids, Py_ssize_t n);
/* A lease over ids[0..n) was released: under slru, protected blocks move up their recency. */
static inline void pol_released(TreeObject *t, const uint32_t *ids, Py_ssize_t n) {
    if (t->pol.kind == POL_SLRU) pol_released_slru(t, ids, n);
}

/* Eviction removed block b from the tree. */
static inline void pol_freed(TreeObject *t, uint32_t b) {
    Policy *p = &t->pol;
    if (p->kind == POL_PRIORITY) {
        p->until[b] = 0;
    } else if (p->kind == POL_SLRU && p->prot[b]) {
        p->prot[b] = 0;
        p->prot_count--;
    }
}

/* Reads, for inspect.c and the methods. */
PyObject *pol_key(const TreeObject *t, uint32_t b);
int pol_dump_fields(const TreeObject *t, PyObject *d, const uint32_t *ids, Py_ssize_t n);
PyObject *pol_dump_entry(const TreeObject *t);
PyObject *pol_options_copy(const Policy *p);
const char *pol_check(const TreeObject *t, const uint8_t *cached, char *buf, size_t len);
size_t pol_bytes(const TreeObject *t);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
