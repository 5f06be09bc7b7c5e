#include "kv/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/logging.h"
#include "core/timer.h"
#include "kv/disk_block_file.h"

namespace kvfork {
namespace {

constexpr char kSuffix[] = ".kvb";
constexpr char kPartialSuffix[] = ".kvp";
constexpr char kTempMark[] = ".tmp.";
// Files found at start announced per wake of the engine (change log).
constexpr size_t kAnnounceBatch = 256;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "<16 hex><suffix>" -> hash; anything else -> nullopt.
std::optional<uint64_t> ParseBlockName(const char* name, const char* suffix) {
  if (std::strlen(name) != 16 + std::strlen(suffix) || std::strcmp(name + 16, suffix) != 0)
    return std::nullopt;
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    char c = name[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return OkStatus();
    return FailedPreconditionError("--kv-disk-dir: " + dir + " exists and is not a directory");
  }
  return FailedPreconditionError("--kv-disk-dir: cannot create " + dir + ": " +
                                 std::strerror(errno));
}

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads up to n bytes at offset; the bytes read (short at end of file), -1
// on an error. Every read of a block file goes through it.
ssize_t PreadAll(int fd, uint8_t* p, size_t n, off_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, p + got, n - got, offset + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

// Backs [p, p + n)'s pages before a read writes them: one madvise instead of
// a page fault per 4 KiB page inside the read (in a fresh process every page
// of the pool is new). The pages are the destination's own (or shared with a
// neighbour block, which this does not change); a kernel without
// MADV_POPULATE_WRITE (before 5.14) just faults them in the read.
void PrefaultForWrite(uint8_t* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)p, (void)n;
#endif
}

}  // namespace

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (options.dir.empty()) return InvalidArgumentError("--kv-disk-dir is empty");
  if (options.capacity_bytes <= 0)
    return InvalidArgumentError("--kv-disk-gib must be > 0 with --kv-disk-dir");
  if (options.fingerprint == 0) return InvalidArgumentError("KV disk tier: fingerprint 0");
  if (options.queue_blocks < 1) return InvalidArgumentError("KV disk tier: queue_blocks < 1");
  KVFORK_RETURN_IF_ERROR(MakeDir(options.dir));
  std::string block_dir = options.dir + "/" + Hex16(options.fingerprint);
  KVFORK_RETURN_IF_ERROR(MakeDir(block_dir));
  std::unique_ptr<DiskTier> tier(new DiskTier(options, std::move(block_dir)));
  KVFORK_RETURN_IF_ERROR(tier->Scan());
  tier->writer_ = std::thread([t = tier.get()] { t->WriterLoop(); });
  return tier;
}

DiskTier::DiskTier(const DiskTierOptions& options, std::string block_dir)
    : options_(options), block_dir_(std::move(block_dir)) {}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    // The read path's profile, per valid block (docs/kv_cache.md quotes it).
    if (stats_.hits_blocks > 0) {
      const double n = static_cast<double>(stats_.hits_blocks) * 1e6;
      char line[256];
      std::snprintf(line, sizeof(line),
                    "KV disk tier: read %lld blocks, %.3f ms a block (open %.3f, readv %.3f, "
                    "checks and checksum %.3f)",
                    static_cast<long long>(stats_.hits_blocks), stats_.read_ns / n,
                    stats_.read_open_ns / n, stats_.read_io_ns / n, stats_.read_check_ns / n);
      KVFORK_LOG(kInfo) << line;
    }
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string DiskTier::PathOf(uint64_t hash, bool partial) const {
  return block_dir_ + "/" + Hex16(hash) + (partial ? kPartialSuffix : kSuffix);
}

Status DiskTier::Scan() {
  DIR* d = ::opendir(block_dir_.c_str());
  if (d == nullptr)
    return FailedPreconditionError("--kv-disk-dir: cannot list " + block_dir_ + ": " +
                                   std::strerror(errno));
  struct Found {
    int64_t mtime_ns;
    uint64_t hash;
    int64_t bytes;
  };
  std::vector<Found> found;
  std::vector<Found> partials;
  const int dfd = ::dirfd(d);
  while (struct dirent* e = ::readdir(d)) {
    const char* name = e->d_name;
    if (name[0] == '.') continue;
    if (const char* t = std::strstr(name, kTempMark)) {
      // "<hash>.kvb.tmp.<pid>.<n>": a write that never finished. Remove it
      // unless its process still runs (a sharing process mid-write).
      long pid = std::strtol(t + sizeof(kTempMark) - 1, nullptr, 10);
      if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
      ::unlinkat(dfd, name, 0);
      continue;
    }
    std::optional<uint64_t> hash = ParseBlockName(name, kSuffix);
    const bool partial = !hash;
    if (partial) hash = ParseBlockName(name, kPartialSuffix);
    if (!hash) continue;
    struct stat st;
    if (::fstatat(dfd, name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    (partial ? partials : found)
        .push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    *hash, static_cast<int64_t>(st.st_size)});
  }
  ::closedir(d);
  // A partial block is found by its parent and tokens, which only its
  // header holds: read them now (few files, one small read each).
  std::vector<std::pair<Found, DiskBlockHeader>> partial_headers;
  for (const Found& f : partials) {
    StatusOr<DiskBlockHeader> h = ReadHeader(f.hash, /*partial=*/true);
    if (h.ok() && (!h->partial || !h->parent_hash.has_value()))
      h = DataLossError("KV disk block: a .kvp file that is not a partial block with a parent");
    else if (h.ok() && h->block_hash != DiskPartialKey(*h->parent_hash, h->tokens))
      h = DataLossError("KV disk block: a partial block's name is not the key of its tokens");
    if (h.ok()) {
      partial_headers.emplace_back(f, *std::move(h));
    } else if (h.status().code() != StatusCode::kNotFound) {
      DropCorrupt(f.hash, h.status(), /*partial=*/true);
    }
  }
  // Oldest first, so ticks follow modification order (the LRU of last run).
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) AddLocked(f.hash, f.bytes, ++clock_);
  // After the full blocks: the newest of what a shutdown wrote.
  for (const auto& [f, h] : partial_headers) AddLocked(f.hash, f.bytes, ++clock_, &h);
  stats_.scanned_files = static_cast<int64_t>(found.size() + partial_headers.size());
  EvictOverCapacityLocked();
  return OkStatus();
}

bool DiskTier::Contains(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(hash) != 0;
}

bool DiskTier::Enqueue(uint64_t hash, const std::function<DiskBlockWrite()>& make) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(hash) != 0 || queued_.count(hash) != 0) return false;
    if (static_cast<int64_t>(queue_.size()) + reserved_ >= options_.queue_blocks) {
      ++stats_.writes_dropped;
      return false;
    }
    queued_.insert(hash);
    ++reserved_;
  }
  DiskBlockWrite block = make();  // outside the lock: copies a whole block
  {
    std::lock_guard<std::mutex> lock(mu_);
    --reserved_;
    queue_.push_back(std::move(block));
  }
  cv_.notify_one();
  return true;
}

bool DiskTier::Enqueue(DiskBlockWrite block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(block.hash) != 0 || queued_.count(block.hash) != 0) return false;
    if (static_cast<int64_t>(queue_.size()) >= options_.queue_blocks) {
      ++stats_.writes_dropped;
      return false;
    }
    queued_.insert(block.hash);
    queue_.push_back(std::move(block));
  }
  cv_.notify_one();
  return true;
}

void DiskTier::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !to_announce_.empty(); });
    if (!queue_.empty()) {
      DiskBlockWrite block = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      lock.unlock();
      Status s = WriteFile(block, options_.fsync);
      if (!s.ok()) {
        KVFORK_LOG(kWarn) << "KV disk tier: " << s.message();
      }
      lock.lock();
      queued_.erase(block.hash);
      writing_ = false;
    } else if (stop_) {
      break;  // queued writes finish first; announcements do not matter any more
    } else {
      // Writes first: announcing the files found at start can wait. A
      // batch of them per wake, so a large directory costs the engine a few
      // hundred events per step, not a step per file.
      std::vector<uint64_t> batch;
      while (!to_announce_.empty() && batch.size() < kAnnounceBatch) {
        batch.push_back(to_announce_.front());
        to_announce_.pop_front();
      }
      writing_ = true;
      lock.unlock();
      bool logged = false;
      for (uint64_t hash : batch) {
        {
          std::lock_guard<std::mutex> relock(mu_);
          auto it = index_.find(hash);
          if (it == index_.end() || it->second.announced) continue;
        }
        StatusOr<DiskBlockHeader> h = ReadHeader(hash);
        if (h.ok()) {
          std::lock_guard<std::mutex> relock(mu_);
          logged = AnnounceLocked(hash, h->parent_hash, std::move(h->tokens), false) || logged;
        } else if (h.status().code() == StatusCode::kNotFound) {
          std::lock_guard<std::mutex> relock(mu_);  // another process evicted it
          logged = ForgetLocked(hash) || logged;
        } else {
          DropCorrupt(hash, h.status());
        }
      }
      if (logged) Wake();
      lock.lock();
      writing_ = false;
    }
    if (queue_.empty() && to_announce_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void DiskTier::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && to_announce_.empty() && !writing_; });
}

Status DiskTier::WriteNow(const DiskBlockWrite& block) {
  if (Contains(block.hash)) return OkStatus();
  Status s = WriteFile(block, /*fsync=*/false);
  if (!s.ok()) {
    KVFORK_LOG(kWarn) << "KV disk tier: " << s.message();
  }
  return s;
}

void DiskTier::Sync() {
  int fd = ::open(block_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::syncfs(fd);
  ::close(fd);
}

Status DiskTier::WriteFile(const DiskBlockWrite& block, bool fsync) {
  DiskBlockHeader h;
  h.fingerprint = options_.fingerprint;
  h.block_hash = block.hash;
  h.parent_hash = block.parent_hash;
  h.tokens = block.tokens;
  h.partial = block.partial;
  if (block.partial && !block.parent_hash.has_value())
    return InvalidArgumentError("KV disk tier: a partial block without a parent is not written");
  std::vector<uint8_t> bytes = EncodeDiskBlock(h, block.payload);
  const std::string path = PathOf(block.hash, block.partial);
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++temp_counter_;
  }
  const std::string temp = path + kTempMark + std::to_string(::getpid()) + "." + std::to_string(n);
  auto fail = [&](const char* what) {
    std::string msg = std::string(what) + " " + temp + ": " + std::strerror(errno);
    ::unlink(temp.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.write_errors;
    return UnavailableError("writing block " + Hex16(block.hash) + " failed (" + msg + ")");
  };
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open");
  if (!WriteAll(fd, bytes.data(), bytes.size()) || (fsync && ::fsync(fd) != 0)) {
    ::close(fd);
    return fail("write");
  }
  if (::close(fd) != 0) return fail("close");
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail("rename");
  bool logged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    AddLocked(block.hash, static_cast<int64_t>(bytes.size()), ++clock_,
              block.partial ? &h : nullptr);
    stats_.bytes_written += static_cast<int64_t>(bytes.size());
    ++stats_.blocks_written;
    // Announced only now: a block is on disk once its file is renamed.
    // Partial blocks are not announced (KV events name full blocks only).
    logged = !block.partial && AnnounceLocked(block.hash, block.parent_hash, block.tokens, true);
    logged = EvictOverCapacityLocked() || logged;
  }
  if (logged) Wake();
  return OkStatus();
}

void DiskTier::AddLocked(uint64_t hash, int64_t bytes, uint64_t tick,
                         const DiskBlockHeader* partial) {
  auto old = index_.find(hash);
  const bool announced = old != index_.end() && old->second.announced;
  RemoveLocked(hash);
  Entry e{bytes, tick, announced};
  if (partial != nullptr) {
    e.partial = true;
    e.parent = partial->parent_hash.value_or(0);
    partials_[e.parent].push_back({hash, partial->tokens});
  }
  index_[hash] = e;
  lru_.emplace(tick, hash);
  bytes_ += bytes;
}

void DiskTier::TouchLocked(uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  lru_.erase({it->second.tick, hash});
  it->second.tick = ++clock_;
  lru_.emplace(it->second.tick, hash);
}

void DiskTier::RemoveLocked(uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  if (it->second.partial) {
    auto p = partials_.find(it->second.parent);
    if (p != partials_.end()) {
      std::erase_if(p->second, [&](const Partial& q) { return q.key == hash; });
      if (p->second.empty()) partials_.erase(p);
    }
  }
  lru_.erase({it->second.tick, hash});
  bytes_ -= it->second.bytes;
  index_.erase(it);
}

std::optional<DiskPartialMatch> DiskTier::BestPartial(uint64_t parent_hash,
                                                      std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = partials_.find(parent_hash);
  if (p == partials_.end()) return std::nullopt;
  const Partial* best = nullptr;
  size_t best_n = 0;
  for (const Partial& q : p->second) {
    size_t n = 0;
    while (n < q.tokens.size() && n < tokens.size() && q.tokens[n] == tokens[n]) ++n;
    if (n > best_n) {
      best_n = n;
      best = &q;
    }
  }
  if (best == nullptr) return std::nullopt;
  return DiskPartialMatch{best->key, best->tokens, static_cast<int>(best_n)};
}

std::vector<std::pair<uint64_t, bool>> DiskTier::NewestFirst() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, bool>> out;
  out.reserve(lru_.size());
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it)
    out.emplace_back(it->second, index_.at(it->second).partial);
  return out;
}

StatusOr<DiskBlockHeader> DiskTier::ReadIdentity(uint64_t hash, bool partial) {
  StatusOr<DiskBlockHeader> h = ReadHeader(hash, partial);
  if (h.ok()) return h;
  if (h.status().code() == StatusCode::kNotFound) {
    bool logged;
    {
      std::lock_guard<std::mutex> lock(mu_);  // another process evicted it
      logged = ForgetLocked(hash);
    }
    if (logged) Wake();
    return h.status();
  }
  DropCorrupt(hash, h.status(), partial);
  return NotFoundError(h.status().message());
}

bool DiskTier::ForgetLocked(uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return false;
  const bool logged = log_changes_ && it->second.announced;
  if (logged || (track_changes_ && !it->second.partial)) {
    DiskTierChange c;
    c.stored = false;
    c.announced = logged;
    c.hash = hash;
    changes_.push_back(std::move(c));
  }
  RemoveLocked(hash);
  return logged;
}

bool DiskTier::AnnounceLocked(uint64_t hash, std::optional<uint64_t> parent_hash,
                              std::vector<int32_t> tokens, bool written) {
  auto it = index_.find(hash);
  if (it == index_.end()) return false;
  const bool announce = log_changes_ && !it->second.announced;
  // A file found at start and announced now is not news to the index (it
  // listed the scan), a write is.
  if (!announce && !(track_changes_ && written)) return false;
  if (announce) it->second.announced = true;
  DiskTierChange c;
  c.stored = true;
  c.announced = announce;
  c.hash = hash;
  c.parent_hash = parent_hash;
  c.tokens = std::move(tokens);
  changes_.push_back(std::move(c));
  return announce;
}

bool DiskTier::EvictOverCapacityLocked() {
  bool logged = false;
  while (bytes_ > options_.capacity_bytes && !lru_.empty()) {
    uint64_t hash = lru_.begin()->second;
    const bool partial = index_.at(hash).partial;
    logged = ForgetLocked(hash) || logged;
    ::unlink(PathOf(hash, partial).c_str());
    ++stats_.evicted_blocks;
  }
  return logged;
}

void DiskTier::DropCorrupt(uint64_t hash, const Status& why, bool partial) {
  KVFORK_LOG(kWarn) << "KV disk tier: block " << PathOf(hash, partial) << " is unusable, deleted ("
                    << why.message() << "); it will be recomputed";
  bool logged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    logged = ForgetLocked(hash);
    ::unlink(PathOf(hash, partial).c_str());
    ++stats_.corrupt_blocks;
  }
  if (logged) Wake();
}

void DiskTier::Wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (wake_) wake_();
}

void DiskTier::SetWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(wake_mu_);
  wake_ = std::move(wake);
}

void DiskTier::EnableChangeLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (log_changes_) return;
    log_changes_ = true;
    // Oldest first, the order the files were last used in.
    for (const auto& [tick, hash] : lru_)
      if (!index_.at(hash).partial) to_announce_.push_back(hash);
  }
  cv_.notify_one();
}

void DiskTier::TrackChanges() {
  std::lock_guard<std::mutex> lock(mu_);
  track_changes_ = true;
}

std::vector<DiskTierChange> DiskTier::TakeChanges() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DiskTierChange> out;
  out.swap(changes_);
  return out;
}

std::vector<uint64_t> DiskTier::Hashes() const {
  std::vector<uint64_t> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(index_.size());
    for (const auto& [hash, entry] : index_)
      if (!entry.partial) out.push_back(hash);
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<DiskBlockHeader> DiskTier::ReadHeader(uint64_t hash, bool partial) const {
  const std::string path = PathOf(hash, partial);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("KV disk block " + path + " is gone");
    return DataLossError("KV disk block: cannot open (" + std::string(std::strerror(errno)) +
                         ")");
  }
  struct stat st;
  std::vector<uint8_t> head(kDiskBlockFixedHeaderBytes);
  Status s = OkStatus();
  if (::fstat(fd, &st) != 0 ||
      PreadAll(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    s = DataLossError("KV disk block: short read of the header");
  } else {
    // The fixed part gives the header's size (checked again by the decoder).
    uint32_t hb;
    std::memcpy(&hb, head.data() + 12, sizeof(hb));
    if (hb < kDiskBlockFixedHeaderBytes || hb > DiskBlockHeaderBytes(1u << 20) ||
        static_cast<uint64_t>(st.st_size) < hb) {
      s = DataLossError("KV disk block: header size " + std::to_string(hb) + " out of range");
    } else {
      head.resize(hb);
      const size_t rest = hb - kDiskBlockFixedHeaderBytes;
      if (PreadAll(fd, head.data() + kDiskBlockFixedHeaderBytes, rest,
                   kDiskBlockFixedHeaderBytes) != static_cast<ssize_t>(rest))
        s = DataLossError("KV disk block: short read of the token ids");
    }
  }
  ::close(fd);
  KVFORK_RETURN_IF_ERROR(s);
  KVFORK_ASSIGN_OR_RETURN(DiskBlockHeader h,
                          DecodeDiskBlockHeader(head, static_cast<uint64_t>(st.st_size)));
  if (h.fingerprint != options_.fingerprint)
    return FailedPreconditionError("KV disk block: fingerprint differs (another model, KV format "
                                   "or kernel ISA level)");
  if (h.block_hash != hash)
    return FailedPreconditionError("KV disk block: hash differs from its name");
  return h;
}

Status DiskTier::Read(uint64_t hash, std::optional<uint64_t> parent_hash,
                      std::span<const int32_t> tokens, uint8_t* dst, size_t payload_bytes,
                      bool partial) {
  if (options_.read_hook) options_.read_hook(hash);
  const int64_t t0 = NowNanos();
  const std::string path = PathOf(hash, partial);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Gone (another process evicted it): a miss, not corruption.
    bool logged;
    {
      std::lock_guard<std::mutex> lock(mu_);
      logged = ForgetLocked(hash);
      ++stats_.misses_blocks;
    }
    if (logged) Wake();
    return NotFoundError("KV disk block " + path + " is gone");
  }
  struct stat st;
  Status s = OkStatus();
  // The header the caller expects, checked before any payload byte is read
  // (a file of another size fails here: fstat gives its real size).
  std::vector<uint8_t> head(DiskBlockHeaderBytes(tokens.size()));
  std::optional<DiskBlockHeader> header;
  if (::fstat(fd, &st) != 0) {
    s = DataLossError("KV disk block: fstat failed");
  } else {
    const ssize_t r = PreadAll(fd, head.data(), head.size(), 0);
    // r < 0 (EIO, or EISDIR where a directory took the file's name) must
    // not become a span of SIZE_MAX bytes.
    StatusOr<DiskBlockHeader> h =
        r < 0 ? StatusOr<DiskBlockHeader>(DataLossError(
                    "KV disk block: cannot read the header (" + std::string(std::strerror(errno)) +
                    ")"))
              : DecodeDiskBlockHeader(std::span<const uint8_t>(head.data(), static_cast<size_t>(r)),
                                      static_cast<uint64_t>(st.st_size));
    s = h.status();
    if (s.ok())
      s = CheckDiskBlockIdentity(*h, options_.fingerprint, hash, parent_hash, tokens, partial,
                                 payload_bytes);
    if (s.ok()) header = *std::move(h);
  }
  const int64_t t_open = NowNanos();
  int64_t io_ns = 0;
  if (s.ok()) {
    // The payload in chunks small enough to stay in the core's L2: each is
    // backed (MADV_POPULATE_WRITE: the kernel zeroes the pages), copied from
    // the page cache and checksummed before the next, so the three passes
    // over a 1.8 MB block hit the cache instead of memory.
    DiskChecksummer sum;
    for (size_t off = 0; off < payload_bytes && s.ok(); off += kReadChunkBytes) {
      const size_t n = std::min(kReadChunkBytes, payload_bytes - off);
      const int64_t t_chunk = NowNanos();
      if (options_.prefault) PrefaultForWrite(dst + off, n);
      if (PreadAll(fd, dst + off, n, static_cast<off_t>(head.size() + off)) !=
          static_cast<ssize_t>(n)) {
        s = DataLossError("KV disk block: short payload");
        break;
      }
      io_ns += NowNanos() - t_chunk;
      sum.Update(dst + off, n);
    }
    if (s.ok() && sum.Finish() != header->payload_checksum)
      s = DataLossError("KV disk block: payload checksum mismatch");
  }
  ::close(fd);
  if (!s.ok()) {
    DropCorrupt(hash, s, partial);
    return NotFoundError(s.message());
  }
  const int64_t t_end = NowNanos();
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked(hash);
  ++stats_.hits_blocks;
  stats_.bytes_read += static_cast<int64_t>(st.st_size);
  stats_.read_ns += t_end - t0;
  stats_.read_open_ns += t_open - t0;
  stats_.read_io_ns += io_ns;
  stats_.read_check_ns += t_end - t_open - io_ns;
  return OkStatus();
}

DiskTierStats DiskTier::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskTierStats s = stats_;
  s.blocks = static_cast<int64_t>(index_.size());
  s.bytes = bytes_;
  s.partial_blocks = 0;
  for (const auto& [parent, children] : partials_)
    s.partial_blocks += static_cast<int64_t>(children.size());
  return s;
}

}  // namespace kvfork
