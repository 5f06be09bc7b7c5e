// A command's `--json PATH` result: the object, indented, in PATH (its
// parent directories made as needed), and an error that names the flag when
// the file cannot be written.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace kvfork::cli {

inline Status WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  if (!out) return InternalError("--json " + path + ": cannot write");
  return OkStatus();
}

}  // namespace kvfork::cli
