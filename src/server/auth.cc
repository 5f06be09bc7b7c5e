#include "server/auth.h"

#include <cstdint>
#include <cstdio>
#include <random>

namespace kvfork::server {
namespace {

// FNV-1a, 64-bit: enough to keep salts distinct; secrecy comes from the
// random per-process secret mixed in, not from the hash.
uint64_t Fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char bc = b.empty() ? 0 : static_cast<unsigned char>(b[i % b.size()]);
    diff |= static_cast<unsigned char>(a[i]) ^ bc;
  }
  return diff == 0;
}

ApiKeys::ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {
  std::random_device rd;
  const std::string secret = std::to_string(rd()) + ":" + std::to_string(rd());
  for (const std::string& k : keys_) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "key-%016llx",
                  static_cast<unsigned long long>(Fnv1a(k, Fnv1a(secret))));
    salts_.push_back(buf);
  }
}

bool ApiKeys::Check(const std::string& authorization, size_t* key_index) const {
  static const std::string kPrefix = "Bearer ";
  if (authorization.size() <= kPrefix.size() ||
      authorization.compare(0, kPrefix.size(), kPrefix) != 0)
    return false;
  const std::string given = authorization.substr(kPrefix.size());
  bool found = false;
  for (size_t i = 0; i < keys_.size(); ++i) {
    // No early exit: the time does not tell which key (if any) matched.
    bool eq = ConstantTimeEquals(given, keys_[i]);
    if (eq && !found) *key_index = i;
    found = found || eq;
  }
  return found;
}

const std::string& ApiKeys::SaltFor(size_t key_index) const {
  static const std::string kNone;
  return key_index < salts_.size() ? salts_[key_index] : kNone;
}

std::vector<std::string> SplitKeys(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    std::string k = value.substr(start, comma - start);
    if (!k.empty()) out.push_back(k);
    start = comma + 1;
  }
  return out;
}

}  // namespace kvfork::server
