#include "tokenizer/special_token_shield.h"

#include <utility>

namespace kvfork {
namespace {

constexpr std::string_view kOpen = "\xE2\xA6\x83";   // U+2983 LEFT WHITE CURLY BRACKET
constexpr std::string_view kClose = "\xE2\xA6\x84";  // U+2984 RIGHT WHITE CURLY BRACKET

}  // namespace

std::string SpecialTokenShield::ShieldString(std::string_view text) {
  std::vector<TextRange> specials = tokenizer_.FindSpecialTokens(text);
  if (specials.empty() && text.find(kOpen) == std::string_view::npos) return std::string(text);
  auto mark = [this](std::string_view original, bool special, std::string* out) {
    *out += kOpen;
    *out += std::to_string(originals_.size());
    *out += kClose;
    originals_.emplace_back(original);
    special_.push_back(special);
  };
  std::string out;
  size_t pos = 0;
  size_t next_special = 0;
  while (pos < text.size()) {
    while (next_special < specials.size() && specials[next_special].begin < pos) ++next_special;
    if (next_special < specials.size() && specials[next_special].begin == pos) {
      const TextRange r = specials[next_special++];
      mark(text.substr(r.begin, r.end - r.begin), true, &out);
      pos = r.end;
      continue;
    }
    if (text.compare(pos, kOpen.size(), kOpen) == 0) {
      mark(kOpen, false, &out);
      pos += kOpen.size();
      continue;
    }
    out += text[pos++];
  }
  return out;
}

void SpecialTokenShield::Shield(nlohmann::ordered_json* value) {
  if (value->is_string()) {
    *value = ShieldString(value->get_ref<const std::string&>());
  } else if (value->is_array()) {
    for (auto& v : *value) Shield(&v);
  } else if (value->is_object()) {
    bool keys_change = false;
    for (auto it = value->begin(); it != value->end(); ++it) {
      Shield(&it.value());
      keys_change = keys_change || ShieldString(it.key()) != it.key();
    }
    if (!keys_change) return;
    // Keys are const inside the object: rebuild it (rare: a key holding a
    // special-token string or a marker bracket). Shielded keys stay distinct.
    nlohmann::ordered_json rebuilt = nlohmann::ordered_json::object();
    for (auto it = value->begin(); it != value->end(); ++it)
      rebuilt[ShieldString(it.key())] = std::move(it.value());
    *value = std::move(rebuilt);
  }
}

std::string SpecialTokenShield::Restore(std::string_view rendered,
                                        std::vector<TextRange>* plain) const {
  plain->clear();
  std::string out;
  out.reserve(rendered.size());
  size_t pos = 0;
  while (pos < rendered.size()) {
    size_t open = rendered.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    out.append(rendered.substr(pos, open - pos));
    size_t digits_end = open + kOpen.size();
    size_t n = 0;
    bool valid = false;
    while (digits_end < rendered.size() && rendered[digits_end] >= '0' &&
           rendered[digits_end] <= '9' && digits_end - open - kOpen.size() < 9) {
      n = n * 10 + static_cast<size_t>(rendered[digits_end] - '0');
      ++digits_end;
      valid = true;
    }
    valid =
        valid && n < originals_.size() && rendered.compare(digits_end, kClose.size(), kClose) == 0;
    if (!valid) {  // not one of ours (the template's own bracket, or a cut marker)
      out.append(kOpen);
      pos = open + kOpen.size();
      continue;
    }
    if (special_[n]) plain->push_back({out.size(), out.size() + originals_[n].size()});
    out += originals_[n];
    pos = digits_end + kClose.size();
  }
  out.append(rendered.substr(pos));
  return out;
}

}  // namespace kvfork
