// vfio-user 0.9.1 codecs against byte strings written out by hand from the
// tables of QEMU's docs/interop/vfio-user.rst, plus round trips and the
// rejection of truncated, oversized and inconsistent messages.
#include <catch2/catch.hpp>

#include <initializer_list>

#include "vfio/vfio_user_proto.hpp"

using namespace openib::vfio;
using namespace openib::vfio::user;

namespace {

Bytes B(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

// Appends little-endian fields, for building bad messages by hand.
struct Build {
  Bytes b;
  Build& u8(uint8_t v) { b.push_back(std::byte{v}); return *this; }
  Build& u16(uint16_t v) { for (int i = 0; i < 2; ++i) u8(static_cast<uint8_t>(v >> (8 * i))); return *this; }
  Build& u32(uint32_t v) { for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i))); return *this; }
  Build& u64(uint64_t v) { for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i))); return *this; }
};

template <typename R>
void require_eproto(const R& r) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EPROTO);
  CHECK_FALSE(r.error().message.empty());
}

}  // namespace

TEST_CASE("header layout: id, command, size, flags, error (spec 'Header')", "[vfio-user]") {
  Bytes m = encode_command(0x1234, Command::kDmaMap, Bytes(32));
  REQUIRE(m.size() == 48);
  CHECK(Bytes(m.begin(), m.begin() + 16) ==
        B({0x34, 0x12, 0x02, 0x00, 0x30, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}));

  // A reply with the error bit (bit 5) and errno 22.
  Bytes e = encode_error_reply(7, 9, 22);
  CHECK(e == B({0x07, 0x00, 0x09, 0x00, 0x10, 0, 0, 0, 0x21, 0, 0, 0, 0x16, 0, 0, 0}));
  auto h = decode_header(e);
  REQUIRE(h.ok());
  CHECK(h->id == 7);
  CHECK(h->command == 9);
  CHECK(h->is_reply());
  CHECK(h->is_error());
  CHECK(h->error == 22);
  CHECK_FALSE(h->no_reply());

  auto nr = decode_header(B({1, 0, 13, 0, 16, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0}));
  REQUIRE(nr.ok());
  CHECK(nr->no_reply());
  CHECK_FALSE(nr->is_reply());
}

TEST_CASE("header rejects what cannot be framed", "[vfio-user]") {
  SECTION("truncated") { require_eproto(decode_header(B({1, 0, 1, 0, 16, 0, 0}))); }
  SECTION("size below the header") {
    require_eproto(decode_header(B({1, 0, 1, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})));
  }
  SECTION("oversized") {
    require_eproto(decode_header(Build{}.u16(1).u16(9).u32(kMaxMessageSize + 1).u32(1).u32(0).b));
    require_eproto(decode_header(Build{}.u16(1).u16(9).u32(100).u32(1).u32(0).b, 64));
    require_eproto(decode_header(Build{}.u16(1).u16(9).u32(0xffffffff).u32(1).u32(0).b));
  }
  SECTION("unknown type") {
    require_eproto(decode_header(Build{}.u16(1).u16(1).u32(16).u32(2).u32(0).b));
  }
  SECTION("unknown flag bits") {
    require_eproto(decode_header(Build{}.u16(1).u16(1).u32(16).u32(1u << 6).u32(0).b));
  }
  SECTION("message shorter or longer than its size field") {
    Bytes m = encode_command(1, Command::kDeviceReset, {});
    CHECK(decode_message(m).ok());
    Bytes longer = m;
    longer.push_back(std::byte{0});
    require_eproto(decode_message(longer));
    require_eproto(decode_message(ByteSpan(m).first(15)));
  }
}

TEST_CASE("VERSION: major, minor, NUL-terminated JSON", "[vfio-user]") {
  Version v{0, 1, "{}"};
  CHECK(encode_version(v) == B({0x00, 0x00, 0x01, 0x00, '{', '}', 0x00}));
  auto d = decode_version(B({0x00, 0x00, 0x01, 0x00, '{', '}', 0x00}));
  REQUIRE(d.ok());
  CHECK(d->major == 0);
  CHECK(d->minor == 1);
  CHECK(d->json == "{}");

  auto bare = decode_version(B({0x00, 0x00, 0x01, 0x00}));
  REQUIRE(bare.ok());
  CHECK(bare->json.empty());

  require_eproto(decode_version(B({0x00, 0x00, 0x01})));
  require_eproto(decode_version(B({0, 0, 1, 0, '{', '}'})));          // no NUL
  require_eproto(decode_version(B({0, 0, 1, 0, '{', 0, '}', 0})));    // NUL inside
  Bytes huge = B({0, 0, 1, 0});
  huge.insert(huge.end(), kMaxVersionJson + 1, std::byte{' '});
  huge.push_back(std::byte{0});
  require_eproto(decode_version(huge));
}

TEST_CASE("VERSION capabilities JSON", "[vfio-user]") {
  Capabilities c{8, 65536, 4096, 100};
  std::string j = capabilities_json(c);
  auto back = parse_capabilities(j);
  REQUIRE(back.ok());
  CHECK(back->max_msg_fds == 8);
  CHECK(back->max_data_xfer_size == 65536);
  CHECK(back->pgsizes == 4096);
  CHECK(back->max_dma_maps == 100);

  SECTION("defaults from the spec when absent") {
    for (const char* s : {"", "{}", "{\"capabilities\":{}}"}) {
      auto d = parse_capabilities(s);
      REQUIRE(d.ok());
      CHECK(d->max_msg_fds == 1);
      CHECK(d->max_data_xfer_size == 1048576);
      CHECK(d->pgsizes == 4096);
      CHECK(d->max_dma_maps == 65535);
    }
  }
  SECTION("unknown members are ignored") {
    auto d = parse_capabilities(
        R"({"capabilities":{"max_msg_fds":4,"migration":{"pgsize":4096},"twin_socket":{"supported":false}}})");
    REQUIRE(d.ok());
    CHECK(d->max_msg_fds == 4);
  }
  SECTION("bad JSON and bad values") {
    require_eproto(parse_capabilities("{"));
    require_eproto(parse_capabilities("[1,2]"));
    require_eproto(parse_capabilities(R"({"capabilities":7})"));
    require_eproto(parse_capabilities(R"({"capabilities":{"max_msg_fds":"8"}})"));
    require_eproto(parse_capabilities(R"({"capabilities":{"max_msg_fds":-1}})"));
    require_eproto(parse_capabilities(R"({"capabilities":{"max_msg_fds":0}})"));
    require_eproto(parse_capabilities(R"({"capabilities":{"max_data_xfer_size":1.5}})"));
    require_eproto(parse_capabilities(R"({"capabilities":{"max_data_xfer_size":99999999999}})"));
  }
}

TEST_CASE("DMA_MAP: argsz 32, flags, offset, address, size", "[vfio-user]") {
  const Bytes wire = B({0x20, 0, 0, 0,                      // argsz 32
                        0x03, 0, 0, 0,                      // read | write
                        0x00, 0x10, 0, 0, 0, 0, 0, 0,       // offset 0x1000
                        0x00, 0x00, 0x20, 0, 0, 0, 0, 0,    // address 0x200000
                        0x00, 0x20, 0, 0, 0, 0, 0, 0});     // size 0x2000
  DmaMapRequest r{VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE, 0x1000, 0x200000, 0x2000};
  CHECK(encode_dma_map(r) == wire);
  auto d = decode_dma_map(wire);
  REQUIRE(d.ok());
  CHECK(d->flags == 3);
  CHECK(d->offset == 0x1000);
  CHECK(d->address == 0x200000);
  CHECK(d->size == 0x2000);

  require_eproto(decode_dma_map(ByteSpan(wire).first(31)));
  Bytes longer = wire;
  longer.push_back(std::byte{0});
  require_eproto(decode_dma_map(longer));
  Bytes bad = wire;
  bad[0] = std::byte{31};  // argsz
  require_eproto(decode_dma_map(bad));
  bad = wire;
  bad[4] = std::byte{4};  // unknown flag
  require_eproto(decode_dma_map(bad));
  require_eproto(decode_dma_map(encode_dma_map({1, 0, 0x1000, 0})));           // size 0
  require_eproto(decode_dma_map(encode_dma_map({1, 0, ~0ull - 10, 0x1000})));  // wraps
}

TEST_CASE("DMA_UNMAP: argsz, flags, address, size", "[vfio-user]") {
  const Bytes wire = B({0x18, 0, 0, 0, 0, 0, 0, 0,
                        0x00, 0x00, 0x20, 0, 0, 0, 0, 0,
                        0x00, 0x20, 0, 0, 0, 0, 0, 0});
  CHECK(encode_dma_unmap({24, 0, 0x200000, 0x2000}) == wire);
  auto d = decode_dma_unmap(wire);
  REQUIRE(d.ok());
  CHECK(d->address == 0x200000);
  CHECK(d->size == 0x2000);
  require_eproto(decode_dma_unmap(ByteSpan(wire).first(23)));
  require_eproto(decode_dma_unmap(encode_dma_unmap({16, 0, 0x200000, 0x2000})));  // argsz
  require_eproto(decode_dma_unmap(encode_dma_unmap({24, 1, 0x200000, 0x2000})));  // dirty bitmap
}

TEST_CASE("DEVICE_GET_INFO request and reply", "[vfio-user]") {
  CHECK(encode_device_info_request() == B({16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  const Bytes reply = B({0x10, 0, 0, 0, 0x03, 0, 0, 0, 0x09, 0, 0, 0, 0x05, 0, 0, 0});
  CHECK(encode_device_info({VFIO_DEVICE_FLAGS_RESET | VFIO_DEVICE_FLAGS_PCI, 9, 5}) == reply);
  auto d = decode_device_info(reply);
  REQUIRE(d.ok());
  CHECK(d->flags == 3);
  CHECK(d->num_regions == 9);
  CHECK(d->num_irqs == 5);
  require_eproto(decode_device_info(ByteSpan(reply).first(12)));
  require_eproto(decode_device_info(B({8, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0, 5, 0, 0, 0})));
  require_eproto(decode_device_info(B({16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 5, 0, 0, 0})));
  require_eproto(decode_device_info_request(B({4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})));
}

namespace {
// GET_REGION_INFO reply for a 2-page region 2 whose second page may be
// mmap-ed: fixed part (32 bytes) + sparse-mmap cap at 32 (16 + 16 bytes).
const Bytes kRegionWire = B({
    0x40, 0, 0, 0,                     // argsz 64
    0x0f, 0, 0, 0,                     // READ | WRITE | MMAP | CAPS
    0x02, 0, 0, 0,                     // index 2
    0x20, 0, 0, 0,                     // cap_offset 32
    0x00, 0x20, 0, 0, 0, 0, 0, 0,      // size 0x2000
    0x00, 0x00, 0, 0, 0, 0, 0, 0,      // offset 0
    0x01, 0x00, 0x01, 0x00,            // cap id 1 (SPARSE_MMAP), version 1
    0x00, 0, 0, 0,                     // next 0
    0x01, 0, 0, 0, 0, 0, 0, 0,         // nr_areas 1, reserved
    0x00, 0x10, 0, 0, 0, 0, 0, 0,      // area offset 0x1000
    0x00, 0x10, 0, 0, 0, 0, 0, 0});    // area size 0x1000

Bytes with_u32(Bytes b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<std::byte>(v >> (8 * i));
  return b;
}
}  // namespace

TEST_CASE("DEVICE_GET_REGION_INFO with the sparse mmap capability", "[vfio-user]") {
  CHECK(encode_region_info_request({256, 2}) ==
        B({0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
           0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  RegionInfo info;
  info.index = 2;
  info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;
  info.size = 0x2000;
  info.sparse = {{0x1000, 0x1000}};
  CHECK(encode_region_info(info, 256) == kRegionWire);

  auto d = decode_region_info(kRegionWire);
  REQUIRE(d.ok());
  CHECK_FALSE(d->truncated);
  CHECK(d->argsz == 64);
  CHECK(d->info.index == 2);
  CHECK(d->info.size == 0x2000);
  CHECK(d->info.mmappable());
  REQUIRE(d->info.sparse.size() == 1);
  CHECK(d->info.sparse[0].offset == 0x1000);
  CHECK(d->info.sparse[0].size == 0x1000);

  SECTION("a request with too little room gets the fixed part and the needed argsz") {
    Bytes small = encode_region_info(info, 32);
    CHECK(small == B({0x40, 0, 0, 0, 0x07, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0,
                      0x00, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
    auto t = decode_region_info(small);
    REQUIRE(t.ok());
    CHECK(t->truncated);
    CHECK(t->argsz == 64);
  }
  SECTION("no capabilities") {
    RegionInfo plain{0, VFIO_REGION_INFO_FLAG_READ, 0x100000, 0, {}};
    auto p = decode_region_info(encode_region_info(plain, 32));
    REQUIRE(p.ok());
    CHECK(p->info.size == 0x100000);
    CHECK(p->info.sparse.empty());
  }
  SECTION("the type capability, chained before the sparse areas") {
    RegionInfo page = info;
    page.index = 12;
    page.type = 0x80001234;  // VFIO_REGION_TYPE_PCI_VENDOR_TYPE | vendor
    page.subtype = 1;
    Bytes w = encode_region_info(page, 256);
    CHECK(w.size() == 32 + 16 + 32);
    auto t = decode_region_info(w);
    REQUIRE(t.ok());
    CHECK(t->info.type == 0x80001234);
    CHECK(t->info.subtype == 1);
    REQUIRE(t->info.sparse.size() == 1);
    page.sparse.clear();
    auto alone = decode_region_info(encode_region_info(page, 256));
    REQUIRE(alone.ok());
    CHECK(alone->info.type == 0x80001234);
    CHECK(alone->info.sparse.empty());
    require_eproto(decode_region_info(with_u32(encode_region_info(page, 256), 40, 0)));  // type 0
  }
  SECTION("unknown capabilities are skipped") {
    // An unknown cap (id 99) at 32 pointing to the sparse cap moved to 40.
    Bytes w(kRegionWire.begin(), kRegionWire.begin() + 32);
    w = with_u32(w, 0, 72);
    Bytes unk = Build{}.u16(99).u16(1).u32(40).b;
    w.insert(w.end(), unk.begin(), unk.end());
    w.insert(w.end(), kRegionWire.begin() + 32, kRegionWire.end());
    auto u = decode_region_info(w);
    REQUIRE(u.ok());
    CHECK(u->info.sparse.size() == 1);
  }
}

TEST_CASE("DEVICE_GET_REGION_INFO rejects bad lengths and capability chains", "[vfio-user]") {
  SECTION("truncated fixed part") { require_eproto(decode_region_info(ByteSpan(kRegionWire).first(31))); }
  SECTION("argsz below the fixed part") { require_eproto(decode_region_info(with_u32(kRegionWire, 0, 16))); }
  SECTION("argsz smaller than the payload") { require_eproto(decode_region_info(with_u32(kRegionWire, 0, 48))); }
  SECTION("argsz larger than a partial payload") {
    require_eproto(decode_region_info(ByteSpan(kRegionWire).first(40)));
  }
  SECTION("capability pointing at itself") {
    require_eproto(decode_region_info(with_u32(kRegionWire, 36, 32)));
  }
  SECTION("two capabilities pointing at each other") {
    Bytes w(kRegionWire.begin(), kRegionWire.begin() + 32);
    w = with_u32(w, 0, 48);
    Bytes caps = Build{}.u16(99).u16(1).u32(40).u16(98).u16(1).u32(32).b;
    w.insert(w.end(), caps.begin(), caps.end());
    require_eproto(decode_region_info(w));
  }
  SECTION("capability offset inside the fixed part, misaligned, or past argsz") {
    require_eproto(decode_region_info(with_u32(kRegionWire, 12, 8)));
    require_eproto(decode_region_info(with_u32(kRegionWire, 12, 34)));
    require_eproto(decode_region_info(with_u32(kRegionWire, 12, 60)));
    require_eproto(decode_region_info(with_u32(kRegionWire, 12, 1000)));
  }
  SECTION("sparse areas overrunning argsz or the region") {
    require_eproto(decode_region_info(with_u32(kRegionWire, 40, 2)));       // nr_areas 2
    require_eproto(decode_region_info(with_u32(kRegionWire, 40, 0)));       // nr_areas 0
    require_eproto(decode_region_info(with_u32(kRegionWire, 48, 0x1800)));  // offset 0x1800 + 0x1000
    Bytes huge = kRegionWire;                                               // offset ~0
    for (int i = 48; i < 56; ++i) huge[i] = std::byte{0xff};
    require_eproto(decode_region_info(huge));
  }
  SECTION("sparse cap version") {
    Bytes v = kRegionWire;
    v[34] = std::byte{2};
    require_eproto(decode_region_info(v));
  }
  SECTION("every truncation is rejected or reported truncated, never read past") {
    for (size_t n = 0; n < kRegionWire.size(); ++n) {
      auto r = decode_region_info(ByteSpan(kRegionWire).first(n));
      CHECK((!r.ok() || r->truncated));
    }
  }
  SECTION("request argsz below the fixed part") {
    require_eproto(decode_region_info_request(encode_region_info_request({16, 0})));
  }
}

TEST_CASE("DEVICE_GET_IRQ_INFO request and reply", "[vfio-user]") {
  CHECK(encode_irq_info_request(1) == B({16, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}));
  auto idx = decode_irq_info_request(encode_irq_info_request(1));
  REQUIRE(idx.ok());
  CHECK(*idx == 1);
  const Bytes reply = B({16, 0, 0, 0, 0x09, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0});
  CHECK(encode_irq_info({1, VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE, 1}) == reply);
  auto d = decode_irq_info(reply);
  REQUIRE(d.ok());
  CHECK(d->flags == 9);
  CHECK(d->index == 1);
  CHECK(d->count == 1);
  require_eproto(decode_irq_info(ByteSpan(reply).first(15)));
  require_eproto(decode_irq_info(with_u32(reply, 0, 12)));
}

TEST_CASE("DEVICE_SET_IRQS: argsz covers the data", "[vfio-user]") {
  IrqSet s;
  s.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;  // 0x4 | 0x20
  s.index = VFIO_PCI_MSI_IRQ_INDEX;
  s.count = 1;
  const Bytes wire = B({20, 0, 0, 0, 0x24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0});
  CHECK(encode_irq_set(s) == wire);
  auto d = decode_irq_set(wire);
  REQUIRE(d.ok());
  CHECK(d->data_type() == VFIO_IRQ_SET_DATA_EVENTFD);
  CHECK(d->action() == VFIO_IRQ_SET_ACTION_TRIGGER);
  CHECK(d->index == 1);
  CHECK(d->count == 1);

  IrqSet b;
  b.flags = VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER;
  b.index = 2;
  b.start = 1;
  b.count = 3;
  b.bools = {1, 0, 1};
  const Bytes bwire = B({23, 0, 0, 0, 0x22, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 1});
  CHECK(encode_irq_set(b) == bwire);
  auto bd = decode_irq_set(bwire);
  REQUIRE(bd.ok());
  CHECK(bd->bools == std::vector<uint8_t>{1, 0, 1});

  require_eproto(decode_irq_set(ByteSpan(wire).first(19)));
  require_eproto(decode_irq_set(with_u32(wire, 0, 24)));                        // argsz != payload
  require_eproto(decode_irq_set(with_u32(wire, 4, 0x26)));                      // two data types
  require_eproto(decode_irq_set(with_u32(wire, 4, 0x04)));                      // no action
  require_eproto(decode_irq_set(with_u32(wire, 4, 0x124)));                     // unknown bit
  require_eproto(decode_irq_set(with_u32(bwire, 16, 2)));                       // 3 bools, count 2
  require_eproto(decode_irq_set(with_u32(with_u32(bwire, 4, 0x24), 0, 23)));    // data w/o BOOL
  require_eproto(decode_irq_set(with_u32(with_u32(wire, 12, 0xffffffff), 16, 2)));  // wraps
}

TEST_CASE("REGION_READ / REGION_WRITE: offset, region, count, data", "[vfio-user]") {
  const Bytes rd = B({0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0});
  CHECK(encode_region_access(0x20, 0, 4) == rd);
  auto a = decode_region_access_header(rd, 4096);
  REQUIRE(a.ok());
  CHECK(a->offset == 0x20);
  CHECK(a->region == 0);
  CHECK(a->count == 4);

  const Bytes data = B({0xed, 0x00, 0x00, 0x01});
  const Bytes reply = B({0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0xed, 0, 0, 1});
  CHECK(encode_region_access(0x20, 0, 4, data) == reply);
  auto r = decode_region_access_data(reply, 4096);
  REQUIRE(r.ok());
  CHECK(Bytes(r->data.begin(), r->data.end()) == data);

  require_eproto(decode_region_access_header(ByteSpan(rd).first(15), 4096));
  require_eproto(decode_region_access_header(reply, 4096));                  // data where none
  require_eproto(decode_region_access_data(ByteSpan(reply).first(19), 4096));
  require_eproto(decode_region_access_header(with_u32(rd, 12, 0), 4096));    // count 0
  require_eproto(decode_region_access_header(with_u32(rd, 12, 8192), 4096)); // over max xfer
  Bytes wrap = rd;
  for (int i = 0; i < 8; ++i) wrap[i] = std::byte{0xff};
  require_eproto(decode_region_access_header(wrap, 4096));
}

TEST_CASE("DMA_READ / DMA_WRITE: address, count, data", "[vfio-user]") {
  const Bytes req = B({0, 0x10, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0});
  CHECK(encode_dma_access(0x1000, 2) == req);
  auto a = decode_dma_access_header(req, 4096);
  REQUIRE(a.ok());
  CHECK(a->address == 0x1000);
  CHECK(a->count == 2);
  auto w = decode_dma_access_data(encode_dma_access(0x1000, 2, B({7, 8})), 4096);
  REQUIRE(w.ok());
  CHECK(w->data.size() == 2);
  // The spec table's 12-byte DMA_WRITE reply (4-byte count).
  auto s = decode_dma_access_header(B({0, 0x10, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}), 4096);
  REQUIRE(s.ok());
  CHECK(s->count == 2);
  require_eproto(decode_dma_access_header(ByteSpan(req).first(11), 4096));
  require_eproto(decode_dma_access_data(req, 4096));                     // data missing
  require_eproto(decode_dma_access_header(encode_dma_access(0, 0), 4096));
  require_eproto(decode_dma_access_header(encode_dma_access(0, 1u << 20), 4096));
}

TEST_CASE("round trips through whole messages", "[vfio-user]") {
  RegionInfo info{5, VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_MMAP, 1 << 20, 0x10000,
                  {{0, 0x1000}, {0x3000, 0x2000}}};
  Bytes msg = encode_reply(42, static_cast<uint16_t>(Command::kDeviceGetRegionInfo),
                           encode_region_info(info, 1024));
  auto m = decode_message(msg);
  REQUIRE(m.ok());
  CHECK(m->header.id == 42);
  auto r = decode_region_info(m->payload);
  REQUIRE(r.ok());
  CHECK(r->info.offset == 0x10000);
  REQUIRE(r->info.sparse.size() == 2);
  CHECK(r->info.sparse[1].offset == 0x3000);
  CHECK(r->info.sparse[1].size == 0x2000);

  for (uint64_t addr : {0ull, 0x1000ull, 0xfffff000ull, 1ull << 47}) {
    auto d = decode_dma_map(encode_dma_map({VFIO_DMA_MAP_FLAG_READ, addr, addr, 0x1000}));
    REQUIRE(d.ok());
    CHECK(d->address == addr);
    CHECK(d->offset == addr);
  }
  Version v{0, 1, capabilities_json({})};
  auto vd = decode_version(encode_version(v));
  REQUIRE(vd.ok());
  CHECK(vd->json == v.json);
  CHECK(parse_capabilities(vd->json).ok());
}
