// The encoder's thread-local scratch vectors (regex matches, pre-token
// pieces, BPE symbols and candidates) keep their capacity between calls, so
// encoding a usual prompt allocates nothing for them. One large text must not
// pin its peak for the life of the thread (an HTTP server has hundreds), so
// after each use a vector holding more than kScratchKeepBytes is released.
#pragma once

#include <cstddef>
#include <vector>

namespace kvfork {

// 16 KiB is about 1,000 pre-tokens (4 KB of text) per vector: prompts up to
// that size reuse their buffers; a larger one pays a few reallocations, which
// cost far less than tokenizing it. Worst case kept per thread: about 80 KiB.
inline constexpr size_t kScratchKeepBytes = 16 << 10;

template <typename T>
void ReleaseLargeScratch(std::vector<T>* v) {
  if (v->capacity() * sizeof(T) > kScratchKeepBytes) std::vector<T>().swap(*v);
}

}  // namespace kvfork
