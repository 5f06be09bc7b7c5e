// `kvfork bench tokenizer`: encoding speed (MB/s of UTF-8 input, one thread)
// on a ~10 MB mixed corpus, side by side in the same run with two references
// run under node (tools/tokenizer/bench.mjs): @lenml/tokenizers and llama.cpp's
// tokenizer via node-llama-cpp (vocab-only GGUF from .cache/llama.cpp/models).
// Target: ours >= 3x the faster reference.
//
// Corpus: llama.cpp's own sources and docs (C++, Python, Markdown: code with
// tabs and indentation, English prose), then seeded random multilingual text
// (CJK, Cyrillic, Arabic, emoji, digits) to --mb megabytes, cut into
// documents of about 16 KB at line ends. Every run times one warm-up pass and
// then --reps passes; the median is reported.
//
// Flags: --model qwen3|llama3|all (default all), --mb N (default 10), --reps N
// (default 3), --no-reference (ours only), --json PATH (default
// bench/results/tokenizer.json).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/flags.h"
#include "core/timer.h"
#include "tokenizer/tokenizer.h"

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

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

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
      for (int k = 0; k < len; ++k) AppendUtf8(s.lo + rng.Next() % (s.hi - s.lo + 1), &out);
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

int RunBenchTokenizer(int argc, char** argv) {
  auto flags = Flags::Parse(argc, argv, {"no-reference"});
  if (!flags.ok()) {
    std::fprintf(stderr, "bench tokenizer: %s\n", flags.status().ToString().c_str());
    return 2;
  }
  auto which = flags->GetString("model", "all");
  auto mb = flags->GetInt("mb", 10);
  auto reps = flags->GetInt("reps", 3);
  auto json_path = flags->GetString("json", "bench/results/tokenizer.json");
  const bool no_reference = flags->GetBool("no-reference");
  for (const Status& s : {which.status(), mb.status(), reps.status(), json_path.status(),
                          flags->Finish()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "bench tokenizer: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  if (*mb < 1 || *reps < 1) {
    std::fprintf(stderr, "bench tokenizer: --mb and --reps must be >= 1\n");
    return 2;
  }
  struct ModelSpec {
    std::string name, dir, gguf;
  };
  const std::string cache = SourceDir() + "/.cache";
  std::vector<ModelSpec> models;
  if (*which == "all" || *which == "qwen3")
    models.push_back({"qwen3", cache + "/npm/tokenizer-qwen3/package/models",
                      cache + "/llama.cpp/models/ggml-vocab-qwen2.gguf"});
  if (*which == "all" || *which == "llama3")
    models.push_back({"llama3", cache + "/npm/tokenizer-llama3/package/models",
                      cache + "/llama.cpp/models/ggml-vocab-llama-bpe.gguf"});
  if (models.empty()) {
    std::fprintf(stderr, "bench tokenizer: --model must be qwen3, llama3 or all\n");
    return 2;
  }

  const std::vector<std::string> docs = BuildCorpus(static_cast<size_t>(*mb) << 20);
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

  nlohmann::json results = nlohmann::json::array();
  std::printf("corpus: %.2f MB in %zu documents; one thread; median of %lld passes\n\n",
              megabytes, docs.size(), static_cast<long long>(*reps));
  std::printf("%-8s %-26s %10s %12s %10s\n", "model", "tokenizer", "MB/s", "tokens", "vs best ref");
  int rc = 0;
  for (const ModelSpec& m : models) {
    auto tok = Tokenizer::Load(m.dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "bench tokenizer: %s\n", tok.status().ToString().c_str());
      rc = 1;
      continue;
    }
    size_t tokens = 0;
    for (const auto& d : docs) tokens += (*tok)->Encode(d, false).size();  // warm-up
    std::vector<double> secs;
    for (int64_t r = 0; r < *reps; ++r) {
      Timer t;
      for (const auto& d : docs) tokens = tokens + 0 * (*tok)->Encode(d, false).size();
      secs.push_back(t.Seconds());
    }
    const double ours = megabytes / Median(secs);
    nlohmann::json row = {{"model", m.name}, {"corpus_mb", megabytes},
                          {"kvfork_mbps", ours}, {"kvfork_seconds", secs}};
    double best_ref = 0;
    std::string best_name;
    if (!no_reference) {
      const std::string cmd = "node '" + SourceDir() + "/tools/tokenizer/bench.mjs' '" +
                              corpus_path + "' '" + m.dir + "' '" + m.gguf + "' " +
                              std::to_string(*reps) + " 2>/dev/null";
      std::string out;
      if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
        if (pclose(p) != 0) out.clear();
      }
      const nlohmann::json ref = nlohmann::json::parse(out, nullptr, false);
      if (ref.is_discarded() || !ref.is_object()) {
        std::fprintf(stderr, "bench tokenizer: reference run failed: %s\n", cmd.c_str());
        rc = 1;
      } else {
        for (const char* name : {"lenml", "llama_cpp"}) {
          if (!ref.contains(name)) continue;
          const double mbps = megabytes / Median(ref[name]["seconds"].get<std::vector<double>>());
          row[std::string(name) + "_mbps"] = mbps;
          row[std::string(name) + "_tokens"] = ref[name]["tokens"];
          if (mbps > best_ref) best_ref = mbps, best_name = name;
          std::printf("%-8s %-26s %10.2f %12lld\n", m.name.c_str(),
                      std::string(name) == "lenml" ? "@lenml/tokenizers (node)"
                                                   : "llama.cpp (node-llama-cpp)",
                      mbps, ref[name]["tokens"].get<long long>());
        }
      }
    }
    std::size_t our_tokens = 0;
    for (const auto& d : docs) our_tokens += (*tok)->Encode(d, false).size();
    row["kvfork_tokens"] = our_tokens;
    if (best_ref > 0) {
      row["speedup_vs_best_reference"] = ours / best_ref;
      row["best_reference"] = best_name;
      row["target_speedup"] = 3.0;
      std::printf("%-8s %-26s %10.2f %12zu %9.2fx (target 3x)\n", m.name.c_str(), "kvfork", ours,
                  our_tokens, ours / best_ref);
    } else {
      std::printf("%-8s %-26s %10.2f %12zu\n", m.name.c_str(), "kvfork", ours, our_tokens);
    }
    results.push_back(row);
  }
  std::remove(corpus_path);
  std::error_code ec;
  fs::create_directories(fs::path(*json_path).parent_path(), ec);
  std::ofstream(*json_path) << results.dump(2) << "\n";
  std::printf("\nwrote %s\n", json_path->c_str());
  return rc;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(tokenizer, "tokenizer",
                          "encode MB/s vs @lenml/tokenizers and llama.cpp (node)",
                          RunBenchTokenizer);

}  // namespace kvfork::cli
