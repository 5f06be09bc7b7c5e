#include "server/json_body.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvfork::server {
namespace {

ApiError TooDeep() {
  return BadRequest(
      "request body nests JSON values deeper than " + std::to_string(kMaxJsonDepth) + " levels",
      "invalid_json");
}

// A SAX consumer that builds an ordered_json in one pass. Objects up to
// kScanKeys members find a repeated key by scanning; larger ones keep a hash
// index, so no object costs more than linear time.
class OrderedBuilder {
 public:
  using Json = nlohmann::ordered_json;

  explicit OrderedBuilder(Json* root) : root_(root) {}

  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool v) { return Put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return Put(Json(v)); }
  bool string(Json::string_t& v) { return Put(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return false; }  // not in JSON text
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(Json::string_t& k) {
    Frame& f = stack_.back();
    // ordered_map is a vector of pairs; its own emplace scans for the key.
    auto& obj = static_cast<Json::object_t::Container&>(f.value->get_ref<Json::object_t&>());
    size_t index = obj.size();
    if (!f.index.empty()) {
      auto it = f.index.find(k);
      if (it != f.index.end()) index = it->second;
    } else {
      for (size_t i = 0; i < obj.size(); ++i) {
        if (obj[i].first == k) {
          index = i;
          break;
        }
      }
    }
    if (index == obj.size()) {
      obj.emplace_back(k, nullptr);
      if (!f.index.empty()) {
        f.index.emplace(k, index);
      } else if (obj.size() > kScanKeys) {
        for (size_t i = 0; i < obj.size(); ++i) f.index.emplace(obj[i].first, i);
      }
    }
    f.slot = &obj[index].second;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& error() const { return error_; }

 private:
  static constexpr size_t kScanKeys = 16;
  struct Frame {
    Json* value = nullptr;
    Json* slot = nullptr;  // objects: the member the next value fills
    std::unordered_map<std::string, size_t> index;
  };

  // Where the next value goes: the root, an array's new element, or the
  // member its key named.
  Json* Target() {
    if (stack_.empty()) return root_;
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      f.value->get_ref<Json::array_t&>().emplace_back();
      return &f.value->get_ref<Json::array_t&>().back();
    }
    return f.slot;
  }
  bool Put(Json v) {
    *Target() = std::move(v);
    return true;
  }
  bool Open(Json container) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    Json* target = Target();
    *target = std::move(container);
    stack_.push_back(Frame{target, nullptr, {}});
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  Json* root_;
  std::vector<Frame> stack_;
  bool too_deep_ = false;
  std::string error_;
};

// nlohmann's lexer takes a NUL byte outside a string for the end of the
// input, so '{"prompt": "hi"}\0{...}' parsed as its prefix. A raw NUL is never
// valid JSON text (inside strings it must be escaped as \u0000).
std::optional<ApiError> RefuseNul(std::string_view body) {
  if (body.find('\0') == std::string_view::npos) return std::nullopt;
  return BadRequest("request body is not valid JSON: it contains a NUL byte", "invalid_json");
}

}  // namespace

std::optional<ApiError> ParseJsonBody(std::string_view body, nlohmann::json* out) {
  if (auto err = RefuseNul(body)) return err;
  // nlohmann's parser keeps its own stack, but copying, comparing and
  // converting a value (the chat template's context) recurse once per level:
  // a body of 100k nested brackets (200 KB) overflowed the stack and took the
  // server down. Deeper nesting than any real request needs is refused here.
  bool too_deep = false;
  auto depth_limit = [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;  // false: the parser drops the value instead of building it
  };
  try {
    *out = nlohmann::json::parse(body.begin(), body.end(), depth_limit);
  } catch (const nlohmann::json::exception& e) {
    return BadRequest(std::string("request body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (too_deep) {
    *out = nlohmann::json();
    return TooDeep();
  }
  return std::nullopt;
}

std::optional<ApiError> ParseJsonBody(std::string_view body, nlohmann::ordered_json* out) {
  if (auto err = RefuseNul(body)) return err;
  nlohmann::ordered_json root;
  OrderedBuilder builder(&root);
  bool ok = false;
  try {
    ok = nlohmann::ordered_json::sax_parse(body.begin(), body.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    return BadRequest(std::string("request body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (builder.too_deep()) return TooDeep();
  if (!ok) {
    return BadRequest("request body is not valid JSON: " + builder.error(), "invalid_json");
  }
  *out = std::move(root);
  return std::nullopt;
}

}  // namespace kvfork::server
