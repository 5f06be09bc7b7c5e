#include "engine/model_tokenizer.h"

#include <bit>
#include <cstring>

#include "model/gguf_reader.h"

namespace kvfork {
namespace {

// An integer scalar key (converters write u32; some write i32 or u64).
StatusOr<std::optional<int64_t>> OptionalId(const GgufReader& r, const std::string& key) {
  const GgufValue* v = r.Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  switch (v->type) {
    case GgufType::kUint32: {
      uint32_t x;
      std::memcpy(&x, v->payload.data(), 4);
      return std::optional<int64_t>(x);
    }
    case GgufType::kInt32: {
      int32_t x;
      std::memcpy(&x, v->payload.data(), 4);
      return std::optional<int64_t>(x);
    }
    case GgufType::kUint64:
    case GgufType::kInt64: {
      int64_t x;
      std::memcpy(&x, v->payload.data(), 8);
      return std::optional<int64_t>(x);
    }
    default:
      return InvalidArgumentError("GGUF key " + key + " is not an integer");
  }
}

StatusOr<std::optional<bool>> OptionalBool(const GgufReader& r, const std::string& key) {
  const GgufValue* v = r.Find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type != GgufType::kBool) return InvalidArgumentError("GGUF key " + key + " is not a bool");
  return std::optional<bool>(v->payload[0] != 0);
}

// tokenizer.ggml.token_type: an array of i32 (u32 accepted).
StatusOr<std::vector<int32_t>> TokenTypes(const GgufReader& r) {
  const std::string key = "tokenizer.ggml.token_type";
  const GgufValue* v = r.Find(key);
  if (v == nullptr) return std::vector<int32_t>();
  if (v->type != GgufType::kArray ||
      (v->array_type != GgufType::kInt32 && v->array_type != GgufType::kUint32))
    return InvalidArgumentError("GGUF key " + key + " is not an array of int32");
  KVFORK_ASSIGN_OR_RETURN(std::vector<uint32_t> words, r.GetArrayWords(key));
  std::vector<int32_t> types(words.size());
  for (size_t i = 0; i < words.size(); ++i) types[i] = static_cast<int32_t>(words[i]);
  return types;
}

// tokenizer.ggml.scores: an array of f32 (i32 accepted, as llama.cpp does);
// empty when absent.
StatusOr<std::vector<float>> Scores(const GgufReader& r) {
  const std::string key = "tokenizer.ggml.scores";
  const GgufValue* v = r.Find(key);
  if (v == nullptr) return std::vector<float>();
  if (v->type != GgufType::kArray ||
      (v->array_type != GgufType::kFloat32 && v->array_type != GgufType::kInt32))
    return InvalidArgumentError("GGUF key " + key + " is not an array of float32");
  KVFORK_ASSIGN_OR_RETURN(std::vector<uint32_t> words, r.GetArrayWords(key));
  std::vector<float> scores(words.size());
  for (size_t i = 0; i < words.size(); ++i)
    scores[i] = v->array_type == GgufType::kFloat32
                    ? std::bit_cast<float>(words[i])
                    : static_cast<float>(static_cast<int32_t>(words[i]));
  return scores;
}

// llama.cpp's split files are PREFIX-%05d-of-%05d.gguf; the tokenizer keys
// are in the first. Any other name is returned as is.
std::string FirstSplitPath(const std::string& path) {
  constexpr std::string_view kShape = "-00000-of-00000.gguf";
  if (path.size() < kShape.size()) return path;
  const size_t at = path.size() - kShape.size();
  for (size_t i = 0; i < kShape.size(); ++i) {
    const char c = path[at + i];
    const bool ok = kShape[i] == '0' ? (c >= '0' && c <= '9') : c == kShape[i];
    if (!ok) return path;
  }
  std::string first = path;
  first.replace(at + 1, 5, "00001");
  return first;
}

}  // namespace

StatusOr<GgufVocab> ReadGgufVocab(const std::string& gguf_path) {
  KVFORK_ASSIGN_OR_RETURN(GgufReader r, GgufReader::Open(gguf_path));
  GgufVocab v;
  v.source = gguf_path;
  auto in_file = [&](const Status& s) { return s.WithContext(gguf_path); };
  auto optional_string = [&](const std::string& key) -> StatusOr<std::string> {
    if (r.Find(key) == nullptr) return std::string();
    return r.GetString(key);
  };
  if (r.Find("tokenizer.ggml.model") == nullptr)
    return NotFoundError(gguf_path + ": GGUF key tokenizer.ggml.model is missing (no tokenizer)");
  KVFORK_ASSIGN_OR_RETURN(v.model, r.GetString("tokenizer.ggml.model"));
  KVFORK_ASSIGN_OR_RETURN(v.pre, optional_string("tokenizer.ggml.pre"));
  KVFORK_ASSIGN_OR_RETURN(v.chat_template, optional_string("tokenizer.chat_template"));
  // TokenizerFromGguf names what is unsupported.
  const bool bpe = v.model == "gpt2", spm = v.model == "llama";
  if (!bpe && !spm) return v;
  KVFORK_ASSIGN_OR_RETURN(v.name, optional_string("general.name"));
  if (r.Find("tokenizer.ggml.tokens") == nullptr)
    return NotFoundError(gguf_path + ": GGUF key tokenizer.ggml.tokens is missing");
  KVFORK_ASSIGN_OR_RETURN(v.tokens, r.GetStringArray("tokenizer.ggml.tokens"));
  if (bpe) {
    if (r.Find("tokenizer.ggml.merges") == nullptr)
      return NotFoundError(gguf_path + ": GGUF key tokenizer.ggml.merges is missing");
    KVFORK_ASSIGN_OR_RETURN(v.merges, r.GetStringArray("tokenizer.ggml.merges"));
  }
  if (spm) {
    StatusOr<std::vector<float>> scores = Scores(r);
    if (!scores.ok()) return in_file(scores.status());
    v.scores = std::move(*scores);
  }
  StatusOr<std::vector<int32_t>> types = TokenTypes(r);
  if (!types.ok()) return in_file(types.status());
  v.token_types = std::move(*types);
  struct IdKey {
    const char* key;
    std::optional<int64_t>* out;
  };
  for (const IdKey& k : {IdKey{"tokenizer.ggml.bos_token_id", &v.bos_id},
                         IdKey{"tokenizer.ggml.eos_token_id", &v.eos_id},
                         IdKey{"tokenizer.ggml.eot_token_id", &v.eot_id},
                         IdKey{"tokenizer.ggml.eom_token_id", &v.eom_id},
                         IdKey{"tokenizer.ggml.padding_token_id", &v.pad_id},
                         IdKey{"tokenizer.ggml.unknown_token_id", &v.unk_id}}) {
    StatusOr<std::optional<int64_t>> id = OptionalId(r, k.key);
    if (!id.ok()) return in_file(id.status());
    *k.out = *id;
  }
  StatusOr<std::optional<bool>> add_bos = OptionalBool(r, "tokenizer.ggml.add_bos_token");
  if (!add_bos.ok()) return in_file(add_bos.status());
  StatusOr<std::optional<bool>> add_eos = OptionalBool(r, "tokenizer.ggml.add_eos_token");
  if (!add_eos.ok()) return in_file(add_eos.status());
  v.add_bos = *add_bos;
  v.add_eos = *add_eos;
  struct BoolKey {
    const char* key;
    std::optional<bool>* out;
  };
  for (const BoolKey& k :
       {BoolKey{"tokenizer.ggml.add_space_prefix", &v.add_space_prefix},
        BoolKey{"tokenizer.ggml.remove_extra_whitespaces", &v.remove_extra_whitespaces}}) {
    StatusOr<std::optional<bool>> b = OptionalBool(r, k.key);
    if (!b.ok()) return in_file(b.status());
    *k.out = *b;
  }
  return v;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_path) {
  if (!IsGgufPath(model_path)) return Tokenizer::Load(model_path);
  KVFORK_ASSIGN_OR_RETURN(GgufVocab vocab, ReadGgufVocab(FirstSplitPath(model_path)));
  return TokenizerFromGguf(vocab);
}

}  // namespace kvfork
