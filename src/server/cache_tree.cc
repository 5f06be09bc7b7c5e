#include "server/cache_tree.h"

#include <charconv>

namespace kvfork::server {

using nlohmann::json;

std::optional<ApiError> ParseMaxTreeNodes(const std::string& value, int64_t* max_nodes) {
  if (value.empty()) {
    *max_nodes = kDefaultTreeNodes;
    return std::nullopt;
  }
  int64_t n = -1;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 0 || n > kMaxTreeNodes)
    return InvalidField("max_nodes", "'max_nodes' must be an integer in [0, " +
                                         std::to_string(kMaxTreeNodes) + "], got '" +
                                         value.substr(0, 40) + "'");
  *max_nodes = n;
  return std::nullopt;
}

json CacheTreeJson(const PrefixTreeSnapshot& tree, int64_t max_nodes) {
  // Rows of numbers under named columns: a third of the bytes of objects.
  json rows = json::array();
  for (const PrefixTreeNode& n : tree.nodes) {
    // Where the block's K/V is (prefix_index.h): never neither.
    const char* location = n.in_pool ? (n.on_disk ? "both" : "pool") : "disk";
    rows.push_back(json::array({n.id, n.parent, n.num_tokens, n.refcount, n.last_use, location}));
  }
  return json{{"object", "kv_cache.tree"},
              {"has_tree", tree.has_tree},
              {"block_size", tree.block_size},
              {"blocks",
               {{"total", tree.blocks_total},
                {"used", tree.blocks_used},
                {"cached", tree.blocks_cached},
                {"free", tree.blocks_free}}},
              {"clock", tree.clock},
              {"tenant_salts", tree.num_salts},
              {"nodes_total", tree.num_nodes},
              {"pool_nodes", tree.num_registered},
              {"disk_unplaced", tree.num_hash_only},
              {"max_nodes", max_nodes},
              {"truncated", tree.truncated},
              {"columns", json::array({"id", "parent", "tokens", "refcount", "last_use", "location"})},
              {"nodes", std::move(rows)}};
}

}  // namespace kvfork::server
