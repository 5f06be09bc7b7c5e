# Loading GGUF files (single and split): the same logits as the HF directory
# they were exported from, and a clear error for every kind of bad file.
kvfork_test(gguf_load_test SOURCES gguf_load_test.cc LABELS unit
            LIBS kvfork_model kvfork_kernels kvfork_core)
