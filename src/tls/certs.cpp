#include "tls/certs.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

namespace sg::tls {

namespace {

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;


// Opens `file` for reading, or says why not (the errno text: "No such file or directory").
Owned<BIO> open_file(const std::string& file, std::string& why) {
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    why = file + ": not a regular file";
    return nullptr;
  }
  errno = 0;
  Owned<BIO> b(BIO_new_file(file.c_str(), "r"));
  if (!b) {
    why = file + ": cannot read: " + (errno != 0 ? std::strerror(errno) : openssl_reason("no PEM data found"));
    ERR_clear_error();
  }
  return b;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return s;
}

std::string subject_of(X509* x) {
  Owned<BIO> b(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(b.get(), X509_get_subject_name(x), 0, XN_FLAG_RFC2253);
  char* p = nullptr;
  const long n = BIO_get_mem_data(b.get(), &p);
  return n > 0 ? std::string(p, static_cast<std::size_t>(n)) : std::string();
}

std::vector<std::string> names_of(X509* x) {
  std::vector<std::string> out;
  Owned<GENERAL_NAMES> sans(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr)));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans.get()); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans.get(), i);
      if (g->type != GEN_DNS) continue;
      const ASN1_IA5STRING* s = g->d.dNSName;
      out.push_back(lower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                      static_cast<std::size_t>(ASN1_STRING_length(s)))));
    }
  }
  if (out.empty()) {
    X509_NAME* n = X509_get_subject_name(x);
    const int i = X509_NAME_get_index_by_NID(n, NID_commonName, -1);
    if (i >= 0) {
      const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(n, i));
      out.push_back(lower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                      static_cast<std::size_t>(ASN1_STRING_length(s)))));
    }
  }
  return out;
}

int64_t unix_time(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

std::string utc_text(int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::string check_certificate(const std::string& cert_file, const std::string& key_file, CertificateInfo* info) {
  std::string why;
  Owned<BIO> cb = open_file(cert_file, why);
  if (!cb) return why;
  Owned<X509> leaf(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!leaf) return cert_file + ": not a PEM certificate (" + openssl_reason("no PEM data found") + ")";
  Owned<BIO> kb = open_file(key_file, why);
  if (!kb) return why;
  Owned<EVP_PKEY> key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!key) return key_file + ": not a PEM private key (" + openssl_reason("no PEM data found") + ")";
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return key_file + ": the private key does not match the certificate in " + cert_file;
  }
  const int64_t not_after = unix_time(X509_get0_notAfter(leaf.get()));
  if (X509_cmp_current_time(X509_get0_notAfter(leaf.get())) < 0) {
    return cert_file + ": the certificate expired on " + utc_text(not_after);
  }
  if (info != nullptr) {
    info->names = names_of(leaf.get());
    info->subject = subject_of(leaf.get());
    info->not_after = not_after;
  }
  return {};
}

std::string check_ca_file(const std::string& file) {
  std::string why;
  Owned<BIO> b = open_file(file, why);
  if (!b) return why;
  int n = 0;
  while (Owned<X509> x{PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)}) ++n;
  ERR_clear_error();  // the read past the last certificate
  if (n == 0) return file + ": no PEM certificate in it";
  return {};
}

std::string check_ciphers(const std::string& list, bool tls13) {
  Owned<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return "OpenSSL could not make a context: " + openssl_reason();
  const int ok =
      tls13 ? SSL_CTX_set_ciphersuites(ctx.get(), list.c_str()) : SSL_CTX_set_cipher_list(ctx.get(), list.c_str());
  if (ok != 1) {
    ERR_clear_error();
    return "\"" + list + "\" names no cipher " + (tls13 ? "suite OpenSSL knows (e.g. TLS_AES_128_GCM_SHA256)"
                                                         : "OpenSSL knows (e.g. ECDHE-ECDSA-AES128-GCM-SHA256)");
  }
  return {};
}

std::string openssl_reason(std::string_view when_none) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  const char* r = e != 0 ? ERR_reason_error_string(e) : nullptr;
  if (r != nullptr) return r;
  return std::string(e == 0 ? when_none : "unknown OpenSSL error");
}

bool name_matches(const std::string& pattern, const std::string& name) {
  if (pattern == name) return true;
  if (pattern.size() < 3 || pattern.compare(0, 2, "*.") != 0) return false;
  const std::size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0) return false;
  return name.compare(dot, std::string::npos, pattern, 1, std::string::npos) == 0;
}

}  // namespace sg::tls
