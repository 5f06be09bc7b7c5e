// A gate a disk tier's read hook waits at until the test opens it, so a
// test can hold reads in flight (a request arriving mid-load or
// mid-preload) and count how many started.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace kvfork::testing {

struct ReadGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> reads{0};  // reads that reached the gate

  void Wait() {
    ++reads;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

}  // namespace kvfork::testing
