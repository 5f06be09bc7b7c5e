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
  // Renumber the nodes in depth-first order, so that a subtree's nodes (and
  // the tokens listed with them) are contiguous.
  std::vector<uint32_t> dfs;
  dfs.reserve(children.size());
  std::vector<uint32_t> todo = {0};
  while (!todo.empty()) {
    const uint32_t n = todo.back();
    todo.pop_back();
    dfs.push_back(n);
    for (auto it = children[n].rbegin(); it != children[n].rend(); ++it) todo.push_back(it->second);
  }
  std::vector<uint32_t> new_id(children.size());
  for (size_t i = 0; i < dfs.size(); ++i) new_id[dfs[i]] = static_cast<uint32_t>(i);
  {
    std::vector<std::vector<std::pair<uint8_t, uint32_t>>> c2(children.size());
    std::vector<std::vector<int32_t>> t2(children.size());
    for (size_t old = 0; old < children.size(); ++old) {
      for (auto& [b, c] : children[old]) c = new_id[c];
      c2[new_id[old]] = std::move(children[old]);
      t2[new_id[old]] = std::move(tokens[old]);
    }
    children.swap(c2);
    tokens.swap(t2);
  }
  v->nodes_.resize(children.size());
  v->subtree_bytes_.resize(children.size());
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
  // Children come after their parent: fold subtrees bottom-up.
  for (size_t n = children.size(); n-- > 0;) {
    Node& node = v->nodes_[n];
    node.subtree_end = node.token_end;
    for (uint32_t c = node.child_begin; c < node.child_end; ++c) {
      const uint32_t child = v->child_node_[c];
      v->subtree_bytes_[n].Set(v->child_byte_[c]);
      v->subtree_bytes_[n].Or(v->subtree_bytes_[child]);
      node.subtree_end = std::max(node.subtree_end, v->nodes_[child].subtree_end);
    }
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
  const size_t bytes = key.size() + mask->bits.size() * sizeof(uint64_t);
  if (cache_bytes_ + bytes > kMaxMaskCacheBytes) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  if (cache_.emplace(key, std::move(mask)).second) cache_bytes_ += bytes;
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
    if (dfa_.size() > kMaxDfaStates || dfa_arena_.size() > kMaxDfaNodes) {
      dfa_.clear();
      dfa_arena_.clear();
      dfa_index_.clear();
    }
    // The matcher's stacks, copied into the DFA's arena (shared bottoms stay
    // shared), make the walk's starting state.
    const size_t mark = dfa_arena_.size();
    std::vector<int32_t> heads = matcher_.heads();
    CopyStacks(matcher_.arena(), &heads, &dfa_arena_);
    const size_t states = dfa_.size();
    const int32_t start = Intern(std::move(heads), matcher_.CanEnd());
    if (static_cast<size_t>(start) < states) dfa_arena_.resize(mark);
    Walk(0, start, mask.get());
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

int32_t TokenConstraint::Intern(std::vector<int32_t> heads, bool accepting) {
  uint64_t hash = accepting ? 0x9e3779b97f4a7c15ull : 0;
  for (int32_t h : heads) hash += dfa_arena_[h].hash * 0xbf58476d1ce4e5b9ull + 1;  // order-free
  auto [lo, hi] = dfa_index_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const DfaState& d = dfa_[it->second];
    if (d.accepting != accepting || d.heads.size() != heads.size()) continue;
    bool same = true;
    for (size_t i = 0; same && i < heads.size(); ++i) {
      bool found = false;
      for (int32_t h : d.heads) found = found || SameStack(dfa_arena_, heads[i], h);
      same = found;
    }
    if (same) return it->second;
  }
  DfaState d;
  d.next = NextBytes(*grammar_->grammar(), dfa_arena_, heads);
  d.heads = std::move(heads);
  d.accepting = accepting;
  d.hash = hash;
  d.to.fill(kUnknown);
  dfa_.push_back(std::move(d));
  const int32_t id = static_cast<int32_t>(dfa_.size() - 1);
  dfa_index_.emplace(hash, id);
  return id;
}

int32_t TokenConstraint::Next(int32_t state, uint8_t byte) {
  if (dfa_[state].to[byte] != kUnknown) return dfa_[state].to[byte];
  if (!dfa_[state].next.Test(byte)) return dfa_[state].to[byte] = kDead;
  const size_t mark = dfa_arena_.size();
  const bool accepting =
      StepByte(*grammar_->grammar(), &dfa_arena_, dfa_[state].heads, byte, &scratch_);
  if (scratch_.empty() && !accepting) {
    dfa_arena_.resize(mark);
    return dfa_[state].to[byte] = kDead;
  }
  const size_t states = dfa_.size();
  const int32_t to = Intern(scratch_, accepting);
  if (static_cast<size_t>(to) < states) dfa_arena_.resize(mark);  // known: drop the new nodes
  return dfa_[state].to[byte] = to;
}

const ByteSet& TokenConstraint::Loop(int32_t state) {
  if (!dfa_[state].loop_known) {
    ByteSet loop;
    for (int b = 0; b < 256; ++b)
      if (dfa_[state].next.Test(static_cast<uint8_t>(b)) &&
          Next(state, static_cast<uint8_t>(b)) == state)
        loop.Set(static_cast<uint8_t>(b));
    dfa_[state].loop = loop;
    dfa_[state].loop_known = true;
  }
  return dfa_[state].loop;
}

void TokenConstraint::Walk(uint32_t node_id, int32_t state, TokenMask* mask) {
  const Vocabulary& vocab = grammar_->vocab();
  const Vocabulary::Node& node = vocab.nodes()[node_id];
  auto allow = [&](uint32_t begin, uint32_t end) {
    for (uint32_t t = begin; t < end; ++t) {
      const int32_t id = vocab.node_tokens()[t];
      mask->bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  };
  for (uint32_t c = node.child_begin; c < node.child_end; ++c) {
    const uint8_t byte = vocab.child_byte()[c];
    if (!dfa_[state].next.Test(byte)) continue;
    const int32_t to = Next(state, byte);
    if (to == kDead) continue;
    const uint32_t child = vocab.child_node()[c];
    const Vocabulary::Node& cn = vocab.nodes()[child];
    if (to == state) {
      // Every token below whose bytes all loop back here is allowed.
      const ByteSet& loop = Loop(state);
      const ByteSet& below = vocab.subtree_bytes(child);
      bool all_loop = true;
      for (int w = 0; w < 4; ++w) all_loop = all_loop && (below.words[w] & ~loop.words[w]) == 0;
      if (all_loop) {
        allow(cn.token_begin, cn.subtree_end);
        continue;
      }
    }
    allow(cn.token_begin, cn.token_end);
    if (!dfa_[to].heads.empty() && cn.child_begin != cn.child_end) Walk(child, to, mask);
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
