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

bool SameStack(const std::vector<StackNode>& arena, int32_t a, int32_t b) {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    if (arena[a].pos != arena[b].pos || arena[a].hash != arena[b].hash) return false;
    a = arena[a].parent;
    b = arena[b].parent;
  }
  return true;
}

void AddHead(const std::vector<StackNode>& arena, int32_t head, std::vector<int32_t>* out) {
  for (int32_t h : *out)
    if (SameStack(arena, h, head)) return;
  out->push_back(head);
}

// Continues a stack whose next element is `pos`, until every path stops at
// a kBytes element (a head) or at the end of the whole grammar.
void Expand(const Grammar& g, std::vector<StackNode>* arena, uint32_t pos, int32_t parent,
            std::vector<int32_t>* out, bool* accepting) {
  const Element& e = g.elements()[pos];
  switch (e.kind) {
    case Element::Kind::kBytes:
      AddHead(*arena, Push(arena, pos, parent), out);
      return;
    case Element::Kind::kEnd:
      if (parent < 0) {
        *accepting = true;
      } else {
        const StackNode frame = (*arena)[parent];
        Expand(g, arena, frame.pos, frame.parent, out, accepting);
      }
      return;
    case Element::Kind::kRef: {
      // A reference in tail position returns straight to our caller: no
      // frame, so right recursion (x*, a string's characters) keeps the
      // stack flat.
      const int32_t ret =
          g.elements()[pos + 1].kind == Element::Kind::kEnd ? parent : Push(arena, pos + 1, parent);
      for (uint32_t alt : g.alternatives(e.value)) Expand(g, arena, alt, ret, out, accepting);
      return;
    }
  }
}

}  // namespace

bool StepByte(const Grammar& g, std::vector<StackNode>* arena, std::span<const int32_t> heads,
              uint8_t byte, std::vector<int32_t>* out) {
  out->clear();
  bool accepting = false;
  for (int32_t h : heads) {
    const StackNode node = (*arena)[h];
    if (!g.byte_set(g.elements()[node.pos].value).Test(byte)) continue;
    Expand(g, arena, node.pos + 1, node.parent, out, &accepting);
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
  for (uint32_t alt : grammar_->alternatives(grammar_->root()))
    Expand(*grammar_, &arena_, alt, -1, &heads_, &accepting_);
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
  std::unordered_map<int32_t, int32_t> moved;
  // Copies a chain bottom-first so parents keep lower indices.
  auto copy = [&](auto&& self, int32_t id) -> int32_t {
    if (id < 0) return -1;
    auto it = moved.find(id);
    if (it != moved.end()) return it->second;
    const int32_t parent = self(self, arena_[id].parent);
    packed.push_back({arena_[id].pos, parent, arena_[id].hash});
    const int32_t n = static_cast<int32_t>(packed.size() - 1);
    moved[id] = n;
    return n;
  };
  for (int32_t& h : heads_) h = copy(copy, h);
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
