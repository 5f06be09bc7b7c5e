// kvfork: one binary, subcommands registered by the files beside this one.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kvfork::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

CommandRegistrar::CommandRegistrar(Command command) { Commands().push_back(std::move(command)); }

namespace {

// To stdout when asked for (exit 0), to stderr after a mistake.
void PrintUsage(FILE* out) {
  std::vector<Command> cmds = Commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::fprintf(out, "usage: kvfork <command> [flags]\n\ncommands:\n");
  for (const Command& c : cmds)
    std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(out,
               "\n`kvfork <command> --help` or `kvfork help <command>` for a command's flags.\n");
}

}  // namespace
}  // namespace kvfork::cli

int main(int argc, char** argv) {
  using kvfork::cli::Commands;
  if (argc < 2) {
    kvfork::cli::PrintUsage(stderr);
    return 2;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || (first == "help" && argc == 2)) {
    kvfork::cli::PrintUsage(stdout);
    return 0;
  }
  // `kvfork help CMD [SUB...]` is `kvfork CMD [SUB...] --help`.
  std::vector<char*> args(argv + 1, argv + argc);
  std::string help_flag = "--help";
  if (first == "help") {
    args.erase(args.begin());
    args.push_back(help_flag.data());
  }
  for (const auto& c : Commands()) {
    if (c.name == args[0]) return c.run(static_cast<int>(args.size()), args.data());
  }
  std::fprintf(stderr, "kvfork: unknown command '%s'\n\n", args[0]);
  kvfork::cli::PrintUsage(stderr);
  return 2;
}
