#include "cli/bench_decode_compute.h"

#include <map>
#include <utility>
#include <vector>

#include "cli/bench_limits.h"

namespace kvfork::cli {

DecodeCompute MeasureDecodeCompute(const ModelWeights& w, const ModelConfig& c, int threads,
                                   double min_seconds) {
  // Each matrix a step reads and how many times (experts: the active share).
  std::vector<std::pair<const MatrixView*, double>> reads;
  auto add = [&](const MatrixView& m, double times) {
    if (m.data != nullptr && m.rows > 0) reads.emplace_back(&m, times);
  };
  for (const LayerWeights& L : w.layers) {
    for (const MatrixView* m : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj,
                                &L.up_proj, &L.down_proj, &L.router})
      add(*m, 1.0);
    // Every expert of a kind has one shape and format: the first stands for
    // the num_experts_per_tok a token reads.
    for (const std::vector<MatrixView>* experts : {&L.expert_gate, &L.expert_up, &L.expert_down})
      if (!experts->empty()) add(experts->front(), static_cast<double>(c.num_experts_per_tok));
  }
  add(w.lm_head, 1.0);

  struct Format {
    double bytes = 0, seconds = 0;
  };
  std::map<std::pair<DType, int64_t>, double> rate;  // (format, columns) -> bytes/s
  std::map<DType, Format> formats;
  DecodeCompute out;
  for (const auto& [m, times] : reads) {
    const auto key = std::make_pair(m->dtype, m->cols);
    auto it = rate.find(key);
    if (it == rate.end())
      it = rate.emplace(key, HotGemvBytesPerSecond(*m, min_seconds) * threads).first;
    const double bytes = static_cast<double>(m->row_bytes()) * static_cast<double>(m->rows) * times;
    Format& f = formats[m->dtype];
    f.bytes += bytes;
    f.seconds += bytes / it->second;
    out.seconds_per_token += bytes / it->second;
  }
  out.by_format = nlohmann::json::array();
  for (const auto& [dtype, f] : formats)
    out.by_format.push_back({{"dtype", DTypeName(dtype)},
                             {"bytes_per_token", f.bytes},
                             {"hot_gbps", f.bytes / f.seconds * 1e-9},
                             {"seconds_per_token", f.seconds}});
  return out;
}

}  // namespace kvfork::cli
