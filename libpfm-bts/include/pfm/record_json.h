// pfm_record as JSON, the form `pfmctl snapshot --json` and `report --json`
// print. Addresses are hex strings ("0xffffffff81000000"): JSON readers that
// hold numbers as doubles (jq, JavaScript) would round 64-bit addresses.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_RECORD_JSON_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_RECORD_JSON_H_

#include <string>

#include <boost/json.hpp>

#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

// "branch", "pebs", "switch_out", "switch_in", "lost", "counter",
// "throttle", "resized", "exit", or "type_N" for an unknown type.
std::string RecordTypeName(uint16_t type);
std::string Hex(uint64_t v);
boost::json::object RecordToJson(const pfm_record& r);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_RECORD_JSON_H_
