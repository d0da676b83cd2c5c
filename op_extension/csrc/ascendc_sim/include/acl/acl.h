// ACL host API subset of the op_extension Ascend C simulator.
#ifndef ASCENDC_SIM_ACL_ACL_H_
#define ASCENDC_SIM_ACL_ACL_H_
#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#endif  // ASCENDC_SIM_ACL_ACL_H_
