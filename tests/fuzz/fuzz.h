/* What the fuzz targets share: a check that names the target, the line
 * and the condition, then aborts (libFuzzer keeps the input). */
#ifndef OPD_FUZZ_H
#define OPD_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#ifndef FUZZ_ERR
#define FUZZ_ERR stderr /* where a failed check is told */
#endif

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(FUZZ_ERR, "%s: %s:%d: check failed: %s: ", FUZZ_TARGET,    \
              __FILE__, __LINE__, #cond);                                \
      fprintf(FUZZ_ERR, __VA_ARGS__);                                    \
      fprintf(FUZZ_ERR, "\n");                                           \
      abort();                                                           \
    }                                                                    \
  } while (0)

#endif /* OPD_FUZZ_H */
