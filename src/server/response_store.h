// Stored /v1/responses results (store: true), so that a request naming
// previous_response_id continues that conversation: each entry keeps the
// chat messages the response ended with (its input and its output, without
// the instructions, which OpenAI does not carry over) and the response
// object (GET /v1/responses/{id}).
//
// In memory only, bounded: at most max_entries responses and max_bytes of
// their JSON text; past either bound the least recently used entries are
// dropped (a later previous_response_id to them is a 404). Entries are
// scoped by the API key's cache salt: one tenant cannot read or continue
// another's responses. Thread-safe (HTTP workers share it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace kvfork::server {

struct StoredResponse {
  nlohmann::ordered_json messages;  // chat messages: input + the response's output
  nlohmann::json response;          // the response object as answered
};

struct ResponseStoreLimits {
  size_t max_entries = 1024;        // --responses-store-max-entries
  size_t max_bytes = 256ull << 20;  // --responses-store-max-mib (256 MiB)
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits = {});

  // Stores (or replaces) id under the tenant salt, then evicts past the bounds.
  void Put(const std::string& salt, const std::string& id, StoredResponse response);
  // A copy of the entry, marked most recently used; nullopt if absent.
  std::optional<StoredResponse> Get(const std::string& salt, const std::string& id);
  bool Delete(const std::string& salt, const std::string& id);

  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string key;
    StoredResponse value;
    size_t bytes = 0;
  };
  void EvictLocked();

  ResponseStoreLimits limits_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace kvfork::server
