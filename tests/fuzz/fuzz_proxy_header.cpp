// The PROXY protocol header parser (io/proxy_protocol.h): what a load balancer, or anyone
// who can reach a proxy_protocol listener, sends first. Properties: a header it takes is
// self-delimiting (the same bytes alone give the same answer, and any shorter prefix of
// them asks for more), no longer than the input nor than the bound, a version 1 header
// ends with CRLF; asking for more happens only below the bound; a refusal says why.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"
#include "io/proxy_protocol.h"

using sg::io::kMostProxyHeaderBytes;
using sg::io::parse_proxy_header;
using sg::io::ProxyHeader;
using Status = ProxyHeader::Status;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const ProxyHeader h = parse_proxy_header(in);
  switch (h.status) {
    case Status::kInvalid:
      FUZZ_CHECK(!h.error.empty());
      break;
    case Status::kNeedMore:
      FUZZ_CHECK(in.size() < kMostProxyHeaderBytes);
      break;
    case Status::kDone: {
      FUZZ_CHECK(h.length >= 15 && h.length <= in.size() && h.length <= kMostProxyHeaderBytes);
      if (in[0] == 'P') FUZZ_CHECK(in.substr(h.length - 2, 2) == "\r\n");
      const ProxyHeader alone = parse_proxy_header(in.substr(0, h.length));
      FUZZ_CHECK(alone.status == Status::kDone && alone.length == h.length && alone.source == h.source);
      FUZZ_CHECK(parse_proxy_header(in.substr(0, h.length - 1)).status == Status::kNeedMore);
      FUZZ_CHECK(parse_proxy_header(in.substr(0, h.length / 2)).status == Status::kNeedMore);
      break;
    }
  }
  return 0;
}
