#pragma once
// Small POSIX networking helpers for the rendezvous and the launcher (no c10d here).
#include <cstdint>
#include <string>

namespace volt {

// A TCP port that was free on `host` a moment ago (bind to port 0, read it, close). Another
// process may take it before it is used; callers that start a server on it report that clearly.
// Throws DistributedError when no socket can be bound.
int64_t find_free_port(const std::string& host = "127.0.0.1");

// The local IP address of the route towards `remote` (a host name or address): the address a peer
// on that route can reach this process at. Uses a UDP socket's connect(), which sends nothing.
// Throws DistributedError when `remote` does not resolve or no route leads there.
std::string local_address_towards(const std::string& remote);

// Whether `host` is a loopback name or address (localhost, 127.x.y.z, ::1).
bool is_loopback(const std::string& host);

// Makes a write to a socket whose peer has gone fail with EPIPE instead of killing the process
// with SIGPIPE, so that a rank whose peer or store host left reports a DistributedError. Changes
// SIGPIPE only while it has its default action: a handler the program installed stays.
void ignore_broken_pipe_signal();

}  // namespace volt
