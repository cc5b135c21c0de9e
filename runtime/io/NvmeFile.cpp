// The nvme space of one rank: a preallocated O_DIRECT scratch file, read and written through
// io_uring with several requests in flight (pread/pwrite where io_uring is not available).
#include "bigc/Runtime/nvme_file.h"
#include "bigc/Format/program.h"
#include "bigc/Runtime/format.h"
#include "bigc/Support/format.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef BIGC_HAVE_LIBURING
#include <liburing.h>
#endif

namespace bigc::rt {

namespace {
std::string errnoText(int e) { return std::strerror(e); }
bool aligned(int64_t x) { return x % kNvmeAlignment == 0; }
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
} // namespace

struct NvmeFile::Ring {
#ifdef BIGC_HAVE_LIBURING
  io_uring ring{};
#endif
};

NvmeFile::NvmeFile(const std::string &dir, int64_t bytes, const std::string &tag, bool ring) : bytes_(bytes) {
  const std::string fix = " (name a directory on an NVMe drive's file system with `--nvme-path DIR`)";
  if (dir.empty()) throw UserError("the program keeps tensors in the nvme space, but no directory for it is set" + fix);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw UserError("nvme directory " + dir + ": " + errnoText(errno) + fix);
  if (!S_ISDIR(st.st_mode)) throw UserError("nvme directory " + dir + " is not a directory" + fix);
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    if (vfs.f_flag & ST_RDONLY) throw UserError("nvme directory " + dir + " is on a read-only file system" + fix);
    const int64_t avail = int64_t(vfs.f_bavail) * int64_t(vfs.f_frsize);
    if (avail < bytes)
      throw UserError("nvme directory " + dir + ": the nvme arena needs " + humanBytes(bytes) + " (" +
                      std::to_string(bytes) + " bytes), its file system has " + humanBytes(avail) +
                      " free; free space there, name a larger drive, or compile for fewer parameters per rank");
  }
  path_ = dir + (dir.back() == '/' ? "" : "/") + "bigc-nvme-" + tag + "-" + std::to_string(::getpid()) + ".swap";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int e = errno;
    if (e == EINVAL)
      throw UserError("nvme directory " + dir +
                      ": its file system does not support O_DIRECT (tmpfs before Linux 6.6 and some " +
                      "network file systems do not), which the nvme space needs to bypass the page cache" + fix);
    throw UserError("nvme directory " + dir + ": cannot create " + path_ + ": " + errnoText(e) +
                    (e == EACCES || e == EROFS || e == EPERM ? " (the directory must be writable)" : "") + fix);
  }
  // Gone from the directory at once: the blocks are freed when the process ends, however it ends.
  ::unlink(path_.c_str());
  if (bytes > 0) {
    const int e = ::posix_fallocate(fd_, 0, bytes);
    if (e != 0) {
      ::close(fd_);
      fd_ = -1;
      throw UserError("nvme directory " + dir + ": cannot preallocate the nvme arena of " + humanBytes(bytes) + " (" +
                      std::to_string(bytes) + " bytes): " + errnoText(e) +
                      (e == ENOSPC || e == EFBIG ? "; free space there, name a larger drive, or compile for fewer "
                                                   "parameters per rank"
                                                 : "") +
                      fix);
    }
  }
  if (!ring) return;
#ifdef BIGC_HAVE_LIBURING
  ring_ = std::make_unique<Ring>();
  if (const int r = io_uring_queue_init(kQueueDepth, &ring_->ring, 0); r < 0) {
    ring_.reset();
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "bigc run: io_uring is not available here (%s); the nvme space uses pread/pwrite\n",
                   std::strerror(-r));
    });
  }
#else
  static std::once_flag said;
  std::call_once(
      said, [] { std::fprintf(stderr, "bigc run: this build has no liburing; the nvme space uses pread/pwrite\n"); });
#endif
}

NvmeFile::~NvmeFile() {
#ifdef BIGC_HAVE_LIBURING
  if (ring_) io_uring_queue_exit(&ring_->ring);
#endif
  if (fd_ >= 0) ::close(fd_);
}

const char *NvmeFile::engine() const { return ring_ ? "io_uring" : "pread/pwrite"; }

NvmeFile::Stats NvmeFile::stats() const {
  std::lock_guard<std::mutex> l(statsMu_);
  return stats_;
}

void NvmeFile::read(int64_t offset, void *dst, int64_t bytes, bool ownsRoundedExtent) {
  transfer(false, offset, static_cast<char *>(dst), bytes, ownsRoundedExtent);
}

void NvmeFile::write(int64_t offset, const void *src, int64_t bytes, bool ownsRoundedExtent) {
  transfer(true, offset, static_cast<char *>(const_cast<void *>(src)), bytes, ownsRoundedExtent);
}

void NvmeFile::transfer(bool write, int64_t offset, char *buf, int64_t bytes, bool ownsRoundedExtent) {
  if (bytes <= 0) return;
  if (offset < 0 || offset + bytes > bytes_)
    throw UserError("nvme space: " + std::string(write ? "write" : "read") + " of " + std::to_string(bytes) +
                    " bytes at " + std::to_string(offset) + " is outside its " + std::to_string(bytes_) + " bytes");
  const double t0 = now();
  const int64_t rounded = (bytes + kNvmeAlignment - 1) / kNvmeAlignment * kNvmeAlignment;
  if (aligned(offset) && aligned(int64_t(reinterpret_cast<uintptr_t>(buf))) && offset + rounded <= bytes_ &&
      (rounded == bytes || ownsRoundedExtent)) {
    direct(write, offset, buf, rounded);
  } else {
    // Through an aligned bounce buffer: the aligned blocks around [offset, offset + bytes).
    // (no larger than the transfer and the blocks around it: small tensors take small buffers)
    const int64_t chunk = std::min(kRequestBytes * kQueueDepth, rounded + 2 * kNvmeAlignment);
    char *bounce = static_cast<char *>(std::aligned_alloc(size_t(kNvmeAlignment), size_t(chunk)));
    if (!bounce) throw UserError("nvme space: cannot allocate a bounce buffer of " + humanBytes(chunk));
    try {
      int64_t done = 0;
      while (done < bytes) {
        const int64_t at = offset + done, base = at / kNvmeAlignment * kNvmeAlignment, skip = at - base;
        const int64_t n = std::min(bytes - done, chunk - skip);
        const int64_t span = std::min((skip + n + kNvmeAlignment - 1) / kNvmeAlignment * kNvmeAlignment, bytes_ - base);
        if (write && (skip != 0 || n != span)) direct(false, base, bounce, span); // keep the bytes around it
        if (write) {
          std::memcpy(bounce + skip, buf + done, size_t(n));
          direct(true, base, bounce, span);
        } else {
          direct(false, base, bounce, span);
          std::memcpy(buf + done, bounce + skip, size_t(n));
        }
        done += n;
      }
    } catch (...) {
      std::free(bounce);
      throw;
    }
    std::free(bounce);
  }
  std::lock_guard<std::mutex> l(statsMu_);
  (write ? stats_.writeBytes : stats_.readBytes) += bytes;
  (write ? stats_.writeSeconds : stats_.readSeconds) += now() - t0;
}

void NvmeFile::direct(bool write, int64_t offset, char *buf, int64_t bytes) {
  auto fail = [&](int e, int64_t at) {
    throw UserError("nvme space (" + path_ + ", deleted scratch file): " + (write ? "write" : "read") + " at byte " +
                    std::to_string(at) + " failed: " + errnoText(e));
  };
#ifdef BIGC_HAVE_LIBURING
  if (ring_) {
    std::lock_guard<std::mutex> l(ringMu_);
    io_uring &ring = ring_->ring;
    const int64_t requests = (bytes + kRequestBytes - 1) / kRequestBytes;
    auto span = [&](int64_t k) {
      return std::make_pair(k * kRequestBytes, std::min(kRequestBytes, bytes - k * kRequestBytes));
    };
    int64_t next = 0, completed = 0;
    int inFlight = 0;
    io_uring_cqe *cqe = nullptr;
    auto drain = [&] {
      while (inFlight > 0 && io_uring_wait_cqe(&ring, &cqe) == 0) io_uring_cqe_seen(&ring, cqe), --inFlight;
    };
    while (completed < requests) {
      while (inFlight < kQueueDepth && next < requests) {
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        if (!sqe) break;
        const auto [at, n] = span(next);
        if (write)
          io_uring_prep_write(sqe, fd_, buf + at, unsigned(n), uint64_t(offset + at));
        else
          io_uring_prep_read(sqe, fd_, buf + at, unsigned(n), uint64_t(offset + at));
        io_uring_sqe_set_data64(sqe, uint64_t(next));
        ++next;
        ++inFlight;
      }
      if (const int r = io_uring_submit(&ring); r < 0) {
        drain();
        fail(-r, offset);
      }
      if (const int r = io_uring_wait_cqe(&ring, &cqe); r < 0) {
        drain();
        fail(-r, offset);
      }
      const auto [at, n] = span(int64_t(io_uring_cqe_get_data64(cqe)));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      --inFlight;
      if (res < 0) {
        drain();
        fail(-res, offset + at);
      }
      if (res < n) { // short: the rest synchronously
        for (int64_t k = res; k < n;) {
          const ssize_t m = write ? ::pwrite(fd_, buf + at + k, size_t(n - k), offset + at + k)
                                  : ::pread(fd_, buf + at + k, size_t(n - k), offset + at + k);
          if (m <= 0) {
            const int e = m < 0 ? errno : EIO;
            drain();
            fail(e, offset + at + k);
          }
          k += m;
        }
      }
      ++completed;
    }
    return;
  }
#endif
  for (int64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min<int64_t>(bytes - done, 8 * kRequestBytes));
    const ssize_t m = write ? ::pwrite(fd_, buf + done, n, offset + done) : ::pread(fd_, buf + done, n, offset + done);
    if (m <= 0) fail(m < 0 ? errno : EIO, offset + done);
    done += m;
  }
}

} // namespace bigc::rt
