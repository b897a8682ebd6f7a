/* gru_cell's sizes, shared by its shape rule (op.c) and kernels (cpu.c,
 * cuda.cu).
 *
 * DESIGN
 * torch.nn.GRUCell: x (B, I) or unbatched (I), h (B, H) or (H), w_ih
 * (3H, I), w_hh (3H, H), b_ih (3H)?, b_hh (3H)?; the rows of the weights
 * and biases are the gates r, z, n in that order. A call that passed the
 * shape rule reads its sizes from the views; opd__gru_dims does that in
 * one place.
 */
#ifndef OPD_KERNELS_GRU_CELL_H
#define OPD_KERNELS_GRU_CELL_H

#include "kernels/kernel.h"

typedef struct gru_dims {
  int64_t B, I, H;                 /* batch, input size, hidden size */
  int has_bih, has_bhh;            /* b_ih (input 4) / b_hh (input 5) given */
} gru_dims_t;

/* The sizes of a call that passed gru_cell's shape rule. */
static inline gru_dims_t opd__gru_dims(const opd_kcall_t *call) {
  const opd_tview_t *x = &call->in[0], *h = &call->in[1];
  gru_dims_t d;
  d.B = x->rank == 2 ? x->shape[0] : 1;
  d.I = x->shape[x->rank - 1];
  d.H = h->shape[h->rank - 1];
  d.has_bih = call->n_in > 4;
  d.has_bhh = call->n_in > 5;
  return d;
}

#endif /* OPD_KERNELS_GRU_CELL_H */
