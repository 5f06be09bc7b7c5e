#include "core/progress.h"

#include <unistd.h>

#include <algorithm>

#include "core/timer.h"

namespace kvfork {

std::string FormatBytes(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(text, sizeof(text), "%.2f GiB", b / (1 << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", b / (1 << 20));
  } else if (bytes >= (int64_t{1} << 10)) {
    std::snprintf(text, sizeof(text), "%.1f KiB", b / (1 << 10));
  } else {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  }
  return text;
}

Progress::Progress(ProgressOptions options) : options_(std::move(options)) {
  enabled_ = options_.enabled.has_value() ? *options_.enabled
                                          : options_.out != nullptr && isatty(fileno(options_.out));
  enabled_ = enabled_ && options_.out != nullptr;
}

Progress::~Progress() { Finish(); }

void Progress::Update(int64_t done, const std::string& note) {
  done_ = done;
  note_ = note;
  if (!enabled_ || finished_) return;
  const int64_t now = NowNanos();
  if (printed_ && now - last_print_ns_ < options_.min_interval_ns) return;
  last_print_ns_ = now;
  Print(note);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  Print(note_);
  std::fputc('\n', options_.out);
  std::fflush(options_.out);
}

void Progress::Print(const std::string& note) {
  std::string line = options_.label + ": ";
  char numbers[64];
  if (options_.bytes) {
    line += FormatBytes(done_);
    if (options_.total > 0) line += " / " + FormatBytes(options_.total);
  } else {
    std::snprintf(numbers, sizeof(numbers), "%lld", static_cast<long long>(done_));
    line += numbers;
    if (options_.total > 0) {
      std::snprintf(numbers, sizeof(numbers), "/%lld", static_cast<long long>(options_.total));
      line += numbers;
    }
  }
  if (options_.total > 0) {
    const double pct = 100.0 * static_cast<double>(done_) / static_cast<double>(options_.total);
    std::snprintf(numbers, sizeof(numbers), "  %3.0f%%", std::clamp(pct, 0.0, 100.0));
    line += numbers;
  }
  if (!note.empty()) line += "  " + note;
  const size_t width = line.size();
  if (width < last_width_) line.append(last_width_ - width, ' ');
  last_width_ = width;
  std::fprintf(options_.out, "\r%s", line.c_str());
  std::fflush(options_.out);
  printed_ = true;
}

}  // namespace kvfork
