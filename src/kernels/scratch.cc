#include "kernels/scratch.h"

#include <cstdlib>

#include "core/status.h"

namespace kvfork {
namespace {

struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~Buffer() { std::free(data); }
};

}  // namespace

void* ThreadScratch(ScratchSlot slot, size_t bytes) {
  thread_local Buffer bufs[kNumScratchSlots];
  Buffer& buf = bufs[slot];
  if (bytes > buf.bytes) {
    std::free(buf.data);
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    buf.data = std::aligned_alloc(64, rounded);
    KVFORK_CHECK_MSG(buf.data != nullptr, "out of memory for kernel scratch");
    buf.bytes = rounded;
  }
  return buf.data;
}

}  // namespace kvfork
