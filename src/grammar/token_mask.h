// Token masks: which vocabulary tokens keep the output inside a grammar.
//
// Vocabulary is a trie of every text token's bytes (special tokens, which
// decode to nothing, are never allowed; the end ids are allowed exactly when
// the grammar can end). A mask is one walk of the trie against the matcher's
// state: an edge is followed only while the grammar accepts its byte, so the
// walk visits the allowed tokens' prefixes and the dead ends one byte past
// them, not the whole vocabulary.
//
// TokenGrammar caches masks by matcher state (GrammarMatcher::StateKey), so
// a state met again (the inside of a string, a repeated item, the same
// schema in another request sharing the TokenGrammar, a sibling of n > 1)
// costs a lookup. It is shared by the sequences decoding under one grammar
// and safe from several threads (the cache is under a mutex).
//
// TokenConstraint is one sequence's state: its matcher and scratch space.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace kvfork {
class Tokenizer;
}

namespace kvfork::grammar {

class Vocabulary {
 public:
  // token_bytes[id]: the token's bytes; "" for a token never allowed as text
  // (special tokens, unused ids).
  static std::shared_ptr<const Vocabulary> FromTokenBytes(std::vector<std::string> token_bytes);
  // Every token of the tokenizer, ids [0, vocab_size) (the model's vocabulary
  // may be padded past the tokenizer's); special tokens count as "". Cost: O(vocab) decodes and a
  // sort, ~0.1 s for Qwen3's 151,669 tokens: build once per tokenizer.
  static std::shared_ptr<const Vocabulary> FromTokenizer(const Tokenizer& tokenizer,
                                                         int64_t vocab_size);

  int64_t size() const { return static_cast<int64_t>(token_bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  int64_t num_trie_nodes() const { return static_cast<int64_t>(nodes_.size()); }

  struct Node {
    uint32_t child_begin = 0, child_end = 0;  // into child_byte / child_node
    uint32_t token_begin = 0, token_end = 0;  // into node_tokens: tokens ending here
    // node_tokens[token_begin, subtree_end): every token of the subtree
    // (nodes are laid out in depth-first order, tokens with them).
    uint32_t subtree_end = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<uint8_t>& child_byte() const { return child_byte_; }
  const std::vector<uint32_t>& child_node() const { return child_node_; }
  const std::vector<int32_t>& node_tokens() const { return node_tokens_; }
  // The bytes on the edges below a node: a state that loops on all of them
  // allows the whole subtree without walking it.
  const ByteSet& subtree_bytes(uint32_t node) const { return subtree_bytes_[node]; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<Node> nodes_;  // [0] is the root (the empty prefix)
  std::vector<uint8_t> child_byte_;
  std::vector<uint32_t> child_node_;
  std::vector<int32_t> node_tokens_;
  std::vector<ByteSet> subtree_bytes_;
};

struct TokenMask {
  std::vector<uint64_t> bits;  // [ceil(vocab / 64)], bit id = allowed
  int64_t num_allowed = 0;
  int32_t single = -1;  // the one allowed token when num_allowed == 1
  bool Allowed(int32_t id) const { return (bits[id >> 6] >> (id & 63)) & 1; }
};

struct MaskCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
};

class TokenGrammar {
 public:
  // end_ids: tokens that end the output (EOS): allowed when the grammar can end.
  TokenGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
               std::vector<int32_t> end_ids);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  bool IsEnd(int32_t id) const;
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

  // The cached mask of the matcher's state, or nullptr.
  std::shared_ptr<const TokenMask> Lookup(const std::string& key) const;
  void Insert(const std::string& key, std::shared_ptr<const TokenMask> mask) const;
  MaskCacheStats cache_stats() const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<int32_t> end_ids_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
  mutable int64_t hits_ = 0, misses_ = 0;
  mutable size_t cache_bytes_ = 0;
};

// Bytes of masks and keys one TokenGrammar caches; past it the cache starts
// over. A mask of Qwen3's vocabulary is 19 KB, so about 800 states; a key is
// the state's stacks (deep nesting makes it long).
inline constexpr size_t kMaxMaskCacheBytes = 16 << 20;

// Bounds of one sequence's DFA (TokenConstraint): past either, it starts over.
inline constexpr size_t kMaxDfaStates = 1024;    // 1 KB of transitions each
inline constexpr size_t kMaxDfaNodes = 1 << 18;  // stack nodes, 16 bytes each

class TokenConstraint {
 public:
  explicit TokenConstraint(std::shared_ptr<const TokenGrammar> grammar);

  // The tokens allowed next. Cost: a cache lookup, or one trie walk.
  std::shared_ptr<const TokenMask> Mask();
  // Advances by a generated token; InvalidArgument if the grammar rejects
  // it (it was not in Mask()). An end token ends the constraint: from then
  // on only end tokens are allowed.
  Status Accept(int32_t token);
  bool CanEnd() const { return matcher_.CanEnd(); }
  bool ended() const { return ended_; }
  const GrammarMatcher& matcher() const { return matcher_; }

 private:
  std::shared_ptr<const TokenMask> ComputeMask();
  // The walk runs on a lazily built DFA over matcher states: a state is a
  // set of stacks (interned: equal sets get one id), and its transition on a
  // byte is computed once by StepByte and then read from a table. So a trie
  // node costs an array lookup, and a subtree whose bytes all lead back to
  // the same state (a string's characters) is allowed whole without a walk.
  // Kept across steps of the sequence; dropped when it grows past a bound.
  struct DfaState {
    std::vector<int32_t> heads;  // in dfa_arena_
    bool accepting = false;
    uint64_t hash = 0;
    ByteSet next;  // bytes some head accepts
    ByteSet loop;  // bytes leading back here (when loop_known)
    bool loop_known = false;
    std::array<int32_t, 256> to;  // kUnknown, kDead or a state id
  };
  static constexpr int32_t kUnknown = -2, kDead = -1;
  int32_t Intern(std::vector<int32_t> heads, bool accepting);
  int32_t Next(int32_t state, uint8_t byte);
  const ByteSet& Loop(int32_t state);
  void Walk(uint32_t node, int32_t state, TokenMask* mask);

  std::shared_ptr<const TokenGrammar> grammar_;
  GrammarMatcher matcher_;
  bool ended_ = false;
  std::vector<StackNode> dfa_arena_;
  std::vector<DfaState> dfa_;
  std::unordered_multimap<uint64_t, int32_t> dfa_index_;  // hash -> state id
  std::vector<int32_t> scratch_;
};

}  // namespace kvfork::grammar
