# The q4 / q4r KV formats: hand-computed codes and scales, round-trip bounds,
# the Hadamard rotation, capacity against bf16, and q4r's smaller error on
# rows with an outlier channel.
kvfork_test(kv_q4_test
  SOURCES kv_q4_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
