#include "cli/model_tokenizer.h"

#include <filesystem>

#include "model/model.h"

namespace kvfork::cli {

StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_path,
                                                        const std::string& tokenizer_dir) {
  if (!tokenizer_dir.empty()) return Tokenizer::Load(tokenizer_dir);
  if (!IsGgufPath(model_path)) return Tokenizer::Load(model_path);
  std::string dir = std::filesystem::path(model_path).parent_path().string();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (std::filesystem::exists(dir + "/tokenizer.json", ec)) return Tokenizer::Load(dir);
  return UnimplementedError(model_path +
                            ": reading the tokenizer from GGUF metadata is not joined yet; pass "
                            "--tokenizer DIR (a Hugging Face directory with tokenizer.json)");
}

}  // namespace kvfork::cli
