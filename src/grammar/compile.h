// The entry points callers use: each request-level constraint kind compiled
// to a Grammar (errors name `field`, the request field it came from).
// Compiling is O(size of the schema / regex / grammar); the result is
// immutable and may be shared by any number of sequences.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kvfork::grammar {

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                           std::string_view field);
std::shared_ptr<const Grammar> CompileJsonObject();
StatusOr<std::shared_ptr<const Grammar>> CompileRegex(std::string_view regex,
                                                      std::string_view field);
// Exactly one of the strings (bytes as given, nothing around them).
StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices,
                                                       std::string_view field);
StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(std::string_view gbnf, std::string_view field);

}  // namespace kvfork::grammar
