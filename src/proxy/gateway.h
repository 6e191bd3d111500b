// The gateway: listeners, the current configuration snapshot, admission, sessions.
//
// A Snapshot is everything a request needs from the configuration, built once per
// (re)load: compiled routes, clusters (endpoints carried over when unchanged), admission
// semaphores, statistics handles. Requests take the current snapshot when they start and
// keep it to the end, so a reload never changes a request in flight; keep-alive
// connections use the new snapshot for their next request.
//
// Reload order (control thread): resolve + build the new snapshot (any failure leaves the
// old one serving) -> bind listeners that are new -> publish the snapshot -> stop
// listeners that were removed. Listeners whose address is unchanged keep their socket.
//
// Drain (SIGTERM): stop accepting, let busy sessions finish their response (sent with
// Connection: close), cancel idle keep-alive sessions (at once, or after drain_idle_grace,
// during which a request that arrives on one is answered and closes it), wait up to
// drain_timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/schema.h"
#include "exec/notify.h"
#include "exec/runtime.h"
#include "exec/semaphore.h"
#include "io/inherited.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "proxy/load_shedder.h"
#include "proxy/rate_limit.h"
#include "proxy/stats.h"
#include "routing/route_table.h"
#include "tls/server_context.h"
#include "upstream/cluster.h"
#include "upstream/health_checker.h"

namespace sg::proxy {

// A listener's identity across reloads: its address, or for port 0 (any free port) its
// name, since several listeners may ask for port 0.
std::string listener_key(const config::ListenerSection& l);

struct Snapshot {
  std::shared_ptr<const config::Config> config;
  std::vector<std::shared_ptr<upstream::Cluster>> clusters;
  routing::RouteTable routes;
  std::vector<std::shared_ptr<RouteStats>> route_stats;         // by route index
  std::shared_ptr<RouteStats> unrouted_stats;                   // requests no route matched
  std::shared_ptr<exec::Semaphore> global_limit;                // null = unlimited
  std::vector<std::shared_ptr<exec::Semaphore>> route_limits;   // by route index, null = none
  std::vector<std::shared_ptr<RateLimiter>> rate_limits;        // by route index, null = none
  std::map<std::string, std::shared_ptr<exec::Semaphore>> cluster_limits;
  std::map<std::string, const config::ListenerSection*> listeners_by_key;
  // TLS listeners' certificates and settings, by listener key.
  std::map<std::string, std::shared_ptr<const tls::ServerContext>> tls_by_key;

  const config::ListenerSection* listener(const std::string& key) const;
  std::shared_ptr<const tls::ServerContext> tls_for(const std::string& key) const;
};

class Gateway;

struct ListenerState {
  Gateway* gateway = nullptr;  // the owner (what a connection reaches through its listener)
  std::string key;      // listener_key(): identity across reloads
  std::string address;  // host:port as configured
  // One socket, or with reuse_port one per worker (io::listen_group), each with an accept
  // loop of its own pinned to a worker. A TLS listener's one socket is shared on io_uring:
  // the rest are copies of the first's descriptor (io::TcpListener::share), a loop per
  // worker (see Gateway::bind_listener). Filled before the loops start, never resized.
  std::vector<io::TcpListener> sockets;
  bool shared = false;  // sockets[1..] are copies of sockets[0]
  uint16_t bound_port = 0;
  // "ip:port" when the listener is bound to one address, which is then every accepted
  // connection's local address too (the authority of a request without one, RFC 9112
  // §3.3, with no getsockname per request); empty for a wildcard address.
  std::string local_authority;
  bool inherited = false;  // adopted from socket activation instead of bound here
  std::vector<exec::JoinHandle<void>> accept_tasks;
  std::atomic<bool> stopping{false};
  exec::Notify slot_freed;  // a connection closed (for on_max_connections: backlog)
  ListenerStats stats;
};

// One live downstream connection, registered so that drain can close idle ones.
// kFresh: accepted, its first request not begun. Drain leaves it be (the client has sent,
// or is about to send, a request it cannot know to retry: it gets its answer, with
// Connection: close, or header_timeout); kIdle, between requests on a keep-alive
// connection with no byte of the next one received, is what drain closes (a client may
// retry an idempotent request then); kBusy, from the next request's first byte to its
// response, is answered.
//
// A connection that turns idle after close_idle_sessions ran (its response had gone out
// without Connection: close before the drain began) closes itself: it stores kIdle, then
// reads idle_connections_closed(), while close_idle_sessions sets that flag, then reads
// each state; both sequentially consistent, so at least one of the two sees the other.
//
// The entry lives in its connection's task (no allocation, no list node): the task links
// it when it starts (Gateway::enter_session) and unlinks it before the task ends
// (leave_session), both under the registry lock. So an entry seen under that lock belongs
// to a task that has not finished, and cancelling that task through it is safe.
class SessionEntry {
 public:
  enum State : int { kIdle = 0, kBusy = 1, kClosing = 2, kFresh = 3 };
  SessionEntry() = default;
  SessionEntry(const SessionEntry&) = delete;
  SessionEntry& operator=(const SessionEntry&) = delete;

  std::atomic<int> state{kFresh};
  // Between enter_session and leave_session (the owner's thread only).
  bool linked() const { return task_ != nullptr; }

 private:
  friend class Gateway;
  SessionEntry* prev_ = nullptr;
  SessionEntry* next_ = nullptr;
  exec::JoinableTask* task_ = nullptr;  // the task whose frame holds this entry
};

class Gateway {
 public:
  explicit Gateway(io::Runtime& rt);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Builds the first snapshot and binds every listener. Returns an error message or "".
  std::string start(std::shared_ptr<const config::Config> cfg);
  // Applies a validated configuration; on error the previous one keeps serving.
  std::string reload(std::shared_ptr<const config::Config> cfg);
  // Graceful shutdown, first half: stop accepting; from now on every response closes its
  // connection.
  void begin_drain();
  // Closes the keep-alive connections that wait for a next request with no byte of it
  // received (after begin_drain); from then on a connection that turns idle closes itself
  // (SessionEntry).
  void close_idle_sessions();
  // Waits until no session is left, or the timeout passes; true when drained.
  bool wait_drained(std::chrono::milliseconds timeout);
  // Cancels every remaining session (forced shutdown).
  void abort_sessions();

  std::shared_ptr<const Snapshot> snapshot() const { return snap_.load(std::memory_order_acquire); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  // close_idle_sessions has run: a connection that turns idle now must close (SessionEntry).
  bool idle_connections_closed() const { return idle_closed_.load(); }
  bool ready() const { return ready_.load(std::memory_order_acquire) && !draining(); }
  GatewayStats& stats() { return stats_; }
  LoadShedder& shedder() { return shedder_; }
  io::Runtime& runtime() { return rt_; }
  // Sockets inherited at startup (socket activation) that listeners adopt by address.
  void set_inherited(io::InheritedSockets* s) { inherited_ = s; }
  io::InheritedSockets* inherited() const { return inherited_; }
  std::size_t active_sessions() const;
  // Bound ports by listener address (for tests and logs; port 0 in the config = picked).
  std::vector<std::pair<std::string, uint16_t>> bound_listeners() const;
  std::vector<std::shared_ptr<ListenerState>> listener_states() const;

  // Session registry. The accept loop announces each connection before spawning its task
  // (expect_session), so that drain also waits for a task that has not started yet; the
  // task then enters with the entry in its frame, and leaves before the frame goes.
  // enter_session returns false when sessions are being aborted: the task ends at once.
  void expect_session();
  bool enter_session(SessionEntry& e);
  void leave_session(SessionEntry& e);

 private:
  std::string build_snapshot(std::shared_ptr<const config::Config> cfg, std::shared_ptr<Snapshot>& out);
  // TLS listeners' contexts (certificates, SNI, ticket keys kept across reloads).
  std::string build_listener_tls(const config::Config& cfg, Snapshot& snap);
  // build_snapshot's parts; `prev` is the snapshot being replaced (nullptr at start).
  std::string build_clusters(const config::Config& cfg, const Snapshot* prev, Snapshot& snap);
  void attach_route_stats(const config::Config& cfg, Snapshot& snap);
  static void build_admission_limits(const config::Config& cfg, const Snapshot* prev, Snapshot& snap);
  static void build_rate_limits(const config::Config& cfg, const Snapshot* prev, Snapshot& snap);
  // Binds (or adopts) the listener's sockets; while its address is in use, tries again for
  // up to `in_use_wait`.
  std::string bind_listener(const config::ListenerSection& l, std::shared_ptr<ListenerState>& out,
                            std::chrono::milliseconds in_use_wait);
  static constexpr std::chrono::milliseconds kStartInUseWait{2000};
  // Adds copies of the listener's one socket, up to one per worker (ListenerState::sockets).
  static void share_socket(ListenerState& ls, std::size_t workers);
  void start_accepting(const std::shared_ptr<ListenerState>& ls);
  void stop_listener(const std::shared_ptr<ListenerState>& ls);
  void apply_shedding(const config::LimitsSection& lim);

  io::Runtime& rt_;
  io::InheritedSockets* inherited_ = nullptr;
  std::atomic<std::shared_ptr<const Snapshot>> snap_;
  upstream::HealthChecker health_;
  // Listener states readable without control_mu_ (the admin endpoint runs on a worker and
  // must not wait for a reload that resolves names).
  std::atomic<std::shared_ptr<const std::vector<std::shared_ptr<ListenerState>>>> listener_list_;
  void publish_listeners();
  std::atomic<bool> draining_{false};
  std::atomic<bool> idle_closed_{false};
  std::atomic<bool> ready_{false};
  GatewayStats stats_;
  LoadShedder shedder_;
  exec::JoinHandle<void> delay_probe_;  // samples scheduling delay while shedding is on
  // One per worker, pinned to it: closes that worker's expired or upstream-closed idle
  // upstream connections (upstream/conn_pool.h).
  std::vector<exec::JoinHandle<void>> pool_reapers_;
  void start_pool_reapers();

  // Endpoint names are looked up again every clusters[].dns_refresh (proxy/dns_refresh.cpp)
  // on a control-path thread of their own, since lookups block; it sleeps until the next
  // cluster is due (or a reload; Cluster::next_lookup_in: every second while a name has not
  // resolved yet). One round (refresh_dns): every cluster that is due and has an endpoint
  // whose address left the answer, or whose name resolved at last, is rebuilt
  // (Cluster::build moves only those endpoints) into a new snapshot, as a reload would,
  // without reading the file again.
  void dns_refresh_loop(std::stop_token stop);
  std::chrono::steady_clock::time_point refresh_dns();  // -> when the next cluster is due
  void wake_dns_refresh();                               // a new snapshot: maybe new names
  void stop_dns_refresh();
  std::map<std::string, std::chrono::steady_clock::time_point> dns_due_;  // by cluster; refresh_dns only
  std::mutex dns_wait_mu_;
  std::condition_variable_any dns_wait_;
  bool dns_config_changed_ = false;  // guarded by dns_wait_mu_
  std::jthread dns_thread_;

  mutable std::mutex control_mu_;  // start/reload/drain/refresh_dns (control thread operations)
  std::map<std::string, std::shared_ptr<ListenerState>> listeners_;  // by listener_key
  std::map<std::string, std::shared_ptr<RouteStats>> route_stats_;   // by route name, kept across reloads
  // Session ticket keys by listener key, kept across reloads (tls/server_context.h).
  std::map<std::string, std::shared_ptr<tls::TicketKeys>> ticket_keys_;

  // The registry: an intrusive list of the entries (O(1) in and out), guarded by
  // sessions_mu_, as are the counts.
  mutable std::mutex sessions_mu_;
  SessionEntry* sessions_ = nullptr;
  std::size_t session_count_ = 0;
  std::size_t sessions_starting_ = 0;  // expected, not yet entered
  bool aborting_ = false;
  std::condition_variable sessions_cv_;
};

}  // namespace sg::proxy
