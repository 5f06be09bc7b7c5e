// The OpenAI-compatible HTTP server: routes, auth, limits, SSE streaming,
// cancellation on disconnect, draining. It talks to the engine only through
// Engine::Submit/Cancel/Stats/ResetPrefixCache and RequestStream, and to the
// tokenizer and chat template for prompts.
//
// Routes: POST /v1/chat/completions, /v1/completions; GET /v1/models[/{id}];
// GET /health (503 while loading); GET /metrics (Prometheus text);
// GET /v1/cache/stats (?check=1 adds the KV integrity check);
// POST /v1/cache/reset; llama.cpp's POST /tokenize, /detokenize,
// /apply-template.
//
// Threads: Start() runs the listener on its own thread with a pool of HTTP
// worker threads; each worker parses, submits, and reads one request's stream.
// Attach() and Drain() are called from the owner's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/chat_prompt.h"

namespace kvfork {
class Engine;
class Tokenizer;
class ChatTemplate;
}  // namespace kvfork

namespace kvfork::server {

struct ServerOptions {
  std::string host = "127.0.0.1";   // loopback unless asked
  int port = 8080;                  // 0 = any free port (see HttpServer::port())
  std::vector<std::string> api_keys;  // empty = no auth on /v1/*
  int64_t max_body_bytes = 16 << 20;  // larger bodies get 413
  int64_t max_prompt_tokens = 0;      // 0 = the context length minus one
  int http_threads = 64;              // worker threads (one per open connection)
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
};

// What the server serves once loading is done. Everything must outlive the
// server; chat_template may be null (then chat requests get a 400).
struct ServingBackend {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
};

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
  // up to drain_seconds, cancels what is left, closes the listener and joins
  // every HTTP thread. Returns the number of requests cancelled.
  int64_t Drain(double drain_seconds);

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfork::server
