#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <functional>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace kvfork {

struct BpeModel::MergeTable {
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.assign(cap, Slot{});
    mask = cap - 1;
  }
  // Keeps the first (lowest-rank) entry when a pair repeats, as HF's map
  // insertion order does not matter there either (ranks are unique per pair).
  void Insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t k = Key(a, b);
    for (uint64_t i = Hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty) {
        slots[i] = {k, rank, merged};
        return;
      }
      if (slots[i].key == k) return;
    }
  }
  const Slot* Find(int32_t a, int32_t b) const {
    const uint64_t k = Key(a, b);
    for (uint64_t i = Hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Bounded cache of encoded pre-tokens. Sharded so threads rarely contend; a
// full shard is cleared (frequent pieces come back quickly, and memory stays
// bounded at kShards * kShardCapacity entries of kMaxPieceBytes at most).
struct BpeModel::Cache {
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  static constexpr size_t kMaxPieceBytes = 64;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  std::array<Shard, kShards> shards;

  bool Lookup(std::string_view piece, size_t hash, std::vector<int32_t>* ids) {
    Shard& s = shards[hash % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(std::string_view piece, size_t hash, const int32_t* ids, size_t n) {
    Shard& s = shards[hash % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.map.size() >= kShardCapacity) s.map.clear();
    s.map.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
  }
};

BpeModel::BpeModel() = default;
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& json, bool byte_level) {
  if (!json.is_object()) return InvalidArgumentError("tokenizer.json: missing \"model\" object");
  const std::string type = json.value("type", std::string("BPE"));
  if (type != "BPE")
    return UnimplementedError("tokenizer.json model type \"" + type + "\" is not supported (BPE only)");
  if (!json.contains("vocab") || !json["vocab"].is_object())
    return InvalidArgumentError("tokenizer.json model: missing \"vocab\" object");
  if (!json.contains("merges") || !json["merges"].is_array())
    return InvalidArgumentError("tokenizer.json model: missing \"merges\" array");
  if (json.contains("dropout") && json["dropout"].is_number() && json["dropout"].get<double>() > 0)
    return UnimplementedError("tokenizer.json model: BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (json.contains(key) && json[key].is_string() && !json[key].get<std::string>().empty())
      return UnimplementedError(std::string("tokenizer.json model: \"") + key + "\" is not supported");
  }

  BpeModel m;
  m.byte_level_ = byte_level;
  m.ignore_merges_ = json.value("ignore_merges", false);
  m.byte_to_id_.fill(-1);
  const auto& vocab = json["vocab"];
  m.vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return InvalidArgumentError("tokenizer.json vocab: id of \"" + it.key() + "\" is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      return InvalidArgumentError("tokenizer.json vocab: id " + std::to_string(id) + " out of range");
    std::string bytes = it.key();
    if (byte_level) {
      std::optional<std::string> raw = ByteLevelDecode(it.key());
      if (!raw) {
        return InvalidArgumentError("tokenizer.json vocab: token \"" + it.key() +
                                    "\" is not in the byte-level alphabet");
      }
      bytes = std::move(*raw);
    }
    max_id = std::max(max_id, id);
    m.vocab_.emplace(std::move(bytes), static_cast<int32_t>(id));
  }
  m.id_to_bytes_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [bytes, id] : m.vocab_) {
    m.id_to_bytes_[id] = bytes;
    if (bytes.size() == 1) m.byte_to_id_[static_cast<uint8_t>(bytes[0])] = id;
  }
  if (json.contains("unk_token") && json["unk_token"].is_string()) {
    auto it = m.vocab_.find(json["unk_token"].get<std::string>());
    if (it == m.vocab_.end())
      return InvalidArgumentError("tokenizer.json model: unk_token is not in the vocabulary");
    m.unk_id_ = it->second;
  }

  // Merges are "a b" strings (older files) or ["a", "b"] lists (newer ones);
  // rank = position in the list.
  const auto& merges = json["merges"];
  m.merges_ = std::make_unique<MergeTable>();
  m.merges_->Reserve(merges.size());
  auto lookup = [&](const std::string& text, size_t rank) -> StatusOr<int32_t> {
    std::string bytes = text;
    if (byte_level) {
      std::optional<std::string> raw = ByteLevelDecode(text);
      if (raw) bytes = std::move(*raw);
    }
    auto it = m.vocab_.find(bytes);
    if (it == m.vocab_.end()) {
      return InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) + "]: token \"" +
                                  text + "\" is not in the vocabulary");
    }
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& mg = merges[rank];
    std::string a, b;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        return InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) + "]: \"" + s +
                                    "\" is not two tokens separated by a space");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else {
      return InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) +
                                  "]: expected \"a b\" or [\"a\", \"b\"]");
    }
    KVFORK_ASSIGN_OR_RETURN(int32_t ia, lookup(a, rank));
    KVFORK_ASSIGN_OR_RETURN(int32_t ib, lookup(b, rank));
    KVFORK_ASSIGN_OR_RETURN(int32_t imerged, lookup(a + b, rank));
    m.merges_->Insert(ia, ib, static_cast<int32_t>(rank), imerged);
  }
  m.cache_ = std::make_unique<Cache>();
  return m;
}

const std::string& BpeModel::TokenBytes(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<size_t>(id) >= id_to_bytes_.size()) return kEmpty;
  return id_to_bytes_[id];
}

std::optional<int32_t> BpeModel::TokenId(std::string_view bytes) const {
  auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && byte_to_id_[static_cast<uint8_t>(piece[0])] >= 0) {
    ids->push_back(byte_to_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= Cache::kMaxPieceBytes;
  const size_t hash = StringHash{}(piece);
  if (cacheable && cache_->Lookup(piece, hash, ids)) return;
  const size_t first = ids->size();
  Merge(piece, ids);
  if (cacheable) cache_->Insert(piece, hash, ids->data() + first, ids->size() - first);
}

// Hugging Face's Word::merge_all: repeatedly apply the lowest-ranked merge
// present (leftmost among equals), via a min-heap of candidate pairs whose
// entries are checked for staleness when popped.
void BpeModel::Merge(std::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  if (byte_level_) {
    for (char c : piece) {
      const int32_t id = byte_to_id_[static_cast<uint8_t>(c)];
      if (id < 0) {
        if (unk_id_) symbols.push_back({*unk_id_, 0, 0, true});
        continue;
      }
      symbols.push_back({id, 0, 0, true});
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      utf8::Step st = utf8::DecodeAt(piece, i);
      auto it = vocab_.find(piece.substr(i, st.length));
      if (it != vocab_.end()) {
        symbols.push_back({it->second, 0, 0, true});
      } else if (unk_id_) {
        symbols.push_back({*unk_id_, 0, 0, true});
      }
      i += st.length;
    }
  }
  const int32_t n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  heap.clear();
  const std::greater<> later;  // min-heap on (rank, pos)
  auto push_pair = [&](int32_t pos) {
    const int32_t nx = symbols[pos].next;
    if (nx < 0) return;
    const MergeTable::Slot* s = merges_->Find(symbols[pos].id, symbols[nx].id);
    if (s == nullptr) return;
    heap.push_back({s->rank, pos, symbols[pos].id, symbols[nx].id, s->merged});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    if (!left.alive || left.id != c.left || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right) continue;
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) ids->push_back(symbols[i].id);
}

}  // namespace kvfork
