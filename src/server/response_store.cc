#include "server/response_store.h"

#include <utility>

namespace kvfork::server {
namespace {

// The salt and the id, joined by a byte neither contains.
std::string Key(const std::string& salt, const std::string& id) { return salt + '\n' + id; }

size_t BytesOf(const StoredResponse& r) {
  return r.messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size() +
         r.response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
}

}  // namespace

ResponseStore::ResponseStore(ResponseStoreLimits limits) : limits_(limits) {}

void ResponseStore::Put(const std::string& salt, const std::string& id, StoredResponse response) {
  const std::string key = Key(salt, id);
  const size_t bytes = BytesOf(response);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Entry{key, std::move(response), bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  EvictLocked();
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& salt, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(Key(salt, id));
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponseStore::Delete(const std::string& salt, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(Key(salt, id));
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void ResponseStore::EvictLocked() {
  // The newest entry stays even when it alone is over max_bytes: the
  // follow-up that names it is the next request.
  while (lru_.size() > 1 && (lru_.size() > limits_.max_entries || bytes_ > limits_.max_bytes)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  if (limits_.max_entries == 0 && !lru_.empty()) {
    bytes_ = 0;
    index_.clear();
    lru_.clear();
  }
}

}  // namespace kvfork::server
