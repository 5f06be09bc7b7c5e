# Chat prompts on the real Qwen3 tokenizer and template: special-token strings
# in request values stay text, continue_final_message / add_generation_prompt,
# tool schemas in the client's key order.
kvfork_test(chat_prompt_test
  SOURCES chat_prompt_test.cc
  LABELS unit LIBS kvfork_server)
