// The dynamic loss-scale update of fp16 training (docs/program-format.md, `loss_scale_update`),
// shared by the backends: on overflow scale *= backoff and good = 0; else good += 1, and after
// growth_interval clean steps scale *= growth and good = 0.
#pragma once

namespace bigc::rt {

inline void lossScaleUpdate(float foundInf, float *scale, float *good, double backoff, double growth,
                            double growthInterval) {
  if (foundInf != 0.0f) {
    *scale = float(double(*scale) * backoff);
    *good = 0.0f;
  } else {
    *good += 1.0f;
    if (double(*good) >= growthInterval) {
      *scale = float(double(*scale) * growth);
      *good = 0.0f;
    }
  }
}

} // namespace bigc::rt
