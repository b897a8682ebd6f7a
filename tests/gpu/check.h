/* The GPU machine's plain test programs (no criterion there): CHECK prints
 * one "PASS ..." or "FAIL ..." line per check and counts them; a program
 * ends with printf("%d passed, %d failed\n", passed, failed). */
#ifndef OPD_TESTS_GPU_CHECK_H
#define OPD_TESTS_GPU_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (cond) passed++, printf("PASS ");                  \
    else failed++, printf("FAIL ");                       \
    printf(__VA_ARGS__);                                  \
    printf("\n");                                         \
    fflush(stdout);                                       \
  } while (0)

#endif
