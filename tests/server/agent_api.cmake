# Issue 23: tool-call and reasoning parsers (unit), and the agent APIs on the
# real server through the official clients (e2e): OpenAI chat tool calls and
# reasoning, Anthropic messages, OpenAI responses.
kvfork_test(agent_parsers_test
  SOURCES agent_parsers_test.cc
  LABELS unit LIBS kvfork_server)

find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(agent_chat_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/agent_chat.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
if(KVFORK_NODE)
  kvfork_script_test(agent_anthropic_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/agent_anthropic.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
if(KVFORK_NODE)
  kvfork_script_test(agent_responses_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/agent_responses.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
