# `kvfork quantize` as users run it: flag errors, a tiny model, requantizing refused.
kvfork_script_test(quantize_cli_test
  COMMAND sh ${PROJECT_SOURCE_DIR}/tests/cli/quantize_cli_test.sh
  LABELS e2e TIMEOUT 300)
