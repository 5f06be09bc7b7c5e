// One /v1/chat/completions or /v1/completions request from body to response:
// PrepareGeneration parses and validates it, renders the chat template and
// tokenizes (errors are ApiErrors naming the field); SubmitGeneration queues
// one engine request per prompt; GenerationRun reads the engine streams and
// produces either one JSON body or SSE chunks.
//
// Threads: a GenerationRun is driven by one HTTP worker thread at a time;
// CancelAll may also be called from another thread (a drain). ActiveRequests
// is shared by all workers and locked inside.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/assistant_output.h"
#include "server/chat_formatter.h"
#include "server/chat_prompt.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/response_writer.h"

namespace kvfork {
class Tokenizer;
class ChatTemplate;
}  // namespace kvfork

namespace kvfork::server {

// Every generation request that has been submitted and not yet answered, so
// a drain can wait for them and cancel the rest.
class ActiveRequests {
 public:
  void Add(const std::string& run_id, Engine* engine, std::vector<std::string> engine_ids);
  void Remove(const std::string& run_id);
  // Waits until none is active or seconds pass; true if none is left.
  bool WaitIdle(double seconds);
  // Cancels every active request's engine requests; returns how many runs.
  int64_t CancelAll();
  int64_t size() const;

 private:
  struct Entry {
    Engine* engine = nullptr;
    std::vector<std::string> engine_ids;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> runs_;
};

// What a request needs from the server. Pointers are not owned.
struct GenerationEnv {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat requests get a 400
  ServerMetrics* metrics = nullptr;
  ActiveRequests* active = nullptr;
  std::string model_name;
  int64_t max_prompt_tokens = 0;  // 0 = context - 1
  bool log_prompts = false;
  // --special-tokens-in-content: whether special-token strings inside chat
  // messages (and tools, chat_template_kwargs) stay text.
  SpecialTokensInContent special_tokens_in_content = SpecialTokensInContent::kText;
  // The model's tool-call format (--tool-call-parser, else from its chat
  // template); kNone: tool calls stay in the content.
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  // Split <think>...</think> into reasoning (--reasoning-parser, else on
  // when the chat template uses the tags).
  bool reasoning_parser = false;
};

// Makes the formatter of a chat run once its id is known (null: OpenAI chat).
using ChatFormatterFactory = std::function<std::unique_ptr<ChatFormatter>(const ResponseMeta&)>;

struct PreparedGeneration {
  ParsedRequest parsed;
  std::vector<std::vector<int32_t>> prompt_tokens;  // one engine request each
  std::vector<int64_t> max_tokens;                  // per prompt, capped by the context
  std::vector<std::string> echo_texts;              // completions with echo
  std::string cache_salt;                           // key salt + request salt
  // Cache control: pin the first pin_tokens prompt tokens' blocks for
  // pin_ttl_ms when each engine request ends (Request::pin_tokens).
  int64_t pin_tokens = 0;
  int64_t pin_ttl_ms = 0;
  // Chat: what the reply's parsers look for, and the final message's text
  // when continue_final_message (the parsers read it first, so a tool call
  // it opens or completes is returned; its text is not repeated).
  AssistantParsing parsing;
  std::string prefill;
  // Chat: another API's formatter and id prefix ("msg_", "resp_").
  ChatFormatterFactory formatter;
  std::string id_prefix;
};

// How long prompt_cache_key pins a prompt (OpenAI keeps such prefixes 5 to
// 10 minutes).
inline constexpr int64_t kPromptCacheKeyTtlMs = 5 * 60 * 1000;

// key_salt: the API key's salt ("" without auth).
std::optional<ApiError> PrepareGeneration(const GenerationEnv& env, Endpoint endpoint,
                                          const std::string& body, const std::string& key_salt,
                                          PreparedGeneration* out);

// /apply-template: {"messages", "tools"?, "chat_template_kwargs"?,
// "add_generation_prompt"?, "continue_final_message"?} -> the rendered prompt
// text. It parses the body's text so that objects keep the client's key order
// (a tool's schema printed by tojson).
std::optional<ApiError> RenderChatBodyText(const GenerationEnv& env, std::string_view body,
                                           std::string* prompt);
// vLLM's /tokenize with "messages" (same fields, plus "add_special_tokens",
// default false): the chat prompt's token ids exactly as a chat request
// builds them (special-token strings in content kept text by default).
std::optional<ApiError> TokenizeChatBodyText(const GenerationEnv& env, std::string_view body,
                                             std::vector<int32_t>* ids);

class GenerationRun {
 public:
  GenerationRun(const GenerationEnv& env, PreparedGeneration prepared, ResponseMeta meta);
  ~GenerationRun();
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  bool streaming() const { return prepared_.parsed.stream; }
  bool finished() const { return finished_; }
  bool cancelled() const { return cancelled_; }
  // Tokens so far, summed over choices (complete once finished()).
  const Usage& usage() const { return usage_; }

  // Non-streaming: waits for every choice; returns the HTTP status and the body.
  // client_gone, when given, is asked about twice a second; once it says yes,
  // the request is cancelled as a disconnect (the body is then for nobody).
  int CollectAll(std::string* body, const std::function<bool()>& client_gone = nullptr);
  // Streaming: writes the chunks that are ready, waiting up to wait_ms for
  // events. Returns true while more is to come. A write that fails cancels
  // the request (client gone) and returns false.
  bool StreamSome(const std::function<bool(const std::string&)>& write, int64_t wait_ms);
  // Cancels every unfinished engine request of this run.
  void CancelAll(bool disconnected);

 private:
  friend std::optional<ApiError> SubmitGeneration(const GenerationEnv&, PreparedGeneration,
                                                  std::shared_ptr<GenerationRun>*);
  struct Choice {
    std::string text;
    std::string finish_reason;
    std::vector<LogprobEntry> logprobs;
    int64_t last_token_ns = 0;
    int64_t text_offset = 0;  // completions streams: bytes of the tokens with logprobs sent
    bool finished = false;
    // Chat: the reply's parsers and what they found (text holds the content).
    std::optional<AssistantOutputParser> parser;
    std::string reasoning;
    std::vector<ToolCall> calls;
  };
  // Chat: the parsed output of text, added to c (returned for the stream).
  AssistantDelta ParseOutput(Choice& c, std::string_view text, bool finish);

  // Pops what is ready (waiting up to wait_ms) and handles it; stream chunks
  // go to *chunks when streaming. Returns false once every stream is done.
  bool Pump(int64_t wait_ms, std::vector<std::string>* chunks);
  void Handle(size_t stream_index, RequestEvent event, std::vector<std::string>* chunks);
  void Finish();
  LogprobEntry ToEntry(const RequestEvent& event) const;
  // A logprob entry's token: its bytes, or "token_id:N" when asked.
  std::string TokenText(int32_t token) const;
  // Echo with logprobs (prompt_logprobs): the entries of prompt `s` so far,
  // the first token's (null) included.
  bool WantsPromptLogprobs() const { return prepared_.parsed.sampling.prompt_logprobs >= 0; }
  void AddPromptLogprobs(size_t s, const RequestEvent& event);
  // Streams: the echo chunk of each of prompt s's choices, once, with the
  // prompt's logprobs (sent when its first token or finish arrives).
  void SendEcho(size_t s, std::vector<std::string>* chunks);

  GenerationEnv env_;
  PreparedGeneration prepared_;
  ResponseMeta meta_;
  std::unique_ptr<ChatFormatter> formatter_;  // chat only
  int64_t arrival_ns_ = 0;
  std::vector<std::string> engine_ids_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> stream_done_;
  std::vector<Choice> choices_;
  std::vector<std::vector<LogprobEntry>> prompt_logprobs_;  // [prompts]: echo with logprobs
  std::vector<bool> echo_sent_;                             // [prompts]: streams
  Usage usage_;
  std::optional<ApiError> error_;
  bool first_token_seen_ = false;
  bool preamble_sent_ = false;
  bool registered_ = false;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
};

// Submits one engine request per prompt. On a refusal (a full queue: 429
// with Retry-After; a request the engine rejects: 400) nothing stays queued.
std::optional<ApiError> SubmitGeneration(const GenerationEnv& env, PreparedGeneration prepared,
                                         std::shared_ptr<GenerationRun>* run);

}  // namespace kvfork::server
