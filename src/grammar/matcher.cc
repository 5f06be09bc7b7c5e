#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_map>

namespace kvfork::grammar {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int32_t Push(std::vector<StackNode>* arena, uint32_t pos, int32_t parent) {
  const uint64_t below = parent < 0 ? 0x51ed27 : (*arena)[parent].hash;
  arena->push_back({pos, parent, Mix(below * 31 + pos)});
  return static_cast<int32_t>(arena->size() - 1);
}

}  // namespace

bool SameStack(const std::vector<StackNode>& arena, int32_t a, int32_t b) {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    if (arena[a].pos != arena[b].pos || arena[a].hash != arena[b].hash) return false;
    a = arena[a].parent;
    b = arena[b].parent;
  }
  return true;
}

namespace {

void AddHead(const std::vector<StackNode>& arena, int32_t head, std::vector<int32_t>* out) {
  for (int32_t h : *out)
    if (SameStack(arena, h, head)) return;
  if (out->size() < kMaxHeads) out->push_back(head);
}

// Continues a stack whose next element is `pos`, until every path stops at
// a kBytes element (a head) or at the end of the whole grammar.
// Returns from finished rules iteratively (a stack may end in any number of
// frames whose rest is empty: an input cannot make this recurse); recurses
// only into rule alternatives, which a grammar nests to a bounded depth.
// Paths nested past kMaxExpandDepth rules without a byte are dropped.
void Expand(const Grammar& g, std::vector<StackNode>* arena, uint32_t pos, int32_t parent,
            std::vector<int32_t>* out, bool* accepting, int depth, int64_t* budget) {
  for (;;) {
    if (--*budget < 0) return;
    const Element& e = g.elements()[pos];
    switch (e.kind) {
      case Element::Kind::kBytes:
        AddHead(*arena, Push(arena, pos, parent), out);
        return;
      case Element::Kind::kEnd:
        if (parent < 0) {
          *accepting = true;
          return;
        }
        pos = (*arena)[parent].pos;
        parent = (*arena)[parent].parent;
        continue;
      case Element::Kind::kRef: {
        if (depth >= kMaxExpandDepth) return;
        // A reference in tail position returns straight to our caller: no
        // frame, so right recursion (x*, a string's characters) keeps the
        // stack flat.
        const int32_t ret = g.elements()[pos + 1].kind == Element::Kind::kEnd
                                ? parent
                                : Push(arena, pos + 1, parent);
        // The last alternative continues this loop (no recursion), so a
        // chain of optional tails (")"?")"?...) closes at any depth.
        const std::vector<uint32_t>& alts = g.alternatives(e.value);
        for (size_t i = 0; i + 1 < alts.size(); ++i)
          Expand(g, arena, alts[i], ret, out, accepting, depth + 1, budget);
        pos = alts.back();
        parent = ret;
        continue;
      }
    }
  }
}

}  // namespace

void CopyStacks(const std::vector<StackNode>& from, std::vector<int32_t>* heads,
                std::vector<StackNode>* to) {
  std::unordered_map<int32_t, int32_t> moved;
  std::vector<int32_t> chain;
  for (int32_t& h : *heads) {
    // Down to the bottom or a node copied already, then copy bottom-first so
    // a parent is always in `to` before its child (stacks may be deep: no
    // recursion).
    chain.clear();
    int32_t n = h;
    while (n >= 0 && !moved.count(n)) {
      chain.push_back(n);
      n = from[n].parent;
    }
    int32_t parent = n < 0 ? -1 : moved[n];
    for (size_t i = chain.size(); i-- > 0;) {
      const StackNode& s = from[chain[i]];
      to->push_back({s.pos, parent, s.hash});
      parent = static_cast<int32_t>(to->size() - 1);
      moved[chain[i]] = parent;
    }
    h = parent;
  }
}

bool StepByte(const Grammar& g, std::vector<StackNode>* arena, std::span<const int32_t> heads,
              uint8_t byte, std::vector<int32_t>* out) {
  out->clear();
  bool accepting = false;
  int64_t budget = kMaxExpandSteps;
  for (int32_t h : heads) {
    const StackNode node = (*arena)[h];
    if (!g.byte_set(g.elements()[node.pos].value).Test(byte)) continue;
    Expand(g, arena, node.pos + 1, node.parent, out, &accepting, 0, &budget);
  }
  return accepting;
}

ByteSet NextBytes(const Grammar& g, const std::vector<StackNode>& arena,
                  std::span<const int32_t> heads) {
  ByteSet u;
  for (int32_t h : heads) u.Or(g.byte_set(g.elements()[arena[h].pos].value));
  return u;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  int64_t budget = kMaxExpandSteps;
  for (uint32_t alt : grammar_->alternatives(grammar_->root()))
    Expand(*grammar_, &arena_, alt, -1, &heads_, &accepting_, 0, &budget);
  Compact();
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t arena_mark = arena_.size();
  std::vector<int32_t> heads = heads_;
  bool accepting = accepting_;
  for (unsigned char b : bytes) {
    accepting = StepByte(*grammar_, &arena_, heads, b, &scratch_);
    heads.swap(scratch_);
    if (heads.empty() && !accepting) {
      arena_.resize(arena_mark);
      return false;
    }
  }
  heads_ = std::move(heads);
  accepting_ = accepting;
  Compact();
  return true;
}

void GrammarMatcher::Compact() {
  std::vector<StackNode> packed;
  CopyStacks(arena_, &heads_, &packed);
  arena_.swap(packed);
}

std::string GrammarMatcher::StateKey() const {
  std::vector<std::string> stacks;
  for (int32_t h : heads_) {
    std::string s;
    for (int32_t n = h; n >= 0; n = arena_[n].parent) {
      const uint32_t p = arena_[n].pos;
      s.append(reinterpret_cast<const char*>(&p), sizeof(p));
    }
    stacks.push_back(std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(1, accepting_ ? 'A' : 'a');
  for (const std::string& s : stacks) {
    const uint32_t len = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&len), sizeof(len));
    key += s;
  }
  return key;
}

}  // namespace kvfork::grammar
