/* LD_PRELOAD library for llama.cpp's tools in `make bench-gguf` on CPUs with
 * AMX. ggml registers an AMX weight buffer type when the kernel grants the
 * process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM); on the
 * Sapphire Rapids VM this project benchmarks on, its AMX matmul then dies with
 * SIGILL, and llama-bench (unlike llama-cli/llama-perplexity) has no -nr
 * option to turn extra buffer types off. This makes that one request fail,
 * as it does on a kernel without AMX support, so ggml runs its AVX-512
 * kernels instead; every other syscall passes through unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>

#define ARCH_REQ_XCOMP_PERM 0x1023

long syscall(long number, ...) {
  va_list ap;
  long a[6];
  va_start(ap, number);
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_arch_prctl && a[0] == ARCH_REQ_XCOMP_PERM) {
    errno = EPERM;
    return -1;
  }
  long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
