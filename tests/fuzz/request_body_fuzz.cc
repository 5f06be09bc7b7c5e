#include <cstdlib>
#include <memory>

#include "engine/engine.h"
#include "engine/request_validation.h"
#include "fuzz/fuzz_targets.h"
#include "model/model.h"
#include "model/random_model.h"
#include "server/generation.h"
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

void FuzzRequestBody(std::string_view input) {
  const Server& s = GetServer();
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
