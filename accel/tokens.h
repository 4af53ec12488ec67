/* tokens.c: token validation (reference/tokens.py), in the reference's check order. */
#ifndef ACCEL_TOKENS_H
#define ACCEL_TOKENS_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

typedef struct {
    const uint32_t *data;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
    int scratch;      /* data lives in tree->scratch_tok */
    uint32_t *owned;  /* data lives in a private PyMem block */
} Tokens;

/* Validate `obj` as reference.tokens.as_token_list does, in the same check order,
 * and expose it as contiguous uint32.  Returns 0, or -1 with the exception set. */
int tokens_get(TreeObject *tree, PyObject *obj, Tokens *out);
void tokens_release_slow(TreeObject *tree, Tokens *tk);
/* Give back what tokens_get took: the buffer view, the tree's scratch, a private copy. */
static inline void tokens_release(TreeObject *tree, Tokens *tk) {
    if (tk->has_view && !tk->scratch && tk->owned == NULL) { /* a buffer used in place */
        PyBuffer_Release(&tk->view);
        tk->has_view = 0;
        tk->data = NULL;
        return;
    }
    tokens_release_slow(tree, tk);
}
/* Same, without a tree (no scratch reuse); used by module helpers. */
int tokens_get_plain(PyObject *obj, Tokens *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
