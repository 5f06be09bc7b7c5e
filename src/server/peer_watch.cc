#include "server/peer_watch.h"

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kvfork::server {
namespace {

// IPv4 as its v4-mapped IPv6 form, so tcp and tcp6 entries compare alike.
using Addr = std::array<uint8_t, 16>;

Addr MappedV4(const uint8_t* four) {
  Addr a{};
  a[10] = a[11] = 0xff;
  std::memcpy(&a[12], four, 4);
  return a;
}

bool ParseAddr(const std::string& s, Addr* out) {
  in6_addr a6;
  in_addr a4;
  if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
    std::memcpy(out->data(), &a6, 16);
    return true;
  }
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    *out = MappedV4(reinterpret_cast<const uint8_t*>(&a4));
    return true;
  }
  return false;
}

// A /proc/net/tcp{,6} address "HEX:PORT": the address is printed as 32-bit
// words in host order (8 hex digits for tcp, 32 for tcp6), so reading each
// word back in host order restores the bytes in network order.
bool ParseProcAddr(const std::string& field, Addr* addr, int* port) {
  const size_t colon = field.find(':');
  if (colon == std::string::npos) return false;
  const std::string hex = field.substr(0, colon);
  if (hex.size() != 8 && hex.size() != 32) return false;
  uint8_t bytes[16];
  for (size_t w = 0; w < hex.size() / 8; ++w) {
    const uint32_t v = static_cast<uint32_t>(std::strtoul(hex.substr(w * 8, 8).c_str(), nullptr, 16));
    std::memcpy(bytes + 4 * w, &v, 4);
  }
  if (hex.size() == 8) {
    *addr = MappedV4(bytes);
  } else {
    std::memcpy(addr->data(), bytes, 16);
  }
  *port = static_cast<int>(std::strtol(field.c_str() + colon + 1, nullptr, 16));
  return true;
}

// The state of the connection in one table, or -1 when it is not listed.
int StateIn(const char* table, const Addr& local, int local_port, const Addr& remote,
            int remote_port) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, l, r, st;
    if (!(fields >> slot >> l >> r >> st)) continue;
    Addr la, ra;
    int lp = 0, rp = 0;
    if (!ParseProcAddr(l, &la, &lp) || !ParseProcAddr(r, &ra, &rp)) continue;
    if (lp == local_port && rp == remote_port && la == local && ra == remote)
      return static_cast<int>(std::strtol(st.c_str(), nullptr, 16));
  }
  return -1;
}

}  // namespace

bool PeerClosed(const std::string& local_addr, int local_port, const std::string& remote_addr,
                int remote_port) {
  Addr local, remote;
  if (!ParseAddr(local_addr, &local) || !ParseAddr(remote_addr, &remote)) return false;
  int state = StateIn("/proc/self/net/tcp", local, local_port, remote, remote_port);
  if (state < 0) state = StateIn("/proc/self/net/tcp6", local, local_port, remote, remote_port);
  // include/net/tcp_states.h: 7 CLOSE, 8 CLOSE_WAIT, 9 LAST_ACK.
  return state == 7 || state == 8 || state == 9;
}

}  // namespace kvfork::server
