// `kvfork bench serve [flags]`: the serving benchmark (issue 7). The driver is
// bench/serve/bench_serve.py (standard-library Python plus matplotlib for the
// charts), because it starts and stops whole server processes, kvfork's and
// llama.cpp's, and talks to them only over HTTP; this command runs it with
// this binary as --kvfork. The source tree is found through KVFORK_SOURCE_DIR
// or the path this binary was built from.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"

#ifndef KVFORK_BUILD_SOURCE_DIR
#define KVFORK_BUILD_SOURCE_DIR ""
#endif

namespace kvfork::cli {
namespace {

int RunBenchServe(int argc, char** argv) {
  const char* env = std::getenv("KVFORK_SOURCE_DIR");
  const std::string source = env != nullptr && *env != '\0' ? env : KVFORK_BUILD_SOURCE_DIR;
  const std::string script = source + "/bench/serve/bench_serve.py";
  if (source.empty() || !std::filesystem::exists(script)) {
    std::fprintf(stderr,
                 "kvfork bench serve: no driver at '%s'; set KVFORK_SOURCE_DIR to kvfork's source "
                 "tree or run bench/serve/bench_serve.py directly\n",
                 script.c_str());
    return 2;
  }
  // The system Python has python3-matplotlib (scripts/install-deps.sh).
  const char* python_env = std::getenv("KVFORK_PYTHON");
  std::string python = python_env != nullptr && *python_env != '\0' ? python_env
                       : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                     : "python3";
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::vector<std::string> args = {python, script};
  if (n > 0) {
    self[n] = '\0';
    args.push_back("--kvfork");
    args.push_back(self);
  }
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  execvp(cargs[0], cargs.data());
  std::fprintf(stderr, "kvfork bench serve: cannot run %s: %s\n", python.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(serve, "serve",
                          "OpenAI-API workloads on kvfork configurations vs llama-server "
                          "(bench/serve/bench_serve.py)",
                          RunBenchServe);

}  // namespace kvfork::cli
