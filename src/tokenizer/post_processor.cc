#include "tokenizer/post_processor.h"

namespace kvfork {
namespace {

// A [token, id] pair of Roberta/BertProcessing.
StatusOr<int32_t> PairId(const nlohmann::json& json, const char* field) {
  if (!json.contains(field) || !json[field].is_array() || json[field].size() != 2 ||
      !json[field][1].is_number_integer())
    return InvalidArgumentError(std::string("post_processor: \"") + field +
                                "\" must be [token, id]");
  return json[field][1].get<int32_t>();
}

}  // namespace

Status PostProcessor::Add(const nlohmann::json& json, PostProcessor* out) {
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string())
    return InvalidArgumentError("post_processor: expected an object with a string \"type\"");
  const std::string type = json["type"].get<std::string>();
  if (type == "Sequence") {
    if (!json.contains("processors") || !json["processors"].is_array())
      return InvalidArgumentError("post_processor Sequence: missing \"processors\" array");
    for (const auto& p : json["processors"]) KVFORK_RETURN_IF_ERROR(Add(p, out));
    return OkStatus();
  }
  if (type == "ByteLevel") return OkStatus();  // trims offsets; ids are unchanged
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    KVFORK_ASSIGN_OR_RETURN(int32_t cls, PairId(json, "cls"));
    KVFORK_ASSIGN_OR_RETURN(int32_t sep, PairId(json, "sep"));
    out->prefix_.insert(out->prefix_.begin(), cls);
    out->suffix_.push_back(sep);
    return OkStatus();
  }
  if (type != "TemplateProcessing")
    return UnimplementedError("post_processor type \"" + type + "\" is not supported");
  if (!json.contains("single") || !json["single"].is_array())
    return InvalidArgumentError("post_processor TemplateProcessing: missing \"single\" array");
  const nlohmann::json specials = json.value("special_tokens", nlohmann::json::object());
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& piece : json["single"]) {
    if (piece.contains("Sequence")) {
      if (seen_sequence)
        return InvalidArgumentError("post_processor TemplateProcessing: \"single\" has two sequences");
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string())
      return InvalidArgumentError("post_processor TemplateProcessing: bad \"single\" item " +
                                  piece.dump());
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      return InvalidArgumentError("post_processor TemplateProcessing: special token \"" + name +
                                  "\" has no ids in \"special_tokens\"");
    for (const auto& id : specials[name]["ids"]) {
      if (!id.is_number_integer())
        return InvalidArgumentError("post_processor TemplateProcessing: ids of \"" + name +
                                    "\" must be integers");
      (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    }
  }
  out->prefix_.insert(out->prefix_.begin(), prefix.begin(), prefix.end());
  out->suffix_.insert(out->suffix_.end(), suffix.begin(), suffix.end());
  return OkStatus();
}

StatusOr<PostProcessor> PostProcessor::FromJson(const nlohmann::json& json) {
  PostProcessor p;
  if (json.is_null()) return p;
  KVFORK_RETURN_IF_ERROR(Add(json, &p));
  return p;
}

std::vector<int32_t> PostProcessor::Apply(std::vector<int32_t> ids) const {
  if (!adds_tokens()) return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

}  // namespace kvfork
