// GGUF tokenizer metadata -> the tokenizer.json (and tokenizer_config.json,
// generation_config.json) it was converted from -> Tokenizer::FromJson.
//
// Token types decide where a token goes: normal (and byte) tokens are the BPE
// vocabulary, spelled in GPT-2's byte alphabet; control tokens are special
// added tokens and user-defined ones plain added tokens, both spelled as
// their raw text and matched in the raw text, as llama.cpp does; unused
// tokens (padding rows) are left out, as Hugging Face has no token there.
#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

// Appends s as a JSON string literal; the reader wants valid UTF-8.
void AppendJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// tokenizer.json: the model (vocabulary, merges), pre-tokenizer, normalizer,
// added tokens and decoder.
StatusOr<std::string> TokenizerJson(const GgufVocab& v, const GgufPreTokenizer& pre) {
  const size_t n = v.tokens.size();
  std::string j;
  size_t bytes = 0;
  for (const std::string& t : v.tokens) bytes += t.size() + 16;
  for (const std::string& m : v.merges) bytes += m.size() + 4;
  j.reserve(bytes + 1024);
  j += "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":";
  j += pre.ignore_merges ? "true" : "false";
  j += ",\"vocab\":{";
  std::string added = "[";
  bool first_vocab = true;
  std::string raw;
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = v.tokens[id];
    if (!utf8::IsValid(t))
      return InvalidArgumentError("tokenizer.ggml.tokens[" + std::to_string(id) +
                                  "] is not valid UTF-8");
    const GgufTokenType type = GgufTypeOf(v, id);
    switch (type) {
      case GgufTokenType::kNormal:
      case GgufTokenType::kByte:
      case GgufTokenType::kUndefined:
        // A normal token outside the byte alphabet (Command-R's 1,403 emoji
        // tokens) cannot come out of byte-level BPE nor be named by a merge:
        // Hugging Face and llama.cpp never produce it. It is left out.
        if (!ByteLevelDecodeTo(t, &raw)) break;
        if (!first_vocab) j += ',';
        first_vocab = false;
        AppendJsonString(t, &j);
        j += ':' + std::to_string(id);
        break;
      case GgufTokenType::kControl:
      case GgufTokenType::kUnknown:
      case GgufTokenType::kUserDefined: {
        const bool special = type != GgufTokenType::kUserDefined;
        if (added.size() > 1) added += ',';
        added += "{\"id\":" + std::to_string(id) + ",\"content\":";
        AppendJsonString(t, &added);
        added += special ? ",\"special\":true" : ",\"special\":false";
        added += ",\"normalized\":false}";
        break;
      }
      case GgufTokenType::kUnused:
        break;
      default:
        return InvalidArgumentError("tokenizer.ggml.token_type[" + std::to_string(id) + "] is " +
                                    std::to_string(v.token_types[id]) +
                                    ", not a llama.cpp token type (0-6)");
    }
  }
  added += ']';
  j += "},\"merges\":[";
  for (size_t i = 0; i < v.merges.size(); ++i) {
    if (!utf8::IsValid(v.merges[i]))
      return InvalidArgumentError("tokenizer.ggml.merges[" + std::to_string(i) +
                                  "] is not valid UTF-8");
    if (i > 0) j += ',';
    AppendJsonString(v.merges[i], &j);
  }
  j += "]},\"pre_tokenizer\":" + pre.pre_tokenizer_json;
  j += ",\"normalizer\":" + pre.normalizer_json;
  j += ",\"added_tokens\":" + added;
  j += ",\"decoder\":{\"type\":\"ByteLevel\"},\"post_processor\":null}";
  return j;
}

// tokenizer_config.json: special ids become the token texts it would hold.
StatusOr<std::string> ConfigJson(const GgufVocab& v, const GgufPreTokenizer& pre) {
  std::string c = "{";
  auto add_token = [&](const char* key, const std::optional<int64_t>& id) {
    if (!id) return;
    c += std::string("\"") + key + "\":";
    AppendJsonString(v.tokens[static_cast<size_t>(*id)], &c);
    c += ',';
  };
  add_token("bos_token", v.bos_id);
  add_token("eos_token", v.eos_id);
  add_token("pad_token", v.pad_id);
  c += "\"add_bos_token\":";
  c += v.add_bos.value_or(pre.add_bos) && v.bos_id ? "true" : "false";
  c += ",\"add_eos_token\":";
  c += v.add_eos.value_or(false) && v.eos_id ? "true" : "false";
  if (!v.chat_template.empty()) {
    if (!utf8::IsValid(v.chat_template))
      return InvalidArgumentError("tokenizer.chat_template is not valid UTF-8");
    c += ",\"chat_template\":";
    AppendJsonString(v.chat_template, &c);
  }
  c += '}';
  return c;
}

// generation_config.json: eos_token_id lists llama.cpp's end-of-generation
// tokens (eos, eot, eom, and control tokens spelled as one).
std::string GenerationJson(const GgufVocab& v) {
  std::vector<int64_t> eog;
  auto add_eog = [&](int64_t id) {
    if (std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
  };
  for (const auto& id : {v.eos_id, v.eot_id, v.eom_id})
    if (id) add_eog(*id);
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (GgufTypeOf(v, id) == GgufTokenType::kControl && IsEndOfGenerationText(v.tokens[id]))
      add_eog(static_cast<int64_t>(id));
  }
  std::string g = "{\"eos_token_id\":[";
  for (size_t i = 0; i < eog.size(); ++i) g += (i > 0 ? "," : "") + std::to_string(eog[i]);
  g += "]}";
  return g;
}

StatusOr<std::unique_ptr<Tokenizer>> Build(const GgufVocab& v, const GgufPreTokenizer& pre) {
  KVFORK_RETURN_IF_ERROR(CheckGgufVocab(v));
  KVFORK_ASSIGN_OR_RETURN(std::string tokenizer_json, TokenizerJson(v, pre));
  KVFORK_ASSIGN_OR_RETURN(std::string config_json, ConfigJson(v, pre));
  StatusOr<std::unique_ptr<Tokenizer>> t =
      Tokenizer::FromJson(tokenizer_json, config_json, GenerationJson(v));
  if (!t.ok()) return t.status().WithContext("its metadata read as tokenizer.json");
  return t;
}

}  // namespace

GgufTokenType GgufTypeOf(const GgufVocab& v, size_t id) {
  return v.token_types.empty() ? GgufTokenType::kNormal
                               : static_cast<GgufTokenType>(v.token_types[id]);
}

Status CheckGgufTokenId(const GgufVocab& v, const std::optional<int64_t>& id, const char* key) {
  const auto n = static_cast<int64_t>(v.tokens.size());
  if (!id) return OkStatus();
  if (*id < 0 || *id >= n)
    return InvalidArgumentError(std::string("tokenizer.ggml.") + key + " " + std::to_string(*id) +
                                " is outside the vocabulary [0, " + std::to_string(n) + ")");
  if (GgufTypeOf(v, static_cast<size_t>(*id)) == GgufTokenType::kUnused)
    return InvalidArgumentError(std::string("tokenizer.ggml.") + key + " " + std::to_string(*id) +
                                " is an unused token");
  return OkStatus();
}

Status CheckGgufVocab(const GgufVocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) return InvalidArgumentError("tokenizer.ggml.tokens is empty");
  if (!v.token_types.empty() && v.token_types.size() != n)
    return InvalidArgumentError("tokenizer.ggml.token_type has " +
                                std::to_string(v.token_types.size()) + " entries but " +
                                "tokenizer.ggml.tokens has " + std::to_string(n));
  KVFORK_RETURN_IF_ERROR(CheckGgufTokenId(v, v.bos_id, "bos_token_id"));
  KVFORK_RETURN_IF_ERROR(CheckGgufTokenId(v, v.eos_id, "eos_token_id"));
  KVFORK_RETURN_IF_ERROR(CheckGgufTokenId(v, v.eot_id, "eot_token_id"));
  KVFORK_RETURN_IF_ERROR(CheckGgufTokenId(v, v.eom_id, "eom_token_id"));
  return CheckGgufTokenId(v, v.pad_id, "padding_token_id");
}

// llama-vocab.cpp's end-of-generation list, the entries of the model
// families we load, so a GGUF model stops where its HF directory's
// generation_config.json eos_token_id list would: Llama 3, Qwen, Phi-3
// (<|end|>, and </s>, which llama.cpp lists too), Gemma (<end_of_turn>).
bool IsEndOfGenerationText(std::string_view text) {
  static constexpr std::array<std::string_view, 8> kTexts = {
      "<|eot_id|>",      "<|eom_id|>", "<|im_end|>",    "<|endoftext|>",
      "<|end_of_text|>", "<|end|>",    "<end_of_turn>", "</s>"};
  return std::find(kTexts.begin(), kTexts.end(), text) != kTexts.end();
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocab& v) {
  auto fail = [&](const Status& s) {
    return s.WithContext("loading the tokenizer of " + v.source);
  };
  if (v.model == "llama") {
    StatusOr<std::unique_ptr<Tokenizer>> t = SpmTokenizerFromGguf(v);
    if (!t.ok()) return fail(t.status());
    return t;
  }
  if (v.model != "gpt2") {
    const std::string what = v.model == "bert" ? " (WordPiece)" : "";
    return fail(UnimplementedError(
        "tokenizer.ggml.model \"" + v.model + "\"" + what +
        " is not supported (supported: \"gpt2\", byte-level BPE; \"llama\", SentencePiece)"));
  }
  if (v.pre.empty())
    return fail(UnimplementedError(
        "tokenizer.ggml.pre is missing: the pre-tokenizer is unknown (llama.cpp falls back to "
        "\"default\" with degraded output; reconvert the model)"));
  StatusOr<GgufPreTokenizer> pre = FindGgufPreTokenizer(v.pre);
  if (!pre.ok()) return fail(pre.status());
  StatusOr<std::unique_ptr<Tokenizer>> t = Build(v, *pre);
  if (!t.ok()) return fail(t.status());
  return t;
}

}  // namespace kvfork
