/* events.c: KV events (R-EVENT-*), the C twin's side of kachedb_radix.reference.events.
 * A call logs what changed in its mutation phase, into room reserved in its preparation
 * phase (so logging never fails); with events off (ev.recorder NULL) a call pays one
 * pointer test. */
#ifndef ACCEL_EVENTS_H
#define ACCEL_EVENTS_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* The words of a STORE record's header (events.c's log layout). */
#define EV_STORE_HEADER 5u

/* Set up the log for `events` (None, False, True or a BlockHasher), as the reference's
 * constructor reads it.  -1 with the exception set (InvalidArgumentError for a bad value). */
int ev_init(TreeObject *t, PyObject *events);
void ev_fini(TreeObject *t);
/* Room for `words` more words of log (preparation phase); -1 with MemoryError. */
int ev_reserve(TreeObject *t, size_t words);

/* The words an insert may log: its eviction, its store, its flush. */
static inline size_t ev_insert_words(uint32_t B, Py_ssize_t needed, Py_ssize_t nevict) {
    size_t w = 3u;
    if (nevict > 0) w += 2u + (size_t)nevict;
    if (needed > 0) w += EV_STORE_HEADER + (size_t)needed * (1u + B);
    return w;
}

/* Mutation phase (room reserved): blocks ids[0..n) holding tok[0 .. n*B) became cached
 * below `parent` (NIL: at the root) in namespace ns (NULL or None: the default one). */
void ev_log_store(TreeObject *t, PyObject *ns, uint32_t parent, const uint32_t *ids,
                  const uint32_t *tok, Py_ssize_t n);
/* Mutation phase (room reserved): blocks ids[0..n) were evicted, in that order. */
void ev_log_remove(TreeObject *t, const uint32_t *ids, Py_ssize_t n);
/* Mutation phase (room reserved): every cached block stopped being cached (R-EVENT-7). */
void ev_log_clear(TreeObject *t);
/* The end of an operation (room reserved): what it logged becomes one batch (R-EVENT-5). */
void ev_flush(TreeObject *t);

/* check_invariants()' part (R-EVENT-*): 0, or -1 with the exception set. */
int ev_check(TreeObject *t);
/* A clone's log: the records not yet named (the recorder is copied by the caller). */
int ev_copy_log(EvLog *dst, const EvLog *src, uint32_t B);

/* RadixTree.take_events(), .events and ._event_recorder. */
PyObject *Tree_take_events(TreeObject *self, PyObject *unused);
PyObject *Tree_get_events(TreeObject *self, void *unused);
PyObject *Tree_get_event_recorder(TreeObject *self, void *unused);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
