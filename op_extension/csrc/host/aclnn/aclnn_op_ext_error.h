// The message of the last failed op_extension aclnn call on this thread.
//
// Every aclnn<Op>CustomGetWorkspaceSize / aclnn<Op>Custom of op_extension that
// returns a non-zero status first records a message naming the op and the
// problem ("RmsNormCustom: weightOptional has shape [768] but normalizedShape
// is [769]"). CANN's aclGetRecentErrMsg() does not see these messages on real
// hardware (it reports the runtime's own errors), so callers read them here; on
// the simulator both return it.
#ifndef OP_EXT_ACLNN_OP_EXT_ERROR_H_
#define OP_EXT_ACLNN_OP_EXT_ERROR_H_

#ifdef __cplusplus
extern "C" {
#endif

// Never null; "" when no op_extension aclnn call has failed on this thread.
const char *aclnnOpExtGetLastErrorMessage(void);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_ACLNN_OP_EXT_ERROR_H_
