// Checks of TLS material named by the configuration, made while the file is loaded so that
// a bad certificate is a configuration error (file:line:column, the field, the file) and a
// reload with one keeps the old configuration serving.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sg::tls {

struct CertificateInfo {
  std::vector<std::string> names;  // subjectAltName DNS names, else the subject's CN (lower case)
  std::string subject;             // RFC 2253
  int64_t not_after = 0;           // Unix time the leaf expires
};

// Loads a PEM certificate chain (leaf first) and its private key. Returns "" or why they
// cannot serve: a file that cannot be read or holds no PEM certificate or key, a key that
// does not match the certificate, a leaf that has expired. `info` gets the leaf's details.
std::string check_certificate(const std::string& cert_file, const std::string& key_file, CertificateInfo* info);
// A PEM file of one or more CA certificates: "" or why it cannot be used.
std::string check_ca_file(const std::string& file);
// An OpenSSL cipher list (TLS 1.2) or TLS 1.3 ciphersuite list: "" or why it is refused.
std::string check_ciphers(const std::string& list, bool tls13);

// The reason of the first error OpenSSL queued on this thread (and the queue cleared), or
// `when_none` when it queued none.
std::string openssl_reason(std::string_view when_none = "unknown OpenSSL error");

// Whether `name` (a lower-case host name) is matched by certificate name `pattern`: equal,
// or "*.example.com" matching exactly one label in front of "example.com".
bool name_matches(const std::string& pattern, const std::string& name);

}  // namespace sg::tls
