#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/status.h"
#include "fuzz/fuzz_targets.h"

namespace kvfork::fuzz {

std::vector<std::string> SplitParts(std::string_view input) {
  std::vector<std::string> parts;
  for (;;) {
    size_t at = input.find(kFilePartSeparator);
    if (at == std::string_view::npos) break;
    parts.emplace_back(input.substr(0, at));
    input.remove_prefix(at + kFilePartSeparator.size());
  }
  parts.emplace_back(input);
  return parts;
}

const std::string& ScratchDir() {
  // Never freed, so the atexit cleanup can still read it after static
  // destructors have run.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                              "/kvfork-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return d;
  }();
  return *dir;
}

std::string WriteScratchFile(const std::string& name, std::string_view bytes) {
  std::string path = ScratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  KVFORK_CHECK_MSG(out.good(), "cannot write " + path);
  return path;
}

void RemoveScratchFile(const std::string& name) { std::remove((ScratchDir() + "/" + name).c_str()); }

}  // namespace kvfork::fuzz
