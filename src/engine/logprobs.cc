#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace kvfork {

double LogSumExp(std::span<const float> row) {
  float max_raw = -std::numeric_limits<float>::infinity();
  for (float v : row) max_raw = std::max(max_raw, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v - max_raw));
  return static_cast<double>(max_raw) + std::log(sum);
}

PromptTokenLogprob LogprobsAt(std::span<const float> row, int32_t token, int64_t k) {
  const double log_z = LogSumExp(row);
  PromptTokenLogprob out;
  out.chosen = {token, static_cast<float>(static_cast<double>(row[token]) - log_z)};
  if (k <= 0) return out;
  std::vector<std::pair<float, int32_t>> top;
  top.reserve(row.size());
  for (size_t i = 0; i < row.size(); ++i) top.emplace_back(row[i], static_cast<int32_t>(i));
  k = std::min<int64_t>(k, static_cast<int64_t>(top.size()));
  std::partial_sort(top.begin(), top.begin() + k, top.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (int64_t i = 0; i < k; ++i)
    out.top.push_back(
        {top[i].second, static_cast<float>(static_cast<double>(top[i].first) - log_z)});
  return out;
}

}  // namespace kvfork
