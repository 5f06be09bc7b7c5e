#include "server/generation.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <limits>
#include <random>

#include "core/logging.h"
#include "core/timer.h"
#include "server/structured_output.h"
#include "server/tool_choice_grammar.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::server {

using nlohmann::json;

namespace {

std::string RandomHex(int digits) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < digits; ++i) s += kHex[rng() & 15];
  return s;
}

std::string FinishName(FinishReason r) {
  // vLLM reports an aborted (cancelled) choice as "abort".
  return r == FinishReason::kCancelled ? "abort" : FinishReasonName(r);
}

// A prompt text that must tokenize to more than max_prompt tokens is refused
// by its size, before tokenizing (which costs time and tens of bytes of
// scratch per byte): no text of more than max_prompt * max_bytes_per_token()
// bytes fits in max_prompt tokens (Tokenizer::max_bytes_per_token).
std::optional<ApiError> CheckPromptBytes(const Tokenizer& tokenizer, std::string_view text,
                                         int64_t max_prompt, const char* field) {
  const int64_t per_token = tokenizer.max_bytes_per_token();
  if (per_token <= 0 || static_cast<int64_t>(text.size()) <= max_prompt * per_token)
    return std::nullopt;
  ApiError err = InvalidField(
      field, std::string("the prompt ('") + field + "') is " + std::to_string(text.size()) +
                 " bytes; a prompt of at most " + std::to_string(max_prompt) +
                 " tokens is at most " + std::to_string(max_prompt * per_token) +
                 " bytes for this tokenizer (" + std::to_string(per_token) + " bytes per token)");
  err.code = "context_length_exceeded";
  return err;
}

}  // namespace

// ---- ActiveRequests ----

void ActiveRequests::Add(const std::string& run_id, Engine* engine,
                         std::vector<std::string> engine_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  runs_[run_id] = Entry{engine, std::move(engine_ids)};
}

void ActiveRequests::Remove(const std::string& run_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.erase(run_id);
  }
  cv_.notify_all();
}

bool ActiveRequests::WaitIdle(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return runs_.empty(); });
}

int64_t ActiveRequests::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [run_id, entry] : runs_)
    for (const std::string& id : entry.engine_ids) entry.engine->Cancel(id);
  return static_cast<int64_t>(runs_.size());
}

int64_t ActiveRequests::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(runs_.size());
}

// ---- preparing ----

namespace {

// The chat prompt of a body that holds chat fields (/apply-template, /tokenize).
std::optional<ApiError> ChatPromptOfBody(const GenerationEnv& env, std::string_view body,
                                         ChatPrompt* prompt, bool* add_special_tokens) {
  nlohmann::ordered_json j;
  if (auto err = ParseJsonBody(body, &j)) return err;
  if (!j.is_object()) return BadRequest("request body must be a JSON object");
  ChatInput input;
  if (auto err = ParseChatInput(j, &input)) return err;
  auto ast = j.find("add_special_tokens");
  if (ast != j.end() && !ast->is_null()) {
    if (!ast->is_boolean())
      return InvalidField("add_special_tokens", "'add_special_tokens' must be a boolean");
    *add_special_tokens = ast->get<bool>();
  }
  return RenderChatPrompt(*env.tokenizer, env.chat_template, env.special_tokens_in_content, input,
                          prompt);
}

}  // namespace

std::optional<ApiError> RenderChatBodyText(const GenerationEnv& env, std::string_view body,
                                           std::string* prompt) {
  ChatPrompt rendered;
  bool add_special = false;
  if (auto err = ChatPromptOfBody(env, body, &rendered, &add_special)) return err;
  *prompt = std::move(rendered.text);
  return std::nullopt;
}

std::optional<ApiError> TokenizeChatBodyText(const GenerationEnv& env, std::string_view body,
                                             std::vector<int32_t>* ids) {
  ChatPrompt rendered;
  bool add_special = false;
  if (auto err = ChatPromptOfBody(env, body, &rendered, &add_special)) return err;
  *ids = EncodeChatPrompt(*env.tokenizer, rendered, add_special);
  return std::nullopt;
}

namespace {

// Which parsers read the reply: tool calls when the request offers tools
// and lets the model call them, reasoning when the template uses <think>.
// tool_choice required / named: a grammar forces one call.
std::optional<ApiError> SetUpParsing(const GenerationEnv& env, const ChatInput& chat,
                                     std::string_view prompt, PreparedGeneration* out) {
  AssistantParsing& parsing = out->parsing;
  const bool offers_tools = chat.tools.is_array() && !chat.tools.empty();
  if (offers_tools && chat.tool_choice != "none") {
    parsing.tool_format = env.tool_call_format;
    parsing.max_tool_calls = chat.parallel_tool_calls ? SIZE_MAX : 1;
  }
  if (chat.tool_choice == "required" || chat.tool_choice == "function") {
    if (out->parsed.sampling.grammar != nullptr)
      return InvalidField("tool_choice",
                          "'tool_choice' = \"" + chat.tool_choice +
                              "\" cannot be combined with a structured-output constraint "
                              "(response_format, guided_*): both would constrain the reply");
    if (!offers_tools)
      return InvalidField("tool_choice", "'tool_choice' = \"" + chat.tool_choice +
                                             "\" needs at least one tool in 'tools'");
    StatusOr<std::string> gbnf =
        ForcedToolCallGbnf(env.tool_call_format, chat.tools, chat.forced_tool);
    if (!gbnf.ok()) {
      const bool schema_error = gbnf.status().message().find("'tools[") != std::string::npos;
      return FromStatus(gbnf.status(), schema_error ? "tools" : "tool_choice");
    }
    if (auto err = ConstrainToGbnf(*gbnf, "tool_choice", &out->parsed.sampling)) return err;
    parsing.max_tool_calls = 1;
  }
  if (chat.continue_final_message) {
    const nlohmann::ordered_json& last = chat.messages.back();
    out->prefill = last.value("content", "");
    // Where the reply starts is before the prefill the prompt ends with.
    const std::string_view trimmed = out->prefill;
    if (prompt.size() >= trimmed.size() && prompt.substr(prompt.size() - trimmed.size()) == trimmed)
      prompt.remove_suffix(trimmed.size());
  }
  parsing.reasoning = env.reasoning_parser;
  parsing.reasoning_starts_inside = parsing.reasoning && PromptOpensReasoning(prompt);
  // A forced call starts at once: the grammar leaves no room for <think>.
  if (out->parsed.sampling.grammar != nullptr && parsing.tool_format != ToolCallFormat::kNone &&
      (chat.tool_choice == "required" || chat.tool_choice == "function"))
    parsing.reasoning = false;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> PrepareGeneration(const GenerationEnv& env, Endpoint endpoint,
                                          const std::string& body, const std::string& key_salt,
                                          PreparedGeneration* out) {
  SchemaLimits limits;
  limits.vocab_size = env.tokenizer->vocab_size();
  *out = PreparedGeneration{};
  if (auto err = ParseRequestBody(endpoint, body, limits, &out->parsed)) return err;
  ParsedRequest& p = out->parsed;
  if (!p.model.empty() && p.model != env.model_name) {
    ApiError err = NotFound("model '" + p.model + "' does not exist; this server serves '" +
                                env.model_name + "'",
                            "model_not_found");
    err.param = "model";
    return err;
  }
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  const int64_t ctx = env.engine->max_context();
  int64_t max_prompt = ctx - 1;
  if (env.max_prompt_tokens > 0) max_prompt = std::min(max_prompt, env.max_prompt_tokens);
  if (endpoint == Endpoint::kChat) {
    ChatPrompt prompt;
    if (auto err = RenderChatPrompt(*env.tokenizer, env.chat_template,
                                    env.special_tokens_in_content, p.chat, &prompt))
      return err;
    if (env.log_prompts) {
      KVFORK_LOG(kInfo) << "prompt: " << prompt.text;
    }
    if (auto err = CheckPromptBytes(*env.tokenizer, prompt.text, max_prompt, prompt_field))
      return err;
    // The template writes the BOS itself when the model wants one
    // (add_special_tokens is false unless the request says otherwise).
    out->prompt_tokens.push_back(EncodeChatPrompt(*env.tokenizer, prompt, p.add_special_tokens));
    if (auto err = SetUpParsing(env, p.chat, prompt.text, out)) return err;
  } else {
    for (const PromptInput& in : p.prompts) {
      if (in.is_tokens) {
        out->prompt_tokens.push_back(in.tokens);
        if (p.echo) out->echo_texts.push_back(env.tokenizer->Decode(in.tokens, false));
      } else {
        if (env.log_prompts) {
          KVFORK_LOG(kInfo) << "prompt: " << in.text;
        }
        if (auto err = CheckPromptBytes(*env.tokenizer, in.text, max_prompt, prompt_field))
          return err;
        out->prompt_tokens.push_back(env.tokenizer->Encode(in.text, p.add_special_tokens));
        if (p.echo) out->echo_texts.push_back(in.text);
      }
    }
  }
  if (p.max_tokens_given && p.sampling.max_tokens > ctx) {
    ApiError err = InvalidField(p.endpoint == Endpoint::kChat ? "max_tokens" : "max_tokens",
                                "'max_tokens' = " + std::to_string(p.sampling.max_tokens) +
                                    " is more than this model's context of " +
                                    std::to_string(ctx) + " tokens");
    err.code = "context_length_exceeded";
    return err;
  }
  for (const std::vector<int32_t>& tokens : out->prompt_tokens) {
    const int64_t len = static_cast<int64_t>(tokens.size());
    if (len == 0)
      return InvalidField(prompt_field, std::string("the prompt is empty after tokenization ('") +
                                            prompt_field + "')");
    if (len > max_prompt) {
      ApiError err = InvalidField(prompt_field,
                                  "the prompt has " + std::to_string(len) +
                                      " tokens; this model's context is " + std::to_string(ctx) +
                                      " tokens and a prompt may use at most " +
                                      std::to_string(max_prompt));
      err.code = "context_length_exceeded";
      return err;
    }
    // Generation stops at the end of the context ("length"), as vLLM does
    // when max_tokens is absent; an explicit max_tokens is capped the same way.
    int64_t room = ctx - len;
    int64_t mt = p.max_tokens_given
                     ? std::min(p.sampling.max_tokens, room)
                     : (endpoint == Endpoint::kChat ? room : std::min<int64_t>(16, room));
    out->max_tokens.push_back(mt);
  }
  out->cache_salt = key_salt.empty() ? p.cache_salt : key_salt + "/" + p.cache_salt;
  // OpenAI's prompt_cache_key, a salt-and-pin hint here: requests with the
  // same key share their own prefixes (salt), and each prompt stays pinned
  // for 5 minutes after its request (docs/server.md).
  if (!p.prompt_cache_key.empty()) {
    out->cache_salt += "\x1fprompt_cache_key=" + p.prompt_cache_key;
    out->pin_tokens = std::numeric_limits<int32_t>::max();
    out->pin_ttl_ms = kPromptCacheKeyTtlMs;
  }
  // Echo with logprobs: the prompt's tokens get logprobs too (OpenAI's legacy
  // completions, vLLM; lm-evaluation-harness's loglikelihood).
  if (endpoint == Endpoint::kCompletion && p.echo && p.sampling.top_logprobs >= 0)
    p.sampling.prompt_logprobs = p.sampling.top_logprobs;
  return std::nullopt;
}

// ---- running ----

GenerationRun::GenerationRun(const GenerationEnv& env, PreparedGeneration prepared,
                             ResponseMeta meta)
    : env_(env), prepared_(std::move(prepared)), meta_(std::move(meta)), arrival_ns_(NowNanos()) {
  const size_t n = static_cast<size_t>(prepared_.parsed.sampling.n);
  choices_.resize(prepared_.prompt_tokens.size() * n);
  echo_sent_.assign(prepared_.prompt_tokens.size(), false);
  if (WantsPromptLogprobs()) {
    prompt_logprobs_.resize(prepared_.prompt_tokens.size());
    for (size_t s = 0; s < prompt_logprobs_.size(); ++s) {
      LogprobEntry first;
      first.chosen.token = TokenText(prepared_.prompt_tokens[s].front());
      first.no_logprob = true;
      prompt_logprobs_[s].push_back(std::move(first));
    }
  }
  if (meta_.endpoint == Endpoint::kChat) {
    formatter_ = prepared_.formatter ? prepared_.formatter(meta_) : MakeOpenAiChatFormatter(meta_);
    if (prepared_.parsing.enabled()) {
      for (Choice& c : choices_) {
        c.parser.emplace(prepared_.parsing);
        // The prefill's own text was the client's; only its calls count.
        c.calls = c.parser->Feed(prepared_.prefill).calls;
      }
    }
  }
}

AssistantDelta GenerationRun::ParseOutput(Choice& c, std::string_view text, bool finish) {
  AssistantDelta d;
  if (c.parser) {
    d = finish ? c.parser->Finish() : c.parser->Feed(text);
  } else {
    d.content = std::string(text);
  }
  c.text += d.content;
  c.reasoning += d.reasoning;
  c.calls.insert(c.calls.end(), d.calls.begin(), d.calls.end());
  return d;
}

void GenerationRun::AddPromptLogprobs(size_t s, const RequestEvent& e) {
  if (s >= prompt_logprobs_.size()) return;
  for (const PromptTokenLogprob& p : e.prompt_logprobs) {
    LogprobEntry entry;
    entry.chosen = {TokenText(p.chosen.token), p.chosen.logprob};
    for (const TokenLogprob& t : p.top)
      entry.top.push_back({TokenText(t.token), t.logprob});
    prompt_logprobs_[s].push_back(std::move(entry));
  }
}

void GenerationRun::SendEcho(size_t s, std::vector<std::string>* chunks) {
  if (!prepared_.parsed.echo || s >= prepared_.echo_texts.size() || echo_sent_[s]) return;
  echo_sent_[s] = true;
  const int64_t n = prepared_.parsed.sampling.n;
  const json lp = WantsPromptLogprobs() ? CompletionLogprobsJson(prompt_logprobs_[s], 0) : json();
  int64_t prompt_bytes = 0;
  if (WantsPromptLogprobs())
    for (const LogprobEntry& e : prompt_logprobs_[s])
      prompt_bytes += static_cast<int64_t>(e.chosen.token.size());
  for (int64_t c = 0; c < n; ++c) {
    const int64_t index = static_cast<int64_t>(s) * n + c;
    choices_[index].text_offset = prompt_bytes;  // the tokens' text_offset continues from here
    chunks->push_back(SseData(CompletionChunk(meta_, index, prepared_.echo_texts[s], lp, "")));
  }
}

GenerationRun::~GenerationRun() {
  if (!finished_) {
    CancelAll(/*disconnected=*/false);
  }
  Finish();
}

void GenerationRun::Finish() {
  finished_ = true;
  if (registered_) {
    env_.active->Remove(meta_.id);
    registered_ = false;
  }
}

void GenerationRun::CancelAll(bool disconnected) {
  if (finished_ && !registered_) return;
  bool any = false;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!stream_done_[i]) {
      env_.engine->Cancel(engine_ids_[i]);
      any = true;
    }
  }
  if (any && disconnected) {
    env_.metrics->CountDisconnect();
    KVFORK_LOG(kInfo) << meta_.id << ": client disconnected, request cancelled";
  }
  cancelled_ = true;
  Finish();
}

std::string GenerationRun::TokenText(int32_t token) const {
  if (prepared_.parsed.tokens_as_ids) return "token_id:" + std::to_string(token);
  return env_.tokenizer->TokenBytes(token);
}

LogprobEntry GenerationRun::ToEntry(const RequestEvent& e) const {
  LogprobEntry entry;
  if (e.logprob) {
    entry.chosen = {TokenText(e.logprob->token), e.logprob->logprob};
  } else {
    entry.chosen = {TokenText(e.token), 0.0f};
  }
  for (const TokenLogprob& t : e.top_logprobs) entry.top.push_back({TokenText(t.token), t.logprob});
  return entry;
}

void GenerationRun::Handle(size_t s, RequestEvent e, std::vector<std::string>* chunks) {
  const int64_t n = prepared_.parsed.sampling.n;
  const bool want_logprobs = prepared_.parsed.sampling.top_logprobs >= 0;
  const bool chat = meta_.endpoint == Endpoint::kChat;
  // A stream's echo goes first; with prompt logprobs it waits for them.
  if (chunks != nullptr && e.kind != RequestEvent::Kind::kPromptLogprobs &&
      e.kind != RequestEvent::Kind::kError)
    SendEcho(s, chunks);
  switch (e.kind) {
    case RequestEvent::Kind::kPromptLogprobs:
      AddPromptLogprobs(s, e);
      return;
    case RequestEvent::Kind::kToken: {
      if (e.choice < 0 || e.choice >= n) return;
      const int64_t index = static_cast<int64_t>(s) * n + e.choice;
      Choice& c = choices_[index];
      const int64_t now = NowNanos();
      if (!first_token_seen_) {
        first_token_seen_ = true;
        env_.metrics->ObserveTimeToFirstToken((now - arrival_ns_) * 1e-9);
      }
      if (c.last_token_ns != 0) env_.metrics->ObserveInterTokenLatency((now - c.last_token_ns) * 1e-9);
      c.last_token_ns = now;
      LogprobEntry entry;
      if (want_logprobs) entry = ToEntry(e);
      if (chat) {
        const size_t calls_before = c.calls.size();
        AssistantDelta d = ParseOutput(c, e.text_delta, /*finish=*/false);
        if (chunks == nullptr) {
          if (want_logprobs) c.logprobs.push_back(std::move(entry));
          return;
        }
        if (d.empty() && !want_logprobs) return;
        json lp = want_logprobs ? ChatLogprobsJson({entry}) : json(nullptr);
        formatter_->Delta(index, d, calls_before, lp, chunks);
        return;
      }
      if (chunks == nullptr) {
        c.text += e.text_delta;
        if (want_logprobs) c.logprobs.push_back(std::move(entry));
        return;
      }
      if (e.text_delta.empty() && !want_logprobs) return;
      json lp = nullptr;
      if (want_logprobs) {
        lp = CompletionLogprobsJson({entry}, c.text_offset);
        c.text_offset += static_cast<int64_t>(entry.chosen.token.size());
      }
      chunks->push_back(SseData(CompletionChunk(meta_, index, e.text_delta, lp, "")));
      return;
    }
    case RequestEvent::Kind::kFinish: {
      if (e.choice < 0 || e.choice >= n) return;
      const int64_t index = static_cast<int64_t>(s) * n + e.choice;
      Choice& c = choices_[index];
      c.finished = true;
      c.finish_reason = FinishName(e.finish_reason);
      env_.metrics->CountFinished(c.finish_reason);
      if (chat) {
        const size_t calls_before = c.calls.size();
        AssistantDelta d = ParseOutput(c, "", /*finish=*/true);
        // OpenAI: a reply that called a tool ends with "tool_calls".
        if (!c.calls.empty() && c.finish_reason != "abort") c.finish_reason = "tool_calls";
        if (chunks != nullptr) {
          if (!d.empty()) formatter_->Delta(index, d, calls_before, nullptr, chunks);
          formatter_->Finish(index, c.finish_reason, chunks);
        }
        return;
      }
      if (chunks != nullptr)
        chunks->push_back(SseData(CompletionChunk(meta_, index, "", nullptr, c.finish_reason)));
      return;
    }
    case RequestEvent::Kind::kDone:
      stream_done_[s] = true;
      usage_.prompt_tokens += e.usage.prompt_tokens;
      usage_.completion_tokens += e.usage.completion_tokens;
      usage_.cached_tokens += e.usage.cached_tokens;
      return;
    case RequestEvent::Kind::kError: {
      stream_done_[s] = true;
      if (!error_) {
        error_ = FromStatus(e.error);
        KVFORK_LOG(kWarn) << meta_.id << ": engine error: " << e.error.ToString();
        env_.metrics->CountFinished("error");
        if (chunks != nullptr)
          chunks->push_back(formatter_ ? formatter_->ErrorEvent(*error_)
                                       : "data: " + error_->ToJson() + "\n\n");
      }
      return;
    }
  }
}

bool GenerationRun::Pump(int64_t wait_ms, std::vector<std::string>* chunks) {
  bool any_open = false;
  bool got = false;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (stream_done_[s]) continue;
    any_open = true;
    // Drain what is already queued on every stream before waiting.
    while (!stream_done_[s]) {
      std::optional<RequestEvent> e = streams_[s]->Pop(0);
      if (!e) break;
      got = true;
      Handle(s, std::move(*e), chunks);
    }
  }
  if (!any_open) return false;
  if (!got) {
    for (size_t s = 0; s < streams_.size(); ++s) {
      if (stream_done_[s]) continue;
      std::optional<RequestEvent> e = streams_[s]->Pop(wait_ms);
      if (e) Handle(s, std::move(*e), chunks);
      break;
    }
  }
  return std::any_of(stream_done_.begin(), stream_done_.end(), [](bool d) { return !d; });
}

int GenerationRun::CollectAll(std::string* body, const std::function<bool()>& client_gone) {
  constexpr int64_t kClientCheckNs = 500'000'000;  // twice a second
  int64_t next_check_ns = NowNanos() + kClientCheckNs;
  while (Pump(100, nullptr)) {
    if (client_gone && !cancelled_ && NowNanos() >= next_check_ns) {
      next_check_ns = NowNanos() + kClientCheckNs;
      if (client_gone()) CancelAll(/*disconnected=*/true);
    }
  }
  env_.metrics->ObserveRequestLatency((NowNanos() - arrival_ns_) * 1e-9);
  Finish();
  if (error_) {
    *body = formatter_ ? formatter_->ErrorBody(*error_) : error_->ToJson();
    return error_->http_status;
  }
  std::vector<ChoiceResult> results;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    ChoiceResult r;
    const size_t prompt = i / static_cast<size_t>(prepared_.parsed.sampling.n);
    r.text = prepared_.parsed.echo && prompt < prepared_.echo_texts.size()
                 ? prepared_.echo_texts[prompt] + c.text
                 : c.text;
    r.finish_reason = c.finish_reason.empty() ? "stop" : c.finish_reason;
    r.reasoning = std::move(c.reasoning);
    r.tool_calls = std::move(c.calls);
    r.has_logprobs = prepared_.parsed.sampling.top_logprobs >= 0;
    if (prompt < prompt_logprobs_.size()) {
      r.logprobs = prompt_logprobs_[prompt];  // the echoed prompt's tokens come first
      r.logprobs.insert(r.logprobs.end(), std::make_move_iterator(c.logprobs.begin()),
                        std::make_move_iterator(c.logprobs.end()));
    } else {
      r.logprobs = std::move(c.logprobs);
    }
    results.push_back(std::move(r));
  }
  // text_offset counts from the start of the text: with echo the prompt's
  // tokens (echo + logprobs means prompt logprobs) come first.
  *body = DumpJson(formatter_ ? formatter_->Body(results, usage_)
                              : CompletionResponseJson(meta_, results, usage_, /*first_offset=*/0));
  return 200;
}

bool GenerationRun::StreamSome(const std::function<bool(const std::string&)>& write,
                               int64_t wait_ms) {
  if (finished_) return false;
  std::vector<std::string> chunks;
  if (!preamble_sent_) {
    preamble_sent_ = true;
    if (formatter_) {
      formatter_->Begin(choices_.size(), &chunks);
      // Calls the prefill completed.
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (choices_[i].calls.empty()) continue;
        AssistantDelta d;
        d.calls = choices_[i].calls;
        formatter_->Delta(static_cast<int64_t>(i), d, 0, nullptr, &chunks);
      }
    } else if (!WantsPromptLogprobs()) {
      for (size_t s = 0; s < prepared_.echo_texts.size(); ++s) SendEcho(s, &chunks);
    }
  }
  const bool more = Pump(wait_ms, &chunks);
  if (!more) {
    if (formatter_) {
      formatter_->End(usage_, error_.has_value(), &chunks);
    } else {
      if (!error_ && meta_.include_usage) chunks.push_back(SseData(UsageChunk(meta_, usage_)));
      chunks.push_back(kSseDone);
    }
  }
  for (const std::string& c : chunks) {
    if (!write(c)) {
      CancelAll(/*disconnected=*/true);
      return false;
    }
  }
  if (!more) {
    env_.metrics->ObserveRequestLatency((NowNanos() - arrival_ns_) * 1e-9);
    Finish();
  }
  return more;
}

std::optional<ApiError> SubmitGeneration(const GenerationEnv& env, PreparedGeneration prepared,
                                         std::shared_ptr<GenerationRun>* run) {
  ResponseMeta meta;
  meta.endpoint = prepared.parsed.endpoint;
  meta.id = (!prepared.id_prefix.empty()        ? prepared.id_prefix
             : meta.endpoint == Endpoint::kChat ? "chatcmpl-"
                                                : "cmpl-") +
            RandomHex(24);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = env.model_name;
  meta.include_usage = prepared.parsed.include_usage;
  auto r = std::make_shared<GenerationRun>(env, std::move(prepared), meta);
  const PreparedGeneration& p = r->prepared_;
  for (size_t i = 0; i < p.prompt_tokens.size(); ++i) {
    Request req;
    req.id = meta.id + "-" + std::to_string(i);
    req.prompt_tokens = p.prompt_tokens[i];
    req.sampling = p.parsed.sampling;
    req.sampling.max_tokens = p.max_tokens[i];
    // An implicit max_tokens ends at the context: min_tokens cannot go past it.
    req.sampling.min_tokens = std::min(req.sampling.min_tokens, req.sampling.max_tokens);
    req.cache_salt = p.cache_salt;
    req.pin_tokens = p.pin_tokens;
    req.pin_ttl_ms = p.pin_ttl_ms;
    StatusOr<std::shared_ptr<RequestStream>> stream = env.engine->Submit(std::move(req));
    if (!stream.ok()) {
      for (const std::string& id : r->engine_ids_) env.engine->Cancel(id);
      r->finished_ = true;  // nothing of it runs any more
      const char* field = meta.endpoint == Endpoint::kChat ? "messages" : "prompt";
      return FromStatus(stream.status(), stream.status().code() == StatusCode::kOutOfRange ? field : "");
    }
    r->engine_ids_.push_back(meta.id + "-" + std::to_string(i));
    r->streams_.push_back(std::move(stream).value());
    r->stream_done_.push_back(false);
  }
  env.active->Add(meta.id, env.engine, r->engine_ids_);
  r->registered_ = true;
  *run = std::move(r);
  return std::nullopt;
}

}  // namespace kvfork::server
