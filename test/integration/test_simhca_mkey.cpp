// Large memory keys (docs/simhca.md §6.7): page lists by address (the
// translation table the device reads by DMA), the per-MKEY and the
// device-wide limits, and the hostile forms, refused with a status and
// never a crash (§11.1, §11.2).
#include <sys/mman.h>
#include <unistd.h>

#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;

namespace {

constexpr uint32_t kMaxPages = 262144;  // §6.1 max_mkey_pages: 1 GiB of 4 KiB pages
constexpr uint64_t kGiB = 1ull << 30;

// `n` pages of 4 KiB from `iova` on, for a key over [va, va + n × 4 KiB).
MkeyParams contiguous(uint32_t pdn, uint64_t va, uint64_t iova, uint32_t n) {
  MkeyParams p;
  p.pdn = pdn;
  p.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  p.start_va = va;
  p.length = uint64_t{n} * 4096;
  for (uint32_t i = 0; i < n; ++i) p.pages.push_back(iova + uint64_t{i} * 4096);
  return p;
}

// CREATE_MKEY as given, its status; a key it made is destroyed again.
uint8_t raw_status(HcaFixture& f, std::span<const std::byte> in) {
  auto r = f.hca->commands().exec(prm::kOpCreateMkey, in, 8);
  REQUIRE(r.ok());
  if (r->ok()) REQUIRE(f.hca->destroy_mkey(prm::get32(r->output, 0)).ok());
  return r->status;
}

}  // namespace

TEST_CASE("simhca: a 1 GiB MKEY through a translation table; the device's translation memory is bounded",
          "[simhca][commands][mkey]") {
  HcaFixture f;
  CHECK(f.hca->caps().max_mkey_pages == kMaxPages);
  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());

  // 1 GiB of pages does not fit a 16 KiB mailbox: the driver gives the
  // page list by address. The device checks pages only when they are used.
  auto big = contiguous(*pd, 0x7f0000000000, 0x40000000, kMaxPages);
  auto mk = f.hca->create_mkey(big);
  REQUIRE(mk.ok());
  auto ctx = f.hca->query_mkey(mk->lkey);
  REQUIRE(ctx.ok());
  CHECK(ctx->num_pages == kMaxPages);
  CHECK(ctx->length == kGiB);

  // One page more than max_mkey_pages: BAD_PARAM, before any table is read.
  auto over = contiguous(*pd, 0x7f0000000000, 0x40000000, kMaxPages + 1);
  CHECK(f.hca->create_mkey(over).error().code == EINVAL);
  CHECK(f.hca->last_status() == prm::kBadParam);

  // §6.7: 2^23 translation entries in all; 32 such keys fill them, the
  // 33rd is NO_RESOURCES, and a destroyed key gives its entries back.
  std::vector<uint32_t> keys{mk->lkey};
  for (int i = 1; i < 32; ++i) {
    auto k = f.hca->create_mkey(big);
    REQUIRE(k.ok());
    keys.push_back(k->lkey);
  }
  CHECK(f.hca->create_mkey(big).error().code == ENOSPC);
  CHECK(f.hca->last_status() == prm::kNoResources);
  REQUIRE(f.hca->destroy_mkey(keys.back()).ok());
  keys.pop_back();
  auto again = f.hca->create_mkey(big);
  REQUIRE(again.ok());
  keys.push_back(again->lkey);
  for (uint32_t k : keys) REQUIRE(f.hca->destroy_mkey(k).ok());
  REQUIRE(f.hca->dealloc_pd(*pd).ok());
}

TEST_CASE("simhca: CREATE_MKEY by address reads the table by checked DMA; hostile tables are refused",
          "[simhca][commands][mkey]") {
  HcaFixture f;
  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  // A small key by address: the device takes the pages from the table.
  auto small = contiguous(*pd, 0x7f0000001000, 0x300000, 4);
  auto table = f.hca->pool().alloc(4096, 8);
  REQUIRE(table.ok());
  encode_page_list(small.pages, table->bytes());
  REQUIRE(raw_status(f, encode_create_mkey(small, table->iova())) == prm::kOk);

  // The table's address: unmapped, zero, misaligned: BAD_ADDRESS.
  auto reserved = f.hca->pool().reserve_iova(2 * 4096, 4096);
  REQUIRE(reserved);
  CHECK(raw_status(f, encode_create_mkey(small, *reserved)) == prm::kBadAddress);
  CHECK(raw_status(f, encode_create_mkey(small, 0)) == prm::kBadAddress);
  CHECK(raw_status(f, encode_create_mkey(small, table->iova() + 4)) == prm::kBadAddress);

  // A table that starts in mapped memory and runs past its end: one page
  // mapped at the start of a reserved hole, the table's last 2 entries in
  // the unmapped page after it.
  const int fd = ::memfd_create("mkey-table", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 4096) == 0);
  void* va = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(va != MAP_FAILED);
  vfio::DmaMap m{.fd = fd, .fd_offset = 0, .vaddr = va, .iova = *reserved, .size = 4096};
  REQUIRE(f.dev->dma_map(m).ok());
  CHECK(raw_status(f, encode_create_mkey(small, *reserved + 4096 - 16)) == prm::kBadAddress);
  CHECK(raw_status(f, encode_create_mkey(small, *reserved + 4096 - 32)) == prm::kOk);  // wholly inside

  // num_pages that does not match [start_va, start_va + length): BAD_PARAM.
  auto in = encode_create_mkey(small, table->iova());
  prm::put32(in, 0x1c, 5);
  CHECK(raw_status(f, in) == prm::kBadParam);
  // More pages than max_mkey_pages, by address too: BAD_PARAM, nothing read.
  auto huge = small;
  huge.length = uint64_t{kMaxPages + 1} * 4096;
  in = encode_create_mkey(huge, *reserved);
  prm::put32(in, 0x1c, kMaxPages + 1);
  CHECK(raw_status(f, in) == prm::kBadParam);
  // Input too short for the table's address: BAD_INPUT_LEN.
  in = encode_create_mkey(small, table->iova());
  CHECK(raw_status(f, std::span(in).first(36)) == prm::kBadInputLen);
  // A table entry not aligned to the page size: BAD_PARAM.
  prm::put64(table->bytes(), 8, 0x301800);
  CHECK(raw_status(f, encode_create_mkey(small, table->iova())) == prm::kBadParam);

  REQUIRE(f.dev->dma_unmap(*reserved, 4096).ok());
  f.hca->pool().release_iova(*reserved, 2 * 4096);
  ::munmap(va, 4096);
  ::close(fd);
  // The device is still serving: the inline form.
  auto k = f.hca->create_mkey(small);
  REQUIRE(k.ok());
  REQUIRE(f.hca->destroy_mkey(k->lkey).ok());
  REQUIRE(f.hca->dealloc_pd(*pd).ok());
}
