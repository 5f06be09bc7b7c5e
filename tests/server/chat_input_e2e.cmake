# What a chat request's input becomes, on the real server: special-token
# strings in messages stay text, unimplemented fields are 400s,
# add_generation_prompt / continue_final_message.
find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(server_chat_input_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_chat_input.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
