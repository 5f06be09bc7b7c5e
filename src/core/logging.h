// Minimal leveled logging to stderr. Thread-safe: each message is written with
// one fwrite. KVFORK_LOG_LEVEL=debug|info|warn|error sets the threshold.
#pragma once

#include <sstream>
#include <string>

namespace kvfork {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace kvfork

#define KVFORK_LOG_ENABLED(level) (::kvfork::LogLevel::level >= ::kvfork::MinLogLevel())
// KVFORK_LOG(kInfo) << "loaded " << n << " tensors";
#define KVFORK_LOG(level)                     \
  if (!KVFORK_LOG_ENABLED(level)) {           \
  } else                                      \
    ::kvfork::LogMessage(::kvfork::LogLevel::level, __FILE__, __LINE__).stream()
