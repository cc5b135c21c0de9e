/* A file system without O_DIRECT, for test/e2e/offload_nvme.sh: preloaded (LD_PRELOAD), open() of a
 * path under $BIGC_TEST_NO_ODIRECT with O_DIRECT fails with EINVAL, as on tmpfs before Linux 6.6
 * and some network file systems; everything else goes to the C library's open. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int refused(const char *path, int flags) {
  const char *dir = getenv("BIGC_TEST_NO_ODIRECT");
  return (flags & O_DIRECT) && dir && *dir && strncmp(path, dir, strlen(dir)) == 0;
}

#define SHIM(name)                                                                                                   \
  int name(const char *path, int flags, ...) {                                                                     \
    mode_t mode = 0;                                                                                                 \
    if (flags & (O_CREAT | O_TMPFILE)) {                                                                             \
      va_list ap;                                                                                                    \
      va_start(ap, flags);                                                                                           \
      mode = (mode_t)va_arg(ap, int);                                                                                \
      va_end(ap);                                                                                                    \
    }                                                                                                                \
    if (refused(path, flags)) {                                                                                      \
      errno = EINVAL;                                                                                                \
      return -1;                                                                                                     \
    }                                                                                                                \
    int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);                \
    return real(path, flags, mode);                                                                                  \
  }

SHIM(open)
SHIM(open64)
