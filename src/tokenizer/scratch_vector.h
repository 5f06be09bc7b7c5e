// The encoder's thread-local scratch vectors (regex matches, pre-token
// pieces, BPE symbols and candidates) keep their capacity between calls, so
// encoding a usual prompt allocates nothing for them. One large text must not
// pin its peak for the life of the thread (an HTTP server has hundreds), so
// after each use a vector holding more than kScratchKeepBytes is released.
#pragma once

#include <cstddef>
#include <vector>

namespace kvfork {

// 4 KiB is about 250 pre-tokens (1 KB of text) per vector: short prompts
// reuse their buffers; a longer one pays a few allocations, which cost far
// less than tokenizing it. Kept per thread: at most 5 vectors, 20 KiB; over
// the 288 HTTP threads of a default server, under 6 MiB. With 16 KiB a soak
// ended with 3.4 MB of them alive (heaptrack, docs/reliability.md).
inline constexpr size_t kScratchKeepBytes = 4 << 10;

template <typename T>
void ReleaseLargeScratch(std::vector<T>* v) {
  if (v->capacity() * sizeof(T) > kScratchKeepBytes) std::vector<T>().swap(*v);
}

}  // namespace kvfork
