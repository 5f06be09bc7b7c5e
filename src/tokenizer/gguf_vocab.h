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
// pre-tokenizer of SupportedGgufPreTokenizers(), and "llama" (SentencePiece,
// spm_tokenizer.h, which reads tokenizer.ggml.pre but needs none). Anything
// else ("bert" WordPiece, "gemma4", an unknown pre-tokenizer) is an
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
#include <string_view>
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
  std::vector<float> scores;         // tokenizer.ggml.scores (SentencePiece; empty: all 0)
  // tokenizer.ggml.{bos,eos,eot,eom,padding,unknown}_token_id
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, pad_id, unk_id;
  // tokenizer.ggml.add_{bos,eos}_token; absent: llama.cpp's default for the
  // tokenizer (SentencePiece and Llama 3 add bos) and no eos.
  std::optional<bool> add_bos, add_eos;
  // tokenizer.ggml.add_space_prefix (absent: true for SentencePiece) and
  // tokenizer.ggml.remove_extra_whitespaces.
  std::optional<bool> add_space_prefix, remove_extra_whitespaces;
  std::string chat_template;  // tokenizer.chat_template ("" when absent)
  // general.name: llama.cpp gives some models' tokens attributes by it
  // (Phi-3's rstrip, spm_tokenizer.h).
  std::string name;
};

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocab& vocab);

// Shared by the tokenizers built from a GgufVocab.
// The type of token id (kNormal when the file has no token types).
GgufTokenType GgufTypeOf(const GgufVocab& vocab, size_t id);
// An id key (`key` is e.g. "bos_token_id") must name a token that is used.
Status CheckGgufTokenId(const GgufVocab& vocab, const std::optional<int64_t>& id, const char* key);
// What every tokenizer built from a GgufVocab needs of it: tokens, token
// types (if any) for each, and bos/eos/eot/eom/padding ids that name used
// tokens (CheckGgufTokenId).
Status CheckGgufVocab(const GgufVocab& vocab);
// Token texts llama.cpp ends generation on besides eos/eot/eom (its
// end-of-generation list, the entries of the model families we load).
bool IsEndOfGenerationText(std::string_view text);

}  // namespace kvfork
