#include "trainer/cluster/config/host_port.h"

#include <charconv>

namespace tj::cluster {

StatusOr<HostPort> ParseHostPort(std::string_view address, std::string_view what) {
  const std::string prefix = std::string(what) + " \"" + std::string(address) + "\"";
  HostPort hp;
  std::string_view port_text;
  if (!address.empty() && address.front() == '[') {  // [v6]:port
    const size_t close = address.find(']');
    if (close == std::string_view::npos) {
      return Status::Error(prefix + ": unclosed '[' in IPv6 address; write [addr]:port");
    }
    hp.host = std::string(address.substr(1, close - 1));
    if (close + 1 >= address.size() || address[close + 1] != ':') {
      return Status::Error(prefix + ": missing port; write host:port (e.g. [::1]:2222)");
    }
    port_text = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::Error(prefix + ": missing port; write host:port (e.g. " +
                           std::string(address.empty() ? "host" : address) + ":2222)");
    }
    if (address.find(':') != colon) {
      return Status::Error(prefix + ": IPv6 addresses need brackets; write [addr]:port");
    }
    hp.host = std::string(address.substr(0, colon));
    port_text = address.substr(colon + 1);
  }
  if (hp.host.empty()) {
    return Status::Error(prefix + ": missing host; write host:port");
  }
  if (port_text.empty()) {
    return Status::Error(prefix + ": missing port; write host:port");
  }
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return Status::Error(prefix + ": bad port \"" + std::string(port_text) +
                         "\"; use a number from 1 to 65535");
  }
  hp.port = port;
  return hp;
}

std::string FormatHostPort(std::string_view host, int port) {
  const std::string h(host);
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port);
}

}  // namespace tj::cluster
