// Per-thread scratch memory for kernels (packed X panels, task tables).
// Thread affinity: the buffer belongs to the calling thread; a kernel may use
// it only for the duration of one call, and only from the thread that asked
// (workers of a ParallelFor may read what the caller wrote before the call).
// Cost: grows by reallocation (contents lost) and never shrinks.
#pragma once

#include <cstddef>

namespace kvfork {

// Independent buffers per thread, so a caller's X panel (slot 0) survives
// while the same thread, running tasks of a ParallelFor, uses slot 1. Slot 2
// is ops.cc's, around an ISA call that uses the other two (q4r attention's
// rotated queries).
enum ScratchSlot {
  kScratchCaller = 0,
  kScratchTask = 1,
  kScratchDispatch = 2,
  kNumScratchSlots = 3
};

// At least `bytes` bytes, 64-byte aligned, valid until the next call with the
// same slot on this thread.
void* ThreadScratch(ScratchSlot slot, size_t bytes);

}  // namespace kvfork
