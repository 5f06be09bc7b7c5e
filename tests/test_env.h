// Paths the tests find through the environment ctest sets (tests/CMakeLists.txt).
#pragma once

#include <cstdlib>
#include <string>

namespace kvfork::testing {

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
