// GET /v1/cache/tree: the prefix tree of cached KV blocks as JSON, for the
// web page's cache view. Bounded: at most max_nodes blocks (default
// kDefaultTreeNodes, at most kMaxTreeNodes), breadth-first from the roots,
// and the response says when it was cut ("truncated", "nodes_total").
// Token ids and salts never appear; salts only as a count.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kv/prefix_tree.h"
#include "server/api_error.h"

namespace kvfork::server {

// A node row is about 30 bytes of JSON, so the largest answer is ~0.5 MB.
inline constexpr int64_t kDefaultTreeNodes = 4096;
inline constexpr int64_t kMaxTreeNodes = 16384;

// The ?max_nodes= parameter: "" = kDefaultTreeNodes; else an integer in
// [0, kMaxTreeNodes] (the error names max_nodes).
std::optional<ApiError> ParseMaxTreeNodes(const std::string& value, int64_t* max_nodes);

// The response body; docs/server.md describes its fields.
nlohmann::json CacheTreeJson(const PrefixTreeSnapshot& tree, int64_t max_nodes);

}  // namespace kvfork::server
