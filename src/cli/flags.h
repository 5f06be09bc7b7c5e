// A small command-line flag parser shared by the subcommands.
// Accepts `--name value`, `--name=value` and bare boolean `--name`; anything
// not starting with "--" is positional. Getters parse and report the flag by
// name on a bad value; Finish() fails on any flag nobody asked for, so a typo
// is an error, not a silently ignored option.
//
// Usage comes from the getters themselves: each records its flag and default,
// so the list cannot drift from what the command reads. With `--help` (or
// `-h`) the getters return their defaults without parsing, and Finish()
// prints the list to stdout and exits 0. A missing required flag is reported
// by Finish() too, with the list, once every flag has been read.
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
  // Parses argv[1..argc) (argv[0] names the command in the usage);
  // bool_flags lists the flags that take no value.
  static StatusOr<Flags> Parse(int argc, char** argv, const std::set<std::string>& bool_flags);

  bool help_requested() const { return help_; }
  bool Has(const std::string& name);
  bool GetBool(const std::string& name);
  StatusOr<std::string> GetString(const std::string& name, const std::string& default_value);
  // A missing required flag reads as "" here and fails Finish().
  StatusOr<std::string> GetRequiredString(const std::string& name);
  StatusOr<int64_t> GetInt(const std::string& name, int64_t default_value);
  StatusOr<double> GetDouble(const std::string& name, double default_value);
  const std::vector<std::string>& positional() const { return positional_; }

  // With --help: prints Usage() to stdout and exits 0. Otherwise an error
  // naming a missing required flag (with the usage) or every flag given but
  // never read.
  Status Finish() const;
  // "usage: kvfork CMD [flags]" and one line per flag read so far.
  std::string Usage() const;

 private:
  struct Known {
    std::string name;
    std::string default_text;  // "" = none
    bool is_bool = false;
    bool required = false;
  };
  void Record(const std::string& name, std::string default_text, bool is_bool, bool required);

  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
  std::vector<Known> known_;  // in the order first read
  std::vector<std::string> missing_;
};

}  // namespace kvfork::cli
