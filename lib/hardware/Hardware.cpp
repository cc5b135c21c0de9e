// Hardware profiles (hardware/*.json). See include/bigc/support/hardware.h.
//
// A profile is one JSON object:
//   {"name": "v100-16g-x8", "description": "...", "devices": 8,
//    "device_memory_bytes": 17179869184, "host_memory_bytes": "330G",
//    "device_flops": 125e12, "host_flops": 1.5e12, "h2d_bytes_per_s": 12e9,
//    "d2h_bytes_per_s": 12e9, "interconnect_bytes_per_s": 12e9, "sources": ["..."]}
// Byte fields take a number of bytes or a size string with K M G T suffixes (powers of 1024).
// Rates are numbers (per second). `sources`, `notes` and keys starting with `_` are ignored.
#include "bigc/support/hardware.h"

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "bigc/runtime/program.h"
#include "bigc/support/cli.h"

#ifndef BIGC_HARDWARE_DIR
#define BIGC_HARDWARE_DIR "hardware"
#endif

namespace bigc {

using rt::UserError;
using json = nlohmann::json;

namespace {

std::string hardwareDir() {
  const char *env = std::getenv("BIGC_HARDWARE_DIR");
  if (env && *env) return env;
  return BIGC_HARDWARE_DIR;
}

bool isFile(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool endsWith(const std::string &s, const std::string &suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::string stem(const std::string &path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (endsWith(base, ".json")) base.resize(base.size() - 5);
  return base;
}

struct Reader {
  const std::string &file;
  const json &j;

  [[noreturn]] void fail(const std::string &field, const std::string &what) const {
    throw UserError(file + ": field '" + field + "': " + what);
  }

  const json *get(const std::string &field, bool required) const {
    auto it = j.find(field);
    if (it == j.end()) {
      if (required) fail(field, "missing (see hardware/README.md)");
      return nullptr;
    }
    return &*it;
  }

  std::string str(const std::string &field, bool required, const std::string &dflt = "") const {
    const json *v = get(field, required);
    if (!v) return dflt;
    if (!v->is_string()) fail(field, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }

  int64_t integer(const std::string &field, bool required, int64_t dflt) const {
    const json *v = get(field, required);
    if (!v) return dflt;
    if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == double(int64_t(v->get<double>()))))
      fail(field, "expected a positive integer, got " + v->dump());
    int64_t n = v->is_number_integer() ? v->get<int64_t>() : int64_t(v->get<double>());
    if (n <= 0) fail(field, "expected a positive integer, got " + v->dump());
    return n;
  }

  int64_t bytes(const std::string &field, bool required, int64_t dflt) const {
    const json *v = get(field, required);
    if (!v) return dflt;
    double b;
    if (v->is_string()) {
      try {
        b = double(cli::parseSize(v->get<std::string>(), "size"));
      } catch (const UserError &) {
        fail(field, "expected bytes or a size such as \"16G\", got " + v->dump());
      }
    } else if (v->is_number()) {
      b = v->get<double>();
    } else {
      fail(field, "expected bytes or a size such as \"16G\", got " + v->dump());
    }
    if (!(b > 0) || b > 9.0e18) fail(field, "expected a positive size, got " + v->dump());
    return int64_t(b);
  }

  double rate(const std::string &field, bool required, double dflt) const {
    const json *v = get(field, required);
    if (!v) return dflt;
    if (!v->is_number()) fail(field, "expected a positive number (per second), got " + v->dump());
    double r = v->get<double>();
    if (!(r > 0)) fail(field, "expected a positive number (per second), got " + v->dump());
    return r;
  }
};

HardwareProfile parseProfile(const std::string &file, const std::string &text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    throw UserError(file + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw UserError(file + ": expected a JSON object");
  static const std::set<std::string> known = {
      "name", "description", "devices", "device_memory_bytes", "host_memory_bytes",
      "device_flops", "host_flops", "h2d_bytes_per_s", "d2h_bytes_per_s",
      "interconnect_bytes_per_s", "sources", "notes"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string &k = it.key();
    if (!known.count(k) && (k.empty() || k[0] != '_')) {
      std::string best;
      size_t bestD = 4;
      for (const auto &c : known) {
        size_t d = cli::editDistance(k, c);
        if (d < bestD) bestD = d, best = c;
      }
      throw UserError(file + ": field '" + k + "': unknown" +
                      (best.empty() ? std::string() : "; did you mean '" + best + "'?"));
    }
  }
  Reader r{file, j};
  HardwareProfile p;
  p.path = file;
  p.name = r.str("name", false, stem(file));
  if (p.name.empty()) r.fail("name", "must not be empty");
  p.description = r.str("description", false);
  p.devices = r.integer("devices", true, 1);
  p.deviceMemBytes = r.bytes("device_memory_bytes", true, 0);
  p.hostMemBytes = r.bytes("host_memory_bytes", true, 0);
  p.deviceFlops = r.rate("device_flops", true, 0);
  p.hostFlops = r.rate("host_flops", true, 0);
  p.h2dBytesPerS = r.rate("h2d_bytes_per_s", true, 0);
  p.d2hBytesPerS = r.rate("d2h_bytes_per_s", false, p.h2dBytesPerS);
  p.interconnectBytesPerS =
      r.rate("interconnect_bytes_per_s", p.devices > 1, p.h2dBytesPerS);
  return p;
}

std::string knownList() {
  std::string s;
  for (const auto &n : knownHardwareNames()) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? std::string("(none found in ") + hardwareDir() + ")" : s;
}

} // namespace

std::vector<std::string> knownHardwareNames() {
  std::vector<std::string> names;
  std::string dir = hardwareDir();
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (endsWith(n, ".json") && n.size() > 5) names.push_back(n.substr(0, n.size() - 5));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

HardwareProfile loadHardware(const std::string &nameOrFile) {
  if (nameOrFile.empty())
    throw UserError("--hardware: empty name; known profiles: " + knownList());
  std::string file;
  bool looksLikePath = nameOrFile.find('/') != std::string::npos || endsWith(nameOrFile, ".json");
  if (looksLikePath) {
    file = nameOrFile;
    if (!isFile(file))
      throw UserError(file + ": hardware profile not found (a profile name or a .json file; "
                             "known profiles: " + knownList() + ")");
  } else {
    file = hardwareDir() + "/" + nameOrFile + ".json";
    if (!isFile(file))
      throw UserError("unknown hardware profile '" + nameOrFile + "'; known profiles: " +
                      knownList() + " (or give a path to a .json file; profiles are read from " +
                      hardwareDir() + ", set BIGC_HARDWARE_DIR to change)");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(file + ": cannot read the hardware profile");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UserError(file + ": error reading the hardware profile");
  return parseProfile(file, ss.str());
}

} // namespace bigc
