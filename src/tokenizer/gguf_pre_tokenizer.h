// The pre-tokenizers that GGUF's tokenizer.ggml.pre names, as the
// tokenizer.json "pre_tokenizer" and "normalizer" of the model family the name
// stands for. llama.cpp's converter recognises a model's tokenizer by hashing
// its output and writes a name; llama.cpp re-implements each name with its
// own regexes. Here each name maps back to the Hugging Face configuration it
// came from, run by the same code as a tokenizer.json (pre_tokenizer.h), so
// ids equal Hugging Face's (and llama.cpp's test vectors, which are
// Hugging Face's output).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvfork {

struct GgufPreTokenizer {
  std::string pre_tokenizer_json;  // tokenizer.json "pre_tokenizer"
  std::string normalizer_json;     // tokenizer.json "normalizer" ("null": none)
  bool ignore_merges = false;      // model.ignore_merges (Llama 3)
  bool add_bos = false;            // llama.cpp's add_bos when the file does not say
};

// UnimplementedError naming `pre` and the supported names when unknown.
StatusOr<GgufPreTokenizer> FindGgufPreTokenizer(std::string_view pre);
std::vector<std::string> SupportedGgufPreTokenizers();

}  // namespace kvfork
