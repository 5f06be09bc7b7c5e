// Text to token ids and back, exactly as a model's tokenizer.json defines it
// (byte-level BPE, its pre-tokenizer regex, normalizer, added tokens,
// post-processor and decoder), plus tokenizer_config.json and
// generation_config.json.
//
// Thread safety: a loaded Tokenizer is immutable and may be used from any
// number of threads at once (its pre-token cache is internally locked).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/text_range.h"

namespace kvfork {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads tokenizer.json (required), tokenizer_config.json and
  // generation_config.json (optional) from a model directory.
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_dir);
  // Loads from file contents (tests, fuzzers); config texts may be empty.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& tokenizer_json,
                                                       const std::string& tokenizer_config_json,
                                                       const std::string& generation_config_json);

  // Special tokens spelled in the text become their single ids. With
  // add_special the post-processor runs (Llama 3 prepends <|begin_of_text|>).
  // Invalid UTF-8 is encoded byte by byte, as Hugging Face does.
  std::vector<int32_t> Encode(std::string_view text, bool add_special) const {
    return Encode(text, add_special, {});
  }
  // As above, except that no special token is taken over a byte of `plain`
  // (sorted, disjoint ranges): those bytes are tokenized as text, as Hugging
  // Face's split_special_tokens=True does, while special tokens elsewhere in
  // the text still become their ids. Non-special added tokens match anywhere.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special,
                                      std::span<const TextRange> plain) const = 0;
  // Where special tokens' strings occur in text: leftmost-longest, without
  // overlap, in order (what a chat prompt must keep plain in message content).
  virtual std::vector<TextRange> FindSpecialTokens(std::string_view text) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special) const = 0;
  // Raw bytes one token stands for (special tokens: their text).
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual int64_t vocab_size() const = 0;  // including added tokens
  // No text of more than k * max_bytes_per_token() bytes encodes into k or
  // fewer tokens, so a server can refuse an over-long prompt by its size
  // before tokenizing it. 0 when the tokenizer has no such bound: text can
  // vanish (a byte with no token, a pre-tokenizer that removes matches, an
  // added token that swallows the whitespace around it).
  virtual int64_t max_bytes_per_token() const = 0;
  virtual std::optional<int32_t> TokenId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;

  // tokenizer_config.json / generation_config.json
  virtual const std::string& chat_template() const = 0;  // empty if none
  virtual const std::string& bos_token() const = 0;      // "" if none
  virtual const std::string& eos_token() const = 0;
  virtual std::optional<int32_t> bos_token_id() const = 0;
  // EOS ids: generation_config's eos_token_id (number or list) if present,
  // plus tokenizer_config's eos_token.
  virtual const std::vector<int32_t>& eos_token_ids() const = 0;
};

// Emits text as tokens arrive and never a partial UTF-8 sequence: bytes of a
// character split across tokens are held until it is whole. The concatenated
// output equals Decode() of the whole sequence.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special);
  std::string Push(int32_t id);  // text that became complete with this token
  std::string Flush();           // what is left (invalid bytes as U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace kvfork
