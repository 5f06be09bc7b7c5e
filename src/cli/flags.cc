#include "cli/flags.h"

#include <cerrno>
#include <cstdlib>

namespace kvfork::cli {

StatusOr<Flags> Flags::Parse(int argc, char** argv, const std::set<std::string>& bool_flags) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      f.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (bool_flags.count(name)) {
      value = "true";
    } else {
      if (i + 1 >= argc) return InvalidArgumentError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    f.values_[name] = value;
  }
  return f;
}

bool Flags::Has(const std::string& name) { return values_.count(name) > 0; }

bool Flags::GetBool(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return false;
  used_.insert(name);
  return it->second == "true" || it->second == "1" || it->second == "on" || it->second == "yes";
}

StatusOr<std::string> Flags::GetString(const std::string& name, const std::string& default_value) {
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  used_.insert(name);
  return it->second;
}

StatusOr<std::string> Flags::GetRequiredString(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return InvalidArgumentError("missing required flag --" + name);
  used_.insert(name);
  return it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t default_value) {
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  used_.insert(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    return InvalidArgumentError("flag --" + name + ": '" + it->second + "' is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<double> Flags::GetDouble(const std::string& name, double default_value) {
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  used_.insert(name);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    return InvalidArgumentError("flag --" + name + ": '" + it->second + "' is not a number");
  return v;
}

Status Flags::Finish() const {
  std::string unknown;
  for (const auto& [name, value] : values_)
    if (!used_.count(name)) unknown += (unknown.empty() ? "--" : ", --") + name;
  if (!unknown.empty()) return InvalidArgumentError("unknown flag(s): " + unknown);
  return OkStatus();
}

}  // namespace kvfork::cli
