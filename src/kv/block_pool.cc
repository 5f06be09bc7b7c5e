#include "kv/block_pool.h"

#include <sys/mman.h>

#include <cstring>
#include <string>

namespace kvfork {

StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(const KvLayout& layout, int64_t num_blocks) {
  if (num_blocks <= 0) {
    return InvalidArgumentError("KV pool needs at least one block, got " +
                                std::to_string(num_blocks));
  }
  if (num_blocks > INT32_MAX) {
    return InvalidArgumentError("KV pool of " + std::to_string(num_blocks) +
                                " blocks exceeds the 2^31 block id range");
  }
  size_t map_bytes = static_cast<size_t>(num_blocks) * layout.BlockBytes();
  // A layer group without layers (the global group of a model whose every
  // layer slides) has blocks of 0 bytes: identity only, nothing to map.
  if (map_bytes == 0)
    return std::unique_ptr<BlockPool>(new BlockPool(layout, num_blocks, nullptr, 0));
  // MAP_NORESERVE: the pool is reserved address space; the kernel backs a
  // page only when a block is first written, so an idle pool costs nothing.
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhaustedError("cannot map a KV pool of " + std::to_string(num_blocks) +
                                  " blocks (" + std::to_string(map_bytes >> 20) +
                                  " MiB): " + std::strerror(errno));
  }
  // Transparent huge pages where the kernel allows them (THP "madvise" or
  // "always"): a block is written or read in 2 MiB pages instead of 4 KiB
  // ones. Filling a fresh block otherwise faults once per 4 KiB, which on a
  // VM whose faults exit to the hypervisor (a PVM guest) cost ~8 us each:
  // reading a 1.8 MB bf16 block from the disk tier took 2.5 ms a block wall
  // on 4 KiB pages and 0.2-1.0 ms on huge pages (bench/disk/
  // disk_read_profile.cc, docs/kv_cache.md). The pool fills from its start,
  // so backing in 2 MiB steps costs at most one partly used page. Advice
  // only: with THP off, or where it fails, the pool works on 4 KiB pages.
  (void)madvise(p, map_bytes, MADV_HUGEPAGE);
  return std::unique_ptr<BlockPool>(
      new BlockPool(layout, num_blocks, static_cast<uint8_t*>(p), map_bytes));
}

BlockPool::BlockPool(const KvLayout& layout, int64_t num_blocks, uint8_t* base, size_t map_bytes)
    : layout_(layout),
      num_blocks_(num_blocks),
      block_bytes_(layout.BlockBytes()),
      base_(base),
      map_bytes_(map_bytes),
      is_free_(num_blocks, 1),
      refcount_(num_blocks, 0),
      ticks_(num_blocks, 0) {
  free_list_.reserve(num_blocks);
  // Low ids on top, so a fresh pool fills from the start of the mapping.
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(static_cast<BlockId>(i));
}

BlockPool::~BlockPool() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

BlockId BlockPool::Allocate() {
  KVFORK_CHECK_MSG(!free_list_.empty(), "BlockPool::Allocate on an empty free list");
  BlockId id = free_list_.back();
  free_list_.pop_back();
  KVFORK_CHECK(is_free_[id] && refcount_[id] == 0);
  is_free_[id] = 0;
  refcount_[id] = 1;
  Touch(id);
  return id;
}

void BlockPool::Free(BlockId id) {
  KVFORK_CHECK_MSG(!is_free_[id] && refcount_[id] == 0,
                   "freeing block " + std::to_string(id) + " that is free or referenced");
  is_free_[id] = 1;
  free_list_.push_back(id);
}

int32_t BlockPool::DecRef(BlockId id) {
  KVFORK_CHECK_MSG(refcount_[id] > 0, "DecRef of unreferenced block " + std::to_string(id));
  return --refcount_[id];
}

Status BlockPool::CheckFreeList() const {
  std::vector<uint8_t> seen(num_blocks_, 0);
  for (BlockId id : free_list_) {
    if (id < 0 || id >= num_blocks_ || seen[id] || !is_free_[id] || refcount_[id] != 0)
      return InternalError("free list entry " + std::to_string(id) + " is stale or duplicated");
    seen[id] = 1;
  }
  for (int64_t i = 0; i < num_blocks_; ++i) {
    if (is_free_[i] && !seen[i])
      return InternalError("block " + std::to_string(i) + " is marked free but not on the list");
  }
  return OkStatus();
}

void CopyBlockTokens(const KvLayout& layout, const uint8_t* src, uint8_t* dst, int start, int n) {
  if (n <= 0) return;
  const size_t row = layout.RowBytes();
  const size_t scale_row = layout.RowScaleBytes();  // q4's scales follow the plane's codes
  for (int l = 0; l < layout.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int h = 0; h < layout.num_kv_heads; ++h) {
        size_t off = layout.PlaneOffset(l, kv, h) + static_cast<size_t>(start) * row;
        std::memcpy(dst + off, src + off, static_cast<size_t>(n) * row);
        if (scale_row > 0) {
          size_t soff = layout.Q4ScaleOffset(l, kv, h) + static_cast<size_t>(start) * scale_row;
          std::memcpy(dst + soff, src + soff, static_cast<size_t>(n) * scale_row);
        }
        if (layout.dtype == KvDType::kInt8) {
          size_t soff = layout.ScaleOffset(l, kv, h) + static_cast<size_t>(start) * sizeof(float);
          std::memcpy(dst + soff, src + soff, static_cast<size_t>(n) * sizeof(float));
        }
      }
    }
  }
}

}  // namespace kvfork
