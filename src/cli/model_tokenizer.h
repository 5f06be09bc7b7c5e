// Where the CLI gets the tokenizer of a --model path: the one seam between
// a model file and its tokenizer, so every command (generate, serve, bench)
// agrees.
//   - a Hugging Face directory: its tokenizer.json (Tokenizer::Load);
//   - a .gguf file: --tokenizer DIR if given, else the file's own directory
//     when it holds a tokenizer.json (a GGUF exported into its HF directory).
//     Building the tokenizer from the GGUF's tokenizer.* metadata is the GGUF
//     tokenizer's work (issue 22); until it is joined here, a GGUF with no
//     HF tokenizer beside it is an error that says to pass --tokenizer.
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
