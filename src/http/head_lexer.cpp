// The head lexer: Parser's first pass over a message head's bytes, before llhttp sees
// them, for what llhttp 8 tolerates and RFC 9112 does not (bare LF line ends, obs-fold,
// whitespace before the first field line, more than one SP in the request line) and for
// the start line's first and last bytes (the method and version, which llhttp's errors
// do not give back). It also folds HTAB to SP in Content-Length and Transfer-Encoding
// values. A split from parser.cpp, which holds the llhttp side; both are Parser's.
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "http/parser.h"

namespace sg::http {

namespace {
// The first CR or LF (or `extra`, unless it is -1) in [p, p + n), or p + n.
template <int extra>
const char* find_line_end(const char* p, std::size_t n) {
  const char* end = p + n;
#if defined(__SSE2__)
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i lf = _mm_set1_epi8('\n');
  while (end - p >= 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, lf));
    if constexpr (extra >= 0) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(extra))));
    int mask = _mm_movemask_epi8(hit);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  for (; p < end; ++p) {
    if (*p == '\r' || *p == '\n' || (extra >= 0 && *p == static_cast<char>(extra))) return p;
  }
  return end;
}
const char* find_cr_or_lf(const char* p, std::size_t n) { return find_line_end<-1>(p, n); }
}  // namespace

bool Parser::lex_head(char* data, std::size_t len) {
  const char* violation = nullptr;
  for (std::size_t i = 0; i < len && lex_ != Lex::kDone && violation == nullptr; ++i) {
    const char c = data[i];
    switch (lex_) {
      case Lex::kStart:  // empty lines before the start line are allowed (RFC 9112 §2.2)
        if (c == '\r') {
          lex_ = Lex::kCr;
        } else if (c == '\n') {
          violation = "bare LF line ending";
        } else {
          lex_ = Lex::kStartLine;
          violation = lex_start_line(data, len, i);
          if (violation == nullptr) take_lf(data, len, i);
        }
        break;
      case Lex::kStartLine:
        violation = lex_start_line(data, len, i);
        if (violation == nullptr) take_lf(data, len, i);
        break;
      case Lex::kCr:
        if (c != '\n') violation = "bare CR";
        else lex_ = start_line_len_ == 0 ? Lex::kStart : Lex::kLineStart;
        break;
      case Lex::kLineStart:
        if (c == ' ' || c == '\t') {
          violation = lex_seen_field_line_ ? "obsolete line folding" : "whitespace before the first header field";
        } else if (c == '\r') {
          lex_ = Lex::kEndCr;  // the empty line that ends the head
        } else if (c == '\n') {
          violation = "bare LF line ending";
        } else {
          lex_seen_field_line_ = true;
          field_name_len_ = 0;
          framing_value_ = false;
          lex_ = Lex::kFieldName;
          violation = lex_field_line(data, len, i);
        }
        break;
      case Lex::kFieldName:
        violation = lex_field_line(data, len, i);
        break;
      case Lex::kInLine:
        violation = lex_in_line(data, len, i);
        if (violation == nullptr) take_lf(data, len, i);
        break;
      case Lex::kEndCr:
        if (c != '\n') violation = "bare CR";
        else lex_ = Lex::kDone;
        break;
      case Lex::kDone:
        break;
    }
  }
  if (violation != nullptr) {
    fail(mode_ == Mode::kRequest ? 400 : 502, violation);
    return false;
  }
  return true;
}

const char* Parser::lex_start_line(const char* data, std::size_t len, std::size_t& i) {
  // The rest of the start line in one go: find its end, check the request line's spacing,
  // remember its first bytes (method) and last 8 (version).
  const char* p = data + i;
  const char* q = find_cr_or_lf(p, len - i);
  if (mode_ == Mode::kRequest) {
    for (const char* b = p; b < q; ++b) {
      // Exactly one SP between method, target and version (RFC 9112 §3: lenient
      // whitespace "can result in request smuggling").
      const char ch = *b;
      const bool space = ch == ' ';
      if (space && (prev_was_space_ || (start_line_len_ == 0 && b == p))) return "malformed request line";
      if (ch == '\t' || ch == '\v' || ch == '\f') return "malformed request line";
      prev_was_space_ = space;
    }
  }
  const std::size_t n = static_cast<std::size_t>(q - p);
  if (start_line_len_ < sizeof(start_line_head_)) {
    std::memcpy(start_line_head_ + start_line_len_, p, std::min(n, sizeof(start_line_head_) - start_line_len_));
  }
  if (n >= 8) {
    std::memcpy(start_line_tail_, q - 8, 8);
  } else {  // (a line arriving in pieces)
    std::memmove(start_line_tail_, start_line_tail_ + n, 8 - n);
    std::memcpy(start_line_tail_ + 8 - n, p, n);
  }
  start_line_len_ += n;
  if (q == data + len) {
    i = len - 1;  // the line continues in the next read
    return nullptr;
  }
  if (*q == '\n') return "bare LF line ending";
  if (mode_ == Mode::kRequest) {
    if (prev_was_space_) return "malformed request line";
    version_syntax_ok_ = version_tail_ok();
  }
  i = static_cast<std::size_t>(q - data);  // at the CR
  lex_ = Lex::kCr;
  return nullptr;
}

// A whole field line in one step of lex_head's loop where it is all there: the name, the
// rest of the line, its CRLF (instead of a step for each).
const char* Parser::lex_field_line(char* data, std::size_t len, std::size_t& i) {
  const char* violation = lex_field_name_run(data, len, i);
  if (violation != nullptr || lex_ != Lex::kInLine || i + 1 == len) return violation;
  ++i;  // past the colon
  violation = lex_in_line(data, len, i);
  if (violation == nullptr) take_lf(data, len, i);
  return violation;
}

// At a line's CR: takes the LF after it too when it is there (a bare CR is left for
// lex_head's kCr step to refuse).
void Parser::take_lf(const char* data, std::size_t len, std::size_t& i) {
  if (lex_ != Lex::kCr || i + 1 == len || data[i + 1] != '\n') return;
  ++i;
  lex_ = start_line_len_ == 0 ? Lex::kStart : Lex::kLineStart;
}

const char* Parser::lex_field_name_run(const char* data, std::size_t len, std::size_t& i) {
  // The field name up to its colon, in one go: is it one whose value we fold?
  const char* p = data + i;
  const char* q = find_line_end<':'>(p, len - i);
  lex_field_name(std::string_view(p, static_cast<std::size_t>(q - p)), q < data + len && *q == ':');
  if (q == data + len) {
    i = len - 1;  // the name continues in the next read
    return nullptr;
  }
  i = static_cast<std::size_t>(q - data);
  if (*q == ':') return nullptr;  // lex_field_name moved on to kInLine
  if (*q == '\n') return "bare LF line ending";
  lex_ = Lex::kCr;  // a line without a colon: llhttp refuses it
  return nullptr;
}

const char* Parser::lex_in_line(char* data, std::size_t len, std::size_t& i) {
  // The bulk of a head: skip to the line's end (16 bytes at a time), refusing a NUL on the
  // way (so the field values stored from a head hold no NUL, CR or LF: see
  // on_header_value_complete). Tabs in a framing header's value become spaces (see
  // lex_field_name).
  char* q = data + (find_line_end<0>(data + i, len - i) - data);
  if (q != data + len && *q == '\0') return "NUL in a header field";
  if (framing_value_) {
    for (char* b = data + i; b < q; ++b) {
      if (*b == '\t') *b = ' ';
    }
  }
  if (q == data + len) {
    i = len - 1;  // the whole rest is inside this line
    return nullptr;
  }
  if (*q == '\n') return "bare LF line ending";
  i = static_cast<std::size_t>(q - data);  // at the CR
  lex_ = Lex::kCr;
  return nullptr;
}

void Parser::lex_field_name(std::string_view part, bool complete) {
  auto is_framing = [](std::string_view name) {
    return (name.size() == 14 && iequals(name, "content-length")) ||
           (name.size() == 17 && iequals(name, "transfer-encoding"));
  };
  if (complete && field_name_len_ == 0) {  // the whole name in one read: no copy
    framing_value_ = is_framing(part);
    lex_ = Lex::kInLine;
    return;
  }
  // A name split across reads: keep its first bytes (enough for the two names).
  for (char c : part) {
    if (field_name_len_ < sizeof(field_name_)) field_name_[field_name_len_] = c;
    ++field_name_len_;
  }
  if (!complete) return;
  framing_value_ = field_name_len_ <= sizeof(field_name_) && is_framing(std::string_view(field_name_, field_name_len_));
  lex_ = Lex::kInLine;
}

// "HTTP/" DIGIT "." DIGIT at the end of what we have seen of the start line (§2.3).
bool Parser::version_tail_ok() const {
  const char* v = start_line_tail_;
  return start_line_len_ >= 8 && std::memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' &&
         v[7] >= '0' && v[7] <= '9';
}

}  // namespace sg::http
