// A one-line progress report for long operations (model load, make-model,
// quantize, export-gguf, benchmarks), shown only when its stream is a
// terminal: a pipe or a log file gets nothing, so scripts and tests read the
// same output as before.
//
//   Progress p({.label = "loading weights", .total = total_bytes, .bytes = true});
//   for (...) p.Update(done_bytes, "tensor 12/310");
//   p.Finish();  // or let the destructor do it
//
// Prints "\rLABEL: 1.20 GiB / 3.40 GiB   35%  NOTE" (or "LABEL: 2/5" in units), rewriting the line
// at most once per min_interval_ns (10 a second by default: the cost of a report stays invisible
// however often Update is called), and a final report with a newline at Finish(). Not thread-safe:
// one thread reports (call Update from the loop that drives the work, not from pool workers).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace kvfork {

struct ProgressOptions {
  std::string label;   // what is going on: "loading weights", "round"
  int64_t total = 0;   // units of work in all; 0 = unknown (no percentage)
  bool bytes = false;  // units are bytes, shown in KiB/MiB/GiB
  FILE* out = stderr;
  // Unset: report only if `out` is a terminal. Tests set it.
  std::optional<bool> enabled;
  int64_t min_interval_ns = 100'000'000;
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  // `done` units of `total` are complete; note is shown after the numbers.
  void Update(int64_t done, const std::string& note = "");
  // The last report, then a newline; once (later calls do nothing).
  void Finish();

 private:
  void Print(const std::string& note);

  ProgressOptions options_;
  bool enabled_ = false;
  bool finished_ = false;
  bool printed_ = false;
  int64_t done_ = 0;
  std::string note_;
  int64_t last_print_ns_ = 0;
  size_t last_width_ = 0;  // to blank what a longer previous line left
};

// "1.20 GiB", "350.0 MiB", "12.0 KiB", "512 B".
std::string FormatBytes(int64_t bytes);

}  // namespace kvfork
