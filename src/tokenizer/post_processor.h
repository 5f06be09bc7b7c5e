// tokenizer.json "post_processor" for a single sequence: TemplateProcessing
// (special tokens around the sequence: Llama 3's <|begin_of_text|> $A),
// ByteLevel (offsets only: ids unchanged), RobertaProcessing/BertProcessing
// (cls $A sep) and Sequence of them.
//
// Thread safety: immutable after FromJson.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvfork {

class PostProcessor {
 public:
  // json is the "post_processor" value; null adds nothing.
  static StatusOr<PostProcessor> FromJson(const nlohmann::json& json);

  // ids with the template's special tokens around them.
  std::vector<int32_t> Apply(std::vector<int32_t> ids) const;
  // True if Apply adds any token.
  bool adds_tokens() const { return !prefix_.empty() || !suffix_.empty(); }

 private:
  static Status Add(const nlohmann::json& json, PostProcessor* out);
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace kvfork
