// Monotonic wall-clock timing.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvfork {

inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Timer {
 public:
  Timer() : start_(NowNanos()) {}
  void Reset() { start_ = NowNanos(); }
  double Seconds() const { return static_cast<double>(NowNanos() - start_) * 1e-9; }
  double Millis() const { return static_cast<double>(NowNanos() - start_) * 1e-6; }

 private:
  int64_t start_;
};

}  // namespace kvfork
