// XXH64 (https://github.com/Cyan4973/xxHash, doc/xxhash_spec.md), streaming: the checksum of
// checkpoint files (about 10x faster than FNV-1a's byte loop, so that a checkpoint is checked at
// disk speed). No MLIR here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bigc::rt {

class Xxh64 {
public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void *data, size_t n);
  uint64_t digest() const;

private:
  uint64_t v_[4];
  uint64_t total_ = 0, seed_;
  unsigned char buf_[32];
  size_t used_ = 0;
};

// XXH64 of n bytes.
uint64_t xxh64(const void *data, size_t n, uint64_t seed = 0);

} // namespace bigc::rt
