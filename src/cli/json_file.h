// A command's `--json PATH` result: the object, indented, and an error that
// names the flag when the file cannot be written.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace kvfork::cli {

inline Status WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return InternalError("--json " + path + ": cannot write");
  return OkStatus();
}

}  // namespace kvfork::cli
