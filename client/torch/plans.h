/* The plan cache of one torch kernel (plans.c): the outputs' dtypes and
 * shapes per call signature, so that the daemon's shape rule is asked once
 * per signature.
 *
 * DESIGN
 * A signature is the bytes of a call's attribute values, inputs' dtypes
 * and shapes and device (opd_torch_sig_t, filled by opd__torch_sig_put;
 * one longer than its buffer is not cached). A cache holds PLANS of them,
 * the least recently used replaced, under its own mutex: kernels of
 * several threads share it.
 */
#ifndef OPD_CLIENT_TORCH_PLANS_H
#define OPD_CLIENT_TORCH_PLANS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "opd/opd.h"

#pragma GCC visibility push(hidden)

#define OPD_TORCH_PLANS 16 /* signatures cached per kernel */

typedef struct opd_torch_sig {
  unsigned char b[512];
  uint32_t len;
  int over; /* longer than b: not cached */
} opd_torch_sig_t;

typedef struct opd_torch_plan {
  unsigned char key[512];
  uint32_t key_len;
  uint32_t n_out;
  opd_tensor_t out[OPD_MAX_TENSORS]; /* dtypes and shapes from opd_infer */
  uint64_t used;                     /* tick of the last use */
  int ran;                           /* a run of it was answered "enqueued":
                                        later ones are not waited for */
} opd_torch_plan_t;

typedef struct opd_torch_plans {
  pthread_mutex_t mu; /* everything below */
  opd_torch_plan_t plan[OPD_TORCH_PLANS];
  uint32_t n;
  uint64_t tick;
} opd_torch_plans_t;

/* Appends n bytes at p to signature s (or marks it over). */
void opd__torch_sig_put(opd_torch_sig_t *s, const void *p, size_t n);
void opd__torch_plans_init(opd_torch_plans_t *c);
void opd__torch_plans_destroy(opd_torch_plans_t *c);
/* 1 and the outputs in outs[0..*n_out) and *ran when s is cached, else 0
 * (nothing written). */
int opd__torch_plan_find(opd_torch_plans_t *c, const opd_torch_sig_t *s,
                         opd_tensor_t *outs, uint32_t *n_out, int *ran);
/* Caches outs[0..n_out) for s (not yet ran), unless s is over. */
void opd__torch_plan_store(opd_torch_plans_t *c, const opd_torch_sig_t *s,
                           const opd_tensor_t *outs, uint32_t n_out);
/* Marks s as answered: its later calls are not waited for. */
void opd__torch_plan_ran(opd_torch_plans_t *c, const opd_torch_sig_t *s);

#pragma GCC visibility pop

#endif
