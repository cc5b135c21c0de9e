// A build without a CUDA toolkit: the CUDA backend is absent, and says so.
#include "bigc/Runtime/engine.h"
#include "bigc/Runtime/ops.h"
#include "bigc/Runtime/rank_group.h"

namespace bigc::rt {

bool cudaBackendCompiled() { return false; }

std::vector<std::string> cudaMissingKernels() {
  std::vector<std::string> all;
  for (const OpDef &d : opDefs()) all.push_back(d.name);
  return all;
}

bool cudaDeviceVisible(std::string *why) {
  if (why) *why = "this build has no CUDA backend (no CUDA toolkit was found when it was built)";
  return false;
}

std::unique_ptr<Engine> makeCudaEngine(Program, uint64_t) {
  throw UserError("this build has no CUDA backend (no CUDA toolkit was found when it was built); rebuild where "
                  "nvcc is on PATH, or run with --backend cpu");
}

std::unique_ptr<RankGroup> makeCudaRankGroup(Program, uint64_t, double, bool) {
  throw UserError("this build has no CUDA backend (no CUDA toolkit was found when it was built); run with --backend "
                  "cpu");
}

} // namespace bigc::rt
