# The tokenizer's parts against plain references: the JSON reader that loads
# vocabularies and merges (vs nlohmann, on the real files too), the lookup
# tables and the shared piece cache (vs std:: maps), NFC with its quick check
# (vs utf8proc on every code point of planes 0-2).
kvfork_test(tokenizer_parts_test
  SOURCES json_reader_test.cc tables_test.cc nfc_test.cc
  LABELS unit LIBS kvfork_tokenizer)
