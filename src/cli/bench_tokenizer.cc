// `kvfork bench tokenizer`: encoding speed (MB/s of UTF-8 input, one thread)
// on a ~10 MB mixed corpus, side by side in the same run with two references
// run under node (tools/tokenizer/bench.mjs): @lenml/tokenizers and llama.cpp's
// tokenizer via node-llama-cpp (vocab-only GGUF from .cache/llama.cpp/models).
// Target: ours >= 3x the faster reference.
//
// Corpus: llama.cpp's own sources and docs (C++, Python, Markdown: code with
// tabs and indentation, English prose), then seeded random multilingual text
// (CJK, Cyrillic, Arabic, emoji, digits) to --mb megabytes, cut into
// documents of about 16 KB at line ends. Each tokenizer is loaded (timed),
// warmed up on the first ~1 MB, then timed over whole passes: --reps of them,
// but no pass is started once --budget-s seconds of passes are spent (at
// least one always runs), so the slow references finish on a loaded machine.
// The median pass is reported (MB/s of wall time, and of the process's CPU
// time, which is less distorted on a machine shared with other work), with
// the load average before and after. The target is judged on wall time.
//
// llama2 is SentencePiece (tokenizer.ggml.model "llama", llama.cpp's Llama 2
// vocab file), loaded from the GGUF as `serve` would; it has no tokenizer.json,
// so its only reference is llama.cpp.
//
// Flags: --model qwen3|llama3|llama2|all (default all), --mb N (default 10), --reps N
// (default 3), --budget-s N (default 60), --no-reference (ours only), --json
// PATH (default bench/results/tokenizer.json).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "core/progress.h"
#include "core/timer.h"
#include "engine/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork::cli {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  const char* env = std::getenv("KVFORK_SOURCE_DIR");
  return env != nullptr ? env : ".";
}

// mulberry32, as tools/tokenizer/corpus.mjs.
struct Rng {
  uint32_t a;
  uint32_t Next() {
    a += 0x6d2b79f5u;
    uint32_t t = a;
    t = (t ^ (t >> 15)) * (t | 1u);
    t ^= t + (t ^ (t >> 7)) * (t | 61u);
    return t ^ (t >> 14);
  }
};

// Words of random letters from one script, space separated, with digits and
// punctuation: multilingual text with a word structure.
std::string RandomWords(uint32_t seed, size_t bytes) {
  struct Script {
    uint32_t lo, hi;
  };
  const Script scripts[] = {{0x4e00, 0x9fa5}, {0x430, 0x44f}, {0x627, 0x64a}, {0x3b1, 0x3c9},
                            {0x1f600, 0x1f64f}, {0x61, 0x7a}, {0xe0, 0xfc}};
  Rng rng{seed};
  std::string out;
  while (out.size() < bytes) {
    const Script& s = scripts[rng.Next() % std::size(scripts)];
    const int words = 5 + static_cast<int>(rng.Next() % 20);
    for (int w = 0; w < words; ++w) {
      const int len = 1 + static_cast<int>(rng.Next() % 8);
      for (int k = 0; k < len; ++k) utf8::AppendCodepoint(s.lo + rng.Next() % (s.hi - s.lo + 1), &out);
      const uint32_t r = rng.Next() % 16;
      if (r == 0) out += ", ";
      else if (r == 1) out += ". ";
      else if (r == 2) out += " " + std::to_string(rng.Next() % 100000) + " ";
      else out += ' ';
    }
    out += '\n';
  }
  return out;
}

std::vector<std::string> BuildCorpus(size_t total_bytes) {
  // About 70% real text: llama.cpp's sources and docs, in path order.
  std::vector<fs::path> files;
  const fs::path base = SourceDir() + "/.cache/llama.cpp";
  std::error_code ec;
  for (const char* sub : {"src", "common", "docs", "examples", "tools", "gguf-py", "tests"}) {
    for (auto it = fs::recursive_directory_iterator(base / sub, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string ext = it->path().extension().string();
      if (it->is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".py" || ext == ".md"))
        files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string text;
  const size_t real_bytes = total_bytes * 7 / 10;
  for (const fs::path& p : files) {
    if (text.size() >= real_bytes) break;
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  text.resize(std::min(text.size(), real_bytes));
  text += RandomWords(12345, total_bytes - text.size());
  // Documents of ~16 KB cut at a line end, and never inside a character.
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.size(), pos + 16384);
    const size_t nl = text.find('\n', end);
    end = nl == std::string::npos ? text.size() : nl + 1;
    std::string doc = text.substr(pos, end - pos);
    doc.erase(std::remove(doc.begin(), doc.end(), '\x1e'), doc.end());
    docs.push_back(std::move(doc));
    pos = end;
  }
  return docs;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The protocol tools/tokenizer/bench.mjs follows for the references: a
// warm-up over the first ~1 MB, then whole timed passes, `reps` of them but
// none started once `budget_s` seconds of passes are spent (at least one).
struct Passes {
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;  // CPU time of the process during each pass
  size_t tokens = 0;
};

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
Passes TimePasses(const Tokenizer& tok, const std::vector<std::string>& docs, int64_t reps,
                  double budget_s) {
  size_t warm = 0;
  for (const auto& d : docs) {
    if (warm > (size_t{1} << 20)) break;
    tok.Encode(d, false);
    warm += d.size();
  }
  Passes p;
  double spent = 0;
  ProgressOptions po;  // on a terminal only, between timed passes
  po.label = "timed pass";
  po.total = reps;
  Progress progress(po);
  for (int64_t r = 0; r < reps && (r == 0 || spent < budget_s); ++r) {
    progress.Update(r + 1);
    size_t tokens = 0;
    Timer t;
    const double cpu0 = ProcessCpuSeconds();
    for (const auto& d : docs) tokens += tok.Encode(d, false).size();
    p.seconds.push_back(t.Seconds());
    p.cpu_seconds.push_back(ProcessCpuSeconds() - cpu0);
    spent += p.seconds.back();
    p.tokens = tokens;
  }
  return p;
}

// Runs the node references on the corpus file; a JSON object, or null.
nlohmann::json RunReferences(const std::string& corpus_path, const std::string& model_dir,
                             const std::string& gguf, int64_t reps, double budget_s) {
  const std::string cmd = "node '" + SourceDir() + "/tools/tokenizer/bench.mjs' '" + corpus_path +
                          "' '" + model_dir + "' '" + gguf + "' " + std::to_string(reps) + " " +
                          std::to_string(budget_s) + " 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) out.clear();
  }
  nlohmann::json ref = nlohmann::json::parse(out, nullptr, false);
  if (ref.is_discarded() || !ref.is_object()) {
    std::fprintf(stderr, "bench tokenizer: reference run failed: %s\n", cmd.c_str());
    return nullptr;
  }
  return ref;
}

std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", load[0], load[1], load[2]);
  return buf;
}

int RunBenchTokenizer(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {"no-reference"});
  const std::string which =
      flags.GetString("model", "all", "tokenizer: qwen3, llama3, llama2 (SentencePiece) or all");
  const int64_t mb = flags.GetInt("mb", 10, "megabytes of corpus");
  const int64_t reps = flags.GetInt("reps", 3, "timed passes; the median is reported");
  const int64_t budget =
      flags.GetInt("budget-s", 60, "seconds of passes after which no new pass starts");
  const std::string json_path =
      flags.GetString("json", "bench/results/tokenizer.json", "where the JSON result goes");
  const bool no_reference = flags.GetBool("no-reference", "time ours only, not the references");
  if (Status s = flags.Finish(); !s.ok()) {
    std::fprintf(stderr, "kvfork bench tokenizer: %s\n", s.ToString().c_str());
    return 2;
  }
  if (mb < 1 || reps < 1 || budget < 1) {
    std::fprintf(stderr, "bench tokenizer: --mb, --reps and --budget-s must be >= 1\n");
    return 2;
  }
  struct ModelSpec {
    std::string name, dir, gguf;
  };
  const std::string cache = SourceDir() + "/.cache";
  std::vector<ModelSpec> models;
  if (which == "all" || which == "qwen3")
    models.push_back({"qwen3", cache + "/npm/tokenizer-qwen3/package/models",
                      cache + "/llama.cpp/models/ggml-vocab-qwen2.gguf"});
  if (which == "all" || which == "llama3")
    models.push_back({"llama3", cache + "/npm/tokenizer-llama3/package/models",
                      cache + "/llama.cpp/models/ggml-vocab-llama-bpe.gguf"});
  if (which == "all" || which == "llama2")  // no directory: the GGUF's tokenizer
    models.push_back({"llama2", "", cache + "/llama.cpp/models/ggml-vocab-llama-spm.gguf"});
  if (models.empty()) {
    std::fprintf(stderr, "bench tokenizer: --model must be qwen3, llama3, llama2 or all\n");
    return 2;
  }

  const std::vector<std::string> docs = BuildCorpus(static_cast<size_t>(mb) << 20);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  const double megabytes = static_cast<double>(bytes) / (1 << 20);
  char corpus_path[] = "/tmp/kvfork_tokenizer_corpus_XXXXXX";
  const int fd = mkstemp(corpus_path);
  if (fd < 0) {
    std::perror("bench tokenizer: mkstemp");
    return 1;
  }
  close(fd);
  {
    std::ofstream out(corpus_path, std::ios::binary);
    for (size_t i = 0; i < docs.size(); ++i) out << (i ? "\x1e" : "") << docs[i];
  }

  const std::string load_before = LoadAverage();
  nlohmann::json results = nlohmann::json::array();
  std::printf("corpus: %.2f MB in %zu documents; one thread; median of up to %lld passes "
              "(none started after %llds of passes); load average %s\n\n",
              megabytes, docs.size(), static_cast<long long>(reps),
              static_cast<long long>(budget), load_before.c_str());
  std::printf("%-8s %-26s %9s %10s %10s %7s %12s %12s\n", "model", "tokenizer", "load s", "MB/s",
              "CPU MB/s", "passes", "tokens", "vs best ref");
  auto print_row = [](const std::string& model, const char* name, double load_s, double mbps,
                      double cpu_mbps, size_t passes, size_t tokens) {
    std::printf("%-8s %-26s %9.3f %10.2f %10.2f %7zu %12zu", model.c_str(), name, load_s, mbps,
                cpu_mbps, passes, tokens);
  };
  int rc = 0;
  for (const ModelSpec& m : models) {
    Timer load_timer;
    auto tok = m.dir.empty() ? kvfork::LoadModelTokenizer(m.gguf) : Tokenizer::Load(m.dir);
    const double load_s = load_timer.Seconds();
    if (!tok.ok()) {
      std::fprintf(stderr, "bench tokenizer: %s\n", tok.status().ToString().c_str());
      rc = 1;
      continue;
    }
    const Passes ours_passes = TimePasses(**tok, docs, reps, static_cast<double>(budget));
    const double ours = megabytes / Median(ours_passes.seconds);
    const double ours_cpu = megabytes / Median(ours_passes.cpu_seconds);
    nlohmann::json row = {{"model", m.name},
                          {"corpus_mb", megabytes},
                          {"kvfork_mbps", ours},
                          {"kvfork_cpu_mbps", ours_cpu},
                          {"kvfork_seconds", ours_passes.seconds},
                          {"kvfork_cpu_seconds", ours_passes.cpu_seconds},
                          {"kvfork_load_seconds", load_s},
                          {"kvfork_tokens", ours_passes.tokens}};
    double best_ref = 0;
    std::string best_name;
    if (!no_reference) {
      const nlohmann::json ref = RunReferences(corpus_path, m.dir.empty() ? "-" : m.dir, m.gguf,
                                               reps, static_cast<double>(budget));
      if (ref.is_null()) rc = 1;
      for (const char* name : {"lenml", "llama_cpp"}) {
        if (ref.is_null() || !ref.contains(name)) continue;
        const auto secs = ref[name]["seconds"].get<std::vector<double>>();
        const auto cpu_secs = ref[name]["cpu_seconds"].get<std::vector<double>>();
        const double mbps = megabytes / Median(secs);
        const double cpu_mbps = megabytes / Median(cpu_secs);
        const double ref_load = ref[name]["load_seconds"].get<double>();
        const auto ref_tokens = ref[name]["tokens"].get<size_t>();
        const std::string key(name);
        row[key + "_mbps"] = mbps;
        row[key + "_cpu_mbps"] = cpu_mbps;
        row[key + "_seconds"] = secs;
        row[key + "_cpu_seconds"] = cpu_secs;
        row[key + "_load_seconds"] = ref_load;
        row[key + "_tokens"] = ref_tokens;
        if (mbps > best_ref) best_ref = mbps, best_name = name;
        print_row(m.name, key == "lenml" ? "@lenml/tokenizers (node)" : "llama.cpp (node-llama-cpp)",
                  ref_load, mbps, cpu_mbps, secs.size(), ref_tokens);
        std::printf("\n");
      }
    }
    print_row(m.name, "kvfork", load_s, ours, ours_cpu, ours_passes.seconds.size(),
              ours_passes.tokens);
    if (best_ref > 0) {
      row["speedup_vs_best_reference"] = ours / best_ref;
      row["best_reference"] = best_name;
      row["target_speedup"] = 3.0;
      std::printf(" %11.2fx (target 3x)", ours / best_ref);
    }
    std::printf("\n");
    results.push_back(row);
  }
  std::remove(corpus_path);
  const std::string load_after = LoadAverage();
  std::printf("\nload average after: %s\n", load_after.c_str());
  const nlohmann::json doc = {{"load_average_before", load_before},
                              {"load_average_after", load_after},
                              {"reps", reps},
                              {"budget_seconds", budget},
                              {"results", results}};
  if (Status s = WriteJsonFile(json_path, doc); !s.ok()) return ExitCode("bench tokenizer", s);
  std::printf("wrote %s\n", json_path.c_str());
  return rc;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(tokenizer, "tokenizer",
                          "encode MB/s vs @lenml/tokenizers and llama.cpp (node)",
                          RunBenchTokenizer);

}  // namespace kvfork::cli
