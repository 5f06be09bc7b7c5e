#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/scratch_vector.h"
#include "tokenizer/spm_model.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

// What a token is to encoding and decoding, from its GGUF type and
// llama.cpp's overrides by text.
enum class Kind : uint8_t {
  kNormal,       // text, "▁" decoded as a space
  kByte,         // <0xXX>: one byte
  kControl,      // special: matched in the text, skippable when decoding
  kUnknown,      // special, as control
  kUserDefined,  // matched in the text, not special
  kSilent,       // unused or undefined: decodes to nothing
};

std::string EscapeSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  for (char c : text) {
    if (c == ' ') {
      out += kSpmSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string UnescapeSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

// The byte of a "<0xXX>" token (llama.cpp reads the two hex digits).
std::optional<uint8_t> ByteOfToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = digit(text[3]), lo = digit(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// llama.cpp's per-model attributes by general.name: Phi-3's special tokens
// swallow the whitespace after them.
bool IsPhi3Name(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
}

class SpmTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Create(const GgufVocab& v);

  using Tokenizer::Encode;
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              std::span<const TextRange> plain) const override;
  std::vector<TextRange> FindSpecialTokens(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string TokenBytes(int32_t id) const override { return std::string(Piece(id)); }
  int64_t vocab_size() const override { return model_.size(); }
  int64_t max_bytes_per_token() const override { return max_bytes_per_token_; }
  std::optional<int32_t> TokenId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return false;
    const Kind k = kinds_[static_cast<size_t>(id)];
    return k == Kind::kControl || k == Kind::kUnknown;
  }
  const std::string& chat_template() const override { return chat_template_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }
  std::optional<int32_t> bos_token_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_token_ids() const override { return eos_token_ids_; }

 private:
  explicit SpmTokenizer(SpmModel model) : model_(std::move(model)) {}
  // What id decodes to (empty for an id outside the vocabulary).
  std::string_view Piece(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return {};
    const auto i = static_cast<size_t>(id);
    return std::string_view(pieces_).substr(piece_offsets_[i],
                                            piece_offsets_[i + 1] - piece_offsets_[i]);
  }
  void EncodeText(std::string_view text, bool space_prefix, std::vector<int32_t>* ids) const;

  SpmModel model_;
  std::vector<Kind> kinds_;              // [vocab_size]
  std::string pieces_;                   // every token's decoded bytes, back to back
  std::vector<uint32_t> piece_offsets_;  // [vocab_size + 1] into pieces_
  AddedTokenMatcher matcher_;            // control, unknown and user-defined tokens
  AddedTokenMatcher special_matcher_;    // the special ones, no strip rules
  bool add_space_prefix_ = true;
  bool add_bos_ = false, add_eos_ = false;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_, chat_template_;
  std::vector<int32_t> eos_token_ids_;
  int64_t max_bytes_per_token_ = 0;
};

// llama.cpp's defaults for an SPM vocabulary: bos 1, eos 2, unknown 0, when
// the file names none and the vocabulary has them.
std::optional<int64_t> WithDefault(const std::optional<int64_t>& id, int64_t fallback,
                                   size_t vocab_size) {
  if (id) return id;
  if (fallback < static_cast<int64_t>(vocab_size)) return fallback;
  return std::nullopt;
}

StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizer::Create(const GgufVocab& v) {
  // Ids the file gives must name used tokens; llama.cpp's defaults are
  // taken as they are.
  KVFORK_RETURN_IF_ERROR(CheckGgufVocab(v));
  KVFORK_RETURN_IF_ERROR(CheckGgufTokenId(v, v.unk_id, "unknown_token_id"));
  const size_t n = v.tokens.size();
  std::vector<float> zeros;
  if (v.scores.empty()) zeros.assign(n, 0.0f);  // llama.cpp: no scores, all 0
  const std::optional<int64_t> unk = WithDefault(v.unk_id, 0, n);
  const std::optional<int64_t> bos = WithDefault(v.bos_id, 1, n);
  const std::optional<int64_t> eos = WithDefault(v.eos_id, 2, n);
  KVFORK_ASSIGN_OR_RETURN(
      SpmModel model,
      SpmModel::Create(v.tokens, v.scores.empty() ? zeros : v.scores,
                       unk ? std::optional<int32_t>(static_cast<int32_t>(*unk)) : std::nullopt));
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer(std::move(model)));

  t->kinds_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    Kind kind;
    switch (GgufTypeOf(v, id)) {
      case GgufTokenType::kNormal:
        kind = Kind::kNormal;
        break;
      case GgufTokenType::kByte:
        kind = Kind::kByte;
        break;
      case GgufTokenType::kControl:
        kind = Kind::kControl;
        break;
      case GgufTokenType::kUnknown:
        kind = Kind::kUnknown;
        break;
      case GgufTokenType::kUserDefined:
        kind = Kind::kUserDefined;
        break;
      case GgufTokenType::kUnused:
      case GgufTokenType::kUndefined:
        kind = Kind::kSilent;
        break;
      default:
        return InvalidArgumentError("tokenizer.ggml.token_type[" + std::to_string(id) + "] is " +
                                    std::to_string(v.token_types[id]) +
                                    ", not a llama.cpp token type (0-6)");
    }
    // llama.cpp makes a token spelled as an end of generation a control token.
    if (IsEndOfGenerationText(v.tokens[id]) && kind != Kind::kUnknown) kind = Kind::kControl;
    if (kind == Kind::kByte && !ByteOfToken(v.tokens[id]))
      return InvalidArgumentError("tokenizer.ggml.tokens[" + std::to_string(id) + "] \"" +
                                  v.tokens[id] + "\" is a byte token not spelled <0xXX>");
    t->kinds_[id] = kind;
  }

  // Decoded pieces.
  t->piece_offsets_.reserve(n + 1);
  for (size_t id = 0; id < n; ++id) {
    t->piece_offsets_.push_back(static_cast<uint32_t>(t->pieces_.size()));
    const std::string& text = v.tokens[id];
    switch (t->kinds_[id]) {
      case Kind::kNormal:
        t->pieces_ += UnescapeSpaces(text);
        break;
      case Kind::kByte:
        t->pieces_.push_back(static_cast<char>(*ByteOfToken(text)));
        break;
      case Kind::kControl:
      case Kind::kUnknown:
      case Kind::kUserDefined:
        t->pieces_ += text;
        break;
      case Kind::kSilent:
        break;
    }
    if (t->pieces_.size() >= UINT32_MAX)
      return InvalidArgumentError("tokenizer.ggml.tokens holds over 4 GiB of text");
  }
  t->piece_offsets_.push_back(static_cast<uint32_t>(t->pieces_.size()));

  // Tokens matched in the raw text.
  const bool phi3 = IsPhi3Name(v.name);
  bool strips = false;
  for (size_t id = 0; id < n; ++id) {
    const Kind kind = t->kinds_[id];
    if (kind != Kind::kControl && kind != Kind::kUnknown && kind != Kind::kUserDefined) continue;
    const std::string& text = v.tokens[id];
    AddedToken tok;
    tok.content = text;
    tok.id = static_cast<int32_t>(id);
    tok.special = kind != Kind::kUserDefined;
    tok.rstrip = phi3 && text != "<unk>" && text != "<s>" && text != "<|endoftext|>";
    tok.strip_ascii_only = true;
    strips = strips || tok.rstrip;
    t->matcher_.Add(text, tok);
    if (tok.special) {
      AddedToken plain_match = tok;
      plain_match.rstrip = false;
      t->special_matcher_.Add(text, plain_match);
    }
  }

  t->add_space_prefix_ = v.add_space_prefix.value_or(true);
  if (bos) {
    t->bos_id_ = static_cast<int32_t>(*bos);
    t->bos_token_ = v.tokens[static_cast<size_t>(*bos)];
  }
  if (eos) {
    t->eos_id_ = static_cast<int32_t>(*eos);
    t->eos_token_ = v.tokens[static_cast<size_t>(*eos)];
  }
  t->add_bos_ = v.add_bos.value_or(true) && bos.has_value();
  t->add_eos_ = v.add_eos.value_or(false) && eos.has_value();
  if (!v.chat_template.empty() && !utf8::IsValid(v.chat_template))
    return InvalidArgumentError("tokenizer.chat_template is not valid UTF-8");
  t->chat_template_ = v.chat_template;

  auto add_eog = [&](int64_t id) {
    const auto i = static_cast<int32_t>(id);
    if (std::find(t->eos_token_ids_.begin(), t->eos_token_ids_.end(), i) == t->eos_token_ids_.end())
      t->eos_token_ids_.push_back(i);
  };
  for (const auto& id : {eos, v.eot_id, v.eom_id})
    if (id) add_eog(*id);
  for (size_t id = 0; id < n; ++id)
    if (t->kinds_[id] == Kind::kControl && IsEndOfGenerationText(v.tokens[id]))
      add_eog(static_cast<int64_t>(id));

  // Every byte of the text lands in one token, which stands for at most its
  // own text's bytes ("▁" is 3 bytes for a 1-byte space; a byte token or the
  // unknown token for one byte). rstrip lets whitespace vanish: no bound.
  if (!strips) {
    size_t longest = 1;
    for (const std::string& text : v.tokens) longest = std::max(longest, text.size());
    t->max_bytes_per_token_ = static_cast<int64_t>(longest);
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void SpmTokenizer::EncodeText(std::string_view text, bool space_prefix,
                              std::vector<int32_t>* ids) const {
  thread_local std::string escaped;
  escaped.clear();
  escaped.reserve(text.size() + 3);
  if (space_prefix) escaped += kSpmSpace;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpmSpace;
    } else {
      escaped.push_back(c);
    }
  }
  model_.Encode(escaped, ids);
  if (escaped.capacity() > kScratchKeepBytes) std::string().swap(escaped);
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_special,
                                          std::span<const TextRange> plain) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_) ids.push_back(*bos_id_);
  // llama.cpp: a stretch of text gets the prefix space when it starts the
  // text or follows a matched token (bos does not count: it is not text).
  bool after_token = true;
  if (matcher_.empty()) {
    if (!text.empty()) EncodeText(text, add_space_prefix_, &ids);
  } else {
    std::vector<TextSpan> spans;
    matcher_.Split(text, &spans, plain);
    for (const TextSpan& s : spans) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        after_token = true;
      } else {
        EncodeText(text.substr(s.begin, s.end - s.begin), add_space_prefix_ && after_token, &ids);
        after_token = false;
      }
    }
  }
  if (add_special && add_eos_) ids.push_back(*eos_id_);
  return ids;
}

std::vector<TextRange> SpmTokenizer::FindSpecialTokens(std::string_view text) const {
  std::vector<TextRange> found;
  if (special_matcher_.empty()) return found;
  std::vector<TextSpan> spans;
  special_matcher_.Split(text, &spans);
  for (const TextSpan& s : spans)
    if (s.id >= 0) found.push_back({s.begin, s.end});
  return found;
}

std::string SpmTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (skip_special && IsSpecial(ids[i])) continue;
    std::string_view piece = Piece(ids[i]);
    // llama.cpp's detokenize drops the prefix space from the first token
    // only (a skipped first token keeps the next one's).
    if (i == 0 && add_space_prefix_ && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    bytes += piece;
  }
  return utf8::Lossy(bytes);
}

std::optional<int32_t> SpmTokenizer::TokenId(std::string_view token) const {
  int32_t id = model_.Find(token);
  if (id < 0) id = model_.Find(EscapeSpaces(token));
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizerFromGguf(const GgufVocab& vocab) {
  return SpmTokenizer::Create(vocab);
}

}  // namespace kvfork
