// `kvfork bench <name> [flags]`: dispatches to the benchmarks registered with
// KVFORK_REGISTER_BENCHMARK. Benchmarks print a table and write JSON under
// bench/results/.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kvfork::cli {

std::vector<Command>& Benchmarks() {
  static std::vector<Command> benchmarks;
  return benchmarks;
}

BenchmarkRegistrar::BenchmarkRegistrar(Command benchmark) {
  Benchmarks().push_back(std::move(benchmark));
}

namespace {

int RunBench(int argc, char** argv) {
  std::vector<Command> list = Benchmarks();
  std::sort(list.begin(), list.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  if (argc >= 2) {
    for (const Command& b : list) {
      if (b.name != argv[1]) continue;
      // argv[0] names the command in flag usage: "bench kernels".
      std::string name = "bench " + b.name;
      std::vector<char*> args(argv + 1, argv + argc);
      args[0] = name.data();
      return b.run(argc - 1, args.data());
    }
  }
  // `kvfork bench --help` asks for this list: stdout and exit 0.
  const bool help =
      argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
  FILE* out = help ? stdout : stderr;
  if (!help)
    std::fprintf(out, "kvfork bench: %s\n\n",
                 argc < 2 ? "which benchmark?"
                          : ("unknown benchmark '" + std::string(argv[1]) + "'").c_str());
  std::fprintf(out, "usage: kvfork bench <benchmark> [flags]\n\nbenchmarks:\n");
  for (const Command& b : list)
    std::fprintf(out, "  %-12s %s\n", b.name.c_str(), b.summary.c_str());
  std::fprintf(out, "\n`kvfork bench <benchmark> --help` for its flags.\n");
  return help ? 0 : 2;
}

}  // namespace

KVFORK_REGISTER_COMMAND(bench, "bench", "run a benchmark (`kvfork bench --help` lists them)",
                        RunBench);

}  // namespace kvfork::cli
