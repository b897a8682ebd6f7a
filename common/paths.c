/* Socket path resolution; see paths.h. */
#include "common/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>
#include <unistd.h>

#include "opd/protocol.h"

int opd__socket_path(const char *given, char *buf, size_t cap) {
  const char *env = getenv("OPD_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;

  if (given != NULL && given[0] != '\0')
    n = snprintf(buf, cap, "%s", given);
  else if (env != NULL && env[0] != '\0')
    n = snprintf(buf, cap, "%s", env);
  else if (geteuid() == 0)
    n = snprintf(buf, cap, "/run/opd/opd.sock");
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(buf, cap, "%s/opd.sock", xdg);
  else
    n = snprintf(buf, cap, "/tmp/opd-%u/opd.sock", (unsigned)geteuid());
  if (n < 0 || (size_t)n >= cap ||
      (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
    return OPD_EINVAL;
  return 0;
}
