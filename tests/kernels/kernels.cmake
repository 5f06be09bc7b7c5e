# Every op on every ISA the CPU supports, against reference.cc, plus the bitwise
# batch-invariance checks of DESIGN.md invariant 1.
kvfork_test(kernels_test
  SOURCES matmul_test.cc ops_test.cc attention_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)

# The per-ISA objects must define no weak (COMDAT) symbols: the linker could
# pick an AVX-512-compiled copy of an inline function for a scalar caller and
# crash a CPU without AVX-512 (see kernels/ops_isa.h).
# Checked on the optimized builds users run: the sanitizer builds (-O1, and
# UBSan's -fsanitize=function emits weak typeinfo for every function type)
# keep out-of-line copies that this check would flag, and run only here.
if(NOT KVFORK_SANITIZE)
  kvfork_script_test(kernels_isa_objects_have_no_weak_symbols
    COMMAND sh -c "nm -C -A $<TARGET_FILE:kvfork_kernels> | grep -E '_(avx2|avx512|avx512vnni|amx)\\.cc\\.o:.* [WV] ' && exit 1 || exit 0"
    LABELS unit)
endif()

# The avx2 attention's register tiles load each q row, K and V vector once per
# step: GCC 12 re-read values that several FMAs share as each one's memory
# operand (10 loads per 8 FMAs in Dots<4, 2>, ~15% of prefill attention on a
# Zen 3 VM; docs/kernels.md), which InRegister prevents. Optimized builds only.
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT KVFORK_SANITIZE AND KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(kernels_avx2_attention_reads_operands_once
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/asm/reread_operands.py
      $<TARGET_FILE:kvfork_kernels> --expect-none
      --match "kvfork::avx2::\\(anonymous namespace\\)::(Dots|Pv|PvRows|TileBlock)<"
    LABELS unit)
endif()
