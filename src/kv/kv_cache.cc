#include "kv/kv_cache.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "core/logging.h"
#include "kv/dense_kv_cache.h"
#include "kv/paged_kv_cache.h"

namespace kvfork {

const char* KvBackendName(KvBackend backend) {
  return backend == KvBackend::kPaged ? "paged" : "dense";
}

StatusOr<KvBackend> ParseKvBackend(std::string_view name, int64_t max_num_seqs) {
  if (name == "paged") return KvBackend::kPaged;
  if (name == "dense") return KvBackend::kDense;
  if (name == "auto") return max_num_seqs > 1 ? KvBackend::kPaged : KvBackend::kDense;
  return InvalidArgumentError("--kv-backend: expected auto, paged or dense, got '" +
                              std::string(name) + "'");
}

StatusOr<KvDType> ParseKvDType(std::string_view name) {
  if (name == "bf16") return KvDType::kBf16;
  if (name == "f32") return KvDType::kF32;
  if (name == "int8") return KvDType::kInt8;
  if (name == "q4") return KvDType::kQ4;
  if (name == "q4r") return KvDType::kQ4r;
  return InvalidArgumentError("--kv-dtype: expected bf16, f32, int8, q4 or q4r, got '" +
                              std::string(name) + "'");
}

StatusOr<bool> ParseOnOff(std::string_view flag, std::string_view value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return InvalidArgumentError(std::string(flag) + ": expected on or off, got '" +
                              std::string(value) + "'");
}

Status ValidateKvLayout(const KvLayout& layout) {
  if (layout.num_layers <= 0) return InvalidArgumentError("KV layout: num_layers must be > 0");
  if (layout.num_kv_heads <= 0) return InvalidArgumentError("KV layout: num_kv_heads must be > 0");
  if (layout.head_dim <= 0) return InvalidArgumentError("KV layout: head_dim must be > 0");
  if (IsQ4(layout.dtype) && layout.head_dim % kQ4Group != 0) {
    return InvalidArgumentError(std::string("--kv-dtype ") + KvDTypeName(layout.dtype) +
                                ": needs the model's head_dim to be a multiple of 32 (one scale "
                                "per 32 values), got " + std::to_string(layout.head_dim));
  }
  if (layout.block_size <= 0 || layout.block_size > 4096) {
    return InvalidArgumentError("--kv-block-size: must be in [1, 4096], got " +
                                std::to_string(layout.block_size));
  }
  return OkStatus();
}

PrefixTreeSnapshot KvCache::SnapshotPrefixTree(int64_t /*max_nodes*/) const {
  const KvCacheStats st = Stats();
  PrefixTreeSnapshot t;
  t.block_size = layout().block_size;
  t.blocks_total = st.blocks_total;
  t.blocks_free = st.blocks_free;
  t.blocks_used = st.blocks_used;
  t.blocks_cached = st.blocks_cached;
  return t;
}

int64_t DefaultKvCacheBytes() {
  int64_t available_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream(line.substr(13)) >> available_kib;
      break;
    }
  }
  const int64_t min_bytes = int64_t{64} << 20;
  const int64_t max_bytes = int64_t{16} << 30;
  // A quarter leaves room for the weights (mmap'd, page cache) and the rest
  // of the system; the pool is touched lazily, so an oversized one is cheap.
  return std::clamp(available_kib * 1024 / 4, min_bytes, max_bytes);
}

StatusOr<int64_t> ResolveNumBlocks(const KvCacheOptions& options) {
  const int64_t block_bytes = static_cast<int64_t>(options.layout.BlockBytes());
  if (options.num_blocks < 0)
    return InvalidArgumentError("--kv-blocks: must be > 0, got " +
                                std::to_string(options.num_blocks));
  if (options.num_blocks > 0) return options.num_blocks;
  if (options.cache_mib < 0)
    return InvalidArgumentError("--kv-cache-mib: must be > 0, got " +
                                std::to_string(options.cache_mib));
  int64_t bytes = options.cache_mib > 0 ? options.cache_mib << 20 : DefaultKvCacheBytes();
  int64_t blocks = bytes / block_bytes;
  if (blocks <= 0) {
    return InvalidArgumentError("--kv-cache-mib: " + std::to_string(bytes >> 20) +
                                " MiB holds no block of " + std::to_string(block_bytes) + " bytes");
  }
  if (options.cache_mib == 0) {
    // Past 64 full contexts more blocks only cost start-up time (per-block
    // metadata) for small models, whose blocks are tiny.
    const char* why = "a quarter of available memory";
    if (options.max_context > 0) {
      const int64_t cap = 64 * ((options.max_context + options.layout.block_size - 1) /
                                options.layout.block_size);
      if (blocks > cap) {
        blocks = cap;
        why = "64 full contexts";
      }
    }
    KVFORK_LOG(kInfo) << "KV cache: " << ((blocks * block_bytes) >> 20) << " MiB (" << why
                      << "), " << blocks << " blocks of " << block_bytes << " bytes";
  }
  return blocks;
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(KvBackend backend,
                                                   const KvCacheOptions& options) {
  if (backend == KvBackend::kPaged) {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvCache> c, PagedKvCache::Create(options));
    return std::unique_ptr<KvCache>(std::move(c));
  }
  if (!options.disk_dir.empty())
    return InvalidArgumentError("--kv-disk-dir needs the paged KV backend (--kv-backend paged)");
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<DenseKvCache> c, DenseKvCache::Create(options));
  return std::unique_ptr<KvCache>(std::move(c));
}

}  // namespace kvfork
