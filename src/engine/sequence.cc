#include "engine/sequence.h"

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

bool RequestState::AllChoicesDone() const {
  for (const auto& c : choices)
    if (c->phase != SeqPhase::kDone) return false;
  return true;
}

}  // namespace kvfork
