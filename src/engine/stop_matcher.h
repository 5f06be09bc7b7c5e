// Finds stop strings in a choice's streamed text, across token boundaries,
// and never lets the stop text (or text that might begin one) out early.
//
// Feed() takes each text delta and returns what may be emitted now: text that
// can no longer be part of a stop string. A suffix that is a prefix of some
// stop string is held back until the next delta decides it. When a stop
// string appears, the text before it is released and nothing after.
// Thread affinity: one per choice, engine thread only. Cost: O(held * stops)
// per delta; held text is shorter than the longest stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvfork {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;      // text to release now
    bool stopped = false;  // a stop string matched; emit is everything before it
  };
  Result Feed(std::string_view delta);
  // Releases held-back text when the choice ends for another reason.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvfork
