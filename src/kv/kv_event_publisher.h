// Publishes the prefix index's events over ZeroMQ exactly as vLLM's
// ZmqEventPublisher does (vllm/distributed/kv_events.py), so llm-d's KV-cache
// indexer, NVIDIA Dynamo's router and vLLM's example subscriber read kvfork:
//
//   PUB socket: multipart [topic, seq (8-byte big-endian), msgpack EventBatch]
//     (kv_event_codec.h); one batch per engine step that changed the index.
//   ROUTER socket (optional replay): a request [seq (8-byte big-endian)] from
//     a DEALER/REQ client is answered with every buffered batch whose seq >=
//     it, each as [seq, payload], then [-1 (8 bytes), ""].
//
// An endpoint with '*', "::", ipc:// or inproc:// is bound, any other is
// connected to (vLLM's rule). A new publisher's first batch (seq 0) is one
// AllBlocksCleared: the process starts with an empty cache, so a subscriber
// that followed an earlier process drops what it knew.
//
// Never blocks the engine thread: Emit appends to a vector the engine thread
// owns; Flush moves it, under a mutex held for a swap, onto a bounded queue;
// a full queue drops the batch and counts its events (counters()). The
// publisher thread encodes, sends (a PUB socket drops, never waits, at its
// high-water mark), keeps the replay buffer and answers replay requests.
//
// Thread affinity: Emit/Flush on the engine thread; counters() anywhere.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "kv/kv_event_codec.h"
#include "kv/kv_events.h"

namespace kvfork {

struct KvEventPublisherOptions {
  std::string endpoint;         // --kv-events, e.g. tcp://*:5557 (required)
  std::string replay_endpoint;  // --kv-events-replay, e.g. tcp://*:5558; "" = none
  std::string topic;            // --kv-events-topic; frame 1 of every message
  int64_t block_size = 16;      // tokens per block, sent in BlockStored
  int64_t max_queued_batches = 10000;  // batches waiting for the thread; more are dropped
  int64_t replay_batches = 10000;      // batches kept for replay (vLLM's buffer_steps)
  int send_high_water_mark = 100000;   // ZMQ_SNDHWM of the PUB socket (vLLM's hwm)
};

class KvEventPublisher final : public KvEventSink {
 public:
  // Binds or connects the sockets and starts the thread; the error names
  // the flag whose endpoint failed.
  static StatusOr<std::unique_ptr<KvEventPublisher>> Create(const KvEventPublisherOptions& options);
  // Publishes what is queued (up to a second), then closes the sockets.
  ~KvEventPublisher() override;

  void Emit(KvEvent event) override;
  void Flush() override;

  KvEventCounters counters() const;
  // Addresses actually bound (a tcp://127.0.0.1:* wildcard port resolved);
  // for tests and the start-up log.
  const std::string& bound_endpoint() const { return bound_endpoint_; }
  const std::string& bound_replay_endpoint() const { return bound_replay_endpoint_; }

 private:
  struct Sockets;
  struct Batch {
    double timestamp_s = 0;
    std::vector<KvEvent> events;
  };

  KvEventPublisher(const KvEventPublisherOptions& options, std::unique_ptr<Sockets> sockets);
  void Loop();
  void Publish(const Batch& batch);
  void ServeReplay();

  const KvEventPublisherOptions options_;
  std::unique_ptr<Sockets> sockets_;  // used by the publisher thread only
  std::string bound_endpoint_;
  std::string bound_replay_endpoint_;

  std::vector<KvEvent> pending_;  // engine thread: events since the last Flush

  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;

  // Publisher thread only.
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> replay_;  // (seq, payload)

  std::atomic<int64_t> batches_published_{0};
  std::atomic<int64_t> events_published_{0};
  std::atomic<int64_t> events_dropped_{0};
  std::atomic<int64_t> replay_requests_{0};
  std::thread thread_;
};

}  // namespace kvfork
