// libibumad's string helpers (<infiniband/umad_str.h>): names of
// management classes (IBA 13.4.4), methods (13.4.5), attributes (14.2.5,
// 15.2.5, 16.1.3, 12.6) and status codes (13.4.7, 15.2.4).
#include <endian.h>
#include <infiniband/umad_str.h>

#include <cstdint>

extern "C" {

const char* umad_class_str(uint8_t c) {
  switch (c) {
    case 0x01: return "Subn";
    case 0x81: return "SubnDirectedRoute";
    case 0x03: return "SubnAdmin";
    case 0x04: return "Perf";
    case 0x05: return "BM";
    case 0x06: return "DevMgt";
    case 0x07: return "ComMgt";
    case 0x08: return "SNMP";
    case 0x10: return "Application";
    case 0x11: return "BootMgmt";
    case 0x21: return "CongestionManagment";
  }
  if ((c >= 0x09 && c <= 0x0f) || (c >= 0x30 && c <= 0x4f)) return "Vendor";
  return "<unknown>";
}

const char* umad_method_str(uint8_t mgmt_class, uint8_t m) {
  if (mgmt_class == 0x03) {  // SA methods, IBA 15.2.2
    switch (m) {
      case 0x12: return "GetTable";
      case 0x92: return "GetTableResp";
      case 0x13: return "GetTraceTable";
      case 0x93: return "GetTraceTableResp";
      case 0x14: return "GetMulti";
      case 0x94: return "GetMultiResp";
      case 0x15: return "Delete";
      case 0x95: return "DeleteResp";
    }
  }
  switch (m) {
    case 0x01: return "Get";
    case 0x02: return "Set";
    case 0x81: return "GetResp";
    case 0x03: return "Send";
    case 0x05: return "Trap";
    case 0x06: return "Report";
    case 0x86: return "ReportResp";
    case 0x07: return "TrapRepress";
  }
  return "<unknown method>";
}

const char* umad_common_mad_status_str(__be16 status) {
  const uint16_t s = be16toh(status);
  if (s & 0x0001) return "Busy";
  if (s & 0x0002) return "Redirection required";
  switch ((s >> 2) & 0x7) {
    case 0: return "Success";
    case 1: return "Bad Version";
    case 2: return "Method not supported";
    case 3: return "Method/Attribute combo not supported";
    case 7: return "Invalid Attribute/Modifier value";
  }
  return "Unknown";
}

const char* umad_sa_mad_status_str(__be16 status) {
  switch (be16toh(status) >> 8) {  // IBA 15.2.4 Table 177
    case 0: return "Success";
    case 1: return "No Resources";
    case 2: return "Request Denied";
    case 3: return "No Records";
    case 4: return "Too Many Records";
    case 5: return "Invalid GID";
    case 6: return "Insufficient Components";
    case 7: return "Request Denied by Service Provider";
  }
  return "Undefined Error";
}

static const char* common_attr(uint16_t a) {
  switch (a) {
    case 0x0001: return "ClassPortInfo";
    case 0x0002: return "Notice";
    case 0x0003: return "InformInfo";
  }
  return nullptr;
}

const char* umad_attribute_str(uint8_t mgmt_class, __be16 attr_id) {
  const uint16_t a = be16toh(attr_id);
  if (const char* s = common_attr(a)) return s;
  switch (mgmt_class) {
    case 0x01:
    case 0x81:
      switch (a) {  // IBA 14.2.5 Table 145
        case 0x0010: return "NodeDescription";
        case 0x0011: return "NodeInfo";
        case 0x0012: return "SwitchInfo";
        case 0x0014: return "GUIDInfo";
        case 0x0015: return "PortInfo";
        case 0x0016: return "P_KeyTable";
        case 0x0017: return "SLtoVLMappingTable";
        case 0x0018: return "VLArbitrationTable";
        case 0x0019: return "LinearForwardingTable";
        case 0x001A: return "RandomForwardingTable";
        case 0x001B: return "MulticastForwardingTable";
        case 0x0020: return "SMInfo";
        case 0x0030: return "VendorDiag";
        case 0x0031: return "LedInfo";
      }
      break;
    case 0x03:
      switch (a) {  // IBA 15.2.5 Table 180
        case 0x0011: return "NodeRecord";
        case 0x0012: return "PortInfoRecord";
        case 0x0013: return "SLtoVLMappingTableRecord";
        case 0x0014: return "SwitchInfoRecord";
        case 0x0015: return "LinearForwardingTableRecord";
        case 0x0016: return "RandomForwardingTableRecord";
        case 0x0017: return "MulticastForwardingTableRecord";
        case 0x0018: return "SMInfoRecord";
        case 0x0020: return "LinkRecord";
        case 0x0030: return "GuidInfoRecord";
        case 0x0031: return "ServiceRecord";
        case 0x0033: return "P_KeyTableRecord";
        case 0x0035: return "PathRecord";
        case 0x0036: return "VLArbitrationTableRecord";
        case 0x0038: return "MCMemberRecord";
        case 0x0039: return "TraceRecord";
        case 0x003A: return "MultiPathRecord";
        case 0x003B: return "ServiceAssociationRecord";
        case 0x00F3: return "InformInfoRecord";
      }
      break;
    case 0x04:
      switch (a) {  // IBA 16.1.3 Table 208
        case 0x0010: return "PortSamplesControl";
        case 0x0011: return "PortSamplesResult";
        case 0x0012: return "PortCounters";
        case 0x001D: return "PortCountersExtended";
        case 0x001E: return "PortSamplesResultExtended";
      }
      break;
    case 0x07:
      switch (a) {  // IBA 12.6 Table 99
        case 0x0010: return "ConnectRequest";
        case 0x0011: return "MsgRcptAck";
        case 0x0012: return "ConnectReject";
        case 0x0013: return "ConnectReply";
        case 0x0014: return "ReadyToUse";
        case 0x0015: return "DisconnectRequest";
        case 0x0016: return "DisconnectReply";
        case 0x0017: return "ServiceIDResReq";
        case 0x0018: return "ServiceIDResReqResp";
        case 0x0019: return "LoadAlternatePath";
        case 0x001A: return "AlternatePathResponse";
      }
      break;
  }
  return "<unknown attribute>";
}

}  // extern "C"
