#include "cli/model_tokenizer.h"

#include "engine/model_tokenizer.h"

namespace kvfork::cli {

StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_path,
                                                        const std::string& tokenizer_dir) {
  if (!tokenizer_dir.empty()) return Tokenizer::Load(tokenizer_dir);
  return kvfork::LoadModelTokenizer(model_path);
}

}  // namespace kvfork::cli
