#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvfork::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::Observe(double value) {
  // Bucket i holds values in (bounds_[i-1], bounds_[i]]; the last is +Inf.
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++buckets_[i];
  sum_ += value;
  ++count_;
}

std::vector<int64_t> Histogram::CumulativeCounts() const {
  std::vector<int64_t> out(buckets_.size());
  int64_t acc = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) out[i] = (acc += buckets_[i]);
  return out;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else {
    // Shortest text that reads back as the same double (0.04, not 0.04000000000000001).
    for (int precision = 6; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  }
  return buf;
}

std::string FormatLabels(const PrometheusWriter::Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    out += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  }
  return out + "}";
}

// Buckets in seconds, the ones vLLM uses for the same histograms.
std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> ItlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
          5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
}
std::vector<double> E2eBuckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

void PrometheusWriter::Family(const std::string& name, const std::string& type,
                              const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
}

void PrometheusWriter::Sample(const std::string& name, const Labels& labels, double value) {
  out_ += name + FormatLabels(labels) + " " + FormatValue(value) + "\n";
}

void PrometheusWriter::HistogramSamples(const std::string& name, const Labels& labels,
                                        const Histogram& h) {
  std::vector<int64_t> cum = h.CumulativeCounts();
  for (size_t i = 0; i < cum.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", i < h.upper_bounds().size() ? FormatValue(h.upper_bounds()[i]) : "+Inf");
    Sample(name + "_bucket", l, static_cast<double>(cum[i]));
  }
  Sample(name + "_sum", labels, h.sum());
  Sample(name + "_count", labels, static_cast<double>(h.count()));
}

ServerMetrics::ServerMetrics() : ttft_(TtftBuckets()), itl_(ItlBuckets()), e2e_(E2eBuckets()) {}

void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(seconds);
}
void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}
void ServerMetrics::ObserveRequestLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.Observe(seconds);
}
void ServerMetrics::CountResponse(const std::string& route, int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[{route, http_status}];
}
void ServerMetrics::CountFinished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
}
void ServerMetrics::CountDisconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++disconnects_;
}

std::string ServerMetrics::Render(const EngineStats& s, const std::string& model_name,
                                  const std::optional<KvEventCounters>& kv_events) const {
  PrometheusWriter w;
  const PrometheusWriter::Labels m = {{"model_name", model_name}};
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    w.Family(name, "gauge", help);
    w.Sample(name, m, v);
  };
  auto counter = [&](const std::string& name, const std::string& help, double v) {
    w.Family(name, "counter", help);
    w.Sample(name, m, v);
  };
  gauge("vllm:num_requests_running", "Requests running on the engine now.",
        static_cast<double>(s.requests_running));
  gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled now.",
        static_cast<double>(s.requests_waiting));
  // vLLM's usage counts blocks held by running requests; cached blocks are
  // reclaimable and so not "used".
  gauge("vllm:kv_cache_usage_perc", "KV cache usage: used blocks / total blocks (0 to 1).",
        s.blocks_total > 0 ? static_cast<double>(s.blocks_used) / s.blocks_total : 0.0);
  // The Gateway API Inference Extension's optional BlockSize and NumGPUBlocks
  // (docs/proposals/003-model-server-protocol): vLLM's info gauge, value 1,
  // the numbers as labels. kvfork's pool is in RAM; "gpu" is the protocol's
  // name for the pool the prefix cache lives in. Absent while loading.
  if (s.blocks_total > 0) {
    w.Family("vllm:cache_config_info", "gauge",
             "Information of the KV cache config (labels; the value is 1).");
    w.Sample("vllm:cache_config_info",
             {{"block_size", std::to_string(s.block_size)},
              {"num_gpu_blocks", std::to_string(s.blocks_total)},
              {"num_cpu_blocks", "0"}},
             1.0);
  }
  counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_queries_tokens));
  counter("vllm:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
          static_cast<double>(s.prefix_hits_tokens));
  counter("vllm:prompt_tokens_total", "Prompt tokens of finished requests.",
          static_cast<double>(s.prompt_tokens));
  counter("vllm:generation_tokens_total", "Generated tokens.",
          static_cast<double>(s.generation_tokens));
  counter("vllm:num_preemptions_total", "Sequences preempted for lack of KV blocks.",
          static_cast<double>(s.preemptions));
  gauge("kvfork_kv_blocks_total", "KV blocks in the pool.", static_cast<double>(s.blocks_total));
  gauge("kvfork_kv_blocks_free", "KV blocks free now.", static_cast<double>(s.blocks_free));
  gauge("kvfork_kv_blocks_used", "KV blocks referenced by running sequences now.",
        static_cast<double>(s.blocks_used));
  gauge("kvfork_kv_blocks_cached", "KV blocks unreferenced but kept in the prefix index now.",
        static_cast<double>(s.blocks_cached));
  gauge("kvfork_kv_block_bytes", "Bytes of one KV block.", static_cast<double>(s.block_bytes));
  gauge("kvfork_kv_bytes_peak", "Most bytes of KV blocks used or cached at once.",
        static_cast<double>(s.kv_bytes_peak));
  counter("kvfork_prefix_tail_copied_tokens_total",
          "Reused prompt tokens copied into a private tail block.",
          static_cast<double>(s.tail_copied_tokens));
  counter("kvfork_prefix_evictions_total", "Blocks evicted from the prefix index.",
          static_cast<double>(s.evictions));
  gauge("kvfork_kv_pinned_blocks",
        "KV blocks pinned by cache control (cache_control, prompt_cache_key, /v1/cache/pin) now.",
        static_cast<double>(s.kv_pinned_blocks));
  counter("kvfork_kv_pinned_evictions_total",
          "Pinned KV blocks evicted before their TTL because nothing unpinned was left.",
          static_cast<double>(s.kv_pinned_evictions));
  counter("kvfork_requests_finished_total", "Requests the engine finished.",
          static_cast<double>(s.requests_finished));
  if (s.kv_disk_enabled) {
    const DiskTierStats& d = s.kv_disk;
    gauge("kvfork_kv_disk_blocks", "KV blocks in the disk tier now.", static_cast<double>(d.blocks));
    gauge("kvfork_kv_disk_bytes", "Bytes of the disk tier's block files now.",
          static_cast<double>(d.bytes));
    counter("kvfork_kv_disk_hits_total",
            "Prompt blocks read back from the disk tier (partial tail blocks too).",
            static_cast<double>(s.kv_disk_hit_blocks));
    counter("kvfork_kv_disk_misses_total",
            "Prompt lookups whose next full block was in neither the pool nor the disk tier.",
            static_cast<double>(s.kv_disk_miss_lookups));
    counter("kvfork_kv_disk_read_bytes_total", "Bytes read from the disk tier.",
            static_cast<double>(d.bytes_read));
    counter("kvfork_kv_disk_written_bytes_total", "Bytes written to the disk tier.",
            static_cast<double>(d.bytes_written));
    counter("kvfork_kv_disk_writes_dropped_total",
            "Evicted blocks not written because the disk tier's queue was full.",
            static_cast<double>(d.writes_dropped));
    counter("kvfork_kv_disk_write_errors_total", "Disk tier writes that failed (full or read-only disk).",
            static_cast<double>(d.write_errors));
    counter("kvfork_kv_disk_corrupt_blocks_total",
            "Disk tier block files that failed a check on read (deleted, recomputed).",
            static_cast<double>(d.corrupt_blocks));
    counter("kvfork_kv_disk_evictions_total", "Block files deleted to stay within --kv-disk-gib.",
            static_cast<double>(d.evicted_blocks));
    counter("kvfork_kv_disk_preloaded_blocks_total",
            "Disk tier blocks read into the pool at start, before any request asked for them.",
            static_cast<double>(s.kv_disk_preloaded_blocks));
    counter("kvfork_kv_disk_preloaded_bytes_total", "Pool bytes the preload at start filled.",
            static_cast<double>(s.kv_disk_preloaded_bytes));
    gauge("kvfork_kv_disk_preload_running", "1 while the preload at start reads, else 0.",
          s.kv_disk_preload_running ? 1.0 : 0.0);
  }
  // A sliding-window model: one series per sliding group's pool, by window.
  if (!s.kv_sliding.empty()) {
    auto per_group = [&](const std::string& name, const char* type, const std::string& help,
                         int64_t KvGroupStats::*field) {
      w.Family(name, type, help);
      for (const KvGroupStats& g : s.kv_sliding) {
        PrometheusWriter::Labels l = m;
        l.emplace_back("window", std::to_string(g.window));
        w.Sample(name, l, static_cast<double>(g.*field));
      }
    };
    per_group("kvfork_kv_sliding_blocks_total", "gauge",
              "KV blocks in a sliding-window layer group's pool.", &KvGroupStats::blocks_total);
    per_group("kvfork_kv_sliding_blocks_free", "gauge",
              "Free KV blocks of a sliding-window layer group now.", &KvGroupStats::blocks_free);
    per_group("kvfork_kv_sliding_blocks_used", "gauge",
              "KV blocks of a sliding-window layer group in running sequences' windows now.",
              &KvGroupStats::blocks_used);
    per_group("kvfork_kv_sliding_blocks_cached", "gauge",
              "KV blocks of a sliding-window layer group kept for prefix reuse now.",
              &KvGroupStats::blocks_cached);
    per_group("kvfork_kv_sliding_block_bytes", "gauge",
              "Bytes of one KV block of a sliding-window layer group.", &KvGroupStats::block_bytes);
    per_group("kvfork_kv_sliding_evictions_total", "counter",
              "Cached KV blocks of a sliding-window layer group evicted.", &KvGroupStats::evictions);
    per_group("kvfork_kv_sliding_pinned_evictions_total", "counter",
              "Blocks of pinned prefixes a sliding-window layer group evicted (all cached were pinned).",
              &KvGroupStats::pinned_evictions);
  }
  if (kv_events) {
    counter("kvfork_kv_events_published_total", "KV events sent on the --kv-events socket.",
            static_cast<double>(kv_events->events_published));
    counter("kvfork_kv_event_batches_published_total", "KV event batches (one per step) sent.",
            static_cast<double>(kv_events->batches_published));
    counter("kvfork_kv_events_dropped_total",
            "KV events dropped because the publisher's queue was full.",
            static_cast<double>(kv_events->events_dropped));
    counter("kvfork_kv_events_replay_requests_total", "Replay requests answered.",
            static_cast<double>(kv_events->replay_requests));
  }

  std::lock_guard<std::mutex> lock(mu_);
  w.Family("vllm:time_to_first_token_seconds", "histogram",
           "Seconds from request arrival to its first generated token.");
  w.HistogramSamples("vllm:time_to_first_token_seconds", m, ttft_);
  w.Family("vllm:inter_token_latency_seconds", "histogram",
           "Seconds between consecutive generated tokens of a choice.");
  w.HistogramSamples("vllm:inter_token_latency_seconds", m, itl_);
  w.Family("vllm:e2e_request_latency_seconds", "histogram",
           "Seconds from request arrival to its last token.");
  w.HistogramSamples("vllm:e2e_request_latency_seconds", m, e2e_);
  w.Family("vllm:request_success_total", "counter", "Choices finished, by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_.find(reason);
    PrometheusWriter::Labels l = m;
    l.emplace_back("finished_reason", reason);
    w.Sample("vllm:request_success_total", l, it == finished_.end() ? 0.0 : it->second);
  }
  w.Family("kvfork_http_responses_total", "counter", "HTTP responses by route and status code.");
  for (const auto& [key, n] : responses_) {
    w.Sample("kvfork_http_responses_total",
             {{"route", key.first}, {"code", std::to_string(key.second)}},
             static_cast<double>(n));
  }
  w.Family("kvfork_client_disconnects_total", "counter",
           "Requests whose client went away before the end (request cancelled).");
  w.Sample("kvfork_client_disconnects_total", {}, static_cast<double>(disconnects_));
  return w.text();
}

}  // namespace kvfork::server
