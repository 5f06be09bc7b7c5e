# The CLI explains itself (issue 29): every command's and benchmark's --help,
# errors followed by the usage, and progress on a terminal only (a pty).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(cli_help_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/cli_help_test.py
    LABELS e2e TIMEOUT 300)
endif()
