// Where the CLI gets the tokenizer of a --model path, so every command
// (generate, serve, bench, perplexity) agrees: --tokenizer DIR when given (a
// Hugging Face directory with tokenizer.json), else the model path's own
// tokenizer (engine/model_tokenizer.h: tokenizer.json of a directory, the
// tokenizer.* metadata of a GGUF file).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {

// `tokenizer_dir` is the --tokenizer flag ("" when absent).
StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_path,
                                                        const std::string& tokenizer_dir);

}  // namespace kvfork::cli
