// server/peer.h — noticing that an HTTP client went away while its non-streaming request
// runs. cpp-httplib 0.11 (Debian's) gives a handler neither its socket nor a
// "connection closed" query, so the accepted socket is found by its address pair
// (local and remote address and port, which identify one TCP connection) among the
// process's open descriptors, and then probed without consuming anything.
// Linux only (/proc/self/fd); elsewhere find_connection_socket returns -1 and requests
// are simply not cancelled early.
#pragma once

#include <string>

namespace specula::server {

// The descriptor of the accepted TCP socket whose local end is local_port and remote end
// remote_addr:remote_port (numeric addresses as cpp-httplib reports them), or -1.
// The descriptor stays valid while the handler that owns the connection runs.
int find_connection_socket(int local_port, const std::string& remote_addr, int remote_port);

// True when the peer has closed the connection: an error or hang-up on the socket, or an
// orderly shutdown (FIN) with no unread data before it. Unread data (a pipelined next
// request) counts as alive. A client that half-closes its sending side while it waits
// for the answer is indistinguishable from one that left and is treated as gone, as
// llama-server does.
bool peer_closed(int fd);

}  // namespace specula::server
