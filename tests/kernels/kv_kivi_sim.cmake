# The KIVI quality simulation's quantizer (kv-quality --kv-dtype kivi4|kivi2):
# K per channel over a group of tokens, V per token in groups of 32 dims, on
# hand-computed cases that fail if either axis is swapped, and the bf16 block
# path across blocks.
kvfork_test(kv_kivi_sim_test
  SOURCES kv_kivi_sim_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
