# The block-quantized formats: dequantization, activation quantization, and
# the quantized MatMul on every ISA (accuracy and bitwise invariance).
kvfork_test(kernels_quant_test
  SOURCES quant_test.cc
  LABELS unit LIBS kvfork_kernels kvfork_core)
