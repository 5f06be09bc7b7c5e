// Binds request grammars to the engine's vocabulary. Holds the vocabulary
// trie (built on the first constrained request: ~0.1 s for Qwen3's 152k
// tokens) and the TokenGrammars of recent grammars, keyed by the grammar's
// source and end tokens, so a schema sent again (an agent loop's every turn)
// reuses its cached masks instead of walking the trie again.
//
// Thread affinity: the engine thread (Scheduler::Add); what it returns is
// shared with the samplers, which may run on the compute pool.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grammar/token_mask.h"

namespace kvfork {

class Tokenizer;

// TokenGrammars kept for requests to come (each caches up to
// grammar::kMaxMaskCacheBytes of masks: 256 MiB at most in all).
inline constexpr size_t kMaxCachedGrammars = 16;

class ConstraintCache {
 public:
  ConstraintCache(const Tokenizer& tokenizer, int64_t vocab_size)
      : tokenizer_(tokenizer), vocab_size_(vocab_size) {}

  // A constraint for one sequence decoding under `grammar`, ending with one
  // of `end_ids`. Sequences of one request share the TokenGrammar.
  std::shared_ptr<const grammar::TokenGrammar> Get(
      const std::shared_ptr<const grammar::Grammar>& grammar, std::vector<int32_t> end_ids);

 private:
  const Tokenizer& tokenizer_;
  int64_t vocab_size_;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const grammar::TokenGrammar>>> recent_;
};

}  // namespace kvfork
