#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <utf8proc.h>

#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

Status AddSteps(const nlohmann::json& json, std::vector<Normalizer::Kind>* steps) {
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string())
    return InvalidArgumentError("normalizer: expected an object with a string \"type\"");
  const std::string type = json["type"].get<std::string>();
  if (type == "Sequence") {
    if (!json.contains("normalizers") || !json["normalizers"].is_array())
      return InvalidArgumentError("normalizer Sequence: missing \"normalizers\" array");
    for (const auto& n : json["normalizers"]) KVFORK_RETURN_IF_ERROR(AddSteps(n, steps));
  } else if (type == "NFC") {
    steps->push_back(Normalizer::Kind::kNfc);
  } else if (type == "NFD") {
    steps->push_back(Normalizer::Kind::kNfd);
  } else if (type == "NFKC") {
    steps->push_back(Normalizer::Kind::kNfkc);
  } else if (type == "NFKD") {
    steps->push_back(Normalizer::Kind::kNfkd);
  } else if (type == "Lowercase") {
    steps->push_back(Normalizer::Kind::kLowercase);
  } else {
    return UnimplementedError("normalizer type \"" + type + "\" is not supported");
  }
  return OkStatus();
}

std::string MapValid(std::string_view valid, Normalizer::Kind kind) {
  if (kind == Normalizer::Kind::kLowercase) {
    std::string out;
    out.reserve(valid.size());
    for (size_t i = 0; i < valid.size();) {
      utf8::Step st = utf8::DecodeAt(valid, i);
      utf8::AppendCodepoint(static_cast<uint32_t>(utf8proc_tolower(st.codepoint)), &out);
      i += st.length;
    }
    return out;
  }
  int options = UTF8PROC_STABLE;
  switch (kind) {
    case Normalizer::Kind::kNfc: options |= UTF8PROC_COMPOSE; break;
    case Normalizer::Kind::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case Normalizer::Kind::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Normalizer::Kind::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case Normalizer::Kind::kLowercase: break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &result,
                   static_cast<utf8proc_option_t>(options));
  if (len < 0) return std::string(valid);  // cannot happen on valid UTF-8
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
  std::free(result);
  return out;
}

std::string Apply(std::string_view text, Normalizer::Kind kind) {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii && kind != Normalizer::Kind::kLowercase) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // start of the current valid run
  for (size_t i = 0; i < text.size();) {
    utf8::Step st = utf8::DecodeAt(text, i);
    if (st.valid) {
      i += st.length;
      continue;
    }
    out += MapValid(text.substr(run, i - run), kind);
    out.append(text.substr(i, st.length));
    i += st.length;
    run = i;
  }
  out += MapValid(text.substr(run), kind);
  return out;
}

}  // namespace

StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& json) {
  Normalizer n;
  KVFORK_RETURN_IF_ERROR(AddSteps(json, &n.steps_));
  return n;
}

std::string_view Normalizer::Normalize(std::string_view text, std::string* storage) const {
  std::string_view view = text;
  for (Kind k : steps_) {
    std::string next;
    if (k == Kind::kNfc) {
      const std::string_view result = nfc::Normalize(view, &next);
      if (result.data() == view.data()) continue;  // unchanged: no copy
    } else {
      next = Apply(view, k);
    }
    *storage = std::move(next);  // view may point into *storage: read before this
    view = *storage;
  }
  return view;
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string storage;
  return std::string(Normalize(text, &storage));
}

}  // namespace kvfork
