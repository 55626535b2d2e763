// A PathRecord query as MADs (IBA 15.4 ff.; PathRecord 15.2.5.16): the
// SubnAdmGet a PathKey asks, and the reading of the SA's answer into what
// the path cache takes (PathAnswer). Pure; the MAD layer that sends one
// and gets the other back is ibd's (not yet wired: docs/sa.md).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.hpp"
#include "sa/path_key.hpp"
#include "sa/path_source.hpp"

namespace openib::sa {

// SubnAdmGet(PathRecord) with the key's ComponentMask and selected fields.
Result<Mad> make_path_query(const PathKey& key, std::uint64_t tid, std::uint64_t sm_key = 0);

// The records (sa_records()) of an SA answer of attribute `attr_id`, after
// its status: as parse_path_records() below, for any record type.
Result<std::vector<ConstBytes>> sa_answer_records(ConstBytes answer, std::uint16_t attr_id);

// The records of an SA answer to a PathRecord Get or GetTable, after its
// status: MAD status Busy (IBA 13.4.7) is EBUSY (retry later); Redirect is
// EREMCHG (ClassPortInfo says where; the caller follows it); a bad
// version/method/attribute code is EPROTO; SA status NoRecords (IBA
// 15.2.1.1) is an empty list; other SA status codes are EREMOTEIO, named in
// the message. An answer that is not a PathRecord response is EPROTO.
Result<std::vector<PathRecord>> parse_path_records(ConstBytes answer);

// parse_path_records() as the cache wants it: the first record, nullopt
// for none ("no path"), or the error.
PathAnswer parse_path_answer(ConstBytes answer);

}  // namespace openib::sa
