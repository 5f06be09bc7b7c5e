// kvfork: one binary, subcommands registered by the files beside this one.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/command.h"

namespace kvfork::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

CommandRegistrar::CommandRegistrar(Command command) { Commands().push_back(std::move(command)); }

namespace {

void PrintUsage() {
  std::vector<Command> cmds = Commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::printf("usage: kvfork <command> [flags]\n\ncommands:\n");
  for (const Command& c : cmds) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n`kvfork <command> --help` for a command's flags.\n");
}

}  // namespace
}  // namespace kvfork::cli

int main(int argc, char** argv) {
  using kvfork::cli::Commands;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    kvfork::cli::PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : Commands()) {
    if (c.name == argv[1]) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvfork: unknown command '%s'\n\n", argv[1]);
  kvfork::cli::PrintUsage();
  return 2;
}
