#include "core/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KVFORK_X86 1
#endif

namespace kvfork {
namespace {

#ifdef KVFORK_X86
uint64_t Xgetbv() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// Linux refuses AMX tile data to a process until it asks (since 5.16): without
// this, the first tile instruction faults. Asked once; the grant is per process.
bool RequestAmxPermission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuFeatures Detect() {
  CpuFeatures f;
#ifdef KVFORK_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const int base_family = static_cast<int>((a >> 8) & 0xf);
  f.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
  bool osxsave = (c >> 27) & 1;
  bool fma = (c >> 12) & 1;
  bool f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  uint64_t xcr0 = Xgetbv();
  bool ymm_os = (xcr0 & 0x6) == 0x6;
  bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_os && ((b >> 5) & 1);
  f.fma = ymm_os && fma;
  f.f16c = ymm_os && f16c;
  f.avx512f = zmm_os && ((b >> 16) & 1);
  f.avx512dq = zmm_os && ((b >> 17) & 1);
  f.avx512bw = zmm_os && ((b >> 30) & 1);
  f.avx512vl = zmm_os && ((b >> 31) & 1);
  f.avx512_vnni = zmm_os && ((c >> 11) & 1);
  const bool tile_os = (xcr0 & 0x60000) == 0x60000;  // XTILECFG | XTILEDATA
  if (tile_os && ((d >> 24) & 1) && ((d >> 22) & 1) && RequestAmxPermission()) {
    f.amx_tile = true;
    f.amx_bf16 = true;
    f.amx_int8 = (d >> 25) & 1;
  }
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f.avx512_bf16 = zmm_os && ((a1 >> 5) & 1);
    f.avx_vnni = ymm_os && ((a1 >> 4) & 1);
  }
#endif
  return f;
}

std::atomic<int> g_active{-1};

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

bool IsaSupported(Isa isa) {
  const CpuFeatures& f = DetectCpuFeatures();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512:
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
             f.avx512_bf16;
    case Isa::kAmx:
      return IsaSupported(Isa::kAvx512) && f.amx_tile && f.amx_bf16;
  }
  return false;
}

Isa BestSupportedIsa() {
  if (IsaSupported(Isa::kAmx)) return Isa::kAmx;
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

StatusOr<Isa> ParseIsa(const std::string& name) {
  if (name == "scalar" || name == "portable") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  if (name == "amx") return Isa::kAmx;
  return InvalidArgumentError("unknown ISA '" + name + "' (expected scalar, avx2, avx512 or amx)");
}

Isa ActiveIsa() {
  int v = g_active.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<Isa>(v);
  Isa isa = BestSupportedIsa();
  if (const char* env = std::getenv("KVFORK_CPU_ISA"); env != nullptr && *env != '\0') {
    StatusOr<Isa> parsed = ParseIsa(env);
    if (!parsed.ok()) {
      std::fprintf(stderr, "KVFORK_CPU_ISA: %s\n", parsed.status().message().c_str());
      std::exit(2);
    }
    if (!IsaSupported(*parsed)) {
      std::fprintf(stderr, "KVFORK_CPU_ISA=%s: this CPU does not support it (best: %s)\n", env,
                   IsaName(isa));
      std::exit(2);
    }
    isa = *parsed;
  }
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  return isa;
}

void SetActiveIsaForTesting(Isa isa) {
  KVFORK_CHECK_MSG(IsaSupported(isa), IsaName(isa));
  g_active.store(static_cast<int>(isa), std::memory_order_release);
}

}  // namespace kvfork
