// Writing a whole file so that readers see the old contents or the new, never half of it: the bytes
// go to path + ".tmp", are synced, and the temporary file is renamed over path. Header-only; used
// by the program writer, the generator and `bigc inspect --timeline`. No MLIR here.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

#include "bigc/Support/error.h"

namespace bigc {

// Throws UserError("<path>: ...") on any I/O failure, leaving no temporary file behind.
inline void writeFileAtomic(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(path + ": cannot write: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw UserError(path + ": write failed: " + std::strerror(e));
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw UserError(path + ": fsync failed: " + std::strerror(e));
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw UserError(path + ": write failed: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw UserError(path + ": cannot rename " + tmp + " into place: " + std::strerror(e));
  }
}

} // namespace bigc
