# Chat template renderer: byte-identical to Python's jinja2 on the checked-in
# goldens (tests/data/chat_template, made by tools/chat_template/make_goldens.py),
# plus a live run of the generator and the error paths.
kvfork_test(chat_template_test
  SOURCES chat_template_test.cc
  LABELS unit LIBS kvfork_tokenizer)
