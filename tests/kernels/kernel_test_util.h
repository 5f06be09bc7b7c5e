// Shared helpers of the kernel tests: random inputs, the ISA sweep, bit compares.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/cpu_features.h"

namespace kvfork::testing {

// Every ISA this CPU can run (scalar always).
inline std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (IsaSupported(isa)) out.push_back(isa);
  return out;
}

// Sets the active ISA for one scope and restores the best one after.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { SetActiveIsaForTesting(isa); }
  ~ScopedIsa() { SetActiveIsaForTesting(BestSupportedIsa()); }
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

inline std::vector<bf16_t> ToBf16(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}

inline bool SameBits(const float* a, const float* b, size_t n, size_t* first_diff = nullptr) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first_diff) *first_diff = i;
      return false;
    }
  }
  return true;
}

}  // namespace kvfork::testing
