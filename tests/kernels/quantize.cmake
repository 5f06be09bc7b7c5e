# f32 -> block-format quantizers (kvfork quantize): round-trip error bounds,
# hand-computed block layouts, block independence.
kvfork_test(quantize_row_test
  SOURCES quantize_row_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
