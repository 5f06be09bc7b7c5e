// A small command-line flag parser shared by the subcommands.
// Accepts `--name value`, `--name=value` and bare boolean `--name`; anything
// not starting with "--" is positional.
//
// Each getter names its flag, its default and a one-line description, and
// records them: the usage is built from the getters themselves, so the list
// cannot drift from what the command reads. Getters never fail: a value that
// does not parse is recorded and the default returned, so that every getter
// still runs and the usage printed with the error is complete. Use the values
// only once Finish() has returned OK.
//
// Finish() with `--help` / `-h` prints the usage to stdout and exits 0.
// Otherwise it returns the first error (a flag without a value, a value that
// does not parse, a missing required flag, a flag nobody read, such as a
// typo) followed by the usage, which every command prints to stderr.
//
// Why not CLI11: docs/cli.md.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvfork::cli {

class Flags {
 public:
  // Parses argv[1..argc) (argv[0] names the command in the usage, e.g.
  // "bench kernels"); bool_flags lists the flags that take no value. Never
  // fails: a trailing flag without its value is reported by Finish().
  static Flags Parse(int argc, char** argv, const std::set<std::string>& bool_flags);

  bool help_requested() const { return help_; }
  // A switch: false unless given (`--name`, or `--name=true|1|on|yes`).
  bool GetBool(const std::string& name, const std::string& description);
  // An empty default_value is not shown: end the description with what no
  // value means, "(none: the model's own)" (tests/cli/cli_help_test.py checks).
  std::string GetString(const std::string& name, const std::string& default_value,
                        const std::string& description);
  // A missing required flag reads as "" here and fails Finish().
  std::string GetRequiredString(const std::string& name, const std::string& description);
  int64_t GetInt(const std::string& name, int64_t default_value, const std::string& description);
  double GetDouble(const std::string& name, double default_value, const std::string& description);
  const std::vector<std::string>& positional() const { return positional_; }
  // One line after the flag list, for positional arguments ("TEXT...  the
  // text to tokenize").
  void DescribePositional(const std::string& synopsis, const std::string& description);

  // With --help: prints Usage() to stdout and exits 0. Otherwise the first
  // error, then a blank line and Usage().
  Status Finish() const;
  // "usage: kvfork CMD --required VALUE [flags]" and one line per flag read
  // so far: name, value placeholder, description, default.
  std::string Usage() const;

 private:
  struct Known {
    std::string name;
    std::string placeholder;   // "N", "X", "VALUE"; "" for a switch
    std::string default_text;  // "" = none shown
    std::string description;
    bool required = false;
  };
  void Record(Known known);
  // The raw value of a flag given on the command line (marking it read), or
  // nullptr when absent or when --help was asked.
  const std::string* Take(const std::string& name);

  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
  std::string positional_synopsis_, positional_description_;
  std::vector<Known> known_;  // in the order first read
  std::vector<std::string> errors_;  // in the order found
  // Flags given last without a value: "needs a value" if a getter reads
  // them, else unknown (a typo of a switch, as often as not).
  std::vector<std::string> without_value_;
};

}  // namespace kvfork::cli
