// Downstream connections: the accept loop, and a task per connection from accept to close.
#pragma once

#include <memory>

#include "exec/coro.h"
#include "io/stream.h"
#include "proxy/gateway.h"

namespace sg::proxy {

// The accept loop of one of a listener's sockets (spawned by the Gateway, one per socket).
exec::Task<void> accept_loop(Gateway& gw, std::shared_ptr<ListenerState> ls, io::TcpListener& socket);
// After the accept loops have stopped: stops each socket's ring accept (io_uring) and
// serves the connections it took that no loop took, as the loops would have.
exec::Task<void> serve_taken(Gateway& gw, std::shared_ptr<ListenerState> ls);

}  // namespace sg::proxy
