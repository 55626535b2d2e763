// libFuzzer target: ibd's parser of /proc/PID/maps lines
// (src/ibd/client_mapping.hpp, parse_maps_line), which MAP_MEM_SHARED reads
// for a client's process. The input is one line's text. Invariants:
// nothing crashes or reads out of bounds; a line that parses has lo < hi
// and the kernel's field limits, and written back in the kernel's own
// format (show_map_vma: "%08lx-%08lx %c%c%c%c %08llx %02x:%02x %lu "),
// followed by the input's name, parses to the same fields.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ibd/client_mapping.hpp"

using namespace openib::ibd;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto m = parse_maps_line(in);
  if (!m) return 0;
  if (m->lo >= m->hi || m->major > 0xfff || m->minor > 0xfffff) std::abort();
  char head[160];
  std::snprintf(head, sizeof head, "%08llx-%08llx %c%c%c%c %08llx %02x:%02x %llu    /some/name (deleted)",
                (unsigned long long)m->lo, (unsigned long long)m->hi, m->perms[0], m->perms[1], m->perms[2],
                m->perms[3], (unsigned long long)m->offset, m->major, m->minor, (unsigned long long)m->ino);
  auto again = parse_maps_line(head);
  if (!again || again->lo != m->lo || again->hi != m->hi || again->offset != m->offset ||
      again->major != m->major || again->minor != m->minor || again->ino != m->ino ||
      std::string_view(again->perms) != std::string_view(m->perms, 4))
    std::abort();
  return 0;
}
