#include "server/http_message.h"

#include <strings.h>

namespace kvfork::server {
namespace {
const std::string kEmpty;
}  // namespace

const std::string& HttpRequest::Header(const std::string& name) const {
  for (const auto& [n, v] : headers)
    if (strcasecmp(n.c_str(), name.c_str()) == 0) return v;
  return kEmpty;
}

bool HttpRequest::HasHeader(const std::string& name) const {
  for (const auto& h : headers)
    if (strcasecmp(h.first.c_str(), name.c_str()) == 0) return true;
  return false;
}

std::string HttpRequest::Param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? "" : it->second;
}

void HttpResponse::SetHeader(const std::string& name, const std::string& value) {
  for (auto& h : headers) {
    if (strcasecmp(h.first.c_str(), name.c_str()) == 0) {
      h.second = value;
      return;
    }
  }
  headers.emplace_back(name, value);
}

const std::string* HttpResponse::FindHeader(const std::string& name) const {
  for (const auto& h : headers)
    if (strcasecmp(h.first.c_str(), name.c_str()) == 0) return &h.second;
  return nullptr;
}

}  // namespace kvfork::server
