# The progress line (core/progress.h): what it prints on a terminal, that it
# prints nothing on a pipe, its throttle and its final newline.
kvfork_test(progress_test SOURCES progress_test.cc LABELS unit LIBS kvfork_core)
