// The tokenizer of a GGUF file, from its tokenizer.* metadata (what llama.cpp's
// convert_hf_to_gguf.py wrote from the model's tokenizer.json).
//
// GgufVocab is a plain copy of those keys, filled by whoever reads the file
// (engine/model_tokenizer.cc), so this module does not depend on the GGUF
// reader in model/. TokenizerFromGguf writes the metadata back as the
// tokenizer.json it was converted from (vocabulary, merges, added tokens with
// their token types, and the pre-tokenizer and normalizer named by
// tokenizer.ggml.pre, see gguf_pre_tokenizer.h) and loads that, so a GGUF
// model and its Hugging Face directory are encoded by the same code.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with a
// pre-tokenizer of SupportedGgufPreTokenizers(). Anything else ("llama"
// SentencePiece, "bert" WordPiece, an unknown pre-tokenizer) is an
// UnimplementedError that names the value and the key.
//
// Cost: the tokenizer.json text is about the size of the vocabulary and
// merges (~5 MB for 150k tokens), built and parsed once: 200-270 ms for
// Qwen2's or Llama 3's vocabulary on this machine, as loading their
// tokenizer.json. Thread safety: a pure function; the Tokenizer is as
// tokenizer.h says.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

// tokenizer.ggml.token_type values (llama.h enum llama_token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct GgufVocab {
  std::string source;                // the file, for error messages
  std::string model;                 // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "a b"
  // tokenizer.ggml.{bos,eos,eot,eom,padding}_token_id
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, pad_id;
  // tokenizer.ggml.add_{bos,eos}_token; absent: llama.cpp's default for the
  // pre-tokenizer (Llama 3 adds bos) and no eos.
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;  // tokenizer.chat_template ("" when absent)
};

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocab& vocab);

}  // namespace kvfork
