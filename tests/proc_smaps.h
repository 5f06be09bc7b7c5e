// Reads this process's memory map (/proc/self/smaps) in tests: how the kernel
// backs a mapping the code under test made.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace kvfork::testing {

// The "VmFlags:" line of the smaps entry whose address range holds p, or ""
// when none does. MADV_HUGEPAGE shows as the flag "hg".
inline std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// Whether the kernel has transparent huge pages at all (advice is a no-op
// without them).
inline bool KernelHasThp() {
  return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

}  // namespace kvfork::testing
