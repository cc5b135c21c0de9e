// A device's kernels: one per op of the registry (include/bigc/Format/ops.h), registered in one
// table per device (the CPU executor's: runtime/executor/Executor.cpp; the CUDA engine's:
// runtime/backends/cuda/CudaOps.cpp). An instruction whose op has no kernel on the device is
// refused when the program is loaded, naming the op and the device. No MLIR here.
#pragma once

#include "bigc/Format/ops.h"
#include "bigc/Format/program.h"
#include "bigc/Support/error.h"

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace bigc::rt {

template <class Fn> class KernelTable {
public:
  KernelTable(const char *device, std::initializer_list<std::pair<format::OpKind, Fn>> entries)
      : device_(device), fns_(format::kOpKinds), has_(format::kOpKinds, 0) {
    for (const auto &[k, f] : entries) {
      const size_t i = size_t(k);
      if (i >= format::kOpKinds || has_[i]) {
        std::fprintf(stderr, "bigc: internal error: the %s device registers a kernel for op %zu twice\n", device, i);
        std::abort();
      }
      fns_[i] = f, has_[i] = 1;
    }
  }
  const char *device() const { return device_; }
  bool has(format::OpKind k) const { return size_t(k) < has_.size() && has_[size_t(k)]; }
  // The kernel of instruction `index`, or a UserError naming the op and the device.
  const Fn &at(format::OpKind k, const format::Instruction &ins, size_t index) const {
    if (!has(k))
      throw UserError("instruction " + std::to_string(index) + " (" + ins.op +
                      (ins.loc.empty() ? "" : " at " + ins.loc) + "): the " + device_ +
                      " device has no kernel for op '" + format::opDef(k).name +
                      "'; run the program on a device that has one (bigc run --backend)");
    return fns_[size_t(k)];
  }
  // The registry's ops this device has no kernel for.
  std::vector<format::OpKind> missing() const {
    std::vector<format::OpKind> out;
    for (size_t i = 0; i < has_.size(); ++i)
      if (!has_[i]) out.push_back(format::OpKind(i));
    return out;
  }

private:
  const char *device_;
  std::vector<Fn> fns_;
  std::vector<char> has_;
};

} // namespace bigc::rt
