#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/peer_watch.h"
#include "server/openai_schema.h"
#include "server/response_writer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::server {

using nlohmann::json;

namespace {

void Reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void ReplyError(httplib::Response& res, const ApiError& err) {
  if (err.http_status == 429) res.set_header("Retry-After", "1");
  Reply(res, err.http_status, err.ToJson());
}

// The metrics label of a path: one of the routes, or "other" (unknown paths
// must not grow the label set without bound).
std::string RouteLabel(const std::string& path) {
  static const std::set<std::string> kRoutes = {
      "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
      "/v1/cache/stats", "/v1/cache/reset", "/tokenize", "/detokenize", "/apply-template"};
  if (kRoutes.count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  ApiKeys keys;
  httplib::Server svr;
  std::thread listener;
  int bound_port = 0;
  int64_t start_time = 0;

  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  ServingBackend backend;
  ServerMetrics metrics;
  ActiveRequests active;
  std::atomic<bool> listener_done{false};  // listen_after_bind returned

  explicit Impl(const ServerOptions& o) : options(o), keys(o.api_keys) {}

  // Which key a request used; nullopt when auth is on and it has none valid.
  std::optional<size_t> KeyOf(const httplib::Request& req) const {
    if (!keys.enabled()) return size_t{0};
    size_t idx = 0;
    if (!keys.Check(req.get_header_value("Authorization"), &idx)) return std::nullopt;
    return idx;
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
    return env;
  }

  void HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    std::optional<size_t> key = KeyOf(req);
    const std::string salt = key ? keys.SaltFor(*key) : "";
    GenerationEnv env = Env();
    PreparedGeneration prepared;
    if (auto err = PrepareGeneration(env, endpoint, req.body, salt, &prepared))
      return ReplyError(res, *err);
    std::shared_ptr<GenerationRun> run;
    if (auto err = SubmitGeneration(env, std::move(prepared), &run)) return ReplyError(res, *err);
    if (!run->streaming()) {
      std::string body;
      int status = run->CollectAll(&body, [&req] {
        return PeerClosed(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
      });
      Reply(res, status, body);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [run](size_t /*offset*/, httplib::DataSink& sink) {
          // Writes what is ready (waiting up to 50 ms for it); a failed write
          // means the client went away: cancel at once.
          bool more = run->StreamSome(
              [&sink](const std::string& data) { return sink.write(data.data(), data.size()); },
              /*wait_ms=*/50);
          if (!more && !run->cancelled()) sink.done();
          return more || !run->cancelled();
        },
        [run](bool success) {
          if (!success || !run->finished()) run->CancelAll(/*disconnected=*/true);
        });
  }

  void HandleTokenize(const httplib::Request& req, httplib::Response& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    json body;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
    if (!body.is_object()) return ReplyError(res, BadRequest("request body must be a JSON object"));
    auto content = body.find("content");
    if (content == body.end() || !content->is_string())
      return ReplyError(res, InvalidField("content", "'content' must be a string"));
    bool add_special = false, with_pieces = false;
    auto as = body.find("add_special");
    if (as != body.end() && !as->is_null()) {
      if (!as->is_boolean()) return ReplyError(res, InvalidField("add_special", "'add_special' must be a boolean"));
      add_special = as->get<bool>();
    }
    auto wp = body.find("with_pieces");
    if (wp != body.end() && !wp->is_null()) {
      if (!wp->is_boolean()) return ReplyError(res, InvalidField("with_pieces", "'with_pieces' must be a boolean"));
      with_pieces = wp->get<bool>();
    }
    std::vector<int32_t> ids = backend.tokenizer->Encode(content->get<std::string>(), add_special);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (with_pieces)
        tokens.push_back({{"id", id}, {"piece", backend.tokenizer->TokenBytes(id)}});
      else
        tokens.push_back(id);
    }
    Reply(res, 200, DumpJson(json{{"tokens", tokens}}));
  }

  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
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
        return ReplyError(res, InvalidField("tokens[" + std::to_string(i) + "]",
                                            "'tokens[" + std::to_string(i) +
                                                "]' is not a token id (vocab size " +
                                                std::to_string(vocab) + ")"));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    Reply(res, 200, DumpJson(json{{"content", backend.tokenizer->Decode(ids, false)}}));
  }

  void HandleApplyTemplate(const httplib::Request& req, httplib::Response& res) {
    if (auto err = CheckReady()) return ReplyError(res, *err);
    json body;
    if (auto err = ParseJsonBody(req.body, &body)) return ReplyError(res, *err);
    if (!body.is_object()) return ReplyError(res, BadRequest("request body must be a JSON object"));
    GenerationEnv env = Env();
    std::string prompt;
    if (auto err = RenderChatBody(env, body, &prompt)) return ReplyError(res, *err);
    Reply(res, 200, DumpJson(json{{"prompt", prompt}}));
  }

  json ModelCard() const {
    json card = {{"id", options.model_name},
                 {"object", "model"},
                 {"created", start_time},
                 {"owned_by", "kvfork"},
                 {"root", options.model_name},
                 {"parent", nullptr}};
    if (ready.load()) card["max_model_len"] = backend.engine->max_context();
    return card;
  }

  json CacheStats() const {
    EngineStats s = backend.engine->Stats();
    double hit_rate = s.prefix_queries_tokens > 0
                          ? static_cast<double>(s.prefix_hits_tokens) / s.prefix_queries_tokens
                          : 0.0;
    return json{{"blocks_total", s.blocks_total},
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
                {"kv_bytes_peak", s.kv_bytes_peak}};
  }

  void InstallRoutes() {
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) == 0 && keys.enabled() && !KeyOf(req)) {
        ReplyError(res, Unauthorized(req.has_header("Authorization")
                                         ? "invalid API key"
                                         : "missing API key: send 'Authorization: Bearer KEY'"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      HandleGenerate(Endpoint::kChat, req, res);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      HandleGenerate(Endpoint::kCompletion, req, res);
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200, DumpJson(json{{"object", "list"}, {"data", json::array({ModelCard()})}}));
    });
    svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != options.model_name)
        return ReplyError(res, NotFound("model '" + std::string(req.matches[1]) +
                                            "' does not exist; this server serves '" +
                                            options.model_name + "'",
                                        "model_not_found"));
      Reply(res, 200, DumpJson(ModelCard()));
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (auto err = CheckReady()) return ReplyError(res, *err);
      Reply(res, 200, R"({"status":"ok"})");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      EngineStats stats = ready.load() ? backend.engine->Stats() : EngineStats{};
      res.status = 200;
      res.set_content(metrics.Render(stats, options.model_name),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/v1/cache/stats", [this](const httplib::Request& req, httplib::Response& res) {
      if (!ready.load()) return ReplyError(res, Unavailable("model is loading"));
      json stats = CacheStats();
      // ?check=1: the engine runs the KV cache's integrity check between two
      // steps (tests and soak runs ask for it; it waits up to one step).
      const std::string check = req.get_param_value("check");
      if (!check.empty() && check != "0" && check != "false") {
        Status s = backend.engine->CheckKv();
        stats["kv_check"] = s.ok() ? "ok" : s.ToString();
      }
      Reply(res, 200, DumpJson(stats));
    });
    svr.Post("/v1/cache/reset", [this](const httplib::Request&, httplib::Response& res) {
      if (auto err = CheckReady()) return ReplyError(res, *err);
      int64_t before = backend.engine->Stats().blocks_cached;
      backend.engine->ResetPrefixCache();
      Reply(res, 200, DumpJson(json{{"reset", true}, {"blocks_cached_before", before}}));
    });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      HandleTokenize(req, res);
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      HandleDetokenize(req, res);
    });
    svr.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
      HandleApplyTemplate(req, res);
    });
    // Errors httplib produces itself (no route, 413, bad request line) get
    // OpenAI's shape too; handler errors already have a body.
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      ApiError err;
      if (res.status == 404) {
        err = NotFound("no route for " + req.method + " " + req.path, "unknown_url");
      } else if (res.status == 413) {
        err = PayloadTooLarge("request body is larger than the server's limit (--max-body-mib)");
      } else {
        err = ApiError{res.status, HttpReason(res.status),
                       res.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
      }
      err.http_status = res.status;
      res.set_content(err.ToJson(), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          ReplyError(res, Internal("internal error: " + what));
        });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.CountResponse(RouteLabel(req.path), res.status);
    });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_ && impl_->listener.joinable()) {
    impl_->svr.stop();
    impl_->listener.join();
  }
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535)
    return InvalidArgumentError("--port must be in [0, 65535], got " + std::to_string(options.port));
  if (options.max_body_bytes <= 0) return InvalidArgumentError("--max-body-mib must be positive");
  if (options.read_timeout_seconds < 1 || options.write_timeout_seconds < 1)
    return InvalidArgumentError("--http-read-timeout and --http-write-timeout must be >= 1 s");
  auto impl = std::make_unique<Impl>(options);
  impl->start_time = static_cast<int64_t>(std::time(nullptr));
  const size_t threads = static_cast<size_t>(std::max(4, options.http_threads));
  impl->svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->svr.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  impl->svr.set_keep_alive_timeout(2);
  impl->svr.set_read_timeout(options.read_timeout_seconds);
  impl->svr.set_write_timeout(options.write_timeout_seconds);
  impl->svr.set_tcp_nodelay(true);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind the
  // same port and silently take half of the connections. SO_REUSEADDR alone
  // still allows a restart while old connections sit in TIME_WAIT, but a
  // port with a live listener is refused ("in use").
  impl->svr.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->InstallRoutes();
  if (options.port == 0) {
    impl->bound_port = impl->svr.bind_to_any_port(options.host);
    if (impl->bound_port <= 0) return UnavailableError("cannot bind " + options.host + ":0");
  } else {
    if (!impl->svr.bind_to_port(options.host, options.port))
      return UnavailableError("cannot bind " + options.host + ":" + std::to_string(options.port) +
                              " (in use, or not an address of this machine)");
    impl->bound_port = options.port;
  }
  Impl* raw = impl.get();
  impl->listener = std::thread([raw] {
    raw->svr.listen_after_bind();
    raw->listener_done.store(true);
  });
  // httplib's stop() does nothing until the accept loop has started, so a
  // server destroyed right after Start (the model failed to load) would
  // join a listener that never stops. Return only once the loop runs.
  while (!impl->svr.is_running() && !impl->listener_done.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Attach(const ServingBackend& backend) {
  KVFORK_CHECK(backend.engine != nullptr && backend.tokenizer != nullptr);
  impl_->backend = backend;
  impl_->ready.store(true);
}

int HttpServer::port() const { return impl_->bound_port; }

int64_t HttpServer::Drain(double drain_seconds) {
  impl_->draining.store(true);
  const bool finished = impl_->active.WaitIdle(drain_seconds);
  int64_t cancelled = 0;
  if (!finished) {
    cancelled = impl_->active.CancelAll();
    // Cancelled streams end with their finish chunks and [DONE]; give the
    // workers a moment to write them before the sockets close.
    impl_->active.WaitIdle(2.0);
  }
  impl_->svr.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
  return cancelled;
}

}  // namespace kvfork::server
