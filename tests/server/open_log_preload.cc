// An LD_PRELOAD library for the security test: it logs, one line each, every
// path the process opens (open/openat/fopen and their 64-bit and fortified
// forms) to the file named by $KVFORK_OPEN_LOG, then calls the real function.
// The test starts `kvfork serve` with it and checks that no request input
// ever makes the server open a path outside the model directory.
//
// Lines are written with one write(2) on an O_APPEND descriptor, so lines of
// concurrent threads never interleave; the log descriptor itself is opened
// through the real open, not the logged one.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace {

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using FopenFn = FILE* (*)(const char*, const char*);

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

int LogFd() {
  static int fd = [] {
    const char* path = getenv("KVFORK_OPEN_LOG");
    if (path == nullptr || *path == '\0') return -1;
    static OpenFn real_open = Next<OpenFn>("open");
    return real_open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  }();
  return fd;
}

void Log(const char* fn, int dirfd, const char* path) {
  const int fd = LogFd();
  if (fd < 0 || path == nullptr) return;
  char line[4200];
  int n;
  if (dirfd >= 0 && path[0] != '/') {
    // Relative to a directory descriptor: resolve it so the test sees a full path.
    char link[64], dir[2048];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
    ssize_t len = readlink(link, dir, sizeof(dir) - 1);
    dir[len > 0 ? len : 0] = '\0';
    n = snprintf(line, sizeof(line), "%s %s/%s\n", fn, dir, path);
  } else {
    n = snprintf(line, sizeof(line), "%s %s\n", fn, path);
  }
  if (n > 0) {
    ssize_t w = write(fd, line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
    (void)w;
  }
}

// The mode argument exists only with O_CREAT or O_TMPFILE.
bool HasMode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

}  // namespace

extern "C" {

#define KVFORK_OPEN_WRAPPER(name)                                   \
  int name(const char* path, int flags, ...) {                      \
    static OpenFn real = Next<OpenFn>(#name);                       \
    Log(#name, -1, path);                                           \
    if (HasMode(flags)) {                                           \
      va_list ap;                                                   \
      va_start(ap, flags);                                          \
      mode_t mode = va_arg(ap, mode_t);                             \
      va_end(ap);                                                   \
      return real(path, flags, mode);                               \
    }                                                               \
    return real(path, flags);                                       \
  }
KVFORK_OPEN_WRAPPER(open)
KVFORK_OPEN_WRAPPER(open64)

#define KVFORK_OPENAT_WRAPPER(name)                                 \
  int name(int dirfd, const char* path, int flags, ...) {           \
    static OpenatFn real = Next<OpenatFn>(#name);                   \
    Log(#name, dirfd == AT_FDCWD ? -1 : dirfd, path);               \
    if (HasMode(flags)) {                                           \
      va_list ap;                                                   \
      va_start(ap, flags);                                          \
      mode_t mode = va_arg(ap, mode_t);                             \
      va_end(ap);                                                   \
      return real(dirfd, path, flags, mode);                        \
    }                                                               \
    return real(dirfd, path, flags);                                \
  }
KVFORK_OPENAT_WRAPPER(openat)
KVFORK_OPENAT_WRAPPER(openat64)

// _FORTIFY_SOURCE builds call these instead of open/openat.
int __open_2(const char* path, int flags) {
  static auto real = Next<int (*)(const char*, int)>("__open_2");
  Log("__open_2", -1, path);
  return real(path, flags);
}
int __open64_2(const char* path, int flags) {
  static auto real = Next<int (*)(const char*, int)>("__open64_2");
  Log("__open64_2", -1, path);
  return real(path, flags);
}
int __openat_2(int dirfd, const char* path, int flags) {
  static auto real = Next<int (*)(int, const char*, int)>("__openat_2");
  Log("__openat_2", dirfd == AT_FDCWD ? -1 : dirfd, path);
  return real(dirfd, path, flags);
}

FILE* fopen(const char* path, const char* mode) {
  static FopenFn real = Next<FopenFn>("fopen");
  Log("fopen", -1, path);
  return real(path, mode);
}
FILE* fopen64(const char* path, const char* mode) {
  static FopenFn real = Next<FopenFn>("fopen64");
  Log("fopen64", -1, path);
  return real(path, mode);
}

}  // extern "C"
