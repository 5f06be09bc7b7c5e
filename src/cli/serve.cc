// `kvfork serve --model DIR|FILE.gguf`: the OpenAI-compatible HTTP server.
//
// Order of start-up: bind the port first (so /health can answer 503 while the
// model loads), then load the model and tokenizer, start the engine, attach.
// SIGTERM, SIGINT and SIGHUP are taken by a sigwait thread: stop taking
// requests, let running ones finish for up to --drain-seconds, cancel the
// rest, exit 0. SIGHUP drains too (there is no configuration to reload, and
// a hung-up terminal or a supervisor's HUP means "stop"), so it no longer
// kills the process mid-stream. SIGUSR1 and SIGUSR2 are logged and ignored:
// a stray `kill -USR1` (logrotate's "reopen your logs") must not stop a
// server that logs to stderr.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/model_tokenizer.h"
#include "core/cpu_features.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/ops.h"
#include "kv/kv_event_publisher.h"
#include "kv/model_files_fingerprint.h"
#include "model/model.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/http_transport.h"
#include "server/tool_call_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

struct ServeConfig {
  std::string model_dir;      // a Hugging Face directory or a .gguf file
  std::string tokenizer_dir;  // --tokenizer; "" = the model's (cli/model_tokenizer.h)
  server::ServerOptions server;
  EngineOptions engine;
  double drain_seconds = 30.0;
  // --kv-events / --kv-events-replay / --kv-events-topic; endpoint "" = off.
  KvEventPublisherOptions kv_events;
};

// llm-d's default topic shape: kv@<host>@<model>.
std::string DefaultKvEventsTopic(const std::string& model_name) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
  return std::string("kv@") + host + "@" + model_name;
}

// --max-step-ms: "auto" (the default), "off" or 0, or a positive number of ms.
StatusOr<double> ParseMaxStepMs(const std::string& value) {
  if (value == "auto") return -1.0;
  if (value == "off") return 0.0;
  char* end = nullptr;
  const double ms = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(ms >= 0) || ms >= 1e7)
    return InvalidArgumentError("--max-step-ms must be auto, off, or a number of ms in [0, 1e7), got '" +
                                value + "'");
  return ms;
}

StatusOr<ServeConfig> ParseServeFlags(int argc, char** argv) {
  Flags flags =
      Flags::Parse(argc, argv, {"no-prefix-cache", "log-prompts", "no-webui", "no-warmup"});
  ServeConfig c;
  c.model_dir = flags.GetRequiredString("model", "a Hugging Face model directory or a .gguf file");
  c.tokenizer_dir =
      flags.GetString("tokenizer", "", "directory with tokenizer.json (none: the model's own)");
  c.server.host = flags.GetString("host", "127.0.0.1", "address to listen on");
  const int64_t port = flags.GetInt("port", 8080, "TCP port; 0 picks a free one");
  // The environment's key is not the flag's default: --help would print it.
  std::string keys = flags.GetString(
      "api-key", "", "comma-separated keys a client must send (none: env KVFORK_API_KEY, else open)");
  const char* env_key = std::getenv("KVFORK_API_KEY");
  if (keys.empty() && env_key != nullptr) keys = env_key;
  const double body_mib = flags.GetDouble("max-body-mib", 16.0, "largest request body in MiB");
  c.server.max_prompt_tokens =
      flags.GetInt("max-prompt-tokens", 0, "longest prompt in tokens; 0 = the model's context");
  const int64_t http_threads = flags.GetInt(
      "http-threads", 0, "connections served at once; 0 = max-num-seqs + max-queue + 16");
  const int64_t read_timeout = flags.GetInt("http-read-timeout", c.server.read_timeout_seconds,
                                            "seconds a read from a client may take");
  const int64_t write_timeout = flags.GetInt("http-write-timeout", c.server.write_timeout_seconds,
                                             "seconds a write to a client may take");
  const int64_t keep_alive = flags.GetInt("http-keep-alive-timeout", c.server.keep_alive_seconds,
                                          "seconds an idle connection is kept open");
  const std::string admin_keys =
      flags.GetString("admin-api-key", "", "comma-separated keys that may use the admin routes (none)");
  const std::string cors = flags.GetString(
      "cors-origins", "", "comma-separated origins allowed by CORS, or '*' (none: CORS off)");
  std::string name = flags.GetString(
      "served-model-name", "", "model id clients send (none: the model's file or directory name)");
  c.server.log_prompts = flags.GetBool("log-prompts", "log each prompt's text");
  c.server.webui = !flags.GetBool("no-webui", "do not serve the web page at /");
  const std::string special_in_content =
      flags.GetString("special-tokens-in-content", "text",
                      "special-token strings in messages: text (tokenized as text) or allow");
  c.server.tool_call_parser = flags.GetString(
      "tool-call-parser", "auto", "auto (from the template), hermes, llama3_json, mistral or none");
  c.server.reasoning_parser =
      flags.GetString("reasoning-parser", "auto", "auto (on for <think> templates), think or none");
  const int64_t store_entries = flags.GetInt("responses-store-max-entries", 1024,
                                             "stored /v1/responses answers kept at most");
  c.server.responses_store_max_mib =
      flags.GetInt("responses-store-max-mib", 256, "MiB of stored /v1/responses JSON kept at most");
  c.drain_seconds = flags.GetDouble("drain-seconds", 30.0,
                                    "on SIGTERM/SIGINT, seconds running requests may finish");

  EngineOptions& e = c.engine;
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  e.max_queue = flags.GetInt("max-queue", e.max_queue, "waiting requests before new ones get 503");
  e.max_model_len = flags.GetInt("max-model-len", e.max_model_len,
                                 "prompt + output tokens of a request; 0 = the model's context");
  e.kv_backend = flags.GetString("kv-backend", e.kv_backend, "KV cache: auto, paged or dense");
  e.kv_dtype =
      flags.GetString("kv-dtype", e.kv_dtype, "KV element type: bf16, f32, int8, q4 or q4r");
  const int64_t block_size = flags.GetInt("kv-block-size", e.kv_block_size, "tokens per KV block");
  e.kv_cache_mib =
      flags.GetInt("kv-cache-mib", e.kv_cache_mib, "KV pool in MiB; 0 = a share of free memory");
  e.kv_blocks =
      flags.GetInt("kv-blocks", e.kv_blocks, "KV pool in blocks (overrides kv-cache-mib)");
  e.kv_disk_dir = flags.GetString(
      "kv-disk-dir", "", "keep evicted and shutdown prefix blocks in this directory (none: RAM only)");
  e.kv_disk_gib = flags.GetInt("kv-disk-gib", e.kv_disk_gib, "with --kv-disk-dir: its size limit in GiB");
  e.kv_disk_preload_gib = flags.GetDouble(
      "kv-disk-preload-gib", -1,
      "with --kv-disk-dir: at start, read the blocks written last into at most this many GiB of "
      "the pool in the background (never evicting); -1 = half the pool, 0 = off");
  e.prefix_cache = !flags.GetBool("no-prefix-cache", "do not reuse cached prefix blocks");
  const std::string tail = flags.GetString(
      "prefix-tail-copy", "on", "on: reuse a partly filled last block by copying it; off");
  e.max_num_seqs = flags.GetInt("max-num-seqs", e.max_num_seqs, "sequences running at once");
  e.max_num_batched_tokens = flags.GetInt("max-num-batched-tokens", e.max_num_batched_tokens,
                                          "tokens per engine step (decode + prefill chunks)");
  e.schedule = flags.GetString("schedule", e.schedule,
                               "admission order: fcfs or longest-prefix (most cached first)");
  e.warmup = !flags.GetBool("no-warmup",
                            "start without the warm-up forward pass (the first request then pays "
                            "the one-time costs)");
  const std::string step_ms = flags.GetString(
      "max-step-ms", "auto", "bound on a step's prefill while decoding: auto, off or N ms");
  c.kv_events.endpoint = flags.GetString(
      "kv-events", "", "publish KV cache events (vLLM's, over ZeroMQ) to this endpoint, e.g. tcp://*:5557 (none: off)");
  c.kv_events.replay_endpoint = flags.GetString(
      "kv-events-replay", "", "with --kv-events: a replay (ROUTER) endpoint (none: no replay)");
  const std::string kv_topic = flags.GetString(
      "kv-events-topic", "", "with --kv-events: the topic (none: kv@<hostname>@<served model name>)");
  KVFORK_RETURN_IF_ERROR(flags.Finish());

  if (store_entries < 0 || c.server.responses_store_max_mib < 0)
    return InvalidArgumentError(
        "--responses-store-max-entries and --responses-store-max-mib must be >= 0");
  c.server.responses_store_max_entries = static_cast<size_t>(store_entries);
  if (port < 0 || port > 65535)
    return InvalidArgumentError("--port must be in [0, 65535], got " + std::to_string(port));
  c.server.port = static_cast<int>(port);
  if (!(body_mib > 0)) return InvalidArgumentError("--max-body-mib must be positive");
  c.server.max_body_bytes = static_cast<int64_t>(body_mib * 1024 * 1024);
  if (c.drain_seconds < 0) return InvalidArgumentError("--drain-seconds must be >= 0");
  if (read_timeout < 1 || read_timeout > 3600)
    return InvalidArgumentError("--http-read-timeout must be in [1, 3600] seconds");
  if (write_timeout < 1 || write_timeout > 3600)
    return InvalidArgumentError("--http-write-timeout must be in [1, 3600] seconds");
  c.server.read_timeout_seconds = static_cast<int>(read_timeout);
  if (keep_alive < 1 || keep_alive > 3600)
    return InvalidArgumentError("--http-keep-alive-timeout must be in [1, 3600] seconds");
  c.server.keep_alive_seconds = static_cast<int>(keep_alive);
  if (http_threads < 0 || http_threads > server::kMaxHttpThreads)
    return InvalidArgumentError("--http-threads must be in [1, " +
                                std::to_string(server::kMaxHttpThreads) +
                                "] (0 = automatic), got " + std::to_string(http_threads));
  c.server.write_timeout_seconds = static_cast<int>(write_timeout);
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  e.threads = static_cast<int>(threads);
  if (e.max_queue < 1) return InvalidArgumentError("--max-queue must be >= 1");
  if (block_size < 1 || block_size > kMaxAttentionBlockSize)
    return InvalidArgumentError("--kv-block-size must be in [1, " +
                                std::to_string(kMaxAttentionBlockSize) +
                                "] (the attention kernels' limit), got " +
                                std::to_string(block_size));
  e.kv_block_size = static_cast<int>(block_size);
  if (tail != "on" && tail != "off")
    return InvalidArgumentError("--prefix-tail-copy must be on or off, got '" + tail + "'");
  e.prefix_tail_copy = tail == "on";
  KVFORK_ASSIGN_OR_RETURN(e.max_step_ms, ParseMaxStepMs(step_ms));
  std::optional<server::SpecialTokensInContent> special =
      server::ParseSpecialTokensInContent(special_in_content);
  if (!special)
    return InvalidArgumentError("--special-tokens-in-content must be text or allow, got '" +
                                special_in_content + "'");
  c.server.special_tokens_in_content = *special;
  if (c.server.tool_call_parser != "auto" &&
      !server::ParseToolCallFormat(c.server.tool_call_parser))
    return InvalidArgumentError(
        "--tool-call-parser must be auto, hermes, llama3_json, mistral or none, got '" +
        c.server.tool_call_parser + "'");
  if (c.server.reasoning_parser != "auto" && c.server.reasoning_parser != "think" &&
      c.server.reasoning_parser != "none")
    return InvalidArgumentError("--reasoning-parser must be auto, think or none, got '" +
                                c.server.reasoning_parser + "'");
  c.server.api_keys = server::SplitKeys(keys);
  c.server.admin_api_keys = server::SplitKeys(admin_keys);
  c.server.cors_origins = server::SplitKeys(cors);
  // One HTTP thread per connection that may be open at once: every running
  // and queued request plus a margin for /metrics, /health and refusals.
  c.server.http_threads = http_threads > 0
                              ? static_cast<int>(http_threads)
                              : static_cast<int>(std::max<int64_t>(
                                    4, std::min<int64_t>(512, e.max_num_seqs + e.max_queue + 16)));
  if (name.empty()) {
    std::filesystem::path p(c.model_dir);
    name = (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
  }
  c.server.model_name = name;
  if (c.kv_events.endpoint.empty() &&
      (!c.kv_events.replay_endpoint.empty() || !kv_topic.empty()))
    return InvalidArgumentError(
        "--kv-events-replay and --kv-events-topic need --kv-events ENDPOINT (e.g. tcp://*:5557)");
  c.kv_events.topic = kv_topic.empty() ? DefaultKvEventsTopic(name) : kv_topic;
  c.kv_events.block_size = e.kv_block_size;
  return c;
}

std::atomic<bool> g_ready{false};
// The first stop signal received (0: none yet). The signal thread is detached
// and may outlive Serve (an error return while it waits), so it touches
// only these globals, never Serve's locals.
std::atomic<int> g_stop_signal{0};

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, sig);
  return set;
}

// Body of the signal thread: waits for signals until a stop signal.
void WaitForSignals() {
  const sigset_t set = HandledSignals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      KVFORK_LOG(kInfo) << "signal " << sig << " (" << strsignal(sig) << ") ignored";
      continue;
    }
    if (!g_ready.load()) {
      // Nothing runs yet: there is nothing to drain.
      KVFORK_LOG(kInfo) << "signal " << sig << " while loading; exiting";
      std::_Exit(0);
    }
    g_stop_signal.store(sig);
    return;
  }
}

Status Serve(int argc, char** argv) {
  KVFORK_ASSIGN_OR_RETURN(ServeConfig c, ParseServeFlags(argc, argv));

  // Each sampled choice holds vocabulary-sized buffers (0.6-1.8 MB) for its
  // lifetime. With glibc's default dynamic threshold, the first such buffer
  // freed raises the mmap threshold above that size, later ones come from
  // the heap, and fragmentation keeps the peak of a burst resident for good:
  // RSS ratchets up under load (measured by the soak, docs/reliability.md).
  // A fixed threshold keeps large buffers mmapped and returns them on free.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  // What a burst freed stays resident in malloc's arenas (16 on 2 cores, one
  // per thread that allocated at once), scattered between live chunks, so
  // idle RSS climbed run after run: +7.8 MiB of anonymous memory in a 240 s
  // soak, of which malloc_trim at the end gave back 11 MiB (the soak's
  // idle end then sat below its idle baseline). Once the engine has been
  // idle for half a second, hand those pages back; the next burst faults
  // them in again.
  c.engine.on_idle = [] { malloc_trim(0); };

  // Signals go to the sigwait thread only: block them before any thread starts.
  const sigset_t set = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed client socket is a failed write, not a crash

  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<server::HttpServer> http,
                          server::HttpServer::Start(c.server));
  const std::string url = "http://" + c.server.host + ":" + std::to_string(http->port());

  std::thread(WaitForSignals).detach();

  ModelLoadOptions load;  // progress on a terminal only
  load.context_length = c.engine.max_model_len;  // longrope's short/long choice
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(c.model_dir, load));
  if (!c.engine.kv_disk_dir.empty()) {
    // The disk tier's blocks are only valid for these exact weights.
    KVFORK_ASSIGN_OR_RETURN(c.engine.kv_model_fingerprint, ModelFilesFingerprint(c.model_dir));
    KVFORK_LOG(kInfo) << "KV disk tier: " << c.engine.kv_disk_dir << ", at most "
                      << c.engine.kv_disk_gib << " GiB";
  }
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                          LoadModelTokenizer(c.model_dir, c.tokenizer_dir));
  std::unique_ptr<ChatTemplate> chat_template;
  if (!tokenizer->chat_template().empty()) {
    StatusOr<ChatTemplate> t = ChatTemplate::Parse(tokenizer->chat_template());
    if (t.ok()) {
      chat_template = std::make_unique<ChatTemplate>(std::move(t).value());
    } else {
      KVFORK_LOG(kWarn) << "chat template not usable, /v1/chat/completions disabled: "
                        << t.status().ToString();
    }
  }
  // Declared before the engine so it outlives the engine (its event sink).
  std::unique_ptr<KvEventPublisher> kv_events;
  if (!c.kv_events.endpoint.empty()) {
    KVFORK_ASSIGN_OR_RETURN(kv_events, KvEventPublisher::Create(c.kv_events));
    c.engine.kv_event_sink = kv_events.get();
    KVFORK_LOG(kInfo) << "KV events: publishing on " << kv_events->bound_endpoint()
                      << " topic '" << c.kv_events.topic << "'"
                      << (c.kv_events.replay_endpoint.empty()
                              ? std::string()
                              : ", replay on " + kv_events->bound_replay_endpoint());
  }
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(c.engine, *model, *tokenizer));
  server::ServingBackend backend;
  if (kv_events) {
    KvEventPublisher* p = kv_events.get();
    backend.kv_event_counters = [p] { return p->counters(); };
  }
  backend.engine = engine.get();
  backend.tokenizer = tokenizer.get();
  backend.chat_template = chat_template.get();
  http->Attach(backend);
  g_ready.store(true);

  const EngineStats stats = engine->Stats();
  const ModelConfig& mc = model->config();
  char line[512];
  std::snprintf(line, sizeof(line),
                "kvfork serve: model %s (%s, weights %s), kv %s %s, %lld blocks x %lld tokens = "
                "%.1f MiB, context %lld, isa %s, threads %d, auth %s, listening on %s",
                c.server.model_name.c_str(), c.model_dir.c_str(),
                mc.torch_dtype.empty() ? "?" : mc.torch_dtype.c_str(), c.engine.kv_backend.c_str(),
                c.engine.kv_dtype.c_str(), static_cast<long long>(stats.blocks_total),
                static_cast<long long>(c.engine.kv_block_size),
                static_cast<double>(stats.blocks_total) * stats.block_bytes / (1024.0 * 1024.0),
                static_cast<long long>(engine->max_context()), IsaName(ActiveIsa()),
                c.engine.threads,
                c.server.api_keys.empty() && c.server.admin_api_keys.empty() ? "off" : "on",
                url.c_str());
  std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);

  while (g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  KVFORK_LOG(kInfo) << "signal " << g_stop_signal.load() << ": draining for up to "
                    << c.drain_seconds << " s";
  const int64_t cancelled = http->Drain(c.drain_seconds);
  engine->Shutdown();
  KVFORK_LOG(kInfo) << "stopped (" << cancelled << " requests cancelled at the drain deadline)";
  return OkStatus();
}

int RunServe(int argc, char** argv) {
  return ExitCode("serve", Serve(argc, argv));
}

}  // namespace

KVFORK_REGISTER_COMMAND(serve, "serve",
                        "OpenAI-compatible HTTP server (--model DIR|FILE.gguf --port 8080)",
                        RunServe);

}  // namespace kvfork::cli
