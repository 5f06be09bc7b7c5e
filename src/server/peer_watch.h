// Whether the client of an HTTP connection has closed its end, read from the
// kernel's TCP tables (/proc/self/net/tcp and tcp6). cpp-httplib 0.11 gives a
// non-streaming handler no way to see its socket, so without this a client
// that gives up on a long completion would leave it generating to max_tokens
// (streaming requests find out from a failed write instead).
#pragma once

#include <string>

namespace kvfork::server {

// The server's side of the connection (local = this server's address and
// port, remote = the client's, as httplib reports them). True when the kernel
// lists it as CLOSE_WAIT, LAST_ACK or CLOSE: the client sent FIN or reset it.
// False while it is open, and also when the connection is not found or an
// address does not parse: unknown never cancels a request.
bool PeerClosed(const std::string& local_addr, int local_port, const std::string& remote_addr,
                int remote_port);

}  // namespace kvfork::server
