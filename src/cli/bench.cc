// `kvfork bench <name> [flags]`: dispatches to the benchmarks registered with
// KVFORK_REGISTER_BENCHMARK. Benchmarks print a table and write JSON under
// bench/results/.
#include <algorithm>
#include <cstdio>

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
    for (const Command& b : list)
      if (b.name == argv[1]) return b.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "usage: kvfork bench <benchmark> [flags]\n\nbenchmarks:\n");
  for (const Command& b : list) std::fprintf(stderr, "  %-12s %s\n", b.name.c_str(), b.summary.c_str());
  return 2;
}

}  // namespace

KVFORK_REGISTER_COMMAND(bench, "bench", "run a benchmark (kernels, model, tokenizer, kv, engine, serve)",
                        RunBench);

}  // namespace kvfork::cli
