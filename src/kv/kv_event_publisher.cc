#include "kv/kv_event_publisher.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/logging.h"

namespace kvfork {
namespace {

// vLLM's rule: bind a wildcard or local transport, connect anything else.
bool ShouldBind(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

std::string BigEndian8(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
  return out;
}

uint64_t FromBigEndian8(const void* data) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// How long the thread sleeps between looks at the replay socket when no
// batch arrives: bounds a replay answer's latency.
constexpr auto kIdleWait = std::chrono::milliseconds(20);

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;  // ROUTER, when asked for
};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    const KvEventPublisherOptions& options) {
  if (options.endpoint.empty()) return InvalidArgumentError("--kv-events needs an endpoint");
  if (options.max_queued_batches < 1 || options.replay_batches < 0)
    return InvalidArgumentError("KV event queue and replay sizes must be positive");
  auto sockets = std::make_unique<Sockets>();
  // Which flag's endpoint is being opened, for the error message.
  std::string flag = "--kv-events " + options.endpoint;
  try {
    sockets->pub.set(zmq::sockopt::sndhwm, options.send_high_water_mark);
    // Half a second at shutdown for the last batches to leave.
    sockets->pub.set(zmq::sockopt::linger, 500);
    if (ShouldBind(options.endpoint)) {
      sockets->pub.bind(options.endpoint);
    } else {
      sockets->pub.connect(options.endpoint);
    }
    if (!options.replay_endpoint.empty()) {
      flag = "--kv-events-replay " + options.replay_endpoint;
      sockets->replay = std::make_unique<zmq::socket_t>(sockets->context, zmq::socket_type::router);
      sockets->replay->set(zmq::sockopt::linger, 0);
      // A ROUTER silently drops what exceeds a peer's high-water mark (1000
      // by default): room for a whole replay and its end marker, so a
      // subscriber that asks from seq 0 gets every buffered batch.
      sockets->replay->set(zmq::sockopt::sndhwm,
                           static_cast<int>(std::min<int64_t>(options.replay_batches + 16, 1 << 30)));
      sockets->replay->bind(options.replay_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return InvalidArgumentError(flag + ": " + e.what());
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(options, std::move(sockets)));
}

KvEventPublisher::KvEventPublisher(const KvEventPublisherOptions& options,
                                   std::unique_ptr<Sockets> sockets)
    : options_(options), sockets_(std::move(sockets)) {
  bound_endpoint_ = sockets_->pub.get(zmq::sockopt::last_endpoint);
  if (bound_endpoint_.empty()) bound_endpoint_ = options_.endpoint;  // connected, not bound
  if (sockets_->replay) bound_replay_endpoint_ = sockets_->replay->get(zmq::sockopt::last_endpoint);
  // Seq 0: the cache this process starts with is empty.
  Batch first;
  first.timestamp_s = WallSeconds();
  first.events.push_back(KvEvent{KvEvent::Kind::kAllBlocksCleared, 0, std::nullopt, {}});
  queue_.push_back(std::move(first));
  thread_ = std::thread([this] { Loop(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void KvEventPublisher::Emit(KvEvent event) { pending_.push_back(std::move(event)); }

void KvEventPublisher::Flush() {
  if (pending_.empty()) return;
  Batch batch;
  batch.timestamp_s = WallSeconds();
  batch.events.swap(pending_);
  const int64_t n = static_cast<int64_t>(batch.events.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(queue_.size()) < options_.max_queued_batches) {
      queue_.push_back(std::move(batch));
      cv_.notify_one();
      return;
    }
  }
  // The publisher thread is behind: drop rather than stall a decode step.
  // Subscribers see the gap in content, not in seq (seq counts published
  // batches), as with vLLM's own queue; the metric says it happened.
  events_dropped_.fetch_add(n, std::memory_order_relaxed);
}

KvEventCounters KvEventPublisher::counters() const {
  KvEventCounters c;
  c.batches_published = batches_published_.load(std::memory_order_relaxed);
  c.events_published = events_published_.load(std::memory_order_relaxed);
  c.events_dropped = events_dropped_.load(std::memory_order_relaxed);
  c.replay_requests = replay_requests_.load(std::memory_order_relaxed);
  return c;
}

void KvEventPublisher::Loop() {
  for (;;) {
    std::deque<Batch> batches;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kIdleWait, [&] { return stop_ || !queue_.empty(); });
      batches.swap(queue_);
      stop = stop_;
    }
    for (const Batch& b : batches) Publish(b);
    ServeReplay();
    if (stop) return;
  }
}

void KvEventPublisher::Publish(const Batch& batch) {
  KvEventBatchHeader header;
  header.timestamp_s = batch.timestamp_s;
  header.block_size = options_.block_size;
  std::string payload = EncodeKvEventBatch(header, batch.events);
  const uint64_t seq = next_seq_++;
  const std::string seq_bytes = BigEndian8(seq);
  try {
    // A PUB socket never blocks: past its high-water mark it drops.
    sockets_->pub.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
    sockets_->pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    sockets_->pub.send(zmq::buffer(payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    KVFORK_LOG(kWarn) << "KV events: sending batch " << seq << " failed: " << e.what();
  }
  batches_published_.fetch_add(1, std::memory_order_relaxed);
  events_published_.fetch_add(static_cast<int64_t>(batch.events.size()),
                              std::memory_order_relaxed);
  if (options_.replay_batches > 0) {
    replay_.emplace_back(seq, std::move(payload));
    while (static_cast<int64_t>(replay_.size()) > options_.replay_batches) replay_.pop_front();
  }
}

void KvEventPublisher::ServeReplay() {
  if (!sockets_->replay) return;
  zmq::socket_t& router = *sockets_->replay;
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      auto got = zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait);
      if (!got) return;  // nothing waiting
    } catch (const zmq::error_t& e) {
      KVFORK_LOG(kWarn) << "KV events replay: receive failed: " << e.what();
      return;
    }
    // [identity, empty delimiter, start seq]; anything else is ignored, as
    // vLLM does (a malformed request gets no answer).
    if (frames.size() != 3 || frames[2].size() != 8) {
      KVFORK_LOG(kWarn) << "KV events replay: ignoring a request of " << frames.size()
                           << " frames (want [identity, '', 8-byte seq])";
      continue;
    }
    replay_requests_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t start = FromBigEndian8(frames[2].data());
    const std::string identity = frames[0].to_string();
    try {
      for (const auto& [seq, payload] : replay_) {
        if (seq < start) continue;
        router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
        router.send(zmq::const_buffer(), zmq::send_flags::sndmore);
        router.send(zmq::buffer(BigEndian8(seq)), zmq::send_flags::sndmore);
        router.send(zmq::buffer(payload), zmq::send_flags::none);
      }
      router.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      router.send(zmq::const_buffer(), zmq::send_flags::sndmore);
      router.send(zmq::buffer(BigEndian8(~uint64_t{0})), zmq::send_flags::sndmore);  // -1
      router.send(zmq::const_buffer(), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      KVFORK_LOG(kWarn) << "KV events replay: answer failed: " << e.what();
    }
  }
}

}  // namespace kvfork
