// XXH64, as specified in xxHash's doc/xxhash_spec.md (little-endian reads).
#include "bigc/Runtime/xxh64.h"

#include <cstring>

namespace bigc::rt {

namespace {
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint32_t read32(const unsigned char *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t round(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
inline uint64_t merge(uint64_t h, uint64_t v) { return (h ^ round(0, v)) * P1 + P4; }
inline void stripes(uint64_t *v, const unsigned char *p, size_t n) { // n a multiple of 32
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  for (size_t i = 0; i < n; i += 32) {
    a = round(a, read64(p + i));
    b = round(b, read64(p + i + 8));
    c = round(c, read64(p + i + 16));
    d = round(d, read64(p + i + 24));
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
}
} // namespace

Xxh64::Xxh64(uint64_t seed) : v_{seed + P1 + P2, seed + P2, seed, seed - P1}, seed_(seed) {}

void Xxh64::update(const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  total_ += n;
  if (used_ + n < 32) {
    std::memcpy(buf_ + used_, p, n);
    used_ += n;
    return;
  }
  if (used_) {
    const size_t fill = 32 - used_;
    std::memcpy(buf_ + used_, p, fill);
    stripes(v_, buf_, 32);
    p += fill, n -= fill, used_ = 0;
  }
  const size_t whole = n / 32 * 32;
  stripes(v_, p, whole);
  std::memcpy(buf_, p + whole, n - whole);
  used_ = n - whole;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (uint64_t v : v_) h = merge(h, v);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const unsigned char *p = buf_;
  size_t n = used_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
  if (n >= 4) h = rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3, p += 4, n -= 4;
  for (; n > 0; ++p, --n) h = rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void *data, size_t n, uint64_t seed) {
  Xxh64 x(seed);
  x.update(data, n);
  return x.digest();
}

} // namespace bigc::rt
