#include "engine/request.h"

namespace kvfork {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

void RequestStream::Push(RequestEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.kind == RequestEvent::Kind::kDone || event.kind == RequestEvent::Kind::kError)
      closed_ = true;
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

std::optional<RequestEvent> RequestStream::Pop(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); }))
    return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool RequestStream::Closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

}  // namespace kvfork
