#include "engine/stop_matcher.h"

#include <algorithm>

namespace kvfork {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Result StopMatcher::Feed(std::string_view delta, bool may_stop) {
  Result r;
  if (stopped_) return r;
  held_.append(delta);
  if (stops_.empty()) {
    r.emit.swap(held_);
    return r;
  }
  // The earliest stop string wins (as vLLM: the first occurrence in the text);
  // at the same position, the first listed.
  size_t first = std::string::npos;
  size_t first_len = 0;
  for (size_t i = 0; may_stop && i < stops_.size(); ++i) {
    const size_t at = held_.find(stops_[i]);
    if (at < first) {
      first = at;
      first_len = stops_[i].size();
    }
  }
  if (first != std::string::npos) {
    r.emit = held_.substr(0, include_stop_ ? first + first_len : first);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::Flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace kvfork
