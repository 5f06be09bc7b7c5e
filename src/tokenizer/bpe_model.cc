#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/piece_cache.h"
#include "tokenizer/scratch_vector.h"
#include "tokenizer/utf8.h"

namespace kvfork {

BpeModel::BpeModel() = default;
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

// The vocabulary: {"token": id, ...}, keys in the byte alphabet when
// byte_level_. A key given twice keeps its last id, as a JSON object does.
Status BpeModel::ReadVocab(std::string_view json) {
  JsonReader r(json, "tokenizer.json model.vocab");
  if (r.Peek() != '{')
    return InvalidArgumentError("tokenizer.json model: missing \"vocab\" object");
  KVFORK_RETURN_IF_ERROR(r.Expect('{'));
  // An estimate from the text (an indented entry is ~24 bytes) saves most
  // rehashing; the table grows if it is short.
  vocab_.Reserve(json.size() / 24, json.size() / 2);
  // Inserts go in batches whose table slots are prefetched together: each
  // mostly misses the caches. Order is kept, so a repeated key's last id wins.
  struct Entry {
    std::string bytes;
    uint64_t hash;
    int32_t id;
  };
  constexpr size_t kBatch = 64;
  std::vector<Entry> batch(kBatch);
  size_t pending = 0;
  auto insert_batch = [&] {
    for (size_t i = 0; i < pending; ++i) vocab_.Prefetch(batch[i].hash);
    for (size_t i = 0; i < pending; ++i) vocab_.Insert(batch[i].bytes, batch[i].hash, batch[i].id);
    pending = 0;
  };
  std::string key;
  bool first = true;
  for (;;) {
    KVFORK_ASSIGN_OR_RETURN(bool more, r.NextKey(&first, &key));
    if (!more) break;
    int64_t id = 0;
    bool is_integer = false;
    KVFORK_RETURN_IF_ERROR(r.ReadInteger(&id, &is_integer));
    if (!is_integer)
      return InvalidArgumentError("tokenizer.json vocab: id of \"" + key + "\" is not an integer");
    if (id < 0)
      return InvalidArgumentError("tokenizer.json vocab: id " + std::to_string(id) +
                                  " out of range");
    // Before the insert: the id table is sized by the largest id, so 2^31 - 1
    // would allocate 16 GB before the check after ReadVocab refused it.
    if (id > MergeTable::kMaxId)
      return UnimplementedError("tokenizer.json vocab: id " + std::to_string(id) +
                                " of \"" + key + "\" is above the largest supported token id " +
                                std::to_string(MergeTable::kMaxId));
    Entry& e = batch[pending];
    if (!byte_level_) {
      e.bytes = key;
    } else if (!ByteLevelDecodeTo(key, &e.bytes)) {
      return InvalidArgumentError("tokenizer.json vocab: token \"" + key +
                                  "\" is not in the byte-level alphabet");
    }
    e.hash = HashBytes(e.bytes);
    e.id = static_cast<int32_t>(id);
    if (++pending == kBatch) insert_batch();
  }
  insert_batch();
  return r.ExpectEnd();
}

// Merges are "a b" strings (older files) or ["a", "b"] lists (newer ones);
// rank = position in the list. Each merge costs three vocabulary lookups
// that mostly miss the caches, so merges are read in batches whose lookups
// are prefetched together.
Status BpeModel::ReadMerges(std::string_view json) {
  JsonReader r(json, "tokenizer.json model.merges");
  if (r.Peek() != '[')
    return InvalidArgumentError("tokenizer.json model: missing \"merges\" array");
  KVFORK_RETURN_IF_ERROR(r.Expect('['));
  merges_.Reserve(json.size() / 48);  // an indented ["a", "b"] is ~46 bytes
  struct Pending {
    size_t rank;
    std::string a, b;                  // as written (the byte alphabet)
    std::string raw_a, raw_b, raw_ab;  // raw bytes, the vocabulary's keys
    uint64_t hash_a, hash_b, hash_ab;
  };
  constexpr size_t kBatch = 64;
  std::vector<Pending> batch(kBatch);
  size_t pending = 0;
  // A merge names its tokens in the byte alphabet; text that is not in it is
  // looked up as written (and then is not in a byte-level vocabulary).
  auto to_raw = [&](const std::string& name, std::string* raw) {
    if (!byte_level_ || !ByteLevelDecodeTo(name, raw)) *raw = name;
  };
  auto not_in_vocab = [](size_t rank, const std::string& name) {
    return InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) + "]: token \"" +
                                name + "\" is not in the vocabulary");
  };
  auto resolve = [&]() -> Status {
    for (size_t i = 0; i < pending; ++i) {
      vocab_.Prefetch(batch[i].hash_a);
      vocab_.Prefetch(batch[i].hash_b);
      vocab_.Prefetch(batch[i].hash_ab);
    }
    for (size_t i = 0; i < pending; ++i) {
      const Pending& m = batch[i];
      const int32_t ia = vocab_.Find(m.raw_a, m.hash_a);
      if (ia < 0) return not_in_vocab(m.rank, m.a);
      const int32_t ib = vocab_.Find(m.raw_b, m.hash_b);
      if (ib < 0) return not_in_vocab(m.rank, m.b);
      const int32_t iab = vocab_.Find(m.raw_ab, m.hash_ab);
      if (iab < 0) return not_in_vocab(m.rank, m.a + m.b);
      if (m.rank > static_cast<size_t>(MergeTable::kMaxRank)) {
        return UnimplementedError("tokenizer.json model: more than " +
                                  std::to_string(MergeTable::kMaxRank + 1) +
                                  " merges are not supported");
      }
      merges_.Insert(ia, ib, static_cast<int32_t>(m.rank), iab);
    }
    pending = 0;
    return OkStatus();
  };
  // Errors found while reading come after those of the merges before them.
  auto fail = [&](Status error) -> Status {
    KVFORK_RETURN_IF_ERROR(resolve());
    return error;
  };
  std::string text;
  bool first = true;
  for (size_t rank = 0;; ++rank) {
    StatusOr<bool> more = r.NextElement(&first);
    if (!more.ok()) return fail(more.status());
    if (!*more) break;
    auto shape_error = [&] {
      return fail(InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) +
                                       "]: expected \"a b\" or [\"a\", \"b\"]"));
    };
    Pending& m = batch[pending];
    m.rank = rank;
    const char c = r.Peek();
    if (c == '"') {
      if (Status s = r.ReadString(&text); !s.ok()) return fail(s);
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos)
        return fail(InvalidArgumentError("tokenizer.json merges[" + std::to_string(rank) + "]: \"" +
                                         text + "\" is not two tokens separated by a space"));
      m.a.assign(text, 0, space);
      m.b.assign(text, space + 1);
    } else if (c == '[') {
      if (Status s = r.Expect('['); !s.ok()) return fail(s);
      bool first_part = true;
      for (std::string* part : {&m.a, &m.b}) {
        StatusOr<bool> has = r.NextElement(&first_part);
        if (!has.ok()) return fail(has.status());
        if (!*has || r.Peek() != '"') return shape_error();
        if (Status s = r.ReadString(part); !s.ok()) return fail(s);
      }
      StatusOr<bool> extra = r.NextElement(&first_part);
      if (!extra.ok()) return fail(extra.status());
      if (*extra) return shape_error();
    } else {
      return shape_error();
    }
    to_raw(m.a, &m.raw_a);
    to_raw(m.b, &m.raw_b);
    m.raw_ab = m.raw_a;
    m.raw_ab += m.raw_b;
    m.hash_a = HashBytes(m.raw_a);
    m.hash_b = HashBytes(m.raw_b);
    m.hash_ab = HashBytes(m.raw_ab);
    if (++pending == kBatch) KVFORK_RETURN_IF_ERROR(resolve());
  }
  KVFORK_RETURN_IF_ERROR(resolve());
  return r.ExpectEnd();
}

StatusOr<BpeModel> BpeModel::FromJson(std::string_view model_json, bool byte_level) {
  // Everything but the two large members is small: nlohmann reads it.
  auto members = SplitObject(model_json, "tokenizer.json model");
  if (!members.ok()) {
    if (!model_json.empty() && model_json.front() != '{')
      return InvalidArgumentError("tokenizer.json: missing \"model\" object");
    return members.status();
  }
  nlohmann::json json = nlohmann::json::object();
  std::string_view vocab_json, merges_json;
  for (const auto& [key, value] : *members) {
    if (key == "vocab") {
      vocab_json = value;
    } else if (key == "merges") {
      merges_json = value;
    } else {
      json[key] = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    }
  }
  const std::string type = json.value("type", std::string("BPE"));
  if (type != "BPE")
    return UnimplementedError("tokenizer.json model type \"" + type +
                              "\" is not supported (BPE only)");
  if (vocab_json.empty())
    return InvalidArgumentError("tokenizer.json model: missing \"vocab\" object");
  if (merges_json.empty())
    return InvalidArgumentError("tokenizer.json model: missing \"merges\" array");
  if (json.contains("dropout") && json["dropout"].is_number() && json["dropout"].get<double>() > 0)
    return UnimplementedError("tokenizer.json model: BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (json.contains(key) && json[key].is_string() && !json[key].get<std::string>().empty())
      return UnimplementedError(std::string("tokenizer.json model: \"") + key +
                                "\" is not supported");
  }

  BpeModel m;
  m.byte_level_ = byte_level;
  m.ignore_merges_ = json.value("ignore_merges", false);
  m.byte_to_id_.fill(-1);
  KVFORK_RETURN_IF_ERROR(m.ReadVocab(vocab_json));
  if (m.vocab_.id_limit() > static_cast<size_t>(MergeTable::kMaxId) + 1) {
    return UnimplementedError("tokenizer.json model: token ids above " +
                              std::to_string(MergeTable::kMaxId) + " are not supported");
  }
  for (int b = 0; b < 256; ++b)
    m.byte_to_id_[b] = m.vocab_.Find(std::string(1, static_cast<char>(b)));
  for (size_t id = 0; id < m.vocab_.id_limit(); ++id)
    m.max_token_bytes_ =
        std::max(m.max_token_bytes_, m.vocab_.Bytes(static_cast<int32_t>(id)).size());
  if (json.contains("unk_token") && json["unk_token"].is_string()) {
    const int32_t id = m.vocab_.Find(json["unk_token"].get<std::string>());
    if (id < 0)
      return InvalidArgumentError("tokenizer.json model: unk_token is not in the vocabulary");
    m.unk_id_ = id;
  }
  KVFORK_RETURN_IF_ERROR(m.ReadMerges(merges_json));
  m.whole_.reset(new std::atomic<uint8_t>[m.vocab_.id_limit()]);
  for (size_t i = 0; i < m.vocab_.id_limit(); ++i)
    m.whole_[i].store(kUnknown, std::memory_order_relaxed);
  m.cache_ = std::make_unique<PieceCache>();
  return m;
}

bool BpeModel::covers_every_byte() const {
  if (!byte_level_) return false;
  for (int32_t id : byte_to_id_)
    if (id < 0) return false;
  return true;
}

std::optional<int32_t> BpeModel::TokenId(std::string_view bytes) const {
  const int32_t id = vocab_.Find(bytes);
  if (id < 0) return std::nullopt;
  return id;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* ids) const {
  EncodeHashed(piece, HashBytes(piece), ids);
}

void BpeModel::EncodePieces(std::span<const std::string_view> pieces,
                            std::vector<int32_t>* ids) const {
  // The vocabulary lookup of a piece mostly misses the caches; hashing ahead
  // and prefetching the slot of the piece kAhead places on hides that.
  constexpr size_t kAhead = 4;
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) hashes[i] = HashBytes(pieces[i]);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + kAhead < pieces.size()) vocab_.Prefetch(hashes[i + kAhead]);
    EncodeHashed(pieces[i], hashes[i], ids);
  }
  ReleaseLargeScratch(&hashes);
}

void BpeModel::EncodeHashed(std::string_view piece, uint64_t hash,
                            std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && byte_to_id_[static_cast<uint8_t>(piece[0])] >= 0) {
    ids->push_back(byte_to_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const int32_t whole = vocab_.Find(piece, hash);
  if (whole >= 0) {
    if (ignore_merges_) {
      ids->push_back(whole);
      return;
    }
    // Merging a token's own bytes almost always rebuilds it, but not always
    // (a token can be unreachable by its merges), so the first sighting
    // merges and records which it is.
    std::atomic<uint8_t>& state = whole_[static_cast<size_t>(whole)];
    const uint8_t known = state.load(std::memory_order_relaxed);
    if (known == kSelf) {
      ids->push_back(whole);
      return;
    }
    if (known == kUnknown) {
      const size_t first = ids->size();
      Merge(piece, ids);
      const bool self = ids->size() == first + 1 && (*ids)[first] == whole;
      state.store(self ? kSelf : kSplits, std::memory_order_relaxed);
      return;
    }
  }
  const bool cacheable = PieceCache::Cacheable(piece);
  if (cacheable && cache_->Lookup(piece, hash, ids)) return;
  const size_t first = ids->size();
  Merge(piece, ids);
  if (cacheable) {
    cache_->Insert(piece, hash, std::span<const int32_t>(ids->data() + first, ids->size() - first));
  }
}

// Hugging Face's Word::merge_all: repeatedly apply the lowest-ranked merge
// present (leftmost among equals), via a min-heap of candidate pairs whose
// entries are checked for staleness when popped.
void BpeModel::Merge(std::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    uint64_t order;  // rank << 32 | index of the left symbol: the heap's key
    int32_t left, right;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  if (byte_level_) {
    for (char c : piece) {
      const int32_t id = byte_to_id_[static_cast<uint8_t>(c)];
      if (id < 0) {
        if (unk_id_) symbols.push_back({*unk_id_, 0, 0});
        continue;
      }
      symbols.push_back({id, 0, 0});
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      utf8::Step st = utf8::DecodeAt(piece, i);
      const int32_t id = vocab_.Find(piece.substr(i, st.length));
      if (id >= 0) {
        symbols.push_back({id, 0, 0});
      } else if (unk_id_) {
        symbols.push_back({*unk_id_, 0, 0});
      }
      i += st.length;
    }
  }
  const int32_t n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  // Every boundary's lookup is independent: prefetching them all first lets
  // their cache misses overlap.
  for (int32_t i = 0; i + 1 < n; ++i)
    __builtin_prefetch(merges_.SlotAddress(symbols[i].id, symbols[i + 1].id));
  heap.clear();
  const auto later = [](const Candidate& x, const Candidate& y) { return x.order > y.order; };
  auto candidate = [&](int32_t pos) {
    const int32_t nx = symbols[pos].next;
    if (nx < 0) return false;
    const int32_t rank = merges_.Find(symbols[pos].id, symbols[nx].id);
    if (rank < 0) return false;
    __builtin_prefetch(merges_.MergedAddress(rank));  // read if this merge is applied
    heap.push_back({(static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos),
                    symbols[pos].id, symbols[nx].id});
    return true;
  };
  for (int32_t i = 0; i + 1 < n; ++i) candidate(i);
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](int32_t pos) {
    if (candidate(pos)) std::push_heap(heap.begin(), heap.end(), later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    const auto pos = static_cast<int32_t>(c.order & 0xFFFFFFFFu);
    Symbol& left = symbols[pos];
    if (left.id != c.left || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right) continue;
    left.id = merges_.Merged(static_cast<int32_t>(c.order >> 32));
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pos;
    // Both new pairs' lookups start before either is needed.
    if (left.prev >= 0) __builtin_prefetch(merges_.SlotAddress(symbols[left.prev].id, left.id));
    if (left.next >= 0) __builtin_prefetch(merges_.SlotAddress(left.id, symbols[left.next].id));
    if (left.prev >= 0) push(left.prev);
    push(pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) ids->push_back(symbols[i].id);
  ReleaseLargeScratch(&symbols);
  ReleaseLargeScratch(&heap);
}

}  // namespace kvfork
