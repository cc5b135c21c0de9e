// C entry point to bigc's CPU AdamW for the Python benchmark (ctypes): the same kernel the
// runtime links, timed on the same torch tensors as torch.optim.AdamW and DeepSpeedCPUAdam, and
// checked against torch.optim.AdamW's numbers. Built by bench/cpu_adam/run.sh into a .so.
#include "bigc/Runtime/cpu_adam.h"

#include <omp.h>

#include <cstdio>

extern "C" {

// dtype codes: 0 f32, 1 bf16, 2 f16. half may be null. Returns 0, or 1 after printing the error.
int bigc_cpu_adamw(float *param, const void *grad, int gradType, float *m, float *v, void *half, int halfType,
                   long long n, float lr, float beta1, float beta2, float eps, float weightDecay, float gradScale,
                   long long step) {
  static const bigc::rt::DType types[] = {bigc::rt::DType::F32, bigc::rt::DType::BF16, bigc::rt::DType::F16};
  if (gradType < 0 || gradType > 2 || halfType < 0 || halfType > 2) {
    std::fprintf(stderr, "bigc_cpu_adamw: bad dtype code\n");
    return 1;
  }
  bigc::rt::CpuAdamArgs a;
  a.lr = lr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weightDecay = weightDecay;
  a.gradScale = gradScale;
  a.step = step;
  try {
    bigc::rt::cpuAdamW(param, grad, types[gradType], m, v, half, types[halfType], n, a);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bigc_cpu_adamw: %s\n", e.what());
    return 1;
  }
  return 0;
}

void bigc_set_threads(int t) { omp_set_num_threads(t); }

const char *bigc_cpu_adam_isa() { return bigc::rt::cpuAdamIsa(); }
}
