#include "library_ops.h"

namespace detrace::tracer {
namespace {
thread_local uint64_t t_parent = 0;
}  // namespace

uint64_t currentParent() { return t_parent; }
void setCurrentParent(uint64_t token) { t_parent = token; }

ParentScope::ParentScope(uint64_t token) : saved_(t_parent) {
  if (token != 0) t_parent = token;
}
ParentScope::~ParentScope() { t_parent = saved_; }

}  // namespace detrace::tracer
