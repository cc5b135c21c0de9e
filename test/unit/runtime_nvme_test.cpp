// The nvme space's file (runtime/io/NvmeFile.cpp): bytes written come back, through io_uring and
// through pread/pwrite, aligned (direct) and unaligned (bounce buffer, read-modify-write of the
// blocks around), and the directory's errors come before anything is written.
#include "bigc/Format/program.h"
#include "bigc/Runtime/format.h"
#include "bigc/Runtime/nvme_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace bigc::rt;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/bigc-nvme-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { ::rmdir(path.c_str()); }
  int entries() const {
    int n = 0;
    if (DIR *d = ::opendir(path.c_str())) {
      while (dirent *e = ::readdir(d)) n += std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..");
      ::closedir(d);
    }
    return n;
  }
};

std::vector<unsigned char> randomBytes(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<unsigned char> v(n);
  for (auto &x : v) x = static_cast<unsigned char>(g());
  return v;
}

struct Aligned {
  unsigned char *p;
  explicit Aligned(size_t n) : p(static_cast<unsigned char *>(std::aligned_alloc(size_t(kNvmeAlignment), n))) {}
  ~Aligned() { std::free(p); }
};

void roundTrip(bool ring) {
  TempDir dir;
  const int64_t size = 24 << 20; // 24 MiB: more requests than the queue holds
  NvmeFile f(dir.path, size, "test", ring);
  EXPECT_EQ(dir.entries(), 0) << "the scratch file stays in the directory";
  if (!ring) EXPECT_STREQ(f.engine(), "pread/pwrite");
  // Freshly preallocated: zeros.
  {
    Aligned z(1 << 20);
    std::memset(z.p, 0xff, 1 << 20);
    f.read(3 << 20, z.p, 1 << 20);
    for (int k = 0; k < (1 << 20); ++k) ASSERT_EQ(z.p[k], 0) << "byte " << k;
  }
  // Aligned (direct), a size not a multiple of the request size.
  const size_t n = (17 << 20) + 3 * 4096;
  Aligned a(n), b(n);
  const auto data = randomBytes(n, 1);
  std::memcpy(a.p, data.data(), n);
  f.write(4096, a.p, int64_t(n));
  f.read(4096, b.p, int64_t(n));
  EXPECT_EQ(std::memcmp(b.p, data.data(), n), 0);
  // Unaligned offset, size and address: the bytes around are kept.
  const auto small = randomBytes(10001, 2);
  f.write(4096 + 777, small.data(), int64_t(small.size()));
  std::vector<unsigned char> back(small.size() + 3);
  f.read(4096 + 776, back.data() + 1, int64_t(small.size() + 2)); // (an odd address too)
  EXPECT_EQ(back[1], data[776]);
  EXPECT_EQ(std::memcmp(back.data() + 2, small.data(), small.size()), 0);
  EXPECT_EQ(back[small.size() + 2], data[777 + small.size()]);
  // An aligned address with a size that is not a multiple of 4096: nothing past the size is
  // written (a caller's buffer ends there), unless the caller says it owns the rounded extent.
  {
    Aligned g(8192);
    std::memset(g.p, 0xab, 8192);
    const int64_t at = 1 << 20; // (of `data`, away from `small`)
    f.read(4096 + at, g.p, 5000);
    EXPECT_EQ(std::memcmp(g.p, data.data() + at, 5000), 0);
    for (int k = 5000; k < 8192; ++k) ASSERT_EQ(g.p[k], 0xab) << "byte " << k << " past the read was written";
    f.read(4096 + at, g.p, 5000, /*ownsRoundedExtent=*/true);
    EXPECT_EQ(std::memcmp(g.p, data.data() + at, 8192), 0) << "the rounded extent is read whole";
  }
  const NvmeFile::Stats st = f.stats();
  EXPECT_GE(st.writeBytes, int64_t(n + small.size()));
  EXPECT_GE(st.readBytes, int64_t(n));
  // Outside the file: an error, not a write past its end.
  EXPECT_THROW(f.write(size - 4096, a.p, 8192), bigc::UserError);
}

} // namespace

TEST(NvmeFile, RoundTripIoUring) { roundTrip(true); }
TEST(NvmeFile, RoundTripPreadPwrite) { roundTrip(false); }

TEST(NvmeFile, DirectoryErrorsComeFirst) {
  auto message = [](const std::string &dir, int64_t bytes) {
    try {
      NvmeFile f(dir, bytes, "test");
    } catch (const bigc::UserError &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("/nonexistent-bigc-dir", 4096).find("No such file or directory"), std::string::npos);
  EXPECT_NE(message("", 4096).find("--nvme-path"), std::string::npos);
  TempDir dir;
  // More than the file system holds: refused before a byte is written, naming both sizes.
  const std::string m = message(dir.path, int64_t(1) << 60);
  EXPECT_NE(m.find("free"), std::string::npos) << m;
  EXPECT_EQ(dir.entries(), 0);
}
