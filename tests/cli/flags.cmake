# The flag parser (cli/flags.h): the usage built from the getters (placeholder,
# description, default), --help exits 0, and every error comes with the usage.
# The real binary's commands: cli_help.cmake.
kvfork_test(cli_flags_test
  SOURCES flags_test.cc ${PROJECT_SOURCE_DIR}/src/cli/flags.cc
  LABELS unit LIBS kvfork_core TIMEOUT 120)
