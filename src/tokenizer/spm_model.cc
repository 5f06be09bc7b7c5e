#include "tokenizer/spm_model.h"

#include <algorithm>
#include <limits>

#include "tokenizer/piece_cache.h"
#include "tokenizer/scratch_vector.h"

namespace kvfork {
namespace {

struct Symbol {
  uint32_t begin;   // byte offset in the text
  uint32_t length;  // 0: merged into its left neighbour
  int32_t prev;     // -1: none
  int32_t next;
};

// A candidate merge of symbols left and right (neighbours when it was made;
// stale once either has changed, which `length` tells).
struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;  // bytes of left + right when it was made
};

// llm_bigram_spm::comparator: the heap's top is the highest score, then the
// leftmost pair. Among live candidates (score, left) is unique (a symbol has
// one right neighbour), so any heap gives llama.cpp's order.
bool Before(const Candidate& a, const Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

// A single merge loop holds at most this many bytes; a longer stretch (a GiB
// of text that no cut splits) is merged in pieces of this size, cut between
// symbols, where ids may differ from llama.cpp's. Symbol indices are 32-bit.
constexpr size_t kMaxMergeBytes = size_t{1} << 30;

bool IsSpaceSymbol(std::string_view text, size_t at, size_t length) {
  return length == kSpmSpace.size() && text.compare(at, length, kSpmSpace) == 0;
}

// Length of the symbol at `at` (llama.cpp's: from the lead byte, clipped to
// the text).
size_t SymbolAt(std::string_view text, size_t at) {
  return std::min(SpmSymbolLength(static_cast<uint8_t>(text[at])), text.size() - at);
}

// Whether some symbol other than "▁" is directly followed by "▁" in text.
bool HasSpaceAfterCharacter(std::string_view text) {
  bool after_character = false;
  for (size_t at = 0; at < text.size();) {
    const size_t n = SymbolAt(text, at);
    const bool space = IsSpaceSymbol(text, at, n);
    if (space && after_character) return true;
    after_character = !space;
    at += n;
  }
  return false;
}

}  // namespace

SpmModel::SpmModel() = default;
SpmModel::~SpmModel() = default;
SpmModel::SpmModel(SpmModel&&) noexcept = default;
SpmModel& SpmModel::operator=(SpmModel&&) noexcept = default;

StatusOr<SpmModel> SpmModel::Create(std::span<const std::string> tokens,
                                    std::span<const float> scores, std::optional<int32_t> unk_id) {
  if (scores.size() != tokens.size())
    return InvalidArgumentError("tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                                " entries but tokenizer.ggml.tokens has " +
                                std::to_string(tokens.size()));
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return InvalidArgumentError("tokenizer.ggml.tokens has too many tokens");
  size_t bytes = 0;
  for (const std::string& t : tokens) bytes += t.size() + 16;
  if (bytes >= std::numeric_limits<uint32_t>::max())
    return InvalidArgumentError("tokenizer.ggml.tokens holds over 4 GiB of text");
  SpmModel m;
  m.table_.Reserve(tokens.size(), bytes);
  m.scores_.assign(scores.begin(), scores.end());
  m.cuts_at_words_ = true;
  for (size_t id = 0; id < tokens.size(); ++id) {
    // llama.cpp names an empty token so that it matches no text.
    const std::string text = tokens[id].empty() ? "[EMPTY_" + std::to_string(id) + "]" : tokens[id];
    const int32_t previous = m.table_.Insert(text, static_cast<int32_t>(id));
    if (previous >= 0)
      return InvalidArgumentError("tokenizer.ggml.tokens[" + std::to_string(id) + "] \"" + text +
                                  "\" is also tokenizer.ggml.tokens[" + std::to_string(previous) +
                                  "] (llama.cpp refuses a duplicate token)");
    if (m.cuts_at_words_ && HasSpaceAfterCharacter(text)) m.cuts_at_words_ = false;
  }
  // The symbol pairs inside tokens: 16 bits per pair keeps false positives
  // (pairs that only seem joinable) to about 6%.
  size_t pairs = 0;
  for (const std::string& t : tokens) pairs += t.size();
  size_t bits = 4096;
  while (bits < 16 * pairs) bits <<= 1;
  m.pair_bits_.assign(bits / 64, 0);
  m.pair_bit_mask_ = bits - 1;
  for (const std::string& t : tokens) {
    for (size_t at = 0; at < t.size();) {
      const size_t n = SymbolAt(t, at);
      if (at + n >= t.size()) break;
      const uint64_t bit =
          HashBytes(std::string_view(t).substr(at, n + SymbolAt(t, at + n))) & m.pair_bit_mask_;
      m.pair_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
      at += n;
    }
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char hex[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = m.table_.Find(std::string_view(hex, sizeof(hex)));
    if (id < 0) id = m.table_.Find(std::string(1, static_cast<char>(b)));
    if (id < 0 && unk_id) id = *unk_id;
    if (id < 0)
      return InvalidArgumentError("tokenizer.ggml.tokens has no token for the byte " +
                                  std::string(hex, sizeof(hex)) +
                                  " and there is no unknown token to stand for it");
    m.byte_tokens_[static_cast<size_t>(b)] = id;
  }
  m.cache_ = std::make_unique<PieceCache>();
  return m;
}

void SpmModel::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  if (!cuts_at_words_) {
    EncodeWord(text, ids);
    return;
  }
  // A word starts at each "▁" that follows another symbol.
  size_t word = 0;
  bool after_character = false;
  for (size_t at = 0; at < text.size();) {
    const size_t n = SymbolAt(text, at);
    const bool space = IsSpaceSymbol(text, at, n);
    if (space && after_character) {
      EncodeWord(text.substr(word, at - word), ids);
      word = at;
    }
    after_character = !space;
    at += n;
  }
  if (word < text.size()) EncodeWord(text.substr(word), ids);
}

void SpmModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  const size_t first = ids->size();
  const bool cacheable = PieceCache::Cacheable(word);
  const uint64_t hash = cacheable ? HashBytes(word) : 0;
  if (cacheable && cache_->Lookup(word, hash, ids)) return;
  size_t part = 0;
  for (size_t at = 0; at < word.size();) {
    const size_t n = SymbolAt(word, at);
    const size_t next = at + n;
    if (next < word.size() && !MayJoin(word.substr(at, n + SymbolAt(word, next)))) {
      EncodePart(word.substr(part, next - part), ids);
      part = next;
    }
    at = next;
  }
  if (part == 0) {
    Merge(word, ids);
  } else {
    EncodePart(word.substr(part), ids);
  }
  if (cacheable)
    cache_->Insert(word, hash, std::span<const int32_t>(ids->data() + first, ids->size() - first));
}

void SpmModel::EncodePart(std::string_view part, std::vector<int32_t>* ids) const {
  if (!PieceCache::Cacheable(part)) {
    Merge(part, ids);
    return;
  }
  const uint64_t hash = HashBytes(part);
  if (cache_->Lookup(part, hash, ids)) return;
  const size_t first = ids->size();
  Merge(part, ids);
  cache_->Insert(part, hash, std::span<const int32_t>(ids->data() + first, ids->size() - first));
}

void SpmModel::Merge(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (text.size() > kMaxMergeBytes) {  // cut between symbols, see kMaxMergeBytes
    size_t end = 0;
    while (end < kMaxMergeBytes) end += SymbolAt(text, end);
    Merge(text.substr(0, end), ids);
    Merge(text.substr(end), ids);
    return;
  }
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (size_t at = 0; at < text.size();) {
    const size_t n = SymbolAt(text, at);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(n), index - 1,
                       at + n == text.size() ? -1 : index + 1});
    at += n;
  }
  auto add_candidate = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const uint32_t length = l.length + r.length;
    const int32_t id = table_.Find(text.substr(l.begin, length));
    if (id < 0) return;
    heap.push_back({scores_[static_cast<size_t>(id)], left, right, length});
    std::push_heap(heap.begin(), heap.end(), Before);
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    add_candidate(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Before);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    Symbol& right = symbols[static_cast<size_t>(c.right)];
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    add_candidate(left.prev, c.left);
    add_candidate(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.length);
    const int32_t id = table_.Find(piece);
    if (id >= 0) {
      ids->push_back(id);
      continue;
    }
    // Only a single character can fail to be a token (merges make tokens).
    for (char c : piece) ids->push_back(byte_tokens_[static_cast<uint8_t>(c)]);
  }
  ReleaseLargeScratch(&symbols);
  ReleaseLargeScratch(&heap);
}

}  // namespace kvfork
