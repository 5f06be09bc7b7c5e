// Subcommand registry of the kvfork binary. A subcommand is one .cc file in
// src/cli that calls KVFORK_REGISTER_COMMAND; main.cc dispatches on argv[1].
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvfork::cli {

// Runs with argv[0] = the subcommand name; returns the process exit code.
using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;     // "generate", "bench"
  std::string summary;  // one line for `kvfork --help`
  CommandFn run = nullptr;
};

std::vector<Command>& Commands();
// `kvfork bench <name>`: each benchmark registers itself the same way.
std::vector<Command>& Benchmarks();

// The exit code of a command whose body returns a Status: 0, or 1 after
// "kvfork <name>: <error>" on stderr.
inline int ExitCode(const char* name, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvfork %s: %s\n", name, s.ToString().c_str());
  return 1;
}

struct CommandRegistrar {
  explicit CommandRegistrar(Command command);
};
struct BenchmarkRegistrar {
  explicit BenchmarkRegistrar(Command benchmark);
};

}  // namespace kvfork::cli

#define KVFORK_REGISTER_COMMAND(ident, name, summary, fn) \
  static ::kvfork::cli::CommandRegistrar kvfork_command_##ident({name, summary, fn})

// KVFORK_REGISTER_BENCHMARK(kernels, "kernels", "GEMM/GEMV vs the machine's limits", RunFn)
#define KVFORK_REGISTER_BENCHMARK(ident, name, summary, fn) \
  static ::kvfork::cli::BenchmarkRegistrar kvfork_benchmark_##ident({name, summary, fn})
