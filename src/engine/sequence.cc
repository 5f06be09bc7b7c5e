#include "engine/sequence.h"

#include <algorithm>

namespace kvfork {

std::vector<int32_t> ChoiceState::History() const {
  std::vector<int32_t> h = request->request.prompt_tokens;
  if (!generated.empty()) h.insert(h.end(), generated.begin(), generated.end() - 1);
  return h;
}

int64_t ChoiceState::HistorySize() const {
  const int64_t g = static_cast<int64_t>(generated.size());
  return static_cast<int64_t>(request->request.prompt_tokens.size()) + (g > 0 ? g - 1 : 0);
}

bool ChoiceState::WantsPromptLogits() const {
  return fresh && request->request.sampling.prompt_logprobs >= 0;
}

int64_t ChoiceState::ReusableHistorySize() const {
  // Admission reuses at most size - 1 of what it is given, so + 1.
  return WantsPromptLogits() ? std::min(HistorySize(), prompt_logits_done + 1) : HistorySize();
}

bool RequestState::AllChoicesDone() const {
  for (const auto& c : choices)
    if (c->phase != SeqPhase::kDone) return false;
  return true;
}

}  // namespace kvfork
