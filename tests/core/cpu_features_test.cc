#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace kvfork {
namespace {

TEST(CpuFeatures, LevelsAreConsistent) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  if (IsaSupported(Isa::kAvx512)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
  // amx is a level above avx512: every op but MatMul runs the avx512 code.
  if (IsaSupported(Isa::kAmx)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx512));
    EXPECT_TRUE(DetectCpuFeatures().amx_tile && DetectCpuFeatures().amx_bf16);
    EXPECT_EQ(BestSupportedIsa(), Isa::kAmx);
  }
  EXPECT_EQ(*ParseIsa("amx"), Isa::kAmx);
  EXPECT_STREQ(IsaName(Isa::kAmx), "amx");
  EXPECT_TRUE(IsaSupported(BestSupportedIsa()));
  EXPECT_EQ(*ParseIsa("avx2"), Isa::kAvx2);
  EXPECT_EQ(*ParseIsa("scalar"), Isa::kScalar);
  EXPECT_FALSE(ParseIsa("sse9").ok());
  SetActiveIsaForTesting(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
}

// Vendor and family against the kernel's own reading of CPUID.
TEST(CpuFeatures, VendorAndFamilyMatchProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line, vendor;
  int family = -1;
  while (std::getline(in, line) && (vendor.empty() || family < 0)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "vendor_id") vendor = line.substr(colon + 2);
    if (key == "cpu family") family = std::stoi(line.substr(colon + 2));
  }
  if (vendor.empty() || family < 0) GTEST_SKIP() << "no x86 vendor_id / cpu family";
  EXPECT_EQ(DetectCpuFeatures().amd, vendor == "AuthenticAMD");
  EXPECT_EQ(DetectCpuFeatures().family, family);
}

// The VNNI bits (the quantized kernels' vpdpbusd) against the kernel's flags.
TEST(CpuFeatures, VnniMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  if (flags.empty()) GTEST_SKIP() << "no flags line";
  EXPECT_EQ(DetectCpuFeatures().avx512_vnni, flags.find(" avx512_vnni ") != std::string::npos);
  EXPECT_EQ(DetectCpuFeatures().avx_vnni, flags.find(" avx_vnni ") != std::string::npos);
}
}  // namespace
}  // namespace kvfork
