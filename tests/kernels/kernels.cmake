# Every op on every ISA the CPU supports, against reference.cc, plus the bitwise
# batch-invariance checks of DESIGN.md invariant 1.
kvfork_test(kernels_test
  SOURCES matmul_test.cc ops_test.cc attention_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
