#include "distributed/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace volt {
namespace {

// Closes a socket descriptor on scope exit.
struct Socket {
  int fd;
  explicit Socket(int domain, int type) : fd(::socket(domain, type, 0)) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolve(const std::string& host, int socket_type) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socket_type;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found);
  check<DistributedError>(rc == 0 && found != nullptr, "network: cannot resolve host '", host, "': ",
                          rc == 0 ? "no address" : gai_strerror(rc), "; check --master-addr / MASTER_ADDR");
  return {found, &freeaddrinfo};
}

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

int64_t find_free_port(const std::string& host) {
  auto addresses = resolve(host, SOCK_STREAM);
  const addrinfo* a = addresses.get();
  Socket s(a->ai_family, SOCK_STREAM);
  check<DistributedError>(s.fd >= 0, "network: cannot open a TCP socket: ", std::strerror(errno));
  sockaddr_storage address{};
  std::memcpy(&address, a->ai_addr, a->ai_addrlen);
  // Port 0: the kernel picks a free ephemeral port.
  if (address.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(address).sin_port = 0;
  else reinterpret_cast<sockaddr_in6&>(address).sin6_port = 0;
  check<DistributedError>(::bind(s.fd, reinterpret_cast<sockaddr*>(&address), a->ai_addrlen) == 0,
                          "network: cannot bind a TCP socket on ", host, ": ", std::strerror(errno));
  socklen_t length = sizeof address;
  ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&address), &length);
  return address.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in&>(address).sin_port)
                                      : ntohs(reinterpret_cast<sockaddr_in6&>(address).sin6_port);
}

std::string local_address_towards(const std::string& remote) {
  auto addresses = resolve(remote, SOCK_DGRAM);
  const addrinfo* a = addresses.get();
  Socket s(a->ai_family, SOCK_DGRAM);
  check<DistributedError>(s.fd >= 0, "network: cannot open a UDP socket: ", std::strerror(errno));
  check<DistributedError>(::connect(s.fd, a->ai_addr, a->ai_addrlen) == 0, "network: no route to '", remote,
                          "': ", std::strerror(errno), "; check --master-addr / MASTER_ADDR");
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  check<DistributedError>(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&local), &length) == 0,
                          "network: getsockname failed: ", std::strerror(errno));
  return address_text(local);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

void ignore_broken_pipe_signal() {
  // LibTorch 2.x's TCPStore sends without MSG_NOSIGNAL; Python ignores SIGPIPE at start-up, so
  // PyTorch never meets the signal, but a C++ program does: a survivor that writes to the store
  // after its host left would die without a word. Ignored, the write fails and c10d throws.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace volt
