// Replays files through a fuzz target without libFuzzer (ctest: every corpus seed and every input
// that once crashed a target, in test/fuzz/corpus/<target> and test/fuzz/regressions/<target>).
// A path that does not exist, or a corpus directory without inputs, is an error (exit 1): a replay
// of nothing would pass without testing anything.
#include <cstdint>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void collect(const std::string &path, std::vector<std::string> &out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    out.push_back(path);
    return;
  }
  if (DIR *d = ::opendir(path.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n != "README.md") collect(path + "/" + n, out);
    }
    ::closedir(d);
  }
}

int main(int argc, char **argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (::stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "replay: %s does not exist (the corpus or regressions folder of this target)\n", argv[i]);
      return 1;
    }
    const size_t before = files.size();
    collect(argv[i], files);
    // The first argument is the corpus: it must hold inputs (regressions may be empty).
    if (i == 1 && files.size() == before) {
      std::fprintf(stderr, "replay: the corpus %s holds no inputs\n", argv[i]);
      return 1;
    }
  }
  for (const std::string &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs without a crash\n", files.size());
  return 0;
}
