// Request fields this server knows but does not implement. A field that
// would change the output if honoured is a 400 naming it, not a 200 that
// silently ignores it (an OpenAI or vLLM client sending `response_format`
// or `best_of` must learn that it did not get what it asked for). Fields
// that cannot change the output (`user`, `metadata`, `store`, ...) and
// fields nobody defines are accepted and ignored, as vLLM does.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"
#include "server/openai_schema.h"

namespace kvfork::server {

// The first unsupported field of body (an object) with a value that asks
// for something, or nullopt. Values that ask for the default (null, false,
// "", "auto", {"type": "text"}, ...) are accepted.
std::optional<ApiError> RejectUnsupportedFields(Endpoint endpoint,
                                                const nlohmann::ordered_json& body);

}  // namespace kvfork::server
