// A fresh directory under /tmp, removed with everything in it at
// destruction: the tests' scratch space.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "core/status.h"

namespace kvfork::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/kvfork-test-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    KVFORK_CHECK(p != nullptr);
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvfork::testing
