# Model loading, the forward pass against an independent float64 reference,
# and batch invariance. (llamacpp*.cmake is the llama.cpp parity group.)
kvfork_test(model_config_test SOURCES model_config_test.cc LABELS unit LIBS kvfork_model)
kvfork_test(model_load_test SOURCES model_load_test.cc LABELS unit LIBS kvfork_model)
kvfork_test(model_batch_invariance_test SOURCES model_batch_invariance_test.cc LABELS model
            LIBS kvfork_model)
kvfork_test(model_reference_test SOURCES model_reference_test.cc LABELS model LIBS kvfork_model)
kvfork_test(model_shapes_test SOURCES model_shapes_test.cc LABELS unit LIBS kvfork_model)
kvfork_test(moe_test SOURCES moe_test.cc LABELS unit LIBS kvfork_model)
