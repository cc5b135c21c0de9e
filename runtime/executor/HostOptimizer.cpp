// The optimizer's instructions on host memory (the dims of every op: the op registry, format/ops/).
#include "bigc/Runtime/op_dims.h"
#include "bigc/Runtime/half.h"
#include "bigc/Runtime/kernels.h"
#include "bigc/Runtime/loss_scale.h"

#include <algorithm>
#include <cmath>

namespace bigc::rt {

bool runOptimizerOpOnHost(OpKind kind, const OpDims &d, const std::vector<void *> &in, const std::vector<void *> &out,
                          const std::vector<DType> &inT, const std::vector<DType> &outT,
                          const std::vector<int64_t> &inN, int64_t updates, float lr) {
  auto scalar = [&](size_t k) { return *static_cast<const float *>(in[k]); };
  switch (kind) {
  case OpKind::AdamW: {
    double inv = 1.0;
    if (d.unscale) inv = 1.0 / double(scalar(size_t(d.iScale)));
    // A chunk of an update: its elements of the gradient (and of a whole half).
    const void *grad = static_cast<const char *>(in[1]) + d.gradOffset * int64_t(dtypeSize(inT[1]));
    void *half = d.writeHalf ? static_cast<char *>(out[3]) + d.halfOffset * int64_t(dtypeSize(outT[3])) : nullptr;
    if (d.skip && scalar(size_t(d.iFound)) != 0.0f) { // overflow: the weights and moments stay as they are,
      if (d.writeHalf) convert(out[0], DType::F32, half, outT[3], d.n); // and half is (again) cast(param)
      return true;
    }
    double c = 1.0;
    if (d.clip && d.maxNorm > 0.0) {
      double norm = double(scalar(size_t(d.iNorm))) * inv;
      c = std::min(1.0, d.maxNorm / (norm + 1e-6));
    }
    CpuAdamArgs a = d.adam;
    a.lr = lr;
    a.gradScale = float(c * inv);
    a.step = updates + 1;
    cpuAdamWStates(static_cast<float *>(out[0]), grad, inT[1], out[1], out[2], outT[1], half,
                   d.writeHalf ? outT[3] : DType::F32, d.n, a);
    return true;
  }
  case OpKind::CheckFinite: {
    bool bad = false;
    for (size_t k = 0; k < in.size() && !bad; ++k) bad = anyNonFinite(in[k], inT[k], inN[k]);
    *static_cast<float *>(out[0]) = bad ? 1.0f : 0.0f;
    return true;
  }
  case OpKind::GlobalNorm: {
    double s = 0.0;
    for (size_t k = 0; k < in.size(); ++k)
      s += inT[k] == DType::F32 ? cpu::sumSquares(static_cast<const float *>(in[k]), inN[k])
                                : sumSquaresAs32(in[k], inT[k], inN[k]);
    *static_cast<float *>(out[0]) = float(std::sqrt(s));
    return true;
  }
  case OpKind::LossScaleUpdate:
    lossScaleUpdate(scalar(0), static_cast<float *>(out[0]), static_cast<float *>(out[1]), d.backoff, d.growth,
                    d.growthInterval);
    return true;
  default: return false;
  }
}

} // namespace bigc::rt
