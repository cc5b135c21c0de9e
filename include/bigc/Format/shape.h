// A tensor shape as messages and bigc inspect write it: "[2,64,768]". No MLIR here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigc::format {

inline std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

} // namespace bigc::format
