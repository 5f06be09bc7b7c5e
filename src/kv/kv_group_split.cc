#include "kv/kv_group_split.h"

#include <algorithm>
#include <string>

#include "core/logging.h"

namespace kvfork {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status ValidateKvGroups(const KvCacheOptions& o) {
  const std::vector<KvGroup>& g = o.groups;
  if (g.size() > static_cast<size_t>(kMaxKvGroups))
    return InvalidArgumentError("KV layer groups: " + std::to_string(g.size()) + " exceed " +
                                std::to_string(kMaxKvGroups));
  int layers = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const KvLayout& l = g[i].layout;
    const std::string name = "KV layer group " + std::to_string(i);
    if ((i == 0) != (g[i].window == 0))
      return InvalidArgumentError(name +
                                  ": the first group is the global one (window 0), "
                                  "the others slide (window > 0)");
    if (l.num_layers < 0 || (i > 0 && l.num_layers == 0))
      return InvalidArgumentError(name + ": no layers");
    if (l.num_kv_heads != o.layout.num_kv_heads || l.head_dim != o.layout.head_dim ||
        l.block_size != o.layout.block_size || l.dtype != o.layout.dtype)
      return InvalidArgumentError(name +
                                  ": heads, head_dim, block size or dtype differ from the "
                                  "cache's layout");
    layers += l.num_layers;
  }
  if (!g.empty() && layers != o.layout.num_layers)
    return InvalidArgumentError("KV layer groups hold " + std::to_string(layers) +
                                " layers, the layout " + std::to_string(o.layout.num_layers));
  return OkStatus();
}

// The pool's share of each layer group (KvCacheOptions::sliding_blocks):
// the sliding groups need about a window per running sequence, so the bytes
// they do not take go to the global group, whose blocks every position of a
// sequence needs.
void SplitKvPool(const KvCacheOptions& o, int64_t num_blocks, int64_t* primary_blocks,
                 std::vector<int64_t>* sliding_blocks) {
  const int64_t bs = o.layout.block_size;
  const KvLayout& global = o.groups[0].layout;
  int64_t bytes_left = num_blocks * static_cast<int64_t>(o.layout.BlockBytes());
  std::string log;
  for (size_t g = 1; g < o.groups.size(); ++g) {
    int64_t n = o.sliding_blocks;
    if (n <= 0) {
      n = global.num_layers == 0
              ? num_blocks
              : std::max(CeilDiv(num_blocks, 2),
                         CeilDiv(o.groups[g].window + o.max_step_tokens, bs) + 2);
    }
    sliding_blocks->push_back(n);
    const int64_t bytes = n * static_cast<int64_t>(o.groups[g].layout.BlockBytes());
    bytes_left -= bytes;
    log += ", window " + std::to_string(o.groups[g].window) + ": " +
           std::to_string(o.groups[g].layout.num_layers) + " layers, " + std::to_string(n) +
           " blocks (" + std::to_string(bytes >> 20) + " MiB)";
  }
  *primary_blocks =
      global.num_layers == 0
          ? 4 * num_blocks
          : std::max(num_blocks, bytes_left / static_cast<int64_t>(global.BlockBytes()));
  KVFORK_LOG(kInfo) << "KV cache layer groups: global: " << global.num_layers << " layers, "
                    << *primary_blocks << " blocks ("
                    << ((*primary_blocks * static_cast<int64_t>(global.BlockBytes())) >> 20)
                    << " MiB)" << log;
}

}  // namespace kvfork
