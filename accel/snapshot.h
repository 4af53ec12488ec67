/* snapshot.c: the published shape (a persistent, reference-counted copy of the writer's
 * shape, also its child index), snapshots and readers (reference/snapshot.py). */
#ifndef ACCEL_SNAPSHOT_H
#define ACCEL_SNAPSHOT_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

extern PyTypeObject Snapshot_Type;
extern PyTypeObject Reader_Type;

int shadow_init(TreeObject *t, uint64_t seed);
void shadow_fini(TreeObject *t);
void shadow_drop(TreeObject *t);
int shadow_rebuild(TreeObject *t);
/* Rebuild a dropped published shape (fallible; for a call's preparation phase). */
static inline int shadow_ensure(TreeObject *t) { return t->shadow_ok ? 0 : shadow_rebuild(t); }

/* Mirror one change of the writer's shape; never fail (an allocation failure drops the
 * published shape, which the next snapshot() rebuilds). */
void sh_root_create(TreeObject *t, uint32_t r, PyObject *ns);
void sh_root_delete(TreeObject *t, uint32_t r);
void sh_attach(TreeObject *t, uint32_t parent, uint32_t c); /* after the writer's attach */
void sh_extend(TreeObject *t, uint32_t n);                  /* after the writer's extension */
PNode *sh_split(TreeObject *t, uint32_t x, uint32_t at, uint32_t u); /* before the writer's split */
void sh_trim(TreeObject *t, uint32_t n);
void sh_remove_leaf(TreeObject *t, uint32_t n); /* before the writer unlinks it */

/* The writer's walk and child lookup over its current published version (walk.c's
 * tree_walk and tree_find_child while the published shape is kept): the matched ids go
 * to out, *last_node is the last writer node visited (NIL if none), *last_used how many
 * of its blocks matched. */
Py_ssize_t pub_walk(TreeObject *t, uint32_t root, const uint32_t *tok, Py_ssize_t limit,
                    uint32_t *out, uint32_t *last_node, uint32_t *last_used);
uint32_t pub_child(TreeObject *t, uint32_t parent, const uint32_t *blk);

PyObject *tree_snapshot(TreeObject *t, int reader);
int shadow_check(TreeObject *t);
size_t shadow_bytes(TreeObject *t); /* PNodes, tries, roots; the chunks are the writer's */
void reader_leave(TreeObject *t, uint64_t epoch);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
