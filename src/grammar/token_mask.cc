#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace kvfork::grammar {

std::shared_ptr<const Vocabulary> Vocabulary::FromTokenBytes(std::vector<std::string> token_bytes) {
  auto v = std::make_shared<Vocabulary>();
  v->token_bytes_ = std::move(token_bytes);
  std::vector<int32_t> order;
  for (size_t i = 0; i < v->token_bytes_.size(); ++i)
    if (!v->token_bytes_[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return v->token_bytes_[a] < v->token_bytes_[b]; });
  // Sorted insertion creates every node's children in byte order.
  std::vector<std::vector<std::pair<uint8_t, uint32_t>>> children(1);
  std::vector<std::vector<int32_t>> tokens(1);
  std::vector<uint32_t> path = {0};  // path[d]: node of the current token's first d bytes
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = v->token_bytes_[id];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const uint32_t node = static_cast<uint32_t>(children.size());
      children.emplace_back();
      tokens.emplace_back();
      children[path[d]].push_back({static_cast<uint8_t>(s[d]), node});
      path.push_back(node);
    }
    tokens[path[s.size()]].push_back(id);
    prev = s;
  }
  v->nodes_.resize(children.size());
  for (size_t n = 0; n < children.size(); ++n) {
    Node& node = v->nodes_[n];
    node.child_begin = static_cast<uint32_t>(v->child_byte_.size());
    for (const auto& [b, c] : children[n]) {
      v->child_byte_.push_back(b);
      v->child_node_.push_back(c);
    }
    node.child_end = static_cast<uint32_t>(v->child_byte_.size());
    node.token_begin = static_cast<uint32_t>(v->node_tokens_.size());
    v->node_tokens_.insert(v->node_tokens_.end(), tokens[n].begin(), tokens[n].end());
    node.token_end = static_cast<uint32_t>(v->node_tokens_.size());
  }
  return v;
}

std::shared_ptr<const Vocabulary> Vocabulary::FromTokenizer(const Tokenizer& tokenizer,
                                                            int64_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  const int64_t n = std::min(vocab_size, tokenizer.vocab_size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (!tokenizer.IsSpecial(id)) bytes[i] = tokenizer.TokenBytes(id);
  }
  return FromTokenBytes(std::move(bytes));
}

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  for (int32_t id : end_ids)
    if (id >= 0 && id < vocab_->size()) end_ids_.push_back(id);
}

bool TokenGrammar::IsEnd(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

std::shared_ptr<const TokenMask> TokenGrammar::Lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return it->second;
}

void TokenGrammar::Insert(const std::string& key, std::shared_ptr<const TokenMask> mask) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(key, std::move(mask));
}

MaskCacheStats TokenGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {hits_, misses_};
}

TokenConstraint::TokenConstraint(std::shared_ptr<const TokenGrammar> grammar)
    : grammar_(std::move(grammar)), matcher_(grammar_->grammar()) {}

std::shared_ptr<const TokenMask> TokenConstraint::Mask() {
  const std::string key = ended_ ? std::string("(ended)") : matcher_.StateKey();
  if (auto cached = grammar_->Lookup(key)) return cached;
  std::shared_ptr<const TokenMask> mask = ComputeMask();
  grammar_->Insert(key, mask);
  return mask;
}

std::shared_ptr<const TokenMask> TokenConstraint::ComputeMask() {
  const Vocabulary& vocab = grammar_->vocab();
  auto mask = std::make_shared<TokenMask>();
  mask->bits.assign(static_cast<size_t>((vocab.size() + 63) / 64), 0);
  if (!ended_ && !matcher_.Complete()) {
    arena_ = matcher_.arena();
    if (levels_.empty()) levels_.resize(1);
    levels_[0] = matcher_.heads();
    Walk(0, 0, mask.get());
  }
  // After an end token only end tokens may follow (ignore_eos keeps going).
  if (ended_ || matcher_.CanEnd())
    for (int32_t id : grammar_->end_ids()) mask->bits[id >> 6] |= uint64_t{1} << (id & 63);
  for (size_t w = 0; w < mask->bits.size(); ++w) {
    const int c = __builtin_popcountll(mask->bits[w]);
    if (c == 1 && mask->num_allowed == 0)
      mask->single = static_cast<int32_t>(w * 64 + __builtin_ctzll(mask->bits[w]));
    mask->num_allowed += c;
  }
  if (mask->num_allowed != 1) mask->single = -1;
  return mask;
}

void TokenConstraint::Walk(uint32_t node_id, size_t depth, TokenMask* mask) {
  const Vocabulary& vocab = grammar_->vocab();
  const Grammar& g = *grammar_->grammar();
  const Vocabulary::Node& node = vocab.nodes()[node_id];
  if (levels_.size() < depth + 2) levels_.resize(depth + 2);
  const ByteSet next = NextBytes(g, arena_, levels_[depth]);
  for (uint32_t c = node.child_begin; c < node.child_end; ++c) {
    const uint8_t byte = vocab.child_byte()[c];
    if (!next.Test(byte)) continue;
    const size_t mark = arena_.size();
    // Deeper calls may grow levels_ (moving the buffers, not their
    // contents): index it again after each call, never hold a reference.
    std::vector<int32_t> heads;
    heads.swap(levels_[depth + 1]);
    const bool accepting = StepByte(g, &arena_, levels_[depth], byte, &heads);
    levels_[depth + 1].swap(heads);
    if (levels_[depth + 1].empty() && !accepting) {
      arena_.resize(mark);
      continue;
    }
    const uint32_t child = vocab.child_node()[c];
    const Vocabulary::Node& cn = vocab.nodes()[child];
    for (uint32_t t = cn.token_begin; t < cn.token_end; ++t) {
      const int32_t id = vocab.node_tokens()[t];
      mask->bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (!levels_[depth + 1].empty() && cn.child_begin != cn.child_end) Walk(child, depth + 1, mask);
    arena_.resize(mark);
  }
}

Status TokenConstraint::Accept(int32_t token) {
  if (ended_) {
    if (grammar_->IsEnd(token)) return OkStatus();
    return InvalidArgumentError("token " + std::to_string(token) + " after the grammar ended");
  }
  if (grammar_->IsEnd(token)) {
    if (!matcher_.CanEnd())
      return InvalidArgumentError("end token " + std::to_string(token) +
                                  " before the grammar can end");
    ended_ = true;
    return OkStatus();
  }
  if (token < 0 || token >= grammar_->vocab().size())
    return InvalidArgumentError("token " + std::to_string(token) + " is outside the vocabulary");
  const std::string& bytes = grammar_->vocab().token_bytes(token);
  if (bytes.empty() || !matcher_.AcceptBytes(bytes))
    return InvalidArgumentError("token " + std::to_string(token) +
                                " is not allowed by the grammar");
  return OkStatus();
}

}  // namespace kvfork::grammar
