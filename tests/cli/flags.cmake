# The flag parser's usage (`kvfork <command> --help` lists each flag with its
# default and exits 0; a missing required flag fails with that list), on the
# parser and on the real binary.
kvfork_test(cli_flags_test
  SOURCES flags_test.cc ${PROJECT_SOURCE_DIR}/src/cli/flags.cc
  LABELS unit LIBS kvfork_core TIMEOUT 120)
