#include "cli/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace kvfork::cli {

StatusOr<Flags> Flags::Parse(int argc, char** argv, const std::set<std::string>& bool_flags) {
  Flags f;
  if (argc > 0 && argv[0] != nullptr) f.command_ = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      // Kept as a flag too, for commands that print their own usage.
      f.help_ = true;
      f.values_["help"] = "true";
      f.used_.insert("help");
      continue;
    }
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

void Flags::Record(const std::string& name, std::string default_text, bool is_bool, bool required) {
  for (Known& k : known_) {
    if (k.name != name) continue;
    if (k.default_text.empty()) k.default_text = std::move(default_text);
    k.is_bool = k.is_bool || is_bool;
    return;
  }
  known_.push_back(Known{name, std::move(default_text), is_bool, required});
}

bool Flags::Has(const std::string& name) {
  Record(name, "", false, false);
  return !help_ && values_.count(name) > 0;
}

bool Flags::GetBool(const std::string& name) {
  Record(name, "", true, false);
  auto it = values_.find(name);
  if (it == values_.end()) return false;
  used_.insert(name);
  return it->second == "true" || it->second == "1" || it->second == "on" || it->second == "yes";
}

StatusOr<std::string> Flags::GetString(const std::string& name, const std::string& default_value) {
  Record(name, default_value.empty() ? "\"\"" : default_value, false, false);
  auto it = values_.find(name);
  if (help_ || it == values_.end()) return default_value;
  used_.insert(name);
  return it->second;
}

StatusOr<std::string> Flags::GetRequiredString(const std::string& name) {
  Record(name, "", false, true);
  auto it = values_.find(name);
  if (help_) return std::string();
  if (it == values_.end()) {
    missing_.push_back(name);
    return std::string();
  }
  used_.insert(name);
  return it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t default_value) {
  Record(name, std::to_string(default_value), false, false);
  auto it = values_.find(name);
  if (help_ || it == values_.end()) return default_value;
  used_.insert(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    return InvalidArgumentError("flag --" + name + ": '" + it->second + "' is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<double> Flags::GetDouble(const std::string& name, double default_value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", default_value);
  Record(name, text, false, false);
  auto it = values_.find(name);
  if (help_ || it == values_.end()) return default_value;
  used_.insert(name);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    return InvalidArgumentError("flag --" + name + ": '" + it->second + "' is not a number");
  return v;
}

std::string Flags::Usage() const {
  std::string out = "usage: kvfork " + (command_.empty() ? std::string("<command>") : command_);
  for (const Known& k : known_)
    if (k.required) out += " --" + k.name + " VALUE";
  out += " [flags]\n\nflags:\n";
  for (const Known& k : known_) {
    std::string line = "  --" + k.name;
    if (k.required) {
      line += "  (required)";
    } else if (k.is_bool) {
      line += "  (switch, off by default)";
    } else if (!k.default_text.empty()) {
      line += "  (default " + k.default_text + ")";
    }
    out += line + "\n";
  }
  out += "  --help  print this list and exit\n";
  return out;
}

Status Flags::Finish() const {
  if (help_) {
    std::fputs(Usage().c_str(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  if (!missing_.empty())
    return InvalidArgumentError("missing required flag --" + missing_.front() + "\n\n" + Usage());
  std::string unknown;
  for (const auto& [name, value] : values_)
    if (!used_.count(name)) unknown += (unknown.empty() ? "--" : ", --") + name;
  if (!unknown.empty()) return InvalidArgumentError("unknown flag(s): " + unknown);
  return OkStatus();
}

}  // namespace kvfork::cli
