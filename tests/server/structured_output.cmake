# Structured-output request fields (response_format, structured_outputs,
# guided_*, llama.cpp's grammar / json_schema) into the engine's grammar.
kvfork_test(server_structured_output_test
  SOURCES structured_output_test.cc
  LABELS unit LIBS kvfork_server kvfork_grammar)
