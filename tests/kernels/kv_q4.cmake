# The q4 / q4r KV formats: hand-computed codes and scales, round-trip bounds,
# the Hadamard rotation, capacity against bf16, q4r's smaller error on rows
# with an outlier channel, and each ISA level's SIMD quantizer and rotation
# byte for byte against the portable ones (kv_q4_simd_test.cc).
kvfork_test(kv_q4_test
  SOURCES kv_q4_test.cc kv_q4_simd_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
