/* Helpers for the operator tests: build a call the way the daemon would
 * (defaults filled, shape rule run, outputs allocated), run a kernel
 * serially or on a pool, compare the fast kernel with the reference.
 *
 * DESIGN
 * Criterion runs each test in its own process, so the helpers keep their
 * allocations and pools in file-static state and never need freeing
 * between tests; ot_free is there for tests that build many calls.
 */
#ifndef OPD_TESTS_OPTEST_H
#define OPD_TESTS_OPTEST_H

#include <criterion/criterion.h>
#include <stdint.h>

#include "kernels/kernel.h"
#include "kernels/runtime/exec.h"
#include "kernels/runtime/opcheck.h"
#include "kernels/runtime/registry.h"

#define OT_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* A call of op `name` with serial exec, no tensors, attrs at defaults. */
opd_kcall_t *ot_new(const char *name);
void ot_free(opd_kcall_t *c);

/* Sets input i (n_in grows to i+1), C-contiguous; data not copied. */
void ot_in(opd_kcall_t *c, int i, int32_t dtype, int rank,
           const int64_t *shape, void *data);
/* Sets input i to fresh float32 values uniform in [lo, hi) from `seed`;
 * returns the data. */
float *ot_in_rand(opd_kcall_t *c, int i, int rank, const int64_t *shape,
                  uint64_t seed, float lo, float hi);
/* Sets input i to a view of float32 `data` (copied). */
float *ot_in_vals(opd_kcall_t *c, int i, int rank, const int64_t *shape,
                  const float *data);

void ot_set_int(opd_kcall_t *c, const char *attr, int64_t v);
void ot_set_float(opd_kcall_t *c, const char *attr, double v);
void ot_set_str(opd_kcall_t *c, const char *attr, const char *v);
void ot_set_ints(opd_kcall_t *c, const char *attr, int n, const int64_t *v);

/* Runs the shape rule (inputs' data hidden, as the daemon does); on
 * success allocates every output, filled with NaN bytes (0xff). Returns
 * the rule's code. */
int ot_shape(opd_kcall_t *c);
/* ot_shape and asserts it returned 0. */
void ot_ready(opd_kcall_t *c);
/* Asserts the rule fails with `code` and its message contains each of the
 * NULL-terminated words. */
void ot_expect_err(opd_kcall_t *c, int code, ...);

/* A pool of n threads, created once per test process. */
const opd_exec_t *ot_pool(int n);

/* Runs cpu_ref (fast=0) or cpu_fast (or cpu_ref where there is none)
 * with exec ex; returns its code. */
int ot_run(opd_kcall_t *c, int fast, const opd_exec_t *ex);

/* Runs cpu_ref serially, then cpu_fast serially and on pools of 2 and 4
 * threads (outputs re-poisoned each time), and asserts every output is
 * within atol + rtol*|ref| of the reference (int64 outputs: equal; NaN
 * matches NaN). Leaves the reference result in the outputs. */
void ot_check_fast(opd_kcall_t *c, double atol, double rtol);

/* Asserts got[i] is within atol + rtol*|want[i]| (NaN matches NaN). */
void ot_assert_close(const float *got, const float *want, int64_t n,
                     double atol, double rtol, const char *what);

float *ot_out(opd_kcall_t *c, int i);

#endif /* OPD_TESTS_OPTEST_H */
