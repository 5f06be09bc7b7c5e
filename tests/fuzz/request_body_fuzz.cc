#include <cstdlib>
#include <memory>

#include "engine/engine.h"
#include "engine/request_validation.h"
#include "fuzz/fuzz_targets.h"
#include "model/model.h"
#include "model/random_model.h"
#include "server/anthropic_messages.h"
#include "server/cache_control.h"
#include "server/assistant_output.h"
#include "server/generation.h"
#include "server/json_body.h"
#include "server/responses_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::fuzz {
namespace {

// What PrepareGeneration needs from a server: a real engine (for its context
// limit) on a tiny random Qwen3 with the real Qwen3 tokenizer and template.
// Built once; the engine thread idles, no request is ever submitted.
struct Server {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<Engine> engine;
  server::ServerMetrics metrics;
  server::ActiveRequests active;
  server::GenerationEnv env;
};

const Server& GetServer() {
  static Server* s = [] {
    auto* s = new Server;  // kept for the whole run
    const char* cache = std::getenv("KVFORK_CACHE_DIR");
    RandomModelOptions ro;
    ro.arch = Architecture::kQwen3;
    ro.shape = "tiny";
    ro.seed = 1;
    ro.tokenizer_dir =
        std::string(cache != nullptr ? cache : KVFORK_DEFAULT_CACHE_DIR) + "/npm/tokenizer-qwen3/package/models";
    const std::string dir = ScratchDir() + "/request-model";
    Status st = WriteRandomModel(ro, dir);
    KVFORK_CHECK_MSG(st.ok(), st.ToString());
    ModelLoadOptions lo;
    lo.show_progress = false;
    StatusOr<std::unique_ptr<Model>> m = Model::Load(dir, lo);
    KVFORK_CHECK_MSG(m.ok(), m.status().ToString());
    s->model = std::move(m).value();
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
    KVFORK_CHECK_MSG(t.ok(), t.status().ToString());
    s->tokenizer = std::move(t).value();
    StatusOr<ChatTemplate> ct = ChatTemplate::Parse(s->tokenizer->chat_template());
    KVFORK_CHECK_MSG(ct.ok(), ct.status().ToString());
    s->chat_template = std::make_unique<ChatTemplate>(std::move(ct).value());
    EngineOptions eo;
    eo.threads = 1;
    eo.kv_blocks = 64;
    StatusOr<std::unique_ptr<Engine>> e = Engine::Create(eo, *s->model, *s->tokenizer);
    KVFORK_CHECK_MSG(e.ok(), e.status().ToString());
    s->engine = std::move(e).value();
    s->env.engine = s->engine.get();
    s->env.tokenizer = s->tokenizer.get();
    s->env.chat_template = s->chat_template.get();
    s->env.metrics = &s->metrics;
    s->env.active = &s->active;
    s->env.model_name = "tiny";
    return s;
  }();
  return *s;
}

}  // namespace

// The Anthropic and Responses bodies become chat bodies: any input is a
// 4xx or a chat body the chat path answers with a 4xx or accepts.
void FuzzAgentRoutes(const Server& s, std::string_view input) {
  nlohmann::ordered_json body;
  if (server::ParseJsonBody(input, &body)) return;
  auto check_error = [](const server::ApiError& err) {
    KVFORK_CHECK(err.http_status >= 400 && err.http_status < 500);
    KVFORK_CHECK(!err.message.empty());
    (void)server::AnthropicErrorJson(err);
  };
  auto run_chat = [&](const nlohmann::ordered_json& chat) {
    server::PreparedGeneration p;
    if (auto err = server::PrepareGeneration(s.env, server::Endpoint::kChat, chat.dump(), "", &p))
      check_error(*err);
  };
  for (bool count_tokens : {false, true}) {
    nlohmann::ordered_json chat;
    server::AnthropicCacheControl cache;
    if (auto err = server::AnthropicToChatBody(body, count_tokens, &chat, &cache)) {
      check_error(*err);
      continue;
    }
    run_chat(chat);
    // cache_control: a TTL Anthropic defines, and a pinned prefix within the
    // prompt.
    if (!cache.present) continue;
    KVFORK_CHECK(cache.ttl_ms == 5 * 60 * 1000 || cache.ttl_ms == 60 * 60 * 1000);
    KVFORK_CHECK(cache.chat_messages >= 1 && cache.chat_messages <= chat["messages"].size());
    server::PreparedGeneration p;
    if (server::PrepareGeneration(s.env, server::Endpoint::kChat, chat.dump(), "", &p)) continue;
    const int64_t pin = server::AnthropicPinTokens(s.env, chat, cache, p.prompt_tokens[0]);
    KVFORK_CHECK(pin >= 0 && pin <= static_cast<int64_t>(p.prompt_tokens[0].size()));
  }
  server::ResponsesRequest r;
  if (auto err = server::ResponsesToChatBody(body, nullptr, &r)) {
    check_error(*err);
  } else {
    run_chat(r.chat_body);
  }
}

// The reply parsers on any text: reading it whole or byte by byte gives the
// same reasoning, content and calls.
void FuzzReplyParsers(std::string_view input) {
  if (input.size() > 4096) return;
  for (server::ToolCallFormat format :
       {server::ToolCallFormat::kHermes, server::ToolCallFormat::kLlama3Json,
        server::ToolCallFormat::kMistral}) {
    server::AssistantParsing parsing;
    parsing.reasoning = true;
    parsing.tool_format = format;
    parsing.max_tool_calls = SIZE_MAX;
    server::AssistantOutputParser whole(parsing), bytes(parsing);
    server::AssistantDelta a = whole.Feed(input);
    a.Append(whole.Finish());
    server::AssistantDelta b;
    for (char c : input) b.Append(bytes.Feed(std::string_view(&c, 1)));
    b.Append(bytes.Finish());
    KVFORK_CHECK(a.reasoning == b.reasoning);
    KVFORK_CHECK(a.content == b.content);
    KVFORK_CHECK(a.calls.size() == b.calls.size());
    for (size_t i = 0; i < a.calls.size(); ++i) {
      KVFORK_CHECK(a.calls[i].name == b.calls[i].name);
      KVFORK_CHECK(a.calls[i].arguments == b.calls[i].arguments);
    }
  }
}

void FuzzRequestBody(std::string_view input) {
  const Server& s = GetServer();
  FuzzAgentRoutes(s, input);
  FuzzReplyParsers(input);
  const std::string body(input);
  for (server::Endpoint endpoint : {server::Endpoint::kChat, server::Endpoint::kCompletion}) {
    server::PreparedGeneration p;
    std::optional<server::ApiError> err = server::PrepareGeneration(s.env, endpoint, body, "", &p);
    if (err) {
      KVFORK_CHECK(err->http_status >= 400 && err->http_status < 500);
      KVFORK_CHECK(!err->message.empty());
      (void)err->ToJson();
      continue;
    }
    // What the server accepts, the engine must accept too: built exactly as
    // SubmitGeneration does and checked against the engine's own limits
    // (the pool bound left out: a real Submit reports that as out of range).
    KVFORK_CHECK(!p.prompt_tokens.empty() && p.prompt_tokens.size() == p.max_tokens.size());
    RequestLimits limits;
    limits.vocab_size = s.model->config().vocab_size;
    limits.max_context = s.engine->max_context();
    for (size_t i = 0; i < p.prompt_tokens.size(); ++i) {
      Request req;
      req.id = "fuzz-" + std::to_string(i);
      req.prompt_tokens = p.prompt_tokens[i];
      req.sampling = p.parsed.sampling;
      req.sampling.max_tokens = p.max_tokens[i];
      req.cache_salt = p.cache_salt;
      Status st = ValidateRequest(req, limits);
      KVFORK_CHECK_MSG(st.ok(), st.ToString());
    }
  }
}

}  // namespace kvfork::fuzz
