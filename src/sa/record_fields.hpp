// One field list per SA record, read both ways (STYLE.md: a layout written
// once). A record's codec lists its fields as f(bit offset, bit length,
// member) in the order and numbering of its IBA table; FieldWriter encodes
// them and FieldReader decodes them with the bounded helpers of
// mad/bytes.hpp. GIDs and other 16-byte fields, and NUL-padded strings,
// are byte-aligned and have their own overloads.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "sa/sa_mad.hpp"

namespace openib::sa {

struct FieldWriter {
  MutBytes out;
  template <class T>
    requires std::is_arithmetic_v<T>
  void operator()(std::size_t bit, unsigned len, const T& v) const {
    mad::put_bits(out, bit, len, static_cast<std::uint64_t>(v));
  }
  void operator()(std::size_t bit, unsigned /*128*/, const Gid& g) const { put_gid(out, bit / 8, g); }
  void operator()(std::size_t bit, unsigned len, const std::string& s) const {
    const std::size_t n = std::min<std::size_t>(s.size(), len / 8);
    for (std::size_t i = 0; i < n; ++i) mad::put8(out, bit / 8 + i, static_cast<std::uint8_t>(s[i]));
  }
};

struct FieldReader {
  ConstBytes in;
  template <class T>
    requires std::is_arithmetic_v<T>
  void operator()(std::size_t bit, unsigned len, T& v) const {
    if constexpr (std::is_same_v<T, bool>)
      v = mad::get_bits(in, bit, len) != 0;
    else
      v = static_cast<T>(mad::get_bits(in, bit, len));
  }
  void operator()(std::size_t bit, unsigned /*128*/, Gid& g) const { g = get_gid(in, bit / 8); }
  void operator()(std::size_t bit, unsigned len, std::string& s) const {  // up to the first NUL
    s.clear();
    for (std::size_t i = 0; i < len / 8; ++i) {
      const auto c = static_cast<char>(mad::get8(in, bit / 8 + i));
      if (c == '\0') break;
      s.push_back(c);
    }
  }
};

// encode: zero the record's bytes, then write every field.
template <class Rec, class Fields>
void encode_fields(MutBytes out, std::size_t bytes, const Rec& v, Fields fields) {
  mad::zero(out, bytes);
  fields(v, FieldWriter{out});
}
// decode: EPROTO if `in` is shorter than the record, else read every field.
template <class Rec, class Fields>
Result<Rec> decode_fields(ConstBytes in, std::size_t bytes, const char* what, Fields fields) {
  if (auto r = mad::need(in, bytes, what); !r) return r.take_error();
  Rec v;
  fields(v, FieldReader{in});
  return v;
}

}  // namespace openib::sa
