// Server-side metrics and their Prometheus text exposition (format 0.0.4).
// Names follow vLLM's scheme (vllm:num_requests_running, vllm:prefix_cache_*,
// vllm:time_to_first_token_seconds, ...) so dashboards and routers written for
// vLLM read them; what vLLM lacks is kvfork_*.
//
// Thread safety: every method may be called from any thread (HTTP handlers
// observe latencies while /metrics renders); one mutex guards everything, and
// an Observe costs a lock and a bucket search.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kv/kv_events.h"

namespace kvfork::server {

// Cumulative histogram with fixed upper bounds (le), plus sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // counts()[i] = observations <= upper_bounds()[i] (cumulative), last = +Inf.
  std::vector<int64_t> CumulativeCounts() const;
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> buckets_;  // per bucket, not cumulative; size bounds_ + 1
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// Builds Prometheus text: one "# HELP" and "# TYPE" per family, then samples.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  void Family(const std::string& name, const std::string& type, const std::string& help);
  void Sample(const std::string& name, const Labels& labels, double value);
  void HistogramSamples(const std::string& name, const Labels& labels, const Histogram& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Label values escaped as the format requires (\\, \", \n).
std::string EscapeLabelValue(const std::string& value);

class ServerMetrics {
 public:
  ServerMetrics();

  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveRequestLatency(double seconds);
  // An HTTP response by route ("/v1/chat/completions", "other") and status.
  void CountResponse(const std::string& route, int http_status);
  // A generation choice finished ("stop", "length", "abort", "error").
  void CountFinished(const std::string& reason);
  void CountDisconnect();

  // The whole /metrics body: engine gauges and counters, then the server's.
  // kv_events: the KV-event publisher's counters when --kv-events is on.
  std::string Render(const EngineStats& stats, const std::string& model_name,
                     const std::optional<KvEventCounters>& kv_events = std::nullopt) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  std::map<std::string, int64_t> finished_;
  int64_t disconnects_ = 0;
};

}  // namespace kvfork::server
