#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

// Decode() is the lossy UTF-8 of the concatenated bytes. Cutting the bytes
// where no character is left open keeps that conversion's state empty at the
// cut, so lossy(prefix) + lossy(rest) == lossy(all): the pieces concatenate
// to Decode().
std::string StreamDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_.IsSpecial(id)) return "";
  pending_ += tokenizer_.TokenBytes(id);
  const size_t complete = utf8::CompletePrefixLength(pending_);
  std::string out = utf8::Lossy(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvfork
