// The tokenizer of a model path, whatever its format: a Hugging Face
// directory (tokenizer.json, tokenizer_config.json, generation_config.json)
// or a GGUF file (its tokenizer.* metadata; for a split file
// PREFIX-0000K-of-0000N.gguf, that of part 00001, whichever part is named). Lives in engine because
// it joins model/'s GGUF reader and tokenizer/, which do not depend on each other.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/model.h"  // IsGgufPath
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

// The chat template, bos/eos tokens and add_bos come with the tokenizer.
// Errors name the file and the key at fault.
StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_path);

// The tokenizer.* metadata of a GGUF file.
StatusOr<GgufVocab> ReadGgufVocab(const std::string& gguf_path);

}  // namespace kvfork
