// Downstream connections: the accept loop, and a task per connection from accept to close.
#pragma once

#include <memory>

#include "exec/coro.h"
#include "io/stream.h"
#include "proxy/gateway.h"

namespace sg::proxy {

// Accept loop of one listener (spawned by the Gateway).
exec::Task<void> accept_loop(Gateway& gw, std::shared_ptr<ListenerState> ls);

}  // namespace sg::proxy
