#include "server/reasoning_parser.h"

#include <algorithm>

namespace kvfork::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t PartialSuffix(std::string_view text, std::string_view tag) {
  const size_t longest = std::min(text.size(), tag.size() - 1);
  for (size_t n = longest; n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningStreamParser::ReasoningStreamParser(bool starts_inside)
    : state_(starts_inside ? State::kInside : State::kStart) {}

void ReasoningStreamParser::Step(ReasoningOutput* out) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Only a reply that opens with <think> (after blanks) has reasoning.
        size_t lead = 0;
        while (lead < pending_.size() && IsSpace(pending_[lead])) ++lead;
        const std::string_view rest = std::string_view(pending_).substr(lead);
        if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;
        if (rest.substr(0, kOpen.size()) == kOpen) {
          pending_.erase(0, lead + kOpen.size());
          state_ = State::kInside;
        } else {
          state_ = State::kAfter;
        }
        break;
      }
      case State::kInside: {
        const size_t close = pending_.find(kClose);
        if (close == std::string::npos) {
          const size_t keep = PartialSuffix(pending_, kClose);
          out->reasoning += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return;
        }
        out->reasoning += pending_.substr(0, close);
        pending_.erase(0, close + kClose.size());
        state_ = State::kAfter;
        strip_content_start_ = true;
        break;
      }
      case State::kAfter: {
        if (strip_content_start_) {
          size_t lead = 0;
          while (lead < pending_.size() && IsSpace(pending_[lead])) ++lead;
          pending_.erase(0, lead);
          if (pending_.empty()) return;
          strip_content_start_ = false;
        }
        out->content += pending_;
        pending_.clear();
        return;
      }
    }
  }
}

ReasoningOutput ReasoningStreamParser::Feed(std::string_view text) {
  ReasoningOutput out;
  pending_.append(text);
  Step(&out);
  return out;
}

ReasoningOutput ReasoningStreamParser::Finish() {
  ReasoningOutput out;
  Step(&out);
  if (state_ == State::kInside) {
    out.reasoning += pending_;
  } else if (!strip_content_start_) {
    out.content += pending_;
  }
  pending_.clear();
  return out;
}

bool PromptOpensReasoning(std::string_view prompt) {
  while (!prompt.empty() && IsSpace(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

bool TemplateUsesReasoning(std::string_view source) {
  return source.find(kClose) != std::string_view::npos;
}

ReasoningOutput SplitReasoning(std::string_view text, bool starts_inside) {
  ReasoningStreamParser parser(starts_inside);
  ReasoningOutput out = parser.Feed(text);
  ReasoningOutput rest = parser.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace kvfork::server
