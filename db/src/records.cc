#include "detrace/db/records.h"

namespace detrace::db {

const char* eventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kKernel: return "kernel";
    case EventKind::kMemcpy: return "memcpy";
    case EventKind::kMemset: return "memset";
    case EventKind::kCollective: return "collective";
    case EventKind::kGemm: return "gemm";
    case EventKind::kMarker: return "marker";
    case EventKind::kSync: return "sync";
    case EventKind::kOther: return "other";
  }
  return "unknown";
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kUnknown: return "unknown";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
  }
  return "unknown";
}

int dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: case DType::kU8: case DType::kF8E4M3: case DType::kF8E5M2: return 1;
    case DType::kUnknown: return 0;
  }
  return 0;
}

const char* collOpName(CollOp op) {
  switch (op) {
    case CollOp::kUnknown: return "unknown";
    case CollOp::kAllReduce: return "AllReduce";
    case CollOp::kReduceScatter: return "ReduceScatter";
    case CollOp::kAllGather: return "AllGather";
    case CollOp::kBroadcast: return "Broadcast";
    case CollOp::kReduce: return "Reduce";
    case CollOp::kSend: return "Send";
    case CollOp::kRecv: return "Recv";
    case CollOp::kAllToAll: return "AllToAll";
    case CollOp::kGather: return "Gather";
    case CollOp::kScatter: return "Scatter";
  }
  return "unknown";
}

const char* redOpName(RedOp op) {
  switch (op) {
    case RedOp::kNone: return "none";
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kAvg: return "avg";
  }
  return "unknown";
}

const char* operandRoleName(OperandRole role) {
  switch (role) {
    case OperandRole::kInput: return "in";
    case OperandRole::kOutput: return "out";
    case OperandRole::kInOut: return "inout";
  }
  return "unknown";
}

}  // namespace detrace::db
