#include "detrace/db/records.h"

#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

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
    case RedOp::kPreMulSum: return "premulsum";
    case RedOp::kUnknownCustom: return "unknown custom op";
  }
  return "unknown";
}

namespace {

// An IEEE binary16 value.
double halfValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v = std::ldexp(mant | 0x400, exp - 25);
  if (exp == 0) v = std::ldexp(mant, -24);
  if (exp == 31) v = mant != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  return (h & 0x8000) != 0 ? -v : v;
}

// A scalar's bytes (little-endian, zero-extended) as a number of type `t`; in hex where this
// detrace does not decode the type (8-bit floats, unknown).
std::string scalarText(DType t, uint64_t bits) {
  switch (t) {
    case DType::kF64: return fmt::format("{}", std::bit_cast<double>(bits));
    case DType::kF32: return fmt::format("{}", std::bit_cast<float>(static_cast<uint32_t>(bits)));
    case DType::kBF16: return fmt::format("{}", std::bit_cast<float>(static_cast<uint32_t>(bits << 16)));
    case DType::kF16: return fmt::format("{}", halfValue(static_cast<uint16_t>(bits)));
    case DType::kI8: return fmt::format("{}", static_cast<int8_t>(bits));
    case DType::kU8: return fmt::format("{}", static_cast<uint8_t>(bits));
    case DType::kI32: return fmt::format("{}", static_cast<int32_t>(bits));
    case DType::kI64: return fmt::format("{}", static_cast<int64_t>(bits));
    default: return fmt::format("0x{:x}", bits);
  }
}

}  // namespace

std::string redOpText(const Collective& c) {
  const char* name = redOpName(c.redop);
  if (c.redop == RedOp::kPreMulSum) {
    return c.has_redop_scalar ? fmt::format("{}({})", name, scalarText(c.dtype, c.redop_scalar))
                              : fmt::format("{}(unrecorded scalar)", name);
  }
  if (std::string_view(name) == "unknown") return fmt::format("unknown({})", static_cast<int32_t>(c.redop));
  return name;
}

std::string epilogueText(int32_t epilogue) {
  // cublasLtEpilogue_t's values (cublasLt.h, CUDA 13.0); tracer/src/cublas_wrappers.cc checks the
  // tracer's copy of them against the header.
  switch (epilogue) {
    case kUnset: return "unrecorded";
    case 1: return "default";
    case 2: return "relu";
    case 130: return "relu_aux";
    case 4: return "bias";
    case 6: return "relu_bias";
    case 134: return "relu_aux_bias";
    case 136: return "drelu";
    case 152: return "drelu_bgrad";
    case 32: return "gelu";
    case 160: return "gelu_aux";
    case 36: return "gelu_bias";
    case 164: return "gelu_aux_bias";
    case 192: return "dgelu";
    case 208: return "dgelu_bgrad";
    case 256: return "bgrada";
    case 512: return "bgradb";
    default: return fmt::format("{}", epilogue);  // callers label it ("epilogue 1048576")
  }
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
