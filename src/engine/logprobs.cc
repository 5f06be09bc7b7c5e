#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/sampler.h"

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
  // Floored as the sampler reports them (kMinReportedLogprob): JSON has no -Inf.
  out.chosen = {token, static_cast<float>(std::max(static_cast<double>(row[token]) - log_z,
                                                   kMinReportedLogprob))};
  k = std::min<int64_t>(k, static_cast<int64_t>(row.size()));
  if (k <= 0) return out;
  // The k best by logit descending, token ascending on ties (the sampler's
  // partial_sort order), kept sorted while scanning in token order: a later
  // token with an equal logit never displaces an earlier one. One pass, no
  // copy of the row (a 151,936-entry row would be 1.2 MB of pairs).
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(k + 1);
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (static_cast<int64_t>(best.size()) == k && !(v > best.back().first)) continue;
    auto at =
        std::upper_bound(best.begin(), best.end(), v,
                         [](float x, const std::pair<float, int32_t>& b) { return x > b.first; });
    best.insert(at, {v, static_cast<int32_t>(i)});
    if (static_cast<int64_t>(best.size()) > k) best.pop_back();
  }
  for (const auto& [logit, id] : best)
    out.top.push_back(
        {id, static_cast<float>(std::max(static_cast<double>(logit) - log_z, kMinReportedLogprob))});
  return out;
}

}  // namespace kvfork
