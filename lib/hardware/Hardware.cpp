// Hardware profiles (hardware/*.json). See include/bigc/Support/hardware.h.
//
// A profile is one JSON object:
//   {"name": "v100-16g-x8", "description": "...", "devices": 8,
//    "device_memory_bytes": 17179869184, "host_memory_bytes": "330G",
//    "device_flops": 125e12, "host_flops": 1.5e12, "h2d_bytes_per_s": 12e9,
//    "d2h_bytes_per_s": 12e9, "interconnect_bytes_per_s": 12e9, "sources": ["..."]}
// Byte fields take a number of bytes or a size string with K M G T suffixes (powers of 1024).
// Rates are numbers (per second). `sources`, `notes` and keys starting with `_` are ignored.
#include "bigc/Support/hardware.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "bigc/Support/cli.h"
#include "bigc/Support/error.h"

#ifndef BIGC_HARDWARE_DIR
#define BIGC_HARDWARE_DIR "hardware"
#endif

namespace bigc {

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
    if (v->is_number_float() && std::fabs(v->get<double>()) > 9.0e18)
      fail(field, "expected a positive integer, got " + v->dump());
    int64_t n = v->is_number_integer() ? v->get<int64_t>() : int64_t(v->get<double>());
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) n = INT64_MAX;
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
    if (!(b > 0)) fail(field, "expected a positive size, got " + v->dump());
    if (b > 9.0e18) fail(field, "absurd value " + v->dump() + ": more than 8 EiB");
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

  // Plausibility: a value outside [lo, hi] is a typo (a missing exponent, bits for bytes, ...).
  void range(const std::string &field, double value, double lo, double hi, const std::string &unit,
             const std::string &why) const {
    if (value < lo || value > hi)
      fail(field, "absurd value " + human(value) + unit + ": expected " + human(lo) + unit + " to " + human(hi) + unit +
                      " (" + why + ")");
  }

  static std::string human(double v) {
    char buf[64];
    if (v >= 1e3 || (v > 0 && v < 1e-2))
      std::snprintf(buf, sizeof buf, "%.3g", v);
    else
      std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
};

std::string bytesStr(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024.0 && u < 6) b /= 1024.0, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.4g %s" : "%.0f %s", b, units[u]);
  return buf;
}

// Bounds of the plausibility checks. Generous: the largest parts of 2025 are well inside them,
// an error of a factor of 1000 (a missing exponent) or 8 (bits for bytes, in a few cases) is not.
constexpr int64_t kMaxDevices = 1024;
constexpr double kMaxDeviceMem = 10.0 * 1099511627776.0; // 10 TiB per device (H200: 141 GB)
constexpr double kMinDeviceMem = 64.0 * 1048576.0;       // 64 MiB
constexpr double kMaxHostMem = 1024.0 * 1099511627776.0; // 1 PiB per machine
constexpr double kMaxDeviceFlops = 1e17;                 // 100 PFLOP/s (H100: 0.99 PFLOP/s dense)
constexpr double kMinFlops = 1e6;                        // 1 MFLOP/s
constexpr double kMaxHostFlops = 1e16;                   // 10 PFLOP/s
constexpr double kMaxBandwidth = 1e13;                   // 10 TB/s (NVLink 5: 0.9 TB/s each way)
constexpr double kMinBandwidth = 1e6;                    // 1 MB/s

HardwareProfile parseProfile(const std::string &file, const std::string &text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    throw UserError(file + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw UserError(file + ": expected a JSON object");
  static const std::set<std::string> known = {"name",
                                              "description",
                                              "devices",
                                              "device_memory_bytes",
                                              "host_memory_bytes",
                                              "device_flops",
                                              "host_flops",
                                              "h2d_bytes_per_s",
                                              "d2h_bytes_per_s",
                                              "interconnect_bytes_per_s",
                                              "device_bytes_per_s",
                                              "nvme_bytes",
                                              "nvme_read_bytes_per_s",
                                              "nvme_write_bytes_per_s",
                                              "collective_latency_s",
                                              "op_overhead_s",
                                              "threads",
                                              "op_flops",
                                              "device_reserve",
                                              "host_reserve_bytes",
                                              "sources",
                                              "notes"};
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
  if (p.devices > kMaxDevices)
    r.fail("devices", "absurd value " + std::to_string(p.devices) + ": expected 1 to " + std::to_string(kMaxDevices) +
                          " devices per machine");
  p.deviceMemBytes = r.bytes("device_memory_bytes", true, 0);
  p.hostMemBytes = r.bytes("host_memory_bytes", true, 0);
  p.deviceFlops = r.rate("device_flops", true, 0);
  p.hostFlops = r.rate("host_flops", true, 0);
  p.h2dBytesPerS = r.rate("h2d_bytes_per_s", true, 0);
  p.d2hBytesPerS = r.rate("d2h_bytes_per_s", false, p.h2dBytesPerS);
  p.interconnectBytesPerS = r.rate("interconnect_bytes_per_s", p.devices > 1, p.h2dBytesPerS);
  p.deviceBytesPerS = r.rate("device_bytes_per_s", false, 0);
  p.nvmeBytes = r.bytes("nvme_bytes", false, 0);
  p.nvmeReadBytesPerS = r.rate("nvme_read_bytes_per_s", p.nvmeBytes > 0, 0);
  p.nvmeWriteBytesPerS = r.rate("nvme_write_bytes_per_s", false, p.nvmeReadBytesPerS);
  if (p.nvmeBytes > 0) {
    r.range("nvme_bytes", double(p.nvmeBytes), double(int64_t(1) << 30), 1e16, " bytes",
            "the NVMe drives' capacity together, e.g. \"3.2T\"");
    r.range("nvme_read_bytes_per_s", p.nvmeReadBytesPerS, kMinBandwidth, 1e12, " B/s",
            "the drives' sequential read bandwidth together, e.g. 6.8e9");
    r.range("nvme_write_bytes_per_s", p.nvmeWriteBytesPerS, kMinBandwidth, 1e12, " B/s",
            "the drives' sequential write bandwidth together, e.g. 4e9");
  } else if (r.get("nvme_read_bytes_per_s", false) || r.get("nvme_write_bytes_per_s", false)) {
    r.fail("nvme_bytes", "missing: the NVMe bandwidths are given, but not the drives' capacity");
  }
  // Measured profiles (bigc calibrate): per-collective latency, per-instruction overhead.
  for (auto [field, dst] : {std::pair<const char *, double *>{"collective_latency_s", &p.collectiveLatencyS},
                            {"op_overhead_s", &p.opOverheadS}}) {
    const json *v = r.get(field, false);
    if (!v) continue;
    if (!v->is_number() || !(v->get<double>() >= 0)) r.fail(field, "expected seconds >= 0, got " + v->dump());
    *dst = v->get<double>();
    r.range(field, *dst, 0.0, 1.0, " s", "seconds, e.g. 2e-6");
  }
  if (const json *v = r.get("op_flops", false)) {
    if (!v->is_object())
      r.fail("op_flops", "expected an object of FLOP/s by op, e.g. {\"attention\": 2e9}, got " + v->dump());
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string field = "op_flops." + it.key();
      if (!it->is_number() || !(it->get<double>() > 0))
        r.fail(field, "expected a positive number (FLOP/s), got " + it->dump());
      r.range(field, it->get<double>(), kMinFlops, kMaxDeviceFlops, " FLOP/s", "the op's sustained FLOP/s, e.g. 2e9");
      p.opFlops.push_back({it.key(), it->get<double>()});
    }
  }
  if (const json *v = r.get("threads", false)) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1)
      r.fail("threads", "expected a positive integer, got " + v->dump());
    p.threads = v->get<int64_t>();
  }

  // Absurd values: each names the field, the value and the accepted range.
  r.range("device_memory_bytes", double(p.deviceMemBytes), kMinDeviceMem, kMaxDeviceMem, " bytes",
          "64 MiB to 10 TiB per device; sizes take K M G T suffixes, e.g. \"16G\"");
  r.range("host_memory_bytes", double(p.hostMemBytes), 1.0, kMaxHostMem, " bytes", "at most 1 PiB per machine");
  // Host memory far below the devices' memory is a unit mistake (MB for GB, a value per device
  // for the machine read the other way): a real machine has at least a few percent of it.
  double minHost = double(p.deviceMemBytes) * double(p.devices) / 100.0;
  if (double(p.hostMemBytes) < minHost)
    r.fail("host_memory_bytes", "absurd value " + bytesStr(double(p.hostMemBytes)) +
                                    ": less than 1/100 of the devices' memory (" + std::to_string(p.devices) + " x " +
                                    bytesStr(double(p.deviceMemBytes)) +
                                    "); host_memory_bytes is the RAM of the whole machine, e.g. \"330G\"");
  r.range("device_flops", p.deviceFlops, kMinFlops, kMaxDeviceFlops, " FLOP/s",
          "peak dense FLOP/s of one device, e.g. 125e12");
  r.range("host_flops", p.hostFlops, kMinFlops, kMaxHostFlops, " FLOP/s", "sustained FLOP/s of the host, e.g. 1.5e12");
  r.range("h2d_bytes_per_s", p.h2dBytesPerS, kMinBandwidth, kMaxBandwidth, " B/s", "e.g. 12e9 for PCIe 3.0 x16");
  r.range("d2h_bytes_per_s", p.d2hBytesPerS, kMinBandwidth, kMaxBandwidth, " B/s", "e.g. 12e9 for PCIe 3.0 x16");
  r.range("interconnect_bytes_per_s", p.interconnectBytesPerS, kMinBandwidth, kMaxBandwidth, " B/s",
          "one direction per device, e.g. 300e9 for NVLink 3");
  if (p.deviceBytesPerS != 0)
    r.range("device_bytes_per_s", p.deviceBytesPerS, kMinBandwidth, 1e14, " B/s",
            "the device memory's bandwidth, e.g. 900e9 for a V100's HBM2");

  // Reserves: what the plan may not use.
  if (const json *res = r.get("device_reserve", false)) {
    if (!res->is_object())
      r.fail("device_reserve", "expected an object of sizes by part, e.g. {\"cuda_context\": \"512M\", "
                               "\"workspace\": \"256M\"}, got " +
                                   res->dump());
    for (auto it = res->begin(); it != res->end(); ++it) {
      const std::string field = "device_reserve." + it.key();
      double b = -1;
      if (it->is_string()) {
        try {
          b = double(cli::parseSize(it->get<std::string>(), "size"));
        } catch (const UserError &) {
          r.fail(field, "expected bytes or a size such as \"512M\", got " + it->dump());
        }
      } else if (it->is_number()) {
        b = it->get<double>();
      }
      if (!(b >= 0)) r.fail(field, "expected bytes >= 0 or a size such as \"512M\", got " + it->dump());
      p.deviceReserveParts.push_back({it.key(), int64_t(b)});
    }
  } else {
    p.deviceReserveParts = defaultDeviceReserve(p.devices);
  }
  for (const auto &[part, b] : p.deviceReserveParts) p.deviceReserveBytes += b;
  if (p.deviceReserveBytes * 2 > p.deviceMemBytes)
    r.fail("device_reserve", "absurd value " + bytesStr(double(p.deviceReserveBytes)) +
                                 ": more than half of device_memory_bytes (" + bytesStr(double(p.deviceMemBytes)) +
                                 "); it is what one device keeps outside the plan, e.g. 1.5 GiB");
  if (r.get("host_reserve_bytes", false)) {
    const json &v = j["host_reserve_bytes"];
    if (v.is_number() && v.get<double>() == 0)
      p.hostReserveBytes = 0;
    else
      p.hostReserveBytes = r.bytes("host_reserve_bytes", false, 0);
  } else {
    p.hostReserveBytes = defaultHostReserve(p.hostMemBytes);
  }
  if (p.hostReserveBytes * 2 > p.hostMemBytes)
    r.fail("host_reserve_bytes", "absurd value " + bytesStr(double(p.hostReserveBytes)) +
                                     ": more than half of host_memory_bytes (" + bytesStr(double(p.hostMemBytes)) +
                                     ")");
  return p;
}

std::string knownList() {
  std::string s;
  for (const auto &n : knownHardwareNames()) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? std::string("(none found in ") + hardwareDir() + ")" : s;
}

} // namespace

std::vector<std::pair<std::string, int64_t>> defaultDeviceReserve(int64_t devices) {
  std::vector<std::pair<std::string, int64_t>> parts = {{"cuda_context", int64_t(512) << 20},
                                                        {"workspace", int64_t(256) << 20}};
  if (devices > 1) parts.push_back({"nccl", int64_t(704) << 20});
  return parts;
}

int64_t defaultHostReserve(int64_t hostMemBytes) { return std::min<int64_t>(int64_t(4) << 30, hostMemBytes / 8); }

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
  if (nameOrFile.empty()) throw UserError("--hardware: empty name; known profiles: " + knownList());
  std::string file;
  bool looksLikePath = nameOrFile.find('/') != std::string::npos || endsWith(nameOrFile, ".json");
  if (looksLikePath) {
    file = nameOrFile;
    if (!isFile(file))
      throw UserError(file +
                      ": hardware profile not found (a profile name or a .json file; "
                      "known profiles: " +
                      knownList() + ")");
  } else {
    file = hardwareDir() + "/" + nameOrFile + ".json";
    if (!isFile(file))
      throw UserError("unknown hardware profile '" + nameOrFile + "'; known profiles: " + knownList() +
                      " (or give a path to a .json file; profiles are read from " + hardwareDir() +
                      ", set BIGC_HARDWARE_DIR to change)");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(file + ": cannot read the hardware profile");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UserError(file + ": error reading the hardware profile");
  return parseProfile(file, ss.str());
}

} // namespace bigc
