// Engine: what every backend shares (docs/program-format.md names, roles and streams).
#include "bigc/runtime/engine.h"

#include <algorithm>
#include <set>

namespace bigc::rt {

const Buffer *Engine::findPersistent(const std::string &name) const {
  for (const auto &b : program().buffers)
    if (b.persistent() && b.name == name) return &b;
  return nullptr;
}

std::vector<const Buffer *> Engine::params() const {
  std::vector<const Buffer *> out;
  for (const auto &b : program().buffers)
    if (b.role == "param") out.push_back(&b);
  return out;
}

std::vector<const Buffer *> Engine::weights() const {
  std::set<std::string> masters;
  for (const auto &b : program().buffers)
    if (b.role == "master") masters.insert(b.name);
  std::vector<const Buffer *> out;
  for (const auto &b : program().buffers) {
    if (b.role == "master") {
      out.push_back(&b);
    } else if (b.role == "param") {
      const std::string suffix = ".half";
      bool isCopy = b.name.size() > suffix.size() &&
                    b.name.compare(b.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                    masters.count(b.name.substr(0, b.name.size() - suffix.size()));
      if (!isCopy) out.push_back(&b);
    }
  }
  return out;
}

std::map<std::string, int64_t> Engine::arenaBytes() const {
  std::map<std::string, int64_t> out;
  for (const auto &s : program().spaces) out[s.name] = s.arenaBytes;
  return out;
}

std::vector<std::string> Engine::streams() const {
  std::vector<std::string> names = {"compute"};
  for (const auto &ins : program().instructions)
    if (std::find(names.begin(), names.end(), ins.stream) == names.end()) names.push_back(ins.stream);
  return names;
}

} // namespace bigc::rt
