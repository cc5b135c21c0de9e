// Numbers for people: byte counts in powers of 1024 with two decimals ("4.09 MiB", "512 B") and
// integers with thousands separators ("120,576"), durations with their unit. Header-only; no MLIR.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace bigc {

inline std::string humanBytes(int64_t bytes) {
  const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool neg = bytes < 0;
  double v = double(neg ? -bytes : bytes);
  if (v < 1024) return (neg ? "-" : "") + std::to_string(neg ? -bytes : bytes) + " B";
  int u = -1;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%.2f %s", neg ? "-" : "", v, units[u]);
  return buf;
}

// `s` as an MLIR string literal: quoted, with backslashes and quotes escaped (and control
// characters as MLIR's two-digit hex escapes).
inline std::string mlirString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      const char *hex = "0123456789ABCDEF";
      out += '\\';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

inline std::string withCommas(int64_t n) {
  const bool neg = n < 0;
  std::string s = std::to_string(neg ? -n : n), out;
  int k = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it, ++k) {
    if (k && k % 3 == 0) out.push_back(',');
    out.push_back(*it);
  }
  if (neg) out.push_back('-');
  return std::string(out.rbegin(), out.rend());
}

// A duration with the unit that shows it with three significant digits: "2.51 s", "143 ms",
// "61.2 us", "850 ns" (never "0.0 ms" for a step that takes microseconds).
inline std::string durationStr(double seconds) {
  const double a = seconds < 0 ? -seconds : seconds;
  const char *unit = "s";
  double v = seconds;
  if (a == 0) return "0 s";
  if (a < 1e-6)
    v = seconds * 1e9, unit = "ns";
  else if (a < 1e-3)
    v = seconds * 1e6, unit = "us";
  else if (a < 1)
    v = seconds * 1e3, unit = "ms";
  char buf[48];
  const double av = v < 0 ? -v : v;
  std::snprintf(buf, sizeof buf, av >= 100 ? "%.0f %s" : av >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

} // namespace bigc
