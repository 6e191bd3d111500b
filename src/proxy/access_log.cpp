#include "proxy/access_log.h"

#include "common/log.h"

namespace sg::proxy {

namespace {

// The access log's TLS fields: version, cipher, the requested name, resumption, and the
// verified client certificate's subject.
std::string tls_json(const io::TlsSummary& t) {
  std::string out = ",\"tls\":{\"version\":" + log::json_quote(t.version) + ",\"cipher\":" + log::json_quote(t.cipher) +
                    ",\"sni\":" + log::json_quote(t.sni) + ",\"resumed\":" + (t.resumed ? "true" : "false");
  if (!t.peer_subject.empty()) out += ",\"client_subject\":" + log::json_quote(t.peer_subject);
  return out + "}";
}

std::string tls_text(const io::TlsSummary& t) {
  std::string scratch;
  std::string out = " tls=" + std::string(t.version) +
                    " sni=" + (t.sni.empty() ? "-" : std::string(log::text_safe(t.sni, scratch, false))) +
                    (t.resumed ? " resumed" : "");
  if (!t.peer_subject.empty()) out += " client=\"" + std::string(log::text_safe(t.peer_subject, scratch)) + "\"";
  return out;
}

}  // namespace

void write_access_log(const RequestContext& c, const http::RequestHead& req, uint64_t duration_us) {
  auto logger = log::access();
  if (!logger) return;
  if (log::access_json()) {
    logger->info(
        R"("client":{},"method":{},"target":{},"route":{},"cluster":{},"endpoint":{},"status":{},)"
        R"("bytes_in":{},"bytes_out":{},"duration_ms":{:.3f},"attempts":{},"request_id":{}{}{}}})",
        log::json_quote(c.client), log::json_quote(req.method), log::json_quote(req.target),
        log::json_quote(c.route), log::json_quote(c.cluster), log::json_quote(c.endpoint), c.status, c.bytes_in,
        c.bytes_out, static_cast<double>(duration_us) / 1000.0, c.attempts, log::json_quote(c.request_id.view()),
        c.tls == nullptr ? std::string() : tls_json(*c.tls),
        c.note.empty() ? std::string() : ",\"note\":" + log::json_quote(c.note));
  } else {
    std::string target_scratch, note_scratch;
    logger->info("{} \"{} {} HTTP/1.{}\" {} {} route={} cluster={} endpoint={} {:.3f}ms attempts={} id={}{}{}{}{}",
                 c.client, req.method, log::text_safe(req.target, target_scratch), req.version_minor, c.status,
                 c.bytes_out, c.route, c.cluster, c.endpoint, static_cast<double>(duration_us) / 1000.0, c.attempts,
                 c.request_id.view(), c.tls == nullptr ? std::string() : tls_text(*c.tls),
                 c.note.empty() ? "" : " note=\"", log::text_safe(c.note, note_scratch), c.note.empty() ? "" : "\"");
  }
}

void log_refused_request(std::string_view peer, int status, const std::string& note) {
  auto l = log::access();
  if (!l) return;
  if (log::access_json()) {
    l->info(R"("client":{},"status":{},"note":{}}})", log::json_quote(peer), status, log::json_quote(note));
  } else {
    std::string scratch;
    l->info("{} \"-\" {} 0 note=\"{}\"", peer, status, log::text_safe(note, scratch));
  }
}

}  // namespace sg::proxy
