// The BPE model's lookup structures against plain std:: containers on random
// contents: TokenTable (bytes <-> id), MergeTable (pair -> rank -> merged id)
// and PieceCache (shared between threads).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "corpus_rng.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/piece_cache.h"
#include "tokenizer/token_table.h"

namespace kvfork {
namespace {

std::string RandomBytes(testing::Mulberry32& rng, size_t max_len) {
  std::string s(1 + rng.Next() % max_len, '\0');
  for (char& c : s)
    c = static_cast<char>(rng.Next() % 4 == 0 ? rng.Next() % 256 : 'a' + rng.Next() % 3);
  return s;
}

TEST(HashBytes, LengthAndEveryByteMatter) {
  std::set<uint64_t> seen;
  for (size_t n = 0; n < 40; ++n) EXPECT_TRUE(seen.insert(HashBytes(std::string(n, '\0'))).second);
  const std::string base(23, 'x');
  for (size_t i = 0; i < base.size(); ++i) {
    std::string s = base;
    s[i] = 'y';
    EXPECT_TRUE(seen.insert(HashBytes(s)).second) << i;
  }
}

TEST(TokenTable, AgreesWithAMapAndGrowsFromEmpty) {
  testing::Mulberry32 rng(1);
  TokenTable table;  // no Reserve: grows by rehashing
  std::map<std::string, int32_t> expected;
  int32_t next_id = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string s = RandomBytes(rng, 12);
    if (expected.count(s)) continue;
    next_id += 1 + static_cast<int32_t>(rng.Next() % 2);  // leave gaps in the ids
    expected[s] = next_id;
    EXPECT_EQ(table.Insert(s, next_id), -1);
  }
  EXPECT_EQ(table.size(), expected.size());
  EXPECT_EQ(table.id_limit(), static_cast<size_t>(next_id) + 1);
  std::vector<bool> used(table.id_limit(), false);
  for (const auto& [s, id] : expected) {
    EXPECT_EQ(table.Find(s), id);
    EXPECT_EQ(table.Bytes(id), s);
    used[static_cast<size_t>(id)] = true;
  }
  for (size_t id = 0; id < used.size(); ++id)
    if (!used[id]) {
      EXPECT_EQ(table.Bytes(static_cast<int32_t>(id)), "");
    }
  EXPECT_EQ(table.Bytes(-1), "");
  EXPECT_EQ(table.Bytes(next_id + 5), "");
  for (int i = 0; i < 2000; ++i) {
    const std::string s = RandomBytes(rng, 6) + std::string(12, 'z');  // longer than any above
    EXPECT_EQ(table.Find(s), -1);
  }
  EXPECT_EQ(table.Find(""), -1);
}

TEST(TokenTable, ReinsertedBytesMoveToTheNewId) {
  TokenTable table;
  table.Reserve(4, 16);
  EXPECT_EQ(table.Insert("ab", 3), -1);
  EXPECT_EQ(table.Insert("cd", 5), -1);
  EXPECT_EQ(table.Insert("ab", 7), 3);  // as a JSON object: the last value wins
  EXPECT_EQ(table.Find("ab"), 7);
  EXPECT_EQ(table.Bytes(7), "ab");
  EXPECT_EQ(table.Bytes(3), "");
  EXPECT_EQ(table.size(), 2u);
}

TEST(MergeTable, AgreesWithAMap) {
  testing::Mulberry32 rng(2);
  MergeTable table;  // grows from nothing
  std::map<std::pair<int32_t, int32_t>, int32_t> first_rank;
  std::vector<int32_t> merged_of_rank;
  for (int32_t rank = 0; rank < 50000; ++rank) {
    // Ids across the whole supported range, with repeats of popular ids.
    const auto id = [&] {
      return static_cast<int32_t>(rng.Next() % 3 == 0 ? rng.Next() % 50
                                                      : rng.Next() % (MergeTable::kMaxId + 1));
    };
    const int32_t a = id(), b = id(), merged = static_cast<int32_t>(rng.Next() % 1000000);
    table.Insert(a, b, rank, merged);
    first_rank.emplace(std::make_pair(a, b), rank);  // a repeated pair keeps its first rank
    merged_of_rank.push_back(merged);
  }
  for (const auto& [pair, rank] : first_rank) {
    ASSERT_EQ(table.Find(pair.first, pair.second), rank);
    EXPECT_EQ(table.Merged(rank), merged_of_rank[static_cast<size_t>(rank)]);
  }
  int misses = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto a = static_cast<int32_t>(rng.Next() % (MergeTable::kMaxId + 1));
    const auto b = static_cast<int32_t>(rng.Next() % (MergeTable::kMaxId + 1));
    if (first_rank.count({a, b})) continue;
    EXPECT_EQ(table.Find(a, b), -1);
    ++misses;
  }
  EXPECT_GT(misses, 19000);
  MergeTable empty;
  EXPECT_EQ(empty.Find(0, 0), -1);
  table.Insert(MergeTable::kMaxId, MergeTable::kMaxId, 50000, 9);
  EXPECT_EQ(table.Find(MergeTable::kMaxId, MergeTable::kMaxId), 50000);
}

std::vector<int32_t> IdsOf(const std::string& key) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < key.size() % PieceCache::kMaxIds + 1; ++i)
    ids.push_back(static_cast<int32_t>(HashBytes(key) >> (i % 32)) & 0x7FFFFFFF);
  return ids;
}

TEST(PieceCache, HitsOnlyTheSamePiece) {
  PieceCache cache;
  std::vector<int32_t> out;
  const std::string piece = " tokenization";
  EXPECT_FALSE(cache.Lookup(piece, HashBytes(piece), &out));
  cache.Insert(piece, HashBytes(piece), std::vector<int32_t>{5, 6, 7});
  out = {1};
  ASSERT_TRUE(cache.Lookup(piece, HashBytes(piece), &out));
  EXPECT_EQ(out, (std::vector<int32_t>{1, 5, 6, 7}));  // appended
  out.clear();
  EXPECT_FALSE(cache.Lookup(" tokenizatioN", HashBytes(" tokenizatioN"), &out));
  // The same slot (same hash) but other bytes: a miss, never a wrong answer.
  EXPECT_FALSE(cache.Lookup(" tokenizatio", HashBytes(piece), &out));
  EXPECT_TRUE(out.empty());

  // Too long a piece, or too many ids: not kept.
  const std::string long_piece(PieceCache::kMaxKeyBytes + 1, 'x');
  EXPECT_FALSE(PieceCache::Cacheable(long_piece));
  cache.Insert(long_piece, HashBytes(long_piece), std::vector<int32_t>{1});
  EXPECT_FALSE(cache.Lookup(long_piece, HashBytes(long_piece), &out));
  const std::vector<int32_t> many(PieceCache::kMaxIds + 1, 3);
  cache.Insert("many", HashBytes("many"), many);
  EXPECT_FALSE(cache.Lookup("many", HashBytes("many"), &out));
}

TEST(PieceCache, ThreadsSharingItNeverSeeAWrongEntry) {
  PieceCache cache;
  std::vector<std::string> keys;
  testing::Mulberry32 rng(3);
  for (int i = 0; i < 30000; ++i) keys.push_back(RandomBytes(rng, PieceCache::kMaxKeyBytes));
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int32_t> out;
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t i = static_cast<size_t>(t); i < keys.size(); i += 2) {
          const std::string& k = keys[i];
          out.clear();
          if (cache.Lookup(k, HashBytes(k), &out)) {
            ++hits;
            if (out != IdsOf(k)) ++wrong;
          } else {
            cache.Insert(k, HashBytes(k), IdsOf(k));
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
}

}  // namespace
}  // namespace kvfork
