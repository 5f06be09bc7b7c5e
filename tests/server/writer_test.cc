// Response bodies, SSE chunks, Prometheus text and API-key checks, formatted
// without a server.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/response_writer.h"

namespace kvfork::server {
namespace {

using nlohmann::json;

ResponseMeta Meta(Endpoint e, bool include_usage) {
  ResponseMeta m;
  m.endpoint = e;
  m.id = "chatcmpl-abc";
  m.created = 1700000000;
  m.model = "tiny";
  m.include_usage = include_usage;
  return m;
}

json ParseSse(const std::string& line) {
  EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
  EXPECT_EQ(line.substr(line.size() - 2), "\n\n") << line;
  return json::parse(line.substr(6, line.size() - 8));
}

TEST(WriterTest, ChatStreamChunksAsOpenAI) {
  ResponseMeta m = Meta(Endpoint::kChat, true);
  json role = ParseSse(SseData(ChatRoleChunk(m, 0)));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(role["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());
  json delta = ParseSse(SseData(ChatDeltaChunk(m, 1, "hé", nullptr)));
  EXPECT_EQ(delta["choices"][0]["index"], 1);
  EXPECT_EQ(delta["choices"][0]["delta"]["content"], "hé");
  EXPECT_FALSE(delta["choices"][0]["delta"].contains("role"));
  json fin = ParseSse(SseData(ChatFinishChunk(m, 0, "length")));
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  Usage u{10, 5, 8};
  json usage = ParseSse(SseData(UsageChunk(m, u)));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 15);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
  // Without include_usage no chunk carries a usage key.
  EXPECT_FALSE(ParseSse(SseData(ChatRoleChunk(Meta(Endpoint::kChat, false), 0))).contains("usage"));
}

TEST(WriterTest, InvalidUtf8IsReplacedNotThrown) {
  ResponseMeta m = Meta(Endpoint::kCompletion, false);
  std::string s;
  ASSERT_NO_THROW(s = SseData(CompletionChunk(m, 0, "a\xff", nullptr, "")));
  EXPECT_NE(s.find("\xef\xbf\xbd"), std::string::npos);
}

TEST(WriterTest, NonStreamingBodies) {
  ResponseMeta m = Meta(Endpoint::kChat, false);
  ChoiceResult c;
  c.text = "hello";
  c.finish_reason = "stop";
  c.has_logprobs = true;
  // Built field by field: GCC 12 at -O3 reports a false maybe-uninitialized
  // on the nested braced temporary.
  LogprobEntry entry;
  entry.chosen = TokenLogprobText{"he", -0.5f};
  entry.top.push_back(TokenLogprobText{"he", -0.5f});
  entry.top.push_back(TokenLogprobText{"ha", -1.5f});
  c.logprobs.push_back(entry);
  json chat = ChatResponseJson(m, {c, c}, Usage{3, 4, 0});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({104, 101}));
  EXPECT_EQ(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json comp = CompletionResponseJson(Meta(Endpoint::kCompletion, false), {c}, Usage{3, 4, 2}, 5);
  EXPECT_EQ(comp["object"], "text_completion");
  EXPECT_EQ(comp["choices"][0]["text"], "hello");
  EXPECT_EQ(comp["choices"][0]["logprobs"]["text_offset"][0], 5);
  EXPECT_DOUBLE_EQ(comp["choices"][0]["logprobs"]["top_logprobs"][0]["ha"].get<double>(), -1.5);
}

TEST(MetricsTest, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);
  h.Observe(0.5);
  h.Observe(7.0);
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(h.count(), 4);
  EXPECT_DOUBLE_EQ(h.sum(), 7.65);
}

// A strict reader of the Prometheus text format: every sample belongs to a
// family declared just before with HELP and TYPE, names and labels are well
// formed, histograms have increasing buckets ending in +Inf equal to _count.
void CheckPrometheusText(const std::string& text, std::map<std::string, double>* samples) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*\})? (-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$)");
  std::istringstream in(text);
  std::string line, family, type;
  std::set<std::string> seen;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      ASSERT_TRUE(seen.insert(family).second) << "family declared twice: " << family;
      ASSERT_TRUE(std::getline(in, line));
      ASSERT_EQ(line.rfind("# TYPE " + family + " ", 0), 0u) << line;
      type = line.substr(8 + family.size());
      ASSERT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << type;
      continue;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, kSample)) << "bad sample line: " << line;
    std::string name = m[1];
    if (type == "histogram") {
      ASSERT_TRUE(name == family + "_bucket" || name == family + "_sum" || name == family + "_count")
          << line;
    } else {
      ASSERT_EQ(name, family) << line;
    }
    (*samples)[name + std::string(m[2])] = std::stod(m[7] == "+Inf" ? "inf" : std::string(m[7]));
  }
}

TEST(MetricsTest, RenderIsStrictPrometheusText) {
  ServerMetrics metrics;
  metrics.ObserveTimeToFirstToken(0.02);
  metrics.ObserveTimeToFirstToken(3.0);
  metrics.ObserveInterTokenLatency(0.03);
  metrics.CountResponse("/v1/completions", 200);
  metrics.CountFinished("stop");
  EngineStats s;
  s.blocks_total = 100;
  s.blocks_used = 25;
  s.prefix_hits_tokens = 7;
  std::string text = metrics.Render(s, "my \"model\"");
  std::map<std::string, double> samples;
  CheckPrometheusText(text, &samples);
  const std::string m = "{model_name=\"my \\\"model\\\"\"}";
  EXPECT_DOUBLE_EQ(samples.at("vllm:kv_cache_usage_perc" + m), 0.25);
  EXPECT_DOUBLE_EQ(samples.at("vllm:prefix_cache_hits_total" + m), 7);
  EXPECT_DOUBLE_EQ(samples.at("vllm:time_to_first_token_seconds_count" + m), 2);
  EXPECT_DOUBLE_EQ(
      samples.at("vllm:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"0.04\"}"),
      1);
  EXPECT_DOUBLE_EQ(
      samples.at("vllm:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"+Inf\"}"),
      2);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_http_responses_total{route=\"/v1/completions\",code=\"200\"}"), 1);
  for (const char* name : {"vllm:num_requests_running", "vllm:num_requests_waiting",
                           "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total",
                           "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                           "kvfork_kv_blocks_free", "kvfork_kv_blocks_cached",
                           "kvfork_prefix_tail_copied_tokens_total", "kvfork_prefix_evictions_total"})
    EXPECT_TRUE(samples.count(name + m)) << name;
}

// The GIE model-server protocol's optional BlockSize / NumGPUBlocks (vLLM's
// info gauge) and the KV-event publisher's counters.
TEST(MetricsTest, CacheConfigInfoAndKvEventCounters) {
  ServerMetrics metrics;
  EngineStats s;
  s.blocks_total = 640;
  s.block_size = 16;
  KvEventCounters kv;
  kv.events_published = 12;
  kv.batches_published = 3;
  kv.events_dropped = 2;
  kv.replay_requests = 1;
  std::string text = metrics.Render(s, "m", kv);
  std::map<std::string, double> samples;
  CheckPrometheusText(text, &samples);
  EXPECT_DOUBLE_EQ(
      samples.at("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"640\",num_cpu_blocks=\"0\"}"),
      1);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_events_published_total{model_name=\"m\"}"), 12);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_event_batches_published_total{model_name=\"m\"}"), 3);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_events_dropped_total{model_name=\"m\"}"), 2);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_events_replay_requests_total{model_name=\"m\"}"), 1);
  // While the model loads (no pool yet) and without --kv-events: neither.
  text = metrics.Render(EngineStats{}, "m");
  EXPECT_EQ(text.find("vllm:cache_config_info"), std::string::npos);
  EXPECT_EQ(text.find("kvfork_kv_events"), std::string::npos);
}

// The disk tier's series (issue 25) appear only with --kv-disk-dir.
TEST(MetricsTest, DiskTierCounters) {
  ServerMetrics metrics;
  EngineStats s;
  std::string text = metrics.Render(s, "m");
  EXPECT_EQ(text.find("kvfork_kv_disk"), std::string::npos);
  s.kv_disk_enabled = true;
  s.kv_disk.blocks = 9;
  s.kv_disk.bytes = 9000;
  s.kv_disk.bytes_read = 4000;
  s.kv_disk.bytes_written = 12000;
  s.kv_disk.writes_dropped = 3;
  s.kv_disk.write_errors = 1;
  s.kv_disk.corrupt_blocks = 2;
  s.kv_disk.evicted_blocks = 5;
  s.kv_disk_hit_blocks = 4;
  s.kv_disk_miss_lookups = 6;
  s.kv_disk_preloaded_blocks = 7;
  s.kv_disk_preloaded_bytes = 7000;
  s.kv_disk_preload_running = true;
  text = metrics.Render(s, "m");
  std::map<std::string, double> samples;
  CheckPrometheusText(text, &samples);
  const std::string m = "{model_name=\"m\"}";
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_blocks" + m), 9);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_bytes" + m), 9000);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_hits_total" + m), 4);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_misses_total" + m), 6);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_read_bytes_total" + m), 4000);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_written_bytes_total" + m), 12000);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_writes_dropped_total" + m), 3);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_write_errors_total" + m), 1);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_corrupt_blocks_total" + m), 2);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_evictions_total" + m), 5);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_preloaded_blocks_total" + m), 7);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_preloaded_bytes_total" + m), 7000);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_disk_preload_running" + m), 1);
}

// A sliding-window model's groups (issue 24): one series per group, labelled
// by its window; none for a model without sliding groups.
TEST(MetricsTest, SlidingGroupSeriesByWindow) {
  ServerMetrics metrics;
  EngineStats s;
  EXPECT_EQ(metrics.Render(s, "m").find("kvfork_kv_sliding"), std::string::npos);
  KvGroupStats a;
  a.window = 32;
  a.block_bytes = 4096;
  a.blocks_total = 40;
  a.blocks_free = 30;
  a.blocks_used = 6;
  a.blocks_cached = 4;
  a.evictions = 11;
  a.pinned_evictions = 2;
  KvGroupStats b = a;
  b.window = 1024;
  b.blocks_total = 80;
  b.blocks_free = 79;
  b.blocks_used = 1;
  b.blocks_cached = 0;
  b.evictions = 0;
  s.kv_sliding = {a, b};
  std::map<std::string, double> samples;
  CheckPrometheusText(metrics.Render(s, "m"), &samples);
  const std::string w32 = "{model_name=\"m\",window=\"32\"}";
  const std::string w1024 = "{model_name=\"m\",window=\"1024\"}";
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_total" + w32), 40);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_free" + w32), 30);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_used" + w32), 6);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_cached" + w32), 4);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_block_bytes" + w32), 4096);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_evictions_total" + w32), 11);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_pinned_evictions_total" + w32), 2);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_total" + w1024), 80);
  EXPECT_DOUBLE_EQ(samples.at("kvfork_kv_sliding_blocks_used" + w1024), 1);
}

TEST(AuthTest, ConstantTimeCompareAndSalts) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  ApiKeys keys(SplitKeys("k1,k2"));
  size_t idx = 99;
  EXPECT_TRUE(keys.Check("Bearer k2", &idx));
  EXPECT_EQ(idx, 1u);
  EXPECT_FALSE(keys.Check("Bearer k3", &idx));
  EXPECT_FALSE(keys.Check("k1", &idx));
  EXPECT_FALSE(keys.Check("Bearer ", &idx));
  EXPECT_NE(keys.SaltFor(0), keys.SaltFor(1));
  EXPECT_FALSE(keys.SaltFor(0).empty());
  EXPECT_FALSE(ApiKeys({}).enabled());
}

}  // namespace
}  // namespace kvfork::server
