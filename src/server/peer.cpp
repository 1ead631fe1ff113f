// server/peer.cpp — see peer.h.
#include "server/peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace specula::server {
namespace {

// Numeric address and port of a socket address; false for other families.
bool numeric(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf) == nullptr) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf) == nullptr) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

// httplib's remote_addr comes from getnameinfo, which may add an IPv6 zone ("%eth0").
bool same_addr(const std::string& ours, const std::string& theirs) {
  return theirs == ours || (theirs.size() > ours.size() && theirs.compare(0, ours.size(), ours) == 0 &&
                            theirs[ours.size()] == '%');
}

}  // namespace

int find_connection_socket(int local_port, const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0 || remote_addr.empty()) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!numeric(peer, &pa, &pp) || !numeric(self, &sa, &sp)) continue;
    if (pp == remote_port && sp == local_port && same_addr(pa, remote_addr)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;  // nothing happened (or EINTR): alive
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (p.revents & (POLLIN | POLLRDHUP)) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly shutdown with nothing unread
    if (n > 0) return false;  // unread data (a pipelined request)
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // e.g. ECONNRESET
  }
  return false;
}

}  // namespace specula::server
