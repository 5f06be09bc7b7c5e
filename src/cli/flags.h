// A small command-line flag parser shared by the subcommands.
// Accepts `--name value`, `--name=value` and bare boolean `--name`; anything
// not starting with "--" is positional. Getters parse and report the flag by
// name on a bad value; Finish() fails on any flag nobody asked for, so a typo
// is an error, not a silently ignored option.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvfork::cli {

class Flags {
 public:
  // Parses argv[1..argc); bool_flags lists the flags that take no value.
  static StatusOr<Flags> Parse(int argc, char** argv, const std::set<std::string>& bool_flags);

  bool Has(const std::string& name);
  bool GetBool(const std::string& name);
  StatusOr<std::string> GetString(const std::string& name, const std::string& default_value);
  StatusOr<std::string> GetRequiredString(const std::string& name);
  StatusOr<int64_t> GetInt(const std::string& name, int64_t default_value);
  StatusOr<double> GetDouble(const std::string& name, double default_value);
  const std::vector<std::string>& positional() const { return positional_; }

  // Error naming every flag given but never read.
  Status Finish() const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
};

}  // namespace kvfork::cli
