// libFuzzer entry point of one target: compiled once per target with
// KVFORK_FUZZ_TARGET naming its function (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_targets.h"

// One empty input first: the targets load what they share (the real
// tokenizers, a tiny model and engine) on their first call, which must not
// count against libFuzzer's per-input timeout.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  kvfork::fuzz::KVFORK_FUZZ_TARGET(std::string_view());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvfork::fuzz::KVFORK_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
