/* Helpers the service tests share (test_service.c, test_metrics.c): a
 * scratch folder, files written and read back, the daemon binary, opctl
 * against the test's daemon, `opd --check-config`.
 */
#ifndef OPD_TEST_SERVICE_UTIL_H
#define OPD_TEST_SERVICE_UTIL_H

#include <stddef.h>
#include <sys/types.h>

extern char out[65536]; /* the output of the last command run */
extern char dir[64];    /* the scratch folder of scratch() */

void sleep_ms(int ms);
double now_s(void);
const char *opd_bin(void);
/* In a forked child that becomes a daemon: it goes when the test's process
 * does (a failed assertion included), so that no daemon outlives its test
 * and holds the test runner's output open. */
void die_with_parent(pid_t parent);
void scratch(void);    /* a scratch directory for files of one test, in dir */
void scratch_rm(void);
void write_file(const char *path, const char *text);
int slurp(const char *path, char *buf, size_t cap); /* bytes read, or -1 */
/* Waits until `path` contains `needle` (up to ms); returns 1 if it does. */
int wait_for(const char *path, const char *needle, int ms);
/* opd --config FILE --check-config [extra]; output into out */
int check_config(const char *file, const char *extra1, const char *extra2);
/* opctl --socket <the test's daemon> CMD [ARG]; output into out */
int opctl(const char *cmd, const char *arg);

#endif
