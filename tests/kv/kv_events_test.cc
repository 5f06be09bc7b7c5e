// KV events: the stable block hash, the events the prefix index emits (a
// subscriber's rebuilt set always equals the index), vLLM's msgpack layout,
// and the ZeroMQ publisher with its replay socket.
#include <gtest/gtest.h>

#include <chrono>
#include <iterator>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "kv/block_hash.h"
#include "kv/kv_event_codec.h"
#include "kv/kv_event_publisher.h"
#include "kv/paged_kv_cache.h"
#include "kv_test_util.h"

namespace kvfork {
namespace {

using testing::Prefill;
using testing::TinyLayout;

// The golden values below come from an independent implementation of the
// algorithm docs/kv_cache.md states (tools/kv_events/kv_event_subscriber.py,
// documented_block_hash). They must never change: the disk tier and routers
// name blocks by them across restarts and versions.
TEST(BlockHashTest, MatchesTheDocumentedAlgorithm) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, neg = {-1};
  const uint64_t root = ChainBlockHash(RootBlockHashSeed(0), a);
  EXPECT_EQ(root, 0x2e7abb1e7c10137cull);
  EXPECT_EQ(ChainBlockHash(root, b), 0x2a9d03d264b548ceull);
  EXPECT_EQ(SaltKeyOf("tenant-a"), 0x9cc2b00855dbb38eull);
  EXPECT_EQ(ChainBlockHash(RootBlockHashSeed(SaltKeyOf("tenant-a")), a), 0x51e691add86348b9ull);
  EXPECT_EQ(ChainBlockHash(RootBlockHashSeed(0), neg), 0x8383fb5427920ba7ull);  // uint32 of -1
  EXPECT_EQ(SaltKeyOf(""), 0u);
}

TEST(BlockHashTest, SaltParentAndOrderChangeTheHash) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, r = {4, 3, 2, 1};
  const uint64_t seed = RootBlockHashSeed(0);
  EXPECT_NE(ChainBlockHash(seed, a), ChainBlockHash(RootBlockHashSeed(SaltKeyOf("x")), a));
  EXPECT_NE(ChainBlockHash(seed, a), ChainBlockHash(seed, r));
  EXPECT_NE(ChainBlockHash(ChainBlockHash(seed, a), a), ChainBlockHash(seed, a));
  EXPECT_NE(SaltKeyOf("a"), SaltKeyOf(std::string("a\0", 2)));
}

// Rebuilds the set of blocks from events, as a router would, and checks
// each event against what it has seen.
class RebuildingSink final : public KvEventSink {
 public:
  void Emit(KvEvent e) override {
    switch (e.kind) {
      case KvEvent::Kind::kBlockStored:
        EXPECT_EQ(blocks.count(e.block_hash), 0u) << "stored twice";
        if (e.parent_hash) {
          EXPECT_EQ(blocks.count(*e.parent_hash), 1u) << "unknown parent";
        }
        EXPECT_EQ(ChainBlockHash(e.parent_hash ? *e.parent_hash : RootBlockHashSeed(salt_key),
                                 e.token_ids),
                  e.block_hash);
        blocks.insert(e.block_hash);
        ++stored;
        break;
      case KvEvent::Kind::kBlockRemoved:
        EXPECT_EQ(blocks.erase(e.block_hash), 1u) << "removed an unknown block";
        ++removed;
        break;
      case KvEvent::Kind::kAllBlocksCleared:
        blocks.clear();
        ++cleared;
        break;
    }
  }
  void Flush() override { ++flushes; }

  uint64_t salt_key = 0;
  std::set<uint64_t> blocks;
  int stored = 0, removed = 0, cleared = 0, flushes = 0;
};

std::set<uint64_t> IndexSet(const KvCache& cache) {
  std::vector<uint64_t> h = cache.BlockHashes();
  return std::set<uint64_t>(h.begin(), h.end());
}

std::unique_ptr<KvCache> SmallPaged(int64_t blocks) {
  KvCacheOptions o;
  o.layout = TinyLayout(4);
  o.num_blocks = blocks;
  return *KvCache::Create(KvBackend::kPaged, o);
}

TEST(KvEventsTest, RebuiltSetEqualsTheIndexThroughEvictionsAndResets) {
  auto cache = SmallPaged(24);
  RebuildingSink sink;
  ASSERT_TRUE(cache->SetEventSink(&sink).ok());
  std::mt19937 rng(7);
  std::vector<SeqId> live;
  // Prompts from a few shared prefixes, so blocks are shared, evicted and
  // registered again; a 24-block pool forces evictions.
  for (int op = 0; op < 3000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 5 && live.size() < 3) {
      std::vector<int32_t> prompt;
      const int prefix = static_cast<int>(rng() % 4);
      const int len = 3 + static_cast<int>(rng() % 20);
      for (int i = 0; i < len; ++i)
        prompt.push_back(i < 8 ? prefix * 100 + i : static_cast<int32_t>(rng() % 5));
      if (cache->AvailableBlocks() >= (len + 3) / 4) {
        live.push_back(Prefill(*cache, prompt));
      }
    } else if (kind < 9 && !live.empty()) {
      const size_t i = rng() % live.size();
      cache->Release(live[i]);
      live.erase(live.begin() + static_cast<long>(i));
    } else {
      cache->ResetPrefixCache();
    }
    ASSERT_TRUE(cache->Check().ok());
    ASSERT_EQ(sink.blocks, IndexSet(*cache)) << "after op " << op;
  }
  EXPECT_GT(sink.stored, 100);
  EXPECT_GT(sink.removed, 10);
  EXPECT_GT(sink.cleared, 0);
  EXPECT_GT(cache->Stats().evictions, 0);
}

TEST(KvEventsTest, ResetAnnouncesAllBlocksClearedOnlyWhenNothingStays) {
  auto cache = SmallPaged(16);
  RebuildingSink sink;
  ASSERT_TRUE(cache->SetEventSink(&sink).ok());
  SeqId a = Prefill(*cache, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  SeqId b = Prefill(*cache, {20, 21, 22, 23, 24});
  cache->Release(b);  // its full block is cached now
  ASSERT_EQ(sink.blocks.size(), 3u);
  // a still runs: its two full blocks stay, so the reset names what goes.
  cache->ResetPrefixCache();
  EXPECT_EQ(sink.cleared, 0);
  EXPECT_EQ(sink.removed, 1);
  EXPECT_EQ(sink.blocks, IndexSet(*cache));
  EXPECT_EQ(sink.blocks.size(), 2u);
  cache->Release(a);
  cache->ResetPrefixCache();
  EXPECT_EQ(sink.cleared, 1);
  EXPECT_TRUE(sink.blocks.empty());
  EXPECT_TRUE(IndexSet(*cache).empty());
}

TEST(KvEventsTest, SaltSeedsTheRootHash) {
  auto cache = SmallPaged(16);
  RebuildingSink sink;
  sink.salt_key = SaltKeyOf("tenant");
  ASSERT_TRUE(cache->SetEventSink(&sink).ok());
  cache->Release(Prefill(*cache, {1, 2, 3, 4, 5}, "tenant"));  // the sink checks the chain
  EXPECT_EQ(sink.stored, 1);
}

TEST(KvEventsTest, DenseBackendRefusesASink) {
  KvCacheOptions o;
  o.layout = TinyLayout(4);
  o.num_blocks = 16;
  o.max_context = 16;
  auto cache = *KvCache::Create(KvBackend::kDense, o);
  RebuildingSink sink;
  Status s = cache->SetEventSink(&sink);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--kv-backend paged"), std::string::npos) << s.message();
}

// The layout vLLM's msgspec structs (array_like, tag) produce.
TEST(KvEventCodecTest, EncodesVllmsArrayLikeTaggedLayout) {
  KvEventBatchHeader h;
  h.timestamp_s = 1234.5;
  h.block_size = 4;
  std::vector<KvEvent> events(4);
  events[0] = {KvEvent::Kind::kBlockStored, 0xfedcba9876543210ull, std::nullopt, {1, 2, 3, 4}};
  events[1] = {KvEvent::Kind::kBlockStored, 7, 0xfedcba9876543210ull, {5, 6, 7, 8}};
  events[2] = {KvEvent::Kind::kBlockRemoved, 7, std::nullopt, {}, KvMedium::kDisk};
  events[3] = {KvEvent::Kind::kAllBlocksCleared, 0, std::nullopt, {}};
  const std::string bytes = EncodeKvEventBatch(h, events);
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);  // ts, events, data_parallel_rank
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 1234.5);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& evs = batch.via.array.ptr[1];
  ASSERT_EQ(evs.via.array.size, 4u);

  const msgpack::object* s0 = evs.via.array.ptr[0].via.array.ptr;
  ASSERT_EQ(evs.via.array.ptr[0].via.array.size, 8u);
  EXPECT_EQ(s0[0].as<std::string>(), "BlockStored");
  EXPECT_EQ(s0[1].as<std::vector<uint64_t>>(), std::vector<uint64_t>{0xfedcba9876543210ull});
  EXPECT_TRUE(s0[2].is_nil());  // no parent
  EXPECT_EQ(s0[3].as<std::vector<int>>(), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(s0[4].as<int>(), 4);
  EXPECT_TRUE(s0[5].is_nil());  // lora_id
  EXPECT_EQ(s0[6].as<std::string>(), "CPU");
  EXPECT_TRUE(s0[7].is_nil());  // lora_name
  const msgpack::object* s1 = evs.via.array.ptr[1].via.array.ptr;
  EXPECT_EQ(s1[2].as<uint64_t>(), 0xfedcba9876543210ull);

  const msgpack::object& r = evs.via.array.ptr[2];
  ASSERT_EQ(r.via.array.size, 3u);
  EXPECT_EQ(r.via.array.ptr[0].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(r.via.array.ptr[1].as<std::vector<uint64_t>>(), std::vector<uint64_t>{7});
  EXPECT_EQ(r.via.array.ptr[2].as<std::string>(), "DISK");  // the disk tier's medium
  const msgpack::object& c = evs.via.array.ptr[3];
  ASSERT_EQ(c.via.array.size, 1u);
  EXPECT_EQ(c.via.array.ptr[0].as<std::string>(), "AllBlocksCleared");
}

uint64_t Seq(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const unsigned char*>(m.data())[i];
  return v;
}

std::string FirstTag(const zmq::message_t& payload) {
  msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
  return oh.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[0].as<std::string>();
}

TEST(KvEventPublisherTest, PublishesMultipartBatchesAndReplaysFromASeq) {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.topic = "kv@host@model";
  o.block_size = 4;
  auto pub = KvEventPublisher::Create(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();

  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.connect((*pub)->bound_endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // PUB/SUB joins late

  (*pub)->Emit({KvEvent::Kind::kBlockStored, 42, std::nullopt, {1, 2, 3, 4}});
  (*pub)->Emit({KvEvent::Kind::kBlockRemoved, 42, std::nullopt, {}});
  (*pub)->Flush();
  (*pub)->Flush();  // nothing pending: no batch
  (*pub)->Emit({KvEvent::Kind::kAllBlocksCleared, 0, std::nullopt, {}});
  (*pub)->Flush();

  std::vector<zmq::message_t> frames;
  // Seq 0 (the start-up AllBlocksCleared) may or may not reach a subscriber
  // that joined just then; skip it.
  do {
    frames.clear();
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 3u);
  } while (Seq(frames[1]) == 0);
  EXPECT_EQ(frames[0].to_string(), "kv@host@model");
  EXPECT_EQ(Seq(frames[1]), 1u);  // seq 0 is the start-up AllBlocksCleared
  EXPECT_EQ(FirstTag(frames[2]), "BlockStored");
  frames.clear();
  ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)));
  EXPECT_EQ(Seq(frames[1]), 2u);

  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect((*pub)->bound_replay_endpoint());
  const char start[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  dealer.send(zmq::const_buffer(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start, 8), zmq::send_flags::none);
  std::vector<uint64_t> seqs;
  std::vector<std::string> tags;
  for (;;) {
    std::vector<zmq::message_t> r;
    ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(r)));
    ASSERT_EQ(r.size(), 3u);  // "", seq, payload
    if (Seq(r[1]) == ~uint64_t{0}) {  // -1: the end
      EXPECT_EQ(r[2].size(), 0u);
      break;
    }
    seqs.push_back(Seq(r[1]));
    tags.push_back(FirstTag(r[2]));
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(tags, (std::vector<std::string>{"AllBlocksCleared", "BlockStored", "AllBlocksCleared"}));
  const KvEventCounters c = (*pub)->counters();
  EXPECT_EQ(c.batches_published, 3);
  EXPECT_EQ(c.events_published, 4);
  EXPECT_EQ(c.events_dropped, 0);
  EXPECT_EQ(c.replay_requests, 1);
}

// A queue of two batches, flooded from this (the "engine") thread: Flush
// never waits; every event handed over is either published or counted as
// dropped; published batches carry seq numbers without a gap (a drop is not
// a gap: seq counts published batches, as in vLLM), and replay returns them.
TEST(KvEventPublisherTest, FullQueueDropsAndCountsWithoutWaiting) {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.max_queued_batches = 2;
  o.replay_batches = 100000;
  auto pub = KvEventPublisher::Create(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  const int kBatches = 20000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kBatches; ++i) {
    (*pub)->Emit({KvEvent::Kind::kBlockStored, static_cast<uint64_t>(i), std::nullopt, {1, 2, 3, 4}});
    (*pub)->Emit({KvEvent::Kind::kBlockRemoved, static_cast<uint64_t>(i), std::nullopt, {}});
    (*pub)->Flush();
  }
  // 20,000 swaps under a mutex: far under the bound even on a loaded machine;
  // a Flush that waited for the publisher thread would not be.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const int64_t total = 2 * kBatches + 1;  // + the start-up AllBlocksCleared
  KvEventCounters c;
  for (int tries = 0; tries < 1000; ++tries) {
    c = (*pub)->counters();
    if (c.events_published + c.events_dropped == total) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(c.events_published + c.events_dropped, total);
  EXPECT_EQ(c.events_dropped % 2, 0);  // whole batches
  EXPECT_EQ(c.events_published, 2 * c.batches_published - 1);

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect((*pub)->bound_replay_endpoint());
  const char start[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  dealer.send(zmq::const_buffer(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start, 8), zmq::send_flags::none);
  uint64_t expect = 0;
  for (;;) {
    std::vector<zmq::message_t> r;
    ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(r)));
    ASSERT_EQ(r.size(), 3u);
    const uint64_t seq = Seq(r[1]);
    if (seq == ~uint64_t{0}) break;
    ASSERT_EQ(seq, expect);
    ++expect;
  }
  EXPECT_EQ(static_cast<int64_t>(expect), c.batches_published);
}

// More batches than a ZeroMQ socket's default high-water mark (1000): a
// replay from 0 still returns every one, then the end marker.
TEST(KvEventPublisherTest, ReplayReturnsTheWholeBuffer) {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  auto pub = KvEventPublisher::Create(o);
  ASSERT_TRUE(pub.ok());
  const int kBatches = 3000;
  for (int i = 0; i < kBatches; ++i) {
    (*pub)->Emit({KvEvent::Kind::kBlockRemoved, static_cast<uint64_t>(i), std::nullopt, {}});
    (*pub)->Flush();
    // Stay under the default queue of 10,000 batches: nothing is dropped.
  }
  for (int tries = 0; tries < 1000 && (*pub)->counters().batches_published < kBatches + 1; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ((*pub)->counters().batches_published, kBatches + 1);
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.set(zmq::sockopt::rcvhwm, 0);
  dealer.connect((*pub)->bound_replay_endpoint());
  const char start[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  dealer.send(zmq::const_buffer(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start, 8), zmq::send_flags::none);
  uint64_t expect = 0;
  for (;;) {
    std::vector<zmq::message_t> r;
    ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(r))) << "after seq " << expect;
    const uint64_t seq = Seq(r[1]);
    if (seq == ~uint64_t{0}) break;
    ASSERT_EQ(seq, expect);
    ++expect;
  }
  EXPECT_EQ(expect, static_cast<uint64_t>(kBatches + 1));
}

TEST(KvEventPublisherTest, BadEndpointNamesTheFlag) {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://*:notaport";
  auto pub = KvEventPublisher::Create(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("--kv-events"), std::string::npos);
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "bogus://x";
  pub = KvEventPublisher::Create(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("--kv-events-replay"), std::string::npos);
}

}  // namespace
}  // namespace kvfork
