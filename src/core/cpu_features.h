// CPU feature detection and the instruction-set level kernels dispatch on.
// The level is chosen once, at first use: the best the CPU supports, or the
// one named by the environment variable KVFORK_CPU_ISA (scalar|avx2|avx512|amx),
// which must not exceed what the CPU supports.
#pragma once

#include <string>

#include "core/status.h"

namespace kvfork {

enum class Isa {
  kScalar = 0,  // portable C++
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + AVX512_BF16
  kAmx = 3,     // kAvx512 + AMX-TILE + AMX-BF16 (bf16 MatMul on tiles, the rest as kAvx512)
};

struct CpuFeatures {
  // Vendor and CPUID display family (base + extended, leaf 1): for tuning
  // choices that differ between microarchitectures of one ISA level (e.g.
  // AMD family 0x19 is Zen 3/4, 0x1A Zen 5). Never for correctness.
  bool amd = false;
  int family = 0;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  // vpdpbusd on zmm/ymm/xmm (AVX512_VNNI) and on ymm/xmm with the VEX encoding
  // (AVX-VNNI): the int8 dot products of the quantized kernels (kernels/quant_isa.h).
  bool avx512_vnni = false;
  bool avx_vnni = false;
  // AMX-TILE and AMX-BF16 reported by CPUID, the OS saving tile state (XCR0
  // bits 17 and 18), and the kernel granting this process the tile data
  // (arch_prctl ARCH_REQ_XCOMP_PERM, asked once at detection): all three, or false.
  bool amx_tile = false;
  bool amx_bf16 = false;
  // AMX-INT8 (TDPBSSD and kin), with the same OS conditions as amx_tile: the
  // amx level runs the prefill of quantized weights on it where it is set
  // (kernels/quant_matmul_amx.cc).
  bool amx_int8 = false;
};

const CpuFeatures& DetectCpuFeatures();

// Highest level the CPU supports.
Isa BestSupportedIsa();
bool IsaSupported(Isa isa);
const char* IsaName(Isa isa);
StatusOr<Isa> ParseIsa(const std::string& name);

// The level in force for this process (KVFORK_CPU_ISA or the best one).
// An invalid or unsupported KVFORK_CPU_ISA is a fatal start-up error.
Isa ActiveIsa();
// Overrides the level (tests that sweep every ISA); must be supported.
void SetActiveIsaForTesting(Isa isa);

}  // namespace kvfork
