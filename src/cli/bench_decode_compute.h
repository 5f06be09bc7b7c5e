// The compute a decode step does with no DRAM stream under it (issue 22's
// compute bound, for `kvfork bench model`): every weight matrix one step
// reads, at its kernel's rate with W in L2 (HotGemvBytesPerSecond, one core,
// times the run's threads), summed over the matrices' bytes. Against the
// bandwidth limit's reading time it gives the two bounds a decode can be
// measured against:
//   no overlap:      tokens/s <= 1 / (read + compute), where a core streams
//                    and computes one after the other (docs/kernels.md shows
//                    the Sapphire Rapids VM does);
//   perfect overlap: tokens/s <= 1 / max(read, compute).
// Matrices are timed once per (format, columns); of a mixture of experts'
// experts, num_experts_per_tok of each kind count (the limit's bytes).
// Cost: about min_seconds per distinct (format, columns), a handful a model.
#pragma once

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/weights.h"

namespace kvfork::cli {

struct DecodeCompute {
  double seconds_per_token = 0;  // the matrices' compute at their in-L2 rates
  nlohmann::json by_format;      // per format: bytes per token, in-L2 GB/s, seconds
};

DecodeCompute MeasureDecodeCompute(const ModelWeights& w, const ModelConfig& c, int threads,
                                   double min_seconds);

}  // namespace kvfork::cli
