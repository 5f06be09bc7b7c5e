// A byte range [begin, end) of a text.
#pragma once

#include <cstddef>

namespace kvfork {

struct TextRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const TextRange&) const = default;
};

}  // namespace kvfork
