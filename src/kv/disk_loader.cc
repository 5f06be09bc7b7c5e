#include "kv/disk_loader.h"

#include <algorithm>
#include <chrono>

#include "core/timer.h"

namespace kvfork {

size_t DiskLoad::LeadingOk() const {
  size_t n = 0;
  while (n < ok.size() && ok[n]) ++n;
  return n;
}

DiskLoader::DiskLoader(DiskTier* tier, size_t block_bytes, int threads)
    : tier_(tier), block_bytes_(block_bytes) {
  for (int t = 0; t < std::max(1, threads); ++t) workers_.emplace_back([this] { WorkerLoop(); });
}

DiskLoader::~DiskLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& load : loads_) load->cancelled = true;
  }
  work_cv_.notify_all();
  for (std::thread& w : workers_) w.join();
}

std::shared_ptr<DiskLoad> DiskLoader::Start(std::vector<DiskReadJob> jobs,
                                            DiskLoadOptions options) {
  auto load = std::make_shared<DiskLoad>();
  load->options = std::move(options);
  load->ok.assign(jobs.size(), 0);
  load->jobs = std::move(jobs);
  load->start_ns = NowNanos();
  load->end_ns = load->start_ns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loads_.push_back(load);
  }
  work_cv_.notify_all();
  return load;
}

void DiskLoader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::shared_ptr<DiskLoad> load;
    work_cv_.wait(lock, [&] {
      if (stop_) return true;
      // Requests' loads first, in start order; a background one after them.
      for (bool background : {false, true})
        for (auto& l : loads_)
          if (l->options.background == background && !l->cancelled && l->next < l->jobs.size()) {
            load = l;
            return true;
          }
      return false;
    });
    if (load == nullptr) return;  // stopping
    const size_t j = load->next++;
    if (j > load->first_failed && !load->options.independent) {
      // A block after one that failed is never used: not read.
      ++load->finished;
      load->end_ns = NowNanos();
      done_cv_.notify_all();
      if (load->done()) NotifyDone(load, &lock);
      continue;
    }
    ++load->running;
    lock.unlock();
    const DiskReadJob& job = load->jobs[j];
    const bool ok = tier_->Read(job.hash, job.parent_hash, job.tokens, job.dst, block_bytes_, job.partial).ok();
    lock.lock();
    load->ok[j] = ok ? 1 : 0;
    if (!ok) load->first_failed = std::min(load->first_failed, j);
    --load->running;
    ++load->finished;
    load->end_ns = NowNanos();
    done_cv_.notify_all();
    if (load->done()) NotifyDone(load, &lock);
  }
}

void DiskLoader::NotifyDone(const std::shared_ptr<DiskLoad>& load,
                            std::unique_lock<std::mutex>* lock) {
  if (!load->options.on_done || load->cancelled) return;
  std::function<void()> done = load->options.on_done;
  lock->unlock();
  done();
  lock->lock();
}

bool DiskLoader::Done(const DiskLoad& load) const {
  std::lock_guard<std::mutex> lock(mu_);
  return load.done();
}

void DiskLoader::Wait(const DiskLoad& load) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return load.done(); });
}

void DiskLoader::Cancel(const std::shared_ptr<DiskLoad>& load) {
  std::unique_lock<std::mutex> lock(mu_);
  load->cancelled = true;
  // Jobs no worker took count as finished (failed).
  load->finished += load->jobs.size() - load->next;
  load->next = load->jobs.size();
  done_cv_.wait(lock, [&] { return load->running == 0; });
  loads_.erase(std::remove(loads_.begin(), loads_.end(), load), loads_.end());
}

void DiskLoader::Forget(const std::shared_ptr<DiskLoad>& load) {
  std::lock_guard<std::mutex> lock(mu_);
  loads_.erase(std::remove(loads_.begin(), loads_.end(), load), loads_.end());
}

bool DiskLoader::WaitAnyDone(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return std::any_of(loads_.begin(), loads_.end(),
                       [](const std::shared_ptr<DiskLoad>& l) { return l->done(); });
  });
}

}  // namespace kvfork
