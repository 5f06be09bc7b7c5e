#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/logging.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "server/access_log.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/cache_control.h"
#include "server/cache_tree.h"
#include "server/cors.h"
#include "server/generation.h"
#include "server/http_router.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/reasoning_parser.h"
#include "server/response_store.h"
#include "server/response_writer.h"
#include "server/responses_api.h"
#include "server/tool_call_parser.h"
#include "server/webui_assets.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::server {

using nlohmann::json;

namespace {

// What /version reports.
constexpr char kVersion[] = "0.1.0";

void Reply(HttpResponse& res, int status, const std::string& body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = body;
}

void ReplyError(HttpResponse& res, const ApiError& err) {
  if (err.http_status == 429) res.SetHeader("Retry-After", "1");
  Reply(res, err.http_status, err.ToJson());
}

void ReplyAnthropicError(HttpResponse& res, const ApiError& err) {
  if (err.http_status == 429) res.SetHeader("Retry-After", "1");
  Reply(res, err.http_status, AnthropicErrorJson(err));
}

// Anthropic's routes answer errors in Anthropic's shape.
bool IsAnthropicPath(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

ApiError Forbidden(const std::string& message) {
  return ApiError{403, message, "invalid_request_error", "", "insufficient_permissions"};
}

// An optional boolean field of a small JSON body.
std::optional<ApiError> OptionalBool(const json& body, const char* name, bool* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return InvalidField(name, std::string("'") + name + "' must be a boolean");
  *out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  ApiKeys keys;  // api_keys, then admin_api_keys
  CorsPolicy cors;
  Router router;
  std::unique_ptr<HttpTransport> transport;
  int64_t start_time = 0;

  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> next_pin_id{0};  // ids of /v1/cache/pin prefills
  ServingBackend backend;
  ServerMetrics metrics;
  ActiveRequests active;
  ResponseStore responses;                                  // /v1/responses with store
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;  // set by Attach
  bool reasoning_parser = false;                            // set by Attach

  static std::vector<std::string> AllKeys(const ServerOptions& o) {
    std::vector<std::string> all = o.api_keys;
    all.insert(all.end(), o.admin_api_keys.begin(), o.admin_api_keys.end());
    return all;
  }
  explicit Impl(const ServerOptions& o)
      : options(o),
        keys(AllKeys(o)),
        cors(o.cors_origins),
        responses(ResponseStoreLimits{o.responses_store_max_entries,
                                      static_cast<size_t>(o.responses_store_max_mib) << 20}) {}

  // Which key a request used; nullopt when auth is on and it has none valid.
  // The key comes as "Authorization: Bearer KEY" or, as Anthropic's clients
  // send it, "x-api-key: KEY".
  std::optional<size_t> KeyOf(const HttpRequest& req) const {
    if (!keys.enabled()) return size_t{0};
    size_t idx = 0;
    if (req.HasHeader("authorization")) {
      if (!keys.Check(req.Header("authorization"), &idx)) return std::nullopt;
      return idx;
    }
    if (req.HasHeader("x-api-key") && keys.Check("Bearer " + req.Header("x-api-key"), &idx))
      return idx;
    return std::nullopt;
  }

  // POST /v1/responses (responses_api.h). Errors from the chat parser name
  // the Responses field the chat field came from.
  void HandleResponses(const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    nlohmann::ordered_json body;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
    if (!body.is_object()) return ReplyError(res, BadRequest("request body must be a JSON object"));
    const std::string salt = SaltOf(req);
    std::optional<StoredResponse> previous;
    auto prev = body.find("previous_response_id");
    if (prev != body.end() && !prev->is_null()) {
      if (!prev->is_string())
        return ReplyError(
            res, InvalidField("previous_response_id", "'previous_response_id' must be a string"));
      previous = responses.Get(salt, prev->get<std::string>());
      if (!previous) {
        ApiError err = NotFound("previous response '" + prev->get<std::string>().substr(0, 100) +
                                    "' not found (never stored, or dropped from the store's "
                                    "LRU bound)",
                                "previous_response_not_found");
        err.param = "previous_response_id";
        return ReplyError(res, err);
      }
    }
    ResponsesRequest request;
    if (auto err = ResponsesToChatBody(body, previous ? &previous->messages : nullptr, &request))
      return ReplyError(res, *err);
    GenerationEnv env = Env();
    PreparedGeneration prepared;
    const std::string chat_text =
        request.chat_body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    if (auto err = PrepareGeneration(env, Endpoint::kChat, chat_text, salt, &prepared)) {
      static const std::map<std::string, std::string> kNames = {
          {"max_tokens", "max_output_tokens"},
          {"messages", "input"},
          {"reasoning_effort", "reasoning.effort"}};
      auto renamed = kNames.find(err->param);
      if (renamed != kNames.end()) err->param = renamed->second;
      if (err->param.rfind("response_format", 0) == 0)
        err->param = "text.format" + err->param.substr(std::string("response_format").size());
      return ReplyError(res, *err);
    }
    prepared.id_prefix = "resp_";
    ResponseStore* store = &responses;
    prepared.formatter = [request, store, salt](const ResponseMeta& meta) {
      return MakeResponsesFormatter(meta, request, store, salt);
    };
    RunGeneration(env, std::move(prepared), req, res, ReplyError);
  }

  // POST /v1/messages and /v1/messages/count_tokens (anthropic_messages.h).
  void HandleAnthropic(bool count_tokens, const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyAnthropicError(res, *err);
    nlohmann::ordered_json body, chat;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyAnthropicError(res, *err);
    AnthropicCacheControl cache;
    if (auto err = AnthropicToChatBody(body, count_tokens, &chat, &cache))
      return ReplyAnthropicError(res, *err);
    GenerationEnv env = Env();
    const std::string chat_text =
        chat.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    if (count_tokens) {
      std::vector<int32_t> ids;
      if (auto err = TokenizeChatBodyText(env, chat_text, &ids))
        return ReplyAnthropicError(res, *err);
      Reply(res, 200, DumpJson(json{{"input_tokens", static_cast<int64_t>(ids.size())}}));
      return;
    }
    PreparedGeneration prepared;
    if (auto err = PrepareGeneration(env, Endpoint::kChat, chat_text, SaltOf(req), &prepared))
      return ReplyAnthropicError(res, *err);
    const int64_t input_tokens = static_cast<int64_t>(prepared.prompt_tokens[0].size());
    // cache_control: pin the prefix through the last breakpoint.
    const int64_t pin_tokens = AnthropicPinTokens(env, chat, cache, prepared.prompt_tokens[0]);
    if (pin_tokens > 0) {
      prepared.pin_tokens = pin_tokens;
      prepared.pin_ttl_ms = cache.ttl_ms;
    }
    prepared.id_prefix = "msg_";
    prepared.formatter = [input_tokens, pin_tokens](const ResponseMeta& meta) {
      return MakeAnthropicFormatter(meta, input_tokens, pin_tokens);
    };
    RunGeneration(env, std::move(prepared), req, res, ReplyAnthropicError);
  }

  // The cache routes act on every tenant's prefixes: with keys configured,
  // only an admin key may use them.
  std::optional<ApiError> CheckAdmin(const HttpRequest& req) const {
    if (!keys.enabled()) return std::nullopt;
    std::optional<size_t> key = KeyOf(req);
    if (key && *key >= options.api_keys.size()) return std::nullopt;
    return Forbidden("the cache routes need an admin key (--admin-api-key)");
  }

  std::optional<ApiError> CheckReady() const {
    if (draining.load()) return Unavailable("server is shutting down");
    if (!ready.load()) return Unavailable("model is loading");
    return std::nullopt;
  }

  GenerationEnv Env() {
    GenerationEnv env;
    env.engine = backend.engine;
    env.tokenizer = backend.tokenizer;
    env.chat_template = backend.chat_template;
    env.metrics = &metrics;
    env.active = &active;
    env.model_name = options.model_name;
    env.max_prompt_tokens = options.max_prompt_tokens;
    env.log_prompts = options.log_prompts;
    env.special_tokens_in_content = options.special_tokens_in_content;
    env.tool_call_format = tool_call_format;
    env.reasoning_parser = reasoning_parser;
    return env;
  }

  void HandleGenerate(Endpoint endpoint, const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    GenerationEnv env = Env();
    PreparedGeneration prepared;
    if (auto err = PrepareGeneration(env, endpoint, req.body, SaltOf(req), &prepared))
      return ReplyError(res, *err);
    RunGeneration(env, std::move(prepared), req, res, ReplyError);
  }

  std::string SaltOf(const HttpRequest& req) const {
    std::optional<size_t> key = KeyOf(req);
    return key ? keys.SaltFor(*key) : "";
  }

  // Submits a prepared run and answers with its body or its stream; errors
  // go through reply_error (each API has its error shape).
  void RunGeneration(const GenerationEnv& env, PreparedGeneration prepared, const HttpRequest& req,
                     HttpResponse& res,
                     const std::function<void(HttpResponse&, const ApiError&)>& reply_error) {
    std::shared_ptr<GenerationRun> run;
    if (auto err = SubmitGeneration(env, std::move(prepared), &run)) return reply_error(res, *err);
    res.log_fields = [run] {
      const Usage& u = run->usage();
      return TokenFields(u.prompt_tokens, u.cached_tokens, u.completion_tokens);
    };
    if (!run->streaming()) {
      std::string body;
      int status = run->CollectAll(&body, req.client_gone);
      Reply(res, status, body);
      return;
    }
    res.status = 200;
    res.content_type = "text/event-stream";
    res.SetHeader("Cache-Control", "no-cache");
    res.SetHeader("X-Accel-Buffering", "no");
    res.stream = [run](const StreamWrite& write) {
      // Writes what is ready (waiting up to 50 ms for it); a failed write
      // means the client went away and cancels the run at once.
      while (run->StreamSome(write, /*wait_ms=*/50)) {
      }
      if (!run->finished() && !run->cancelled()) run->CancelAll(/*disconnected=*/true);
      return !run->cancelled();
    };
  }

  // llama.cpp: {"content", "add_special"?, "with_pieces"?} -> {"tokens"}.
  // vLLM: {"prompt", "add_special_tokens"?} -> {"count", "max_model_len", "tokens"}.
  void HandleTokenize(const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    json body;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
    if (!body.is_object()) return ReplyError(res, BadRequest("request body must be a JSON object"));
    if (body.contains("messages")) {
      // vLLM's chat form: the ids a chat request with these fields would use.
      std::vector<int32_t> ids;
      if (auto err = TokenizeChatBodyText(Env(), req.body, &ids)) return ReplyError(res, *err);
      Reply(res, 200,
            DumpJson(json{{"count", static_cast<int64_t>(ids.size())},
                          {"max_model_len", backend.engine->max_context()},
                          {"tokens", ids}}));
      return;
    }
    const bool vllm = body.contains("prompt") && !body.contains("content");
    const char* field = vllm ? "prompt" : "content";
    auto text = body.find(field);
    if (text == body.end() || !text->is_string())
      return ReplyError(res, InvalidField(field, std::string("'") + field +
                                                     "' must be a string (llama.cpp's 'content' "
                                                     "or vLLM's 'prompt')"));
    bool add_special = vllm, with_pieces = false;
    if (auto err = OptionalBool(body, vllm ? "add_special_tokens" : "add_special", &add_special))
      return ReplyError(res, *err);
    if (auto err = OptionalBool(body, "with_pieces", &with_pieces)) return ReplyError(res, *err);
    std::vector<int32_t> ids = backend.tokenizer->Encode(text->get<std::string>(), add_special);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (with_pieces && !vllm)
        tokens.push_back({{"id", id}, {"piece", backend.tokenizer->TokenBytes(id)}});
      else
        tokens.push_back(id);
    }
    json out = {{"tokens", tokens}};
    if (vllm) {
      out["count"] = static_cast<int64_t>(ids.size());
      out["max_model_len"] = backend.engine->max_context();
    }
    Reply(res, 200, DumpJson(out));
  }

  void HandleDetokenize(const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    json body;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
    if (!body.is_object()) return ReplyError(res, BadRequest("request body must be a JSON object"));
    auto tokens = body.find("tokens");
    if (tokens == body.end() || !tokens->is_array())
      return ReplyError(res, InvalidField("tokens", "'tokens' must be a list of token ids"));
    std::vector<int32_t> ids;
    const int64_t vocab = backend.tokenizer->vocab_size();
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& t = (*tokens)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
        return ReplyError(
            res, InvalidField("tokens[" + std::to_string(i) + "]",
                              "'tokens[" + std::to_string(i) + "]' is not a token id (vocab size " +
                                  std::to_string(vocab) + ")"));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    Reply(res, 200, DumpJson(json{{"content", backend.tokenizer->Decode(ids, false)}}));
  }

  void HandleApplyTemplate(const HttpRequest& req, HttpResponse& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    // From the body's text, so that a tool's schema keeps the client's key order.
    std::string prompt;
    if (auto err = RenderChatBodyText(Env(), req.body, &prompt)) return ReplyError(res, *err);
    Reply(res, 200, DumpJson(json{{"prompt", prompt}}));
  }

  json ModelCard() const {
    json card = {{"id", options.model_name}, {"object", "model"},          {"created", start_time},
                 {"owned_by", "kvfork"},     {"root", options.model_name}, {"parent", nullptr}};
    if (ready.load()) card["max_model_len"] = backend.engine->max_context();
    return card;
  }

  json CacheStats() const {
    EngineStats s = backend.engine->Stats();
    double hit_rate = s.prefix_queries_tokens > 0
                          ? static_cast<double>(s.prefix_hits_tokens) / s.prefix_queries_tokens
                          : 0.0;
    json out{{"blocks_total", s.blocks_total},
                {"blocks_free", s.blocks_free},
                {"blocks_used", s.blocks_used},
                {"blocks_cached", s.blocks_cached},
                {"block_bytes", s.block_bytes},
                {"prefix_queries_tokens", s.prefix_queries_tokens},
                {"prefix_hits_tokens", s.prefix_hits_tokens},
                {"prefix_hit_rate", hit_rate},
                {"tail_copied_tokens", s.tail_copied_tokens},
                {"evictions", s.evictions},
                {"preemptions", s.preemptions},
                {"requests_running", s.requests_running},
                {"requests_waiting", s.requests_waiting},
                {"requests_finished", s.requests_finished},
                {"prompt_tokens", s.prompt_tokens},
                {"generation_tokens", s.generation_tokens},
                {"kv_bytes_peak", s.kv_bytes_peak},
                {"pinned_blocks", s.kv_pinned_blocks},
                {"pinned_evictions", s.kv_pinned_evictions}};
    if (s.kv_disk_enabled) {
      out["disk"] = json{{"blocks", s.kv_disk.blocks},
                         {"bytes", s.kv_disk.bytes},
                         {"hit_blocks", s.kv_disk_hit_blocks},
                         {"miss_lookups", s.kv_disk_miss_lookups},
                         {"bytes_read", s.kv_disk.bytes_read},
                         {"bytes_written", s.kv_disk.bytes_written},
                         {"blocks_written", s.kv_disk.blocks_written},
                         {"writes_dropped", s.kv_disk.writes_dropped},
                         {"write_errors", s.kv_disk.write_errors},
                         {"corrupt_blocks", s.kv_disk.corrupt_blocks},
                         {"evicted_blocks", s.kv_disk.evicted_blocks},
                         {"scanned_files", s.kv_disk.scanned_files},
                         {"partial_blocks", s.kv_disk.partial_blocks},
                         {"recomputed_blocks", s.kv_disk_recomputed_blocks},
                         {"read_ns", s.kv_disk.read_ns},
                         {"read_open_ns", s.kv_disk.read_open_ns},
                         {"read_io_ns", s.kv_disk.read_io_ns},
                         {"read_check_ns", s.kv_disk.read_check_ns},
                         {"preloaded_blocks", s.kv_disk_preloaded_blocks},
                         {"preloaded_bytes", s.kv_disk_preloaded_bytes},
                         {"preload_planned_blocks", s.kv_disk_preload_planned_blocks},
                         {"preload_running", s.kv_disk_preload_running},
                         {"preload_ms", s.kv_disk_preload_ms}};
    }
    if (!s.kv_sliding.empty()) {
      json groups = json::array();
      for (const KvGroupStats& g : s.kv_sliding)
        groups.push_back({{"window", g.window},
                          {"block_bytes", g.block_bytes},
                          {"blocks_total", g.blocks_total},
                          {"blocks_free", g.blocks_free},
                          {"blocks_used", g.blocks_used},
                          {"blocks_cached", g.blocks_cached},
                          {"peak_used_blocks", g.peak_used_blocks},
                          {"evictions", g.evictions},
                          {"pinned_evictions", g.pinned_evictions}});
      out["sliding_groups"] = std::move(groups);
    }
    return out;
  }

  void InstallRoutes() {
    router.Add("POST", "/v1/chat/completions", [this](const HttpRequest& req, HttpResponse& res) {
      HandleGenerate(Endpoint::kChat, req, res);
    });
    router.Add("POST", "/v1/completions", [this](const HttpRequest& req, HttpResponse& res) {
      HandleGenerate(Endpoint::kCompletion, req, res);
    });
    router.Add("GET", "/v1/models", [this](const HttpRequest&, HttpResponse& res) {
      Reply(res, 200, DumpJson(json{{"object", "list"}, {"data", json::array({ModelCard()})}}));
    });
    router.AddPrefix("GET", "/v1/models/", [this](const HttpRequest& req, HttpResponse& res) {
      const std::string id = req.path.substr(std::string("/v1/models/").size());
      if (id != options.model_name)
        return ReplyError(res, NotFound("model '" + id + "' does not exist; this server serves '" +
                                            options.model_name + "'",
                                        "model_not_found"));
      Reply(res, 200, DumpJson(ModelCard()));
    });
    router.Add("GET", "/health", [this](const HttpRequest&, HttpResponse& res) {
      if (auto err = CheckReady()) return ReplyError(res, *err);
      Reply(res, 200, R"({"status":"ok"})");
    });
    // vLLM's /ping (SageMaker's health route): 200 with an empty body when ready.
    const RouteHandler ping = [this](const HttpRequest&, HttpResponse& res) {
      if (auto err = CheckReady()) return ReplyError(res, *err);
      Reply(res, 200, "");
    };
    router.Add("GET", "/ping", ping);
    router.Add("POST", "/ping", ping);
    router.Add("GET", "/version", [](const HttpRequest&, HttpResponse& res) {
      Reply(res, 200, DumpJson(json{{"version", kVersion}}));
    });
    router.Add("GET", "/metrics", [this](const HttpRequest&, HttpResponse& res) {
      EngineStats stats = ready.load() ? backend.engine->Stats() : EngineStats{};
      res.status = 200;
      res.content_type = "text/plain; version=0.0.4; charset=utf-8";
      std::optional<KvEventCounters> kv_events;
      if (ready.load() && backend.kv_event_counters) kv_events = backend.kv_event_counters();
      res.body = metrics.Render(stats, options.model_name, kv_events);
    });
    router.Add("GET", "/v1/cache/stats", [this](const HttpRequest& req, HttpResponse& res) {
      if (auto err = CheckAdmin(req)) return ReplyError(res, *err);
      if (!ready.load()) return ReplyError(res, Unavailable("model is loading"));
      json stats = CacheStats();
      // ?check=1: the engine runs the KV cache's integrity check between two
      // steps (tests and soak runs ask for it; it waits up to one step).
      const std::string check = req.Param("check");
      if (!check.empty() && check != "0" && check != "false") {
        Status s = backend.engine->CheckKv();
        stats["kv_check"] = s.ok() ? "ok" : s.ToString();
      }
      // ?blocks=1: the stable hashes of every full block in the prefix index
      // (kv/block_hash.h), sorted: the set a KV-event subscriber rebuilds.
      const std::string blocks = req.Param("blocks");
      if (!blocks.empty() && blocks != "0" && blocks != "false") {
        StatusOr<KvBlockHashSets> hashes = backend.engine->KvBlockHashes();
        if (!hashes.ok()) return ReplyError(res, Unavailable(hashes.status().message()));
        EngineStats es = backend.engine->Stats();
        stats["block_size"] = es.block_size;
        stats["block_hashes"] = hashes->cpu;
        // The disk tier's blocks: the DISK medium of the KV events.
        if (es.kv_disk_enabled) stats["disk_block_hashes"] = hashes->disk;
      }
      Reply(res, 200, DumpJson(stats));
    });
    // The prefix tree for the web page's cache view (cache_tree.h): the
    // engine copies at most max_nodes blocks between two steps.
    router.Add("GET", "/v1/cache/tree", [this](const HttpRequest& req, HttpResponse& res) {
      if (auto err = CheckAdmin(req)) return ReplyError(res, *err);
      if (auto err = CheckReady()) return ReplyError(res, *err);
      int64_t max_nodes = 0;
      if (auto err = ParseMaxTreeNodes(req.Param("max_nodes"), &max_nodes))
        return ReplyError(res, *err);
      StatusOr<PrefixTreeSnapshot> tree = backend.engine->SnapshotPrefixTree(max_nodes);
      if (!tree.ok()) return ReplyError(res, FromStatus(tree.status()));
      Reply(res, 200, DumpJson(CacheTreeJson(*tree, max_nodes)));
    });
    // Cache control: prefill a prompt and pin its blocks (cache_control.h).
    router.Add("POST", "/v1/cache/pin", [this](const HttpRequest& req, HttpResponse& res) {
      if (auto err = CheckAdmin(req)) return ReplyError(res, *err);
      if (auto err = CheckReady()) return ReplyError(res, *err);
      nlohmann::ordered_json body;
      if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
      // Whose prefix: the caller's, or the tenant of body.api_key (an admin
      // acts for any tenant; a key's salt is not guessable otherwise).
      std::string salt = SaltOf(req);
      if (body.is_object() && body.contains("api_key")) {
        size_t idx = 0;
        const auto& k = body["api_key"];
        if (!keys.enabled() || !k.is_string() ||
            !keys.Check("Bearer " + k.get<std::string>(), &idx))
          return ReplyError(res, InvalidField("api_key", "'api_key' must be one of the server's "
                                                         "API keys (--api-key, --admin-api-key)"));
        salt = keys.SaltFor(idx);
      }
      json reply;
      const std::string id = "pin-" + std::to_string(next_pin_id.fetch_add(1));
      if (auto err = RunCachePin(Env(), body, salt, id, &reply)) return ReplyError(res, *err);
      Reply(res, 200, DumpJson(reply));
    });
    router.Add("POST", "/v1/cache/reset", [this](const HttpRequest& req, HttpResponse& res) {
      if (auto err = CheckAdmin(req)) return ReplyError(res, *err);
      if (auto err = CheckReady()) return ReplyError(res, *err);
      int64_t before = backend.engine->Stats().blocks_cached;
      backend.engine->ResetPrefixCache();
      Reply(res, 200, DumpJson(json{{"reset", true}, {"blocks_cached_before", before}}));
    });
    router.Add("POST", "/tokenize",
               [this](const HttpRequest& req, HttpResponse& res) { HandleTokenize(req, res); });
    router.Add("POST", "/detokenize",
               [this](const HttpRequest& req, HttpResponse& res) { HandleDetokenize(req, res); });
    router.Add("POST", "/v1/responses",
               [this](const HttpRequest& req, HttpResponse& res) { HandleResponses(req, res); });
    // A stored response (store: true), by id; DELETE drops it.
    router.AddPrefix("GET", "/v1/responses/", [this](const HttpRequest& req, HttpResponse& res) {
      const std::string id = req.path.substr(std::string("/v1/responses/").size());
      std::optional<StoredResponse> stored = responses.Get(SaltOf(req), id);
      if (!stored)
        return ReplyError(
            res, NotFound("response '" + id.substr(0, 100) + "' not found", "response_not_found"));
      Reply(res, 200, DumpJson(stored->response));
    });
    router.AddPrefix("DELETE", "/v1/responses/", [this](const HttpRequest& req, HttpResponse& res) {
      const std::string id = req.path.substr(std::string("/v1/responses/").size());
      if (!responses.Delete(SaltOf(req), id))
        return ReplyError(
            res, NotFound("response '" + id.substr(0, 100) + "' not found", "response_not_found"));
      Reply(res, 200, DumpJson(json{{"id", id}, {"object", "response"}, {"deleted", true}}));
    });
    router.Add("POST", "/v1/messages", [this](const HttpRequest& req, HttpResponse& res) {
      HandleAnthropic(/*count_tokens=*/false, req, res);
    });
    router.Add("POST", "/v1/messages/count_tokens",
               [this](const HttpRequest& req, HttpResponse& res) {
                 HandleAnthropic(/*count_tokens=*/true, req, res);
               });
    router.Add("POST", "/apply-template", [this](const HttpRequest& req, HttpResponse& res) {
      HandleApplyTemplate(req, res);
    });
    if (options.webui) InstallWebUi();
  }

  // GET / and the page's files (webui_assets.h), served without auth: the
  // page holds no data; it asks for the API key and sends it on its calls.
  void InstallWebUi() {
    for (const WebAsset& asset : WebUiAssets()) {
      const RouteHandler serve = [&asset](const HttpRequest&, HttpResponse& res) {
        res.status = 200;
        res.content_type = std::string(asset.content_type);
        res.body = std::string(asset.body);
        res.SetHeader("Cache-Control", "no-cache");
        res.SetHeader("X-Content-Type-Options", "nosniff");
        // Only the page's own files and this server: no inline script, no
        // other origin, no framing.
        res.SetHeader("Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
      };
      router.Add("GET", std::string(asset.path), serve);
      if (asset.path == "/index.html") router.Add("GET", "/", serve);
    }
  }

  // Every request: request id, CORS, auth on /v1/*, then the route.
  void Handle(const HttpRequest& req, HttpResponse& res) {
    res.SetHeader("X-Request-Id", RequestIdFor(req.Header("x-request-id")));
    if (cors.IsPreflight(req)) return cors.AnswerPreflight(req, res);
    cors.Apply(req, res);
    if (req.path.rfind("/v1/", 0) == 0 && keys.enabled() && !KeyOf(req)) {
      ApiError err = Unauthorized(
          req.HasHeader("authorization") || req.HasHeader("x-api-key")
              ? "invalid API key"
              : "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
      return IsAnthropicPath(req.path) ? ReplyAnthropicError(res, err) : ReplyError(res, err);
    }
    const RouteHandler* handler = nullptr;
    std::string allow;
    switch (router.Find(req.method, req.path, &handler, &allow)) {
      case Router::Match::kNoRoute:
        return ReplyError(
            res,
            NotFound("no route for " + req.method + " " + req.path.substr(0, 200), "unknown_url"));
      case Router::Match::kWrongMethod:
        res.SetHeader("Allow", allow);
        return ReplyError(res, ApiError{405,
                                        "method " + req.method + " is not allowed on " + req.path +
                                            "; use " + allow,
                                        "invalid_request_error", "", "method_not_allowed"});
      case Router::Match::kFound:
        break;
    }
    // No exception leaves a handler: it becomes a 500 (keeping X-Request-Id
    // and the CORS headers).
    std::string what;
    try {
      (*handler)(req, res);
      return;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
    auto headers = std::move(res.headers);
    res = HttpResponse{};
    res.headers = std::move(headers);
    ReplyError(res, Internal("internal error: " + what));
  }

  // The metrics label of a path: one of the routes, or "other" (unknown
  // paths must not grow the label set without bound).
  std::string RouteLabel(const std::string& path) const {
    std::string pattern = router.Pattern(path);
    if (pattern.empty()) return "other";
    // "/v1/models/" -> "/v1/models"; the page's "/" stays "/".
    if (pattern.size() > 1 && pattern.back() == '/') pattern.pop_back();
    return pattern;
  }

  void LogResponse(const HttpRequest& req, const HttpResponse& res, double seconds) {
    const std::string route = RouteLabel(req.path);
    metrics.CountResponse(route, res.status);
    AccessRecord r;
    r.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    const std::string* id = res.FindHeader("X-Request-Id");
    r.request_id = id != nullptr ? *id : req.Header("x-request-id");
    r.remote = req.remote_addr + ":" + std::to_string(req.remote_port);
    r.method = req.method;
    r.route = route;
    r.status = res.status;
    r.seconds = seconds;
    if (res.log_fields) r.extra = res.log_fields();
    KVFORK_LOG(kInfo) << AccessLogLine(r);
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_ && impl_->transport) impl_->transport->Stop(0.0);
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535)
    return InvalidArgumentError("--port must be in [0, 65535], got " +
                                std::to_string(options.port));
  if (options.max_body_bytes <= 0) return InvalidArgumentError("--max-body-mib must be positive");
  if (options.read_timeout_seconds < 1 || options.write_timeout_seconds < 1)
    return InvalidArgumentError("--http-read-timeout and --http-write-timeout must be >= 1 s");
  if (options.keep_alive_seconds < 1 || options.keep_alive_seconds > 3600)
    return InvalidArgumentError("--http-keep-alive-timeout must be in [1, 3600] seconds, got " +
                                std::to_string(options.keep_alive_seconds));
  if (options.max_header_bytes < 1024 || options.max_header_fields < 1)
    return InvalidArgumentError("the header limits must allow at least 1 KiB and 1 field");
  auto impl = std::make_unique<Impl>(options);
  impl->start_time = static_cast<int64_t>(std::time(nullptr));
  impl->InstallRoutes();
  TransportOptions t;
  t.host = options.host;
  t.port = options.port;
  t.threads = options.http_threads;
  t.connection.limits.max_body_bytes = options.max_body_bytes;
  t.connection.limits.max_head_bytes = options.max_header_bytes;
  t.connection.limits.max_header_fields = options.max_header_fields;
  t.connection.read_timeout_ms = options.read_timeout_seconds * 1000;
  t.connection.write_timeout_ms = options.write_timeout_seconds * 1000;
  t.connection.keep_alive_timeout_ms = options.keep_alive_seconds * 1000;
  Impl* raw = impl.get();
  KVFORK_ASSIGN_OR_RETURN(
      impl->transport, HttpTransport::Start(
                           t, [raw](HttpRequest& req, HttpResponse& res) { raw->Handle(req, res); },
                           [raw](const HttpRequest& req, const HttpResponse& res, double seconds) {
                             raw->LogResponse(req, res, seconds);
                           }));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Attach(const ServingBackend& backend) {
  KVFORK_CHECK(backend.engine != nullptr && backend.tokenizer != nullptr);
  impl_->backend = backend;
  const std::string& source = backend.tokenizer->chat_template();
  const ServerOptions& o = impl_->options;
  impl_->tool_call_format =
      o.tool_call_parser == "auto"
          ? DetectToolCallFormat(source)
          : ParseToolCallFormat(o.tool_call_parser).value_or(ToolCallFormat::kNone);
  impl_->reasoning_parser = o.reasoning_parser == "think" ||
                            (o.reasoning_parser == "auto" && TemplateUsesReasoning(source));
  KVFORK_LOG(kInfo) << "tool-call parser: " << ToolCallFormatName(impl_->tool_call_format)
                    << ", reasoning parser: " << (impl_->reasoning_parser ? "think" : "none");
  impl_->ready.store(true);
}

int HttpServer::port() const { return impl_->transport->port(); }

int64_t HttpServer::Drain(double drain_seconds) {
  impl_->draining.store(true);
  impl_->transport->StopKeepAlive();
  const bool finished = impl_->active.WaitIdle(drain_seconds);
  int64_t cancelled = 0;
  if (!finished) cancelled = impl_->active.CancelAll();
  // Cancelled streams end with their finish chunks and [DONE]; responses
  // being written get a short grace, then every socket is shut down, so no
  // client (one trickling a request, one that stopped reading) holds the
  // process past the deadline.
  impl_->transport->Stop(kDrainGraceSeconds);
  return cancelled;
}

}  // namespace kvfork::server
