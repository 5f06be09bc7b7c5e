#include "engine/constraint_cache.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace kvfork {

std::shared_ptr<const grammar::TokenGrammar> ConstraintCache::Get(
    const std::shared_ptr<const grammar::Grammar>& grammar, std::vector<int32_t> end_ids) {
  std::sort(end_ids.begin(), end_ids.end());
  end_ids.erase(std::unique(end_ids.begin(), end_ids.end()), end_ids.end());
  std::string key = grammar->source();
  key += '\0';
  for (int32_t id : end_ids) key += std::to_string(id) + ",";
  for (auto it = recent_.begin(); it != recent_.end(); ++it)
    if (it->first == key) {
      recent_.splice(recent_.begin(), recent_, it);
      return recent_.front().second;
    }
  if (vocab_ == nullptr) vocab_ = grammar::Vocabulary::FromTokenizer(tokenizer_, vocab_size_);
  auto tg = std::make_shared<const grammar::TokenGrammar>(grammar, vocab_, std::move(end_ids));
  recent_.emplace_front(std::move(key), tg);
  if (recent_.size() > kMaxCachedGrammars) recent_.pop_back();
  return tg;
}

}  // namespace kvfork
