# Which logits rows Forward returns (all, last, none) and that skipping rows
# changes no other row.
kvfork_test(forward_logits_test SOURCES forward_logits_test.cc LABELS unit LIBS kvfork_model)
