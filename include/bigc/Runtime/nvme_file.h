// The nvme space of one rank (bigc-offload-nvme): a scratch file of the arena's size in the
// program's NVMe directory, read and written with O_DIRECT through io_uring (liburing), several
// requests in flight, or with pread/pwrite where io_uring is not available. No MLIR here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace bigc::rt {

class NvmeFile {
public:
  // Creates `bytes` of scratch file in directory `dir` (named after `tag`; removed from the
  // directory at once, so it goes when the process ends, however it ends), preallocated. Throws
  // UserError, before anything is written, when the directory is missing or not writable, its file
  // system refuses O_DIRECT, or lacks the space (naming what it needs and has).
  // `ring` false: pread/pwrite even where io_uring is available.
  NvmeFile(const std::string &dir, int64_t bytes, const std::string &tag, bool ring = true);
  ~NvmeFile();
  NvmeFile(const NvmeFile &) = delete;
  NvmeFile &operator=(const NvmeFile &) = delete;

  // `bytes` at `offset` of the file into `dst` / from `src`. Direct (O_DIRECT, requests of
  // kRequestBytes, up to kQueueDepth in flight) when offset, size and address are aligned to
  // kNvmeAlignment, or offset and address are and `ownsRoundedExtent` says the memory at `dst` /
  // `src` extends to the size rounded up to it (the nvme copies' host buffers, planned so); else
  // through an aligned bounce buffer (checkpoints, weights, initial values). Thread-safe. Throws
  // UserError on an I/O error (naming the file, offset and error).
  void read(int64_t offset, void *dst, int64_t bytes, bool ownsRoundedExtent = false);
  void write(int64_t offset, const void *src, int64_t bytes, bool ownsRoundedExtent = false);

  int64_t size() const { return bytes_; }
  const std::string &path() const { return path_; }
  // "io_uring" or "pread/pwrite".
  const char *engine() const;
  // Bytes moved and seconds spent in read() and write() since construction.
  struct Stats {
    int64_t readBytes = 0, writeBytes = 0;
    double readSeconds = 0, writeSeconds = 0;
  };
  Stats stats() const;

  static constexpr int64_t kRequestBytes = 1 << 20;
  static constexpr int kQueueDepth = 16;

private:
  struct Ring;
  void transfer(bool write, int64_t offset, char *buf, int64_t bytes, bool ownsRoundedExtent);
  void direct(bool write, int64_t offset, char *buf, int64_t bytes);
  int fd_ = -1;
  int64_t bytes_ = 0;
  std::string path_;
  std::unique_ptr<Ring> ring_;
  std::mutex ringMu_;
  mutable std::mutex statsMu_;
  Stats stats_;
};

} // namespace bigc::rt
