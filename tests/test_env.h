// Paths the tests find through the environment ctest sets (tests/CMakeLists.txt).
#pragma once

#include <cstdlib>
#include <string>

namespace kvfork::testing {

// True in the asan and tsan builds. The sanitizer tiers run each code path
// once rather than once per weight format: the quantized kernels are checked
// under ASan by kernels_quant_test, so the model-tier tests that repeat a whole
// engine run per format or architecture (engine_test, llamacpp_parity_test)
// keep only a few float cases there, which holds `make test` under its time
// budget (docs/testing.md, "Sanitizers").
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVFORK_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVFORK_TEST_SANITIZED 1
#endif
#ifdef KVFORK_TEST_SANITIZED
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

inline std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}
inline std::string SourceDir() { return EnvOr("KVFORK_SOURCE_DIR", "."); }
inline std::string CacheDir() { return EnvOr("KVFORK_CACHE_DIR", ".cache"); }
inline std::string KvforkBin() { return EnvOr("KVFORK_BIN", "kvfork"); }
inline std::string BuildDir() { return EnvOr("KVFORK_BUILD_DIR", "."); }
inline std::string QwenTokenizerDir() { return CacheDir() + "/npm/tokenizer-qwen3/package/models"; }
inline std::string LlamaTokenizerDir() { return CacheDir() + "/npm/tokenizer-llama3/package/models"; }
inline std::string LlamaCppSourceDir() { return CacheDir() + "/llama.cpp"; }
inline std::string NodeToolsDir() { return SourceDir() + "/tools/node"; }

}  // namespace kvfork::testing
