// API-key checks for /v1/*: constant-time comparison against every key, and
// the per-key cache salt that keeps tenants' prefixes apart.
//
// Immutable after construction; safe from any thread.
#pragma once

#include <string>
#include <vector>

namespace kvfork::server {

class ApiKeys {
 public:
  // keys: the accepted keys (empty = no auth). A per-process random secret
  // goes into every salt, so salts are not guessable from keys.
  explicit ApiKeys(std::vector<std::string> keys);

  bool enabled() const { return !keys_.empty(); }
  // Checks an Authorization header value ("Bearer KEY"). On success *key_index
  // is the matching key. Every key is compared in full, whatever matches.
  bool Check(const std::string& authorization, size_t* key_index) const;
  // The cache salt of key i ("" when auth is off). Requests' own cache_salt
  // is appended to it, so no tenant can name another tenant's salt.
  const std::string& SaltFor(size_t key_index) const;

 private:
  std::vector<std::string> keys_;
  std::vector<std::string> salts_;
};

// True iff a == b, in time that depends only on the lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// Splits "k1,k2" (the --api-key / KVFORK_API_KEY value) into keys.
std::vector<std::string> SplitKeys(const std::string& value);

}  // namespace kvfork::server
