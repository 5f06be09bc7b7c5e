// Finds stop strings in a choice's streamed text, across token boundaries,
// and never lets the stop text (or text that might begin one) out early.
//
// Feed() takes each text delta and returns what may be emitted now: text that
// can no longer be part of a stop string. A suffix that is a prefix of some
// stop string is held back until the next delta decides it. When a stop
// string appears, the text before it is released and nothing after (with
// include_stop, the stop string too: vLLM's include_stop_str_in_output).
// While may_stop is false (within vLLM's min_tokens) no stop string ends the
// text: text passes, a suffix that may begin one is still held, so a stop
// string that ends once stopping is allowed is found whole.
// Thread affinity: one per choice, engine thread only. Cost: O(held * stops)
// per delta; held text is shorter than the longest stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvfork {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  struct Result {
    std::string emit;      // text to release now
    bool stopped = false;  // a stop string matched; emit is everything before it
  };
  Result Feed(std::string_view delta, bool may_stop = true);
  // Releases held-back text when the choice ends for another reason.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool include_stop_ = false;
  bool stopped_ = false;
};

}  // namespace kvfork
