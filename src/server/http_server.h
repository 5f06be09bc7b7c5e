// The OpenAI-compatible HTTP server: routes, auth, limits, SSE streaming,
// cancellation on disconnect, draining. It talks to the engine only through
// Engine::Submit/Cancel/Stats/ResetPrefixCache and RequestStream, and to the
// tokenizer and chat template for prompts.
//
// Routes: POST /v1/chat/completions, /v1/completions; GET /v1/models[/{id}];
// GET /health (503 while loading); GET|POST /ping (vLLM); GET /version;
// GET /metrics (Prometheus text); GET /v1/cache/stats (?check=1 adds the KV
// integrity check); POST /v1/cache/reset (both admin-only with API keys);
// POST /tokenize (llama.cpp's and vLLM's bodies), /detokenize,
// /apply-template; POST /v1/messages, /v1/messages/count_tokens (Anthropic,
// anthropic_messages.h); POST /v1/responses, GET|DELETE /v1/responses/{id}
// (responses_api.h). A known path under another method is a 405 with Allow.
//
// Transport: the server's own strict HTTP/1.1 front (http_transport.h), with
// header, body and time limits; one line per request goes to the access log.
//
// Threads: Start() runs an accept thread and a pool of HTTP worker threads;
// each worker parses, submits, and reads one request's stream. Attach() and
// Drain() are called from the owner's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_events.h"
#include "server/chat_prompt.h"

namespace kvfork {
class Engine;
class Tokenizer;
class ChatTemplate;
}  // namespace kvfork

namespace kvfork::server {

struct ServerOptions {
  std::string host = "127.0.0.1";     // loopback unless asked
  int port = 8080;                    // 0 = any free port (see HttpServer::port())
  std::vector<std::string> api_keys;  // empty = no auth on /v1/*
  // Keys that may also use the cache routes (/v1/cache/*). They are valid
  // keys for every /v1/ route; with any key configured, other keys get 403
  // on the cache routes.
  std::vector<std::string> admin_api_keys;
  // Origins whose browsers may call the server (--cors-origins); empty = no
  // CORS headers at all; "*" = any origin.
  std::vector<std::string> cors_origins;
  int64_t max_body_bytes = 16 << 20;    // larger bodies get 413
  int64_t max_prompt_tokens = 0;        // 0 = the context length minus one
  int http_threads = 64;                // worker threads (one per open connection), <= 4096
  int keep_alive_seconds = 5;           // an idle kept-alive connection is closed after this
  int64_t max_header_bytes = 64 << 10;  // request line + header fields; more is a 431
  int64_t max_header_fields = 100;      // more header fields is a 431
  // Per socket operation: a client that sends nothing for this long while its
  // request is read (half a body, then silence) is dropped; one that accepts
  // no bytes for this long while its response is written (a stalled stream
  // reader) is dropped and its request cancelled.
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 30;
  bool log_prompts = false;           // log each request's prompt text (off: privacy)
  // Special-token strings inside chat messages: text (default) or allow
  // (chat_prompt.h). GenerationEnv::special_tokens_in_content takes it.
  SpecialTokensInContent special_tokens_in_content = SpecialTokensInContent::kText;
  std::string model_name;             // the id /v1/models reports and requests may name
  // --tool-call-parser: auto (from the chat template), hermes, llama3_json,
  // mistral, none. --reasoning-parser: auto (on when the template uses
  // <think>), think, none.
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "auto";
  // /v1/responses with store: at most this many responses and MiB of their
  // JSON are kept for previous_response_id, least recently used dropped first.
  size_t responses_store_max_entries = 1024;
  int64_t responses_store_max_mib = 256;
};

// What the server serves once loading is done. Everything must outlive the
// server; chat_template may be null (then chat requests get a 400).
struct ServingBackend {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  // The KV-event publisher's counters (for /metrics); empty when --kv-events
  // is off. Called from HTTP threads.
  std::function<KvEventCounters()> kv_event_counters;
};

// After the drain deadline: how long cancelled streams get to write their
// last chunks and [DONE] before every socket is shut down.
inline constexpr double kDrainGraceSeconds = 2.0;

class HttpServer {
 public:
  ~HttpServer();

  // Binds host:port and starts serving; /health answers 503 and generation
  // routes 503 until Attach.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const ServerOptions& options);

  // Makes the server ready. Called once.
  void Attach(const ServingBackend& backend);

  int port() const;  // the bound port (useful with port 0)

  // Stops taking new requests (they get 503), lets running ones finish for
  // up to drain_seconds, cancels what is left, then gives responses at most
  // kDrainGraceSeconds to be written before every connection is shut down
  // and every HTTP thread joined. Returns the number of requests cancelled.
  int64_t Drain(double drain_seconds);

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfork::server
