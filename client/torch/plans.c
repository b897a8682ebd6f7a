/* The plan cache of a torch kernel: client/torch/plans.h says what it is.
 *
 * DESIGN
 * A linear search over at most OPD_TORCH_PLANS keys of at most 512 bytes:
 * a kernel sees few signatures (a model's shapes), and the search is
 * nothing next to the run it saves a shape rule for.
 */
#include <string.h>

#include "client/torch/plans.h"

void opd__torch_sig_put(opd_torch_sig_t *s, const void *p, size_t n) {
  if (s->len + n > sizeof s->b) {
    s->over = 1;
    return;
  }
  memcpy(s->b + s->len, p, n);
  s->len += (uint32_t)n;
}

void opd__torch_plans_init(opd_torch_plans_t *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
}

void opd__torch_plans_destroy(opd_torch_plans_t *c) {
  pthread_mutex_destroy(&c->mu);
}

/* the plan of s, or NULL; under c->mu */
static opd_torch_plan_t *lookup(opd_torch_plans_t *c, const opd_torch_sig_t *s) {
  for (uint32_t p = 0; p < c->n && !s->over; p++) {
    opd_torch_plan_t *pl = &c->plan[p];
    if (pl->key_len == s->len && memcmp(pl->key, s->b, s->len) == 0) return pl;
  }
  return NULL;
}

int opd__torch_plan_find(opd_torch_plans_t *c, const opd_torch_sig_t *s,
                         opd_tensor_t *outs, uint32_t *n_out, int *ran) {
  pthread_mutex_lock(&c->mu);
  opd_torch_plan_t *pl = lookup(c, s);
  if (pl != NULL) {
    pl->used = ++c->tick;
    *n_out = pl->n_out;
    memcpy(outs, pl->out, sizeof outs[0] * pl->n_out);
    *ran = pl->ran;
  }
  pthread_mutex_unlock(&c->mu);
  return pl != NULL;
}

void opd__torch_plan_store(opd_torch_plans_t *c, const opd_torch_sig_t *s,
                           const opd_tensor_t *outs, uint32_t n_out) {
  if (s->over) return;
  pthread_mutex_lock(&c->mu);
  uint32_t slot = c->n;
  if (slot == OPD_TORCH_PLANS) { /* the least recently used goes */
    slot = 0;
    for (uint32_t p = 1; p < OPD_TORCH_PLANS; p++)
      if (c->plan[p].used < c->plan[slot].used) slot = p;
  } else {
    c->n++;
  }
  opd_torch_plan_t *pl = &c->plan[slot];
  memcpy(pl->key, s->b, s->len);
  pl->key_len = s->len;
  pl->n_out = n_out;
  memcpy(pl->out, outs, sizeof outs[0] * n_out);
  pl->used = ++c->tick;
  pl->ran = 0;
  pthread_mutex_unlock(&c->mu);
}

void opd__torch_plan_ran(opd_torch_plans_t *c, const opd_torch_sig_t *s) {
  if (s->over) return;
  pthread_mutex_lock(&c->mu);
  opd_torch_plan_t *pl = lookup(c, s);
  if (pl != NULL) pl->ran = 1;
  pthread_mutex_unlock(&c->mu);
}
