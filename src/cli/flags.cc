#include "cli/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace kvfork::cli {
namespace {

// Edits (insert, delete, substitute) between two flag names.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

Flags Flags::Parse(int argc, char** argv, const std::set<std::string>& bool_flags) {
  Flags f;
  if (argc > 0 && argv[0] != nullptr) f.command_ = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      f.help_ = true;
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
    } else if (i + 1 >= argc) {
      f.without_value_.push_back(name);
      continue;
    } else {
      value = argv[++i];
    }
    f.values_[name] = value;
  }
  return f;
}

void Flags::Record(Known known) {
  for (const Known& k : known_)
    if (k.name == known.name) return;  // read twice: the first reading describes it
  known_.push_back(std::move(known));
}

const std::string* Flags::Take(const std::string& name) {
  auto it = values_.find(name);
  if (help_ || it == values_.end()) return nullptr;
  used_.insert(name);
  return &it->second;
}

void Flags::DescribePositional(const std::string& synopsis, const std::string& description) {
  positional_synopsis_ = synopsis;
  positional_description_ = description;
}

bool Flags::GetBool(const std::string& name, const std::string& description) {
  Record({name, "", "", description, false});
  const std::string* v = Take(name);
  if (v == nullptr) return false;
  if (*v == "true" || *v == "1" || *v == "on" || *v == "yes") return true;
  if (*v == "false" || *v == "0" || *v == "off" || *v == "no") return false;
  errors_.push_back("flag --" + name + ": '" + *v + "' is not true/false (it is a switch)");
  return false;
}

std::string Flags::GetString(const std::string& name, const std::string& default_value,
                             const std::string& description) {
  // An empty default shows nothing: the description says what no value means.
  Record({name, "VALUE", default_value, description, false});
  const std::string* v = Take(name);
  return v == nullptr ? default_value : *v;
}

std::string Flags::GetRequiredString(const std::string& name, const std::string& description) {
  Record({name, "VALUE", "", description, true});
  const std::string* v = Take(name);
  if (v != nullptr) return *v;
  if (!help_) errors_.push_back("missing required flag --" + name);
  return std::string();
}

int64_t Flags::GetInt(const std::string& name, int64_t default_value,
                      const std::string& description) {
  Record({name, "N", std::to_string(default_value), description, false});
  const std::string* v = Take(name);
  if (v == nullptr) return default_value;
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0') {
    errors_.push_back("flag --" + name + ": '" + *v + "' is not an integer");
    return default_value;
  }
  return static_cast<int64_t>(parsed);
}

double Flags::GetDouble(const std::string& name, double default_value,
                        const std::string& description) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", default_value);
  Record({name, "X", text, description, false});
  const std::string* v = Take(name);
  if (v == nullptr) return default_value;
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(v->c_str(), &end);
  if (errno != 0 || end == v->c_str() || *end != '\0') {
    errors_.push_back("flag --" + name + ": '" + *v + "' is not a number");
    return default_value;
  }
  return parsed;
}

std::string Flags::Usage() const {
  std::string out = "usage: kvfork " + (command_.empty() ? std::string("<command>") : command_);
  for (const Known& k : known_)
    if (k.required) out += " --" + k.name + " " + k.placeholder;
  out += " [flags]";
  if (!positional_synopsis_.empty()) out += " " + positional_synopsis_;
  out += "\n";
  if (!positional_description_.empty())
    out += "  " + positional_synopsis_ + ": " + positional_description_ + "\n";
  out += "\nflags:\n";
  // Descriptions start in one column, so the list reads as a table.
  size_t width = std::string("--help").size();
  std::vector<std::string> heads;
  for (const Known& k : known_) {
    heads.push_back("--" + k.name + (k.placeholder.empty() ? "" : " " + k.placeholder));
    width = std::max(width, heads.back().size());
  }
  auto line = [&](const std::string& head, const std::string& text) {
    return "  " + head + std::string(width + 2 - head.size(), ' ') + text + "\n";
  };
  for (size_t i = 0; i < known_.size(); ++i) {
    const Known& k = known_[i];
    std::string text = k.description;
    if (k.required) {
      text += " (required)";
    } else if (!k.default_text.empty()) {
      text += " (default " + k.default_text + ")";
    }
    out += line(heads[i], text);
  }
  out += line("--help", "print this list and exit");
  return out;
}

Status Flags::Finish() const {
  if (help_) {
    std::fputs(Usage().c_str(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  std::vector<std::string> errors = errors_;
  std::vector<std::string> unread;
  for (const auto& [name, value] : values_)
    if (!used_.count(name)) unread.push_back(name);
  for (const std::string& name : without_value_) {
    const bool known =
        std::any_of(known_.begin(), known_.end(), [&](const Known& k) { return k.name == name; });
    if (known) {
      errors.insert(errors.begin(), "flag --" + name + " needs a value");
    } else {
      unread.push_back(name);
    }
  }
  if (!errors.empty()) return InvalidArgumentError(errors.front() + "\n\n" + Usage());
  std::string unknown;
  for (const std::string& name : unread) {
    unknown += (unknown.empty() ? "--" : ", --") + name;
    // A typo is the likely cause: name the closest flag the command reads.
    const Known* closest = nullptr;
    size_t best = 3;  // farther than 2 edits is another word, not a typo
    for (const Known& k : known_) {
      const size_t d = EditDistance(name, k.name);
      if (d < best) {
        best = d;
        closest = &k;
      }
    }
    if (closest != nullptr) unknown += " (did you mean --" + closest->name + "?)";
  }
  if (!unknown.empty()) return InvalidArgumentError("unknown flag " + unknown + "\n\n" + Usage());
  return OkStatus();
}

}  // namespace kvfork::cli
