// A pushdown matcher over a Grammar's bytes: feed bytes, ask whether the
// grammar can end here and which bytes may come next.
//
// The state is a set of parse stacks (the grammar may be ambiguous), each a
// linked list of positions in Grammar::elements() stored in an arena, so a
// step pushes and pops in O(1) and stacks share their bottoms. A stack's top
// (a "head") is always a kBytes element: rules are expanded eagerly after
// every byte. Equal stacks are merged, so ambiguity does not grow the set.
//
// Thread affinity: one matcher per sequence, used by one thread at a time;
// the Grammar it reads is shared and immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace kvfork::grammar {

struct StackNode {
  uint32_t pos = 0;     // position in Grammar::elements()
  int32_t parent = -1;  // the frame below (a return position), -1 = bottom
  uint64_t hash = 0;    // of the whole stack from here down
};

// The low-level step the matcher and the token mask walk share. Appends the
// nodes it creates to *arena (a caller may truncate them away again) and
// writes the new heads, merged, to *out. Returns whether the grammar may end
// after the byte.
bool StepByte(const Grammar& g, std::vector<StackNode>* arena, std::span<const int32_t> heads,
              uint8_t byte, std::vector<int32_t>* out);

// Bounds on one step's work, which only a pathological grammar reaches
// (("a"?){0,100000} is ambiguous 100,000 ways): the rules it may enter
// nested before consuming a byte, the elements it may visit, and the parse
// stacks a state may hold. Paths past them are dropped, so such a grammar is
// enforced more strictly than written, and a request never stalls the engine.
inline constexpr int kMaxExpandDepth = 1000;
inline constexpr int64_t kMaxExpandSteps = 1 << 18;
inline constexpr size_t kMaxHeads = 256;

// Appends the stacks of *heads (nodes of `from`) to *to, sharing common
// bottoms, and points *heads at the copies.
void CopyStacks(const std::vector<StackNode>& from, std::vector<int32_t>* heads,
                std::vector<StackNode>* to);

// Whether two stacks in one arena hold the same positions top to bottom.
bool SameStack(const std::vector<StackNode>& arena, int32_t a, int32_t b);

// Union of the bytes the heads accept next.
ByteSet NextBytes(const Grammar& g, const std::vector<StackNode>& arena,
                  std::span<const int32_t> heads);

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Feeds bytes; all or nothing: false (and no change) when the grammar
  // rejects any of them.
  bool AcceptBytes(std::string_view bytes);
  // Whether the input so far is a complete sentence of the grammar.
  bool CanEnd() const { return accepting_; }
  // Whether no further byte can be accepted (only the end remains).
  bool Complete() const { return heads_.empty(); }
  ByteSet NextBytes() const { return grammar::NextBytes(*grammar_, arena_, heads_); }

  // A canonical description of the state: equal keys accept the same
  // continuations (the mask cache's key).
  std::string StateKey() const;

  const Grammar& grammar() const { return *grammar_; }
  const std::vector<StackNode>& arena() const { return arena_; }
  const std::vector<int32_t>& heads() const { return heads_; }

 private:
  void Compact();  // drops arena nodes no head reaches

  std::shared_ptr<const Grammar> grammar_;
  std::vector<StackNode> arena_;
  std::vector<int32_t> heads_;
  bool accepting_ = false;
  std::vector<int32_t> scratch_;
};

}  // namespace kvfork::grammar
