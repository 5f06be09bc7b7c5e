// The Tokenizer of a tokenizer.json: added tokens -> normalizer -> added
// tokens matched after normalization -> pre-tokenizer -> BPE -> post-processor,
// the order Hugging Face's TokenizerImpl::encode follows.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/scratch_vector.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

using nlohmann::json;

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("error reading " + path);
  return ss.str();
}

// A special-token field of tokenizer_config.json: a string, an AddedToken
// dict {"content": ...}, or null.
std::string TokenField(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// The decoder must turn token bytes back into text by concatenation: null,
// ByteLevel, or a Sequence of those.
Status CheckDecoder(const json& decoder) {
  if (decoder.is_null()) return OkStatus();
  if (!decoder.is_object() || !decoder.contains("type") || !decoder["type"].is_string())
    return InvalidArgumentError("tokenizer.json decoder: expected an object with a string \"type\"");
  const std::string type = decoder["type"].get<std::string>();
  if (type == "ByteLevel") return OkStatus();
  if (type == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array()) {
    for (const auto& d : decoder["decoders"]) KVFORK_RETURN_IF_ERROR(CheckDecoder(d));
    return OkStatus();
  }
  return UnimplementedError("tokenizer.json decoder type \"" + type + "\" is not supported");
}

class BpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Create(const std::string& tokenizer_json,
                                                     const std::string& tokenizer_config_json,
                                                     const std::string& generation_config_json);

  using Tokenizer::Encode;
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              std::span<const TextRange> plain) const override;
  std::vector<TextRange> FindSpecialTokens(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string TokenBytes(int32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t max_bytes_per_token() const override { return max_bytes_per_token_; }
  std::optional<int32_t> TokenId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size_ && special_[static_cast<size_t>(id)];
  }
  const std::string& chat_template() const override { return chat_template_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }
  std::optional<int32_t> bos_token_id() const override { return bos_token_id_; }
  const std::vector<int32_t>& eos_token_ids() const override { return eos_token_ids_; }

 private:
  BpeTokenizer(BpeModel model, PreTokenizer pre, PostProcessor post)
      : model_(std::move(model)), pre_(std::move(pre)), post_(std::move(post)) {}
  Status LoadAddedTokens(const json& added);
  Status LoadConfigs(const std::string& tokenizer_config_json,
                     const std::string& generation_config_json);
  // plain_run: the text holds bytes that must stay plain; special tokens
  // matched after normalization are then not taken (offsets do not survive
  // normalization, so the whole run is kept plain for them).
  void EncodeText(std::string_view text, bool plain_run, std::vector<int32_t>* ids) const;
  void EncodeValid(std::string_view text, bool plain_run, std::vector<int32_t>* ids) const;
  int64_t BytesPerTokenBound() const;

  BpeModel model_;
  PreTokenizer pre_;
  PostProcessor post_;
  std::optional<Normalizer> normalizer_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher_;  // normalized=true, contents normalized
  AddedTokenMatcher special_matcher_;     // special tokens' raw contents, no strip rules
  std::unordered_map<int32_t, std::string> added_content_;
  TokenMap added_ids_;  // content -> id
  std::vector<bool> special_;  // [vocab_size_]
  int64_t vocab_size_ = 0;
  int64_t max_bytes_per_token_ = 0;  // 0 = unbounded
  bool added_token_strips_ = false;  // an added token has lstrip or rstrip
  size_t max_added_bytes_ = 0;       // longest added token's content

  std::string chat_template_, bos_token_, eos_token_;
  std::optional<int32_t> bos_token_id_;
  std::vector<int32_t> eos_token_ids_;
  bool add_bos_ = false;  // prepend bos when the post-processor adds nothing
  bool add_eos_ = false;
};

Status BpeTokenizer::LoadAddedTokens(const json& added) {
  if (added.is_null()) return OkStatus();
  if (!added.is_array()) return InvalidArgumentError("tokenizer.json: \"added_tokens\" must be an array");
  for (const auto& t : added) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      return InvalidArgumentError("tokenizer.json added_tokens: entry needs integer \"id\" and "
                                  "string \"content\": " + t.dump());
    AddedToken tok;
    // The id sizes tables ([vocab_size]), so it is bounded as the vocab's are
    // (and read as 64 bits: 2^32 + 7 must not become 7).
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0) return InvalidArgumentError("tokenizer.json added_tokens: negative id");
    if (id > MergeTable::kMaxId)
      return UnimplementedError("tokenizer.json added_tokens: id " + std::to_string(id) +
                                " is above the largest supported token id " +
                                std::to_string(MergeTable::kMaxId));
    tok.id = static_cast<int32_t>(id);
    tok.content = t["content"].get<std::string>();
    tok.special = t.value("special", false);
    tok.lstrip = t.value("lstrip", false);
    tok.rstrip = t.value("rstrip", false);
    tok.single_word = t.value("single_word", false);
    added_token_strips_ = added_token_strips_ || tok.lstrip || tok.rstrip;
    max_added_bytes_ = std::max(max_added_bytes_, tok.content.size());
    // Hugging Face's default: normalized unless special.
    tok.normalized = t.value("normalized", !tok.special);
    if (tok.normalized && normalizer_) {
      normalized_matcher_.Add(normalizer_->Normalize(tok.content), tok);
    } else {
      raw_matcher_.Add(tok.content, tok);
    }
    if (tok.special) {
      AddedToken plain_match = tok;
      plain_match.lstrip = plain_match.rstrip = plain_match.single_word = false;
      special_matcher_.Add(tok.content, plain_match);
    }
    added_content_[tok.id] = tok.content;
    added_ids_.emplace(tok.content, tok.id);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{tok.id} + 1);
    if (special_.size() < static_cast<size_t>(vocab_size_)) special_.resize(vocab_size_, false);
    if (tok.special) special_[tok.id] = true;
  }
  return OkStatus();
}

Status BpeTokenizer::LoadConfigs(const std::string& tokenizer_config_json,
                                 const std::string& generation_config_json) {
  json config = json::object(), generation = json::object();
  if (!tokenizer_config_json.empty()) {
    config = json::parse(tokenizer_config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object())
      return InvalidArgumentError("tokenizer_config.json is not a JSON object");
  }
  if (!generation_config_json.empty()) {
    generation = json::parse(generation_config_json, nullptr, false);
    if (generation.is_discarded() || !generation.is_object())
      return InvalidArgumentError("generation_config.json is not a JSON object");
  }
  bos_token_ = TokenField(config, "bos_token");
  eos_token_ = TokenField(config, "eos_token");
  if (config.contains("chat_template")) {
    const json& ct = config["chat_template"];
    if (ct.is_string()) {
      chat_template_ = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const auto& entry : ct) {
        if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string())
          continue;
        if (chat_template_.empty() || entry.value("name", std::string()) == "default")
          chat_template_ = entry["template"].get<std::string>();
      }
    }
  }
  if (!bos_token_.empty()) {
    bos_token_id_ = TokenId(bos_token_);
    if (!bos_token_id_)
      return InvalidArgumentError("tokenizer_config.json: bos_token \"" + bos_token_ +
                                  "\" is not a token");
  } else if (generation.contains("bos_token_id") && generation["bos_token_id"].is_number_integer()) {
    const int64_t id = generation["bos_token_id"].get<int64_t>();
    if (id < 0 || id >= vocab_size_)
      return InvalidArgumentError("generation_config.json: bos_token_id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab_size_) +
                                  ")");
    bos_token_id_ = static_cast<int32_t>(id);
  }
  // A config that names a bos_token and does not turn add_bos_token off gets
  // it prepended when the post-processor adds nothing itself (Llama 3's
  // tokenizer.json in some packagings drops its TemplateProcessing).
  const json add_bos = config.value("add_bos_token", json());
  add_bos_ = add_bos.is_boolean() ? add_bos.get<bool>() : bos_token_id_.has_value();
  add_bos_ = add_bos_ && bos_token_id_.has_value();
  const json add_eos = config.value("add_eos_token", json());
  add_eos_ = add_eos.is_boolean() && add_eos.get<bool>();

  auto add_eos_id = [&](int64_t id) -> Status {
    if (id < 0 || id >= vocab_size_)
      return InvalidArgumentError("generation_config.json: eos_token_id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab_size_) +
                                  ")");
    if (std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) == eos_token_ids_.end())
      eos_token_ids_.push_back(static_cast<int32_t>(id));
    return OkStatus();
  };
  if (generation.contains("eos_token_id")) {
    const json& e = generation["eos_token_id"];
    if (e.is_number_integer()) {
      KVFORK_RETURN_IF_ERROR(add_eos_id(e.get<int64_t>()));
    } else if (e.is_array()) {
      for (const auto& v : e) {
        if (!v.is_number_integer())
          return InvalidArgumentError("generation_config.json: eos_token_id list holds a non-integer");
        KVFORK_RETURN_IF_ERROR(add_eos_id(v.get<int64_t>()));
      }
    } else if (!e.is_null()) {
      return InvalidArgumentError("generation_config.json: eos_token_id must be a number or a list");
    }
  }
  if (!eos_token_.empty()) {
    std::optional<int32_t> id = TokenId(eos_token_);
    if (!id)
      return InvalidArgumentError("tokenizer_config.json: eos_token \"" + eos_token_ +
                                  "\" is not a token");
    KVFORK_RETURN_IF_ERROR(add_eos_id(*id));
  }
  if (add_eos_ && eos_token_.empty()) add_eos_ = false;
  return OkStatus();
}

StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(const std::string& tokenizer_json,
                                                         const std::string& tokenizer_config_json,
                                                         const std::string& generation_config_json) {
  // The model's vocabulary and merges are most of the file and are read
  // straight into BpeModel's tables; the other members are small and go
  // through nlohmann. A member given twice keeps its last value.
  auto members = SplitObject(tokenizer_json, "tokenizer.json");
  if (!members.ok())
    return InvalidArgumentError("tokenizer.json is not a JSON object (" + members.status().message() + ")");
  json root = json::object();
  std::string_view model_json;
  for (const auto& [key, value] : *members) {
    if (key == "model") {
      model_json = value;
    } else {
      root[key] = json::parse(value, nullptr, /*allow_exceptions=*/false);
    }
  }
  if (model_json.empty()) return InvalidArgumentError("tokenizer.json: missing \"model\"");
  KVFORK_ASSIGN_OR_RETURN(PreTokenizer pre,
                          PreTokenizer::FromJson(root.value("pre_tokenizer", json())));
  bool byte_level = pre.byte_level();
  const json decoder = root.value("decoder", json());
  KVFORK_RETURN_IF_ERROR(CheckDecoder(decoder));
  if (decoder.is_object() && decoder.dump().find("\"ByteLevel\"") != std::string::npos)
    byte_level = true;
  KVFORK_ASSIGN_OR_RETURN(BpeModel model, BpeModel::FromJson(model_json, byte_level));
  KVFORK_ASSIGN_OR_RETURN(PostProcessor post,
                          PostProcessor::FromJson(root.value("post_processor", json())));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(model), std::move(pre), std::move(post)));
  const json normalizer = root.value("normalizer", json());
  if (!normalizer.is_null()) {
    KVFORK_ASSIGN_OR_RETURN(Normalizer n, Normalizer::FromJson(normalizer));
    t->normalizer_ = std::move(n);
  }
  t->vocab_size_ = t->model_.size();
  t->special_.assign(static_cast<size_t>(t->vocab_size_), false);
  KVFORK_RETURN_IF_ERROR(t->LoadAddedTokens(root.value("added_tokens", json())));
  KVFORK_RETURN_IF_ERROR(t->LoadConfigs(tokenizer_config_json, generation_config_json));
  t->max_bytes_per_token_ = t->BytesPerTokenBound();
  return std::unique_ptr<Tokenizer>(std::move(t));
}

// Every byte of the (normalized) text lands in exactly one token: byte-level
// BPE starts from one symbol per byte and merges only join neighbours within
// a pre-token, an added token covers its content, an invalid UTF-8 byte is
// one token. So a token stands for at most max(longest vocabulary token,
// longest added token) bytes of normalized text; for Qwen3 and Llama 3 that
// is 128 (a run of 128 spaces), the worst case a real text can reach (a
// prompt of spaces). A normalizer can shrink the text before that: NFC at
// most 3x (Hangul jamo L+V+T, 9 bytes, compose to one 3-byte syllable; the
// Kelvin sign, 3 bytes, is "K"), NFKC 4x (U+1D400, a 4-byte mathematical
// bold A, is "A"), Lowercase 3x (Kelvin sign to "k"); kMaxNormalizerShrink
// covers them all (tokenizer_bounds_test checks every code point).
int64_t BpeTokenizer::BytesPerTokenBound() const {
  if (!model_.covers_every_byte() || pre_.removes_text() || added_token_strips_) return 0;
  const auto longest = static_cast<int64_t>(std::max(model_.max_token_bytes(), max_added_bytes_));
  return longest * (normalizer_ ? kMaxNormalizerShrink : 1);
}

// Invalid UTF-8 bytes each become their single-byte token and cut the text:
// the regexes and normalizers only ever see valid runs.
void BpeTokenizer::EncodeText(std::string_view text, bool plain_run,
                              std::vector<int32_t>* ids) const {
  size_t run = 0;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    utf8::Step st = utf8::DecodeAt(text, i);
    if (st.valid) {
      i += st.length;
      continue;
    }
    if (run < i) EncodeValid(text.substr(run, i - run), plain_run, ids);
    for (size_t k = i; k < i + st.length; ++k) model_.Encode(text.substr(k, 1), ids);
    i += st.length;
    run = i;
  }
  if (run == 0) {
    EncodeValid(text, plain_run, ids);
  } else if (run < text.size()) {
    EncodeValid(text.substr(run), plain_run, ids);
  }
}

void BpeTokenizer::EncodeValid(std::string_view text, bool plain_run,
                               std::vector<int32_t>* ids) const {
  thread_local std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  std::string normalized;
  std::string_view view = text;
  if (normalizer_) view = normalizer_->Normalize(text, &normalized);
  auto encode_plain = [&](std::string_view s) {
    pieces.clear();
    pre_.Split(s, &pieces, &arena);
    model_.EncodePieces(pieces, ids);
    ReleaseLargeScratch(&pieces);
  };
  if (normalized_matcher_.empty()) {
    encode_plain(view);
    return;
  }
  std::vector<TextSpan> spans;
  const TextRange whole_run{0, view.size()};
  normalized_matcher_.Split(
      view, &spans,
      plain_run ? std::span<const TextRange>(&whole_run, 1) : std::span<const TextRange>());
  for (const TextSpan& s : spans) {
    if (s.id >= 0) {
      ids->push_back(s.id);
    } else {
      encode_plain(view.substr(s.begin, s.end - s.begin));
    }
  }
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool add_special,
                                          std::span<const TextRange> plain) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  // Whether [begin, end) holds plain bytes; only asked when the normalized
  // matcher has special tokens to refuse.
  auto holds_plain = [&](size_t begin, size_t end) {
    if (plain.empty() || !normalized_matcher_.has_special()) return false;
    auto it = std::upper_bound(plain.begin(), plain.end(), begin,
                               [](size_t b, const TextRange& r) { return b < r.end; });
    return it != plain.end() && it->begin < end;
  };
  if (raw_matcher_.empty()) {
    EncodeText(text, holds_plain(0, text.size()), &ids);
  } else {
    std::vector<TextSpan> spans;
    raw_matcher_.Split(text, &spans, plain);
    for (const TextSpan& s : spans) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        EncodeText(text.substr(s.begin, s.end - s.begin), holds_plain(s.begin, s.end), &ids);
      }
    }
  }
  if (!add_special) return ids;
  if (post_.adds_tokens()) return post_.Apply(std::move(ids));
  if (add_bos_) ids.insert(ids.begin(), *bos_token_id_);
  if (add_eos_) ids.push_back(*TokenId(eos_token_));
  return ids;
}

std::vector<TextRange> BpeTokenizer::FindSpecialTokens(std::string_view text) const {
  std::vector<TextRange> found;
  if (special_matcher_.empty()) return found;
  std::vector<TextSpan> spans;
  special_matcher_.Split(text, &spans);
  for (const TextSpan& s : spans) {
    if (s.id >= 0) found.push_back({s.begin, s.end});
  }
  return found;
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  auto it = added_content_.find(id);
  if (it != added_content_.end()) return it->second;
  return std::string(model_.TokenBytes(id));
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && IsSpecial(id)) continue;
    auto it = added_content_.find(id);
    if (it != added_content_.end()) {
      bytes += it->second;
    } else {
      bytes += model_.TokenBytes(id);
    }
  }
  return utf8::Lossy(bytes);
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  auto it = added_ids_.find(token);
  if (it != added_ids_.end()) return it->second;
  // tokenizer.json spells byte-level tokens in the GPT-2 alphabet ("Ġhello").
  if (std::optional<std::string> raw = ByteLevelDecode(token)) {
    if (std::optional<int32_t> id = model_.TokenId(*raw)) return id;
  }
  return model_.TokenId(token);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& tokenizer_json,
                                                        const std::string& tokenizer_config_json,
                                                        const std::string& generation_config_json) {
  try {
    return BpeTokenizer::Create(tokenizer_json, tokenizer_config_json, generation_config_json);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("tokenizer.json: unexpected JSON value: ") + e.what());
  }
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  KVFORK_ASSIGN_OR_RETURN(std::string tokenizer_json, ReadFile(path));
  std::string config, generation;
  if (std::ifstream(model_dir + "/tokenizer_config.json")) {
    KVFORK_ASSIGN_OR_RETURN(config, ReadFile(model_dir + "/tokenizer_config.json"));
  }
  if (std::ifstream(model_dir + "/generation_config.json")) {
    KVFORK_ASSIGN_OR_RETURN(generation, ReadFile(model_dir + "/generation_config.json"));
  }
  StatusOr<std::unique_ptr<Tokenizer>> t = FromJson(tokenizer_json, config, generation);
  if (!t.ok()) return t.status().WithContext("loading tokenizer from " + model_dir);
  return t;
}

}  // namespace kvfork
