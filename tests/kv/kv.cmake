kvfork_test(kv_cache_test
  SOURCES kv_cache_test.cc kv_property_test.cc
  LABELS unit LIBS kvfork_kv)
kvfork_test(kv_parity_test
  SOURCES kv_parity_test.cc
  LABELS model LIBS kvfork_kv kvfork_model kvfork_kernels kvfork_core)
# The property test at 1M operations per configuration (~10 s of CPU).
kvfork_script_test(kv_property_slow_test
  COMMAND env KVFORK_KV_PROPERTY_OPS=1000000 $<TARGET_FILE:kv_cache_test> --gtest_filter=*KvProperty*
  LABELS slow)
# KV events: block hash, index events, vLLM msgpack layout, ZeroMQ publisher
# (loopback sockets).
kvfork_test(kv_events_test
  SOURCES kv_events_test.cc
  LABELS unit LIBS kvfork_kv)
# The real server's KV events read by a subscriber written from vLLM's schema
# (system python3: Debian's python3-zmq and python3-msgpack).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(kv_events_e2e_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/kv/kv_events_e2e_test.py
    LABELS e2e TIMEOUT 300)
endif()
# The prefix tree snapshot behind GET /v1/cache/tree (issue 29).
kvfork_test(prefix_tree_test
  SOURCES prefix_tree_test.cc
  LABELS unit LIBS kvfork_kv)
# Cache control (issue 25): pins with a TTL on a fake clock.
kvfork_test(kv_pin_test
  SOURCES kv_pin_test.cc
  LABELS unit LIBS kvfork_kv)
# Cache control on the real server: cache_control, /v1/cache/pin, prompt_cache_key.
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(kv_cache_control_e2e_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/kv/kv_cache_control_e2e_test.py
    LABELS e2e TIMEOUT 300)
endif()
# A sliding-window model on the real server: its group in /v1/cache/stats and /metrics.
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(kv_sliding_e2e_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/kv/kv_sliding_e2e_test.py
    LABELS e2e TIMEOUT 300)
endif()
# The disk tier (issue 25): block file format, the tier, the paged cache on it.
kvfork_test(disk_tier_test
  SOURCES disk_tier_test.cc
  LABELS unit LIBS kvfork_kv)
# The disk tier on the real server: clean restart, kill -9, corrupt files.
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(kv_disk_e2e_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/kv/kv_disk_e2e_test.py
    LABELS e2e TIMEOUT 300)
endif()
# Sliding-window layer groups in the paged cache (issue 24), no model.
kvfork_test(kv_sliding_test
  SOURCES kv_sliding_test.cc
  LABELS unit LIBS kvfork_kv)
# Reading the disk tier back: checksum, format version, async loads on I/O
# threads, read or recompute.
kvfork_test(disk_load_test
  SOURCES disk_load_test.cc
  LABELS unit LIBS kvfork_kv)
# The preload at start: whole chains newest first, bounds, corrupt files, a
# request mid-preload.
kvfork_test(disk_preload_test
  SOURCES disk_preload_test.cc
  LABELS unit LIBS kvfork_kv)
# The prefix index's nodes (issue 25): pool block, disk location, both.
kvfork_test(prefix_index_test
  SOURCES prefix_index_test.cc
  LABELS unit LIBS kvfork_kv)
