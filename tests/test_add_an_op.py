"""README's "Adding an op", end to end, in a scratch copy of this tree.

The four steps exactly as README.md writes them, for a new small op
`scale_by` (y = input * alpha, float attribute alpha with a default, an
elementwise backward grad_input = grad_output * alpha):

  1. its prototypes in op_protos/ (the forward's and, written before the
     scaffold so that it plans the backward from it, the backward's);
  2. `python -m op_extension.scaffold op_protos/scale_by.json`;
  then the build (setup.py build_ext --inplace, the three extensions), after
  which every layer raises "not implemented yet": the op on the CPU, the CUDA
  kernel on the harness, the Ascend C kernel on the simulator, the references;
  3. the fill-in: CPU kernel, CUDA kernel, Ascend C kernel with its tiling and
  aclnn entry, the glue, the references and the test data, each written over
  the body the scaffold generated (the snippets below), and an incremental
  rebuild;
  4. the tests: the shared suite selected by the op's name and the all-ops
  tests (opcheck, the reference comparisons on every CPU kernel variant,
  gradcheck, torch.compile, torch.export, FakeTensor, bad input, debug, the
  npu glue, the CUDA harness and its traffic model) and the op's own
  tests/test_scale_by.py must pass, none failing.

The shared tests include tests/test_fuzz.py, which fuzzes the op on every
target (the CPU kernel variants, the CUDA harness, both Ascend SoCs) from the
cases and float64 model in its tests/op_cases/ file. SIMULATOR_PROBE holds both
simulators to the op's definition bit for bit besides.

No file of this tree is changed: the scratch copy holds the working tree's
tracked and untracked (not ignored) files, the build happens there. The whole
flow runs once, in a module-scoped fixture; each test checks one step's
outcome. It takes several minutes on 2 cores, most of it the builds of the
scratch tree. Ninja keys its objects by their absolute paths, so nothing of this
tree's build folder can be reused there; the compiler cache can (setup.py's
compiler_cache(): ccache, with the paths inside a tree made relative), and the
scratch builds use this tree's, so that they compile only what adding the op
changed, where this tree was built through it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OP = "scale_by"
CSRC = "op_extension/csrc"
NOT_IMPLEMENTED = "not implemented yet"

# Step 4's selection: the shared tests parametrized by the op's name (opcheck,
# reference comparisons per CPU kernel variant, gradcheck, compile, FakeTensor,
# bad input, the CUDA harness and its traffic model, prototypes, npu glue), and
# those that run every op at once (the all-ops compiled graph and export, debug's
# fallback and autocompare), the fuzz suite on every target and the DTensor cases
# on 2 and 4 ranks among them.
SHARED = (f"{OP} or all_ops or test_every_op_is_covered or every_custom_op or forcing_every_op"
          " or autocompare_every_op or every_op_appears or every_op_and_backward_op_is_registered"
          " or every_op_has_every_target or every_op_has_a_sharding_rule")
# What ccache wrote of the scratch tree's first build (setup.py's compiler_cache()),
# and the compiles it must have taken from this tree's cache: the kernels of the
# ops already there and their host code, which include nothing generated from the
# list of ops (paths as ccache writes them: relative to build/temp.*).
FIRST_BUILD_CACHE_LOG = "build/ccache_first_build.log"
CACHE = Path(os.environ.get("CCACHE_DIR", ROOT / "build" / "ccache"))  # setup.py's default for this tree
UNCHANGED_BY_A_NEW_OP = re.compile(r"(generated/isa/|generated/cuda_sim/|csrc/kernel/ascendc/|csrc/host/tiling/"
                                   r"|csrc/host/aclnn/|csrc/cuda_sim/harness\.cpp$)")

# Its floor (317 passed when this was written); far fewer means a shared test
# stopped iterating op_protos/.
MIN_SHARED_PASSED = 300


# ---- step 1: the prototypes ---------------------------------------------------------

_DTYPES = '["float16", "float", "bfloat16", "double"]'
_FORMATS = '["ND", "ND", "ND", "ND"]'

PROTOTYPE = f"""[
  {{
    "op": "ScaleBy",
    "input_desc": [
      {{"name": "input", "param_type": "required", "format": {_FORMATS}, "type": {_DTYPES}}}
    ],
    "output_desc": [
      {{"name": "output", "param_type": "required", "format": {_FORMATS}, "type": {_DTYPES}, "shape": "input"}}
    ],
    "attr": [
      {{"name": "alpha", "param_type": "optional", "type": "float", "default_value": 1.0}}
    ],
    "torch": {{"name": "scale_by", "arg_order": ["input", "alpha"], "backward": "scale_by_backward"}}
  }}
]
"""

# The backward needs only the incoming gradient and alpha. The scaffold's own
# backward prototype would also take `input` (every forward input), which the
# kernels would then never read: the CUDA traffic model counts each tensor
# argument as read once, so it would fail. README step 1: the scaffold plans the
# backward from this file when it exists.
BACKWARD_PROTOTYPE = f"""[
  {{
    "op": "ScaleByGrad",
    "input_desc": [
      {{"name": "grad_output", "param_type": "required", "format": {_FORMATS}, "type": {_DTYPES}}}
    ],
    "output_desc": [
      {{"name": "grad_input", "param_type": "required", "format": {_FORMATS}, "type": {_DTYPES},
        "shape": "grad_output"}}
    ],
    "attr": [
      {{"name": "alpha", "param_type": "optional", "type": "float", "default_value": 1.0}}
    ],
    "torch": {{"name": "scale_by_backward", "arg_order": ["grad_output", "alpha"], "backward_of": "scale_by"}}
  }}
]
"""

SCAFFOLDED = {
    "op_extension/csrc/kernel/cpu/scale_by.h", "op_extension/csrc/kernel/cpu/scale_by.cpp",
    "op_extension/csrc/kernel/cuda/scale_by.cuh", "op_extension/csrc/kernel/cuda/scale_by.cu",
    "op_extension/csrc/torch_ext/ops/scale_by.h", "op_extension/csrc/torch_ext/npu/ops/scale_by.cpp",
    *(f"op_extension/csrc/{f}" for stem in ("scale_by_custom", "scale_by_grad_custom") for f in (
        f"kernel/ascendc/{stem}.cpp", f"host/tiling/{stem}_tiling.h", f"host/tiling/{stem}_tiling.cpp",
        f"host/aclnn/aclnn_{stem}.cpp")),
    "op_extension/op_defs/scale_by.py", "tests/test_scale_by.py", "tests/op_cases/scale_by.py",
}


# ---- after the build: every layer says it is not written ----------------------------

# Run in the scratch tree once the scaffolded op is built. Prints one line per
# layer: what calling it raised.
STUB_PROBE = """
import torch
import op_extension
from op_extension import ascend_sim, cuda_sim, ops
from op_extension._reference import run_reference

x = torch.randn(3, 8)
calls = {
    "cpu op": lambda: ops.scale_by(x, 2.0),
    "cpu dispatcher": lambda: torch.ops.custom.scale_by(x, 2.0),
    "cpu backward": lambda: torch.ops.custom.scale_by_backward(x, 2.0),
    "cuda harness": lambda: cuda_sim.run("scale_by", x, 2.0),
    "cuda harness backward": lambda: cuda_sim.run_backward("scale_by", x, 2.0),
    "ascend simulator": lambda: ascend_sim.run("scale_by", x, 2.0),
    "ascend simulator backward": lambda: ascend_sim.run_backward("scale_by", x, 2.0),
    "reference": lambda: run_reference("scale_by", [x, 2.0]),
    "reference backward": lambda: run_reference("scale_by_backward", [x, 2.0]),
}
for layer, call in calls.items():
    try:
        call()
        print(f"{layer}: ran")
    except Exception as e:  # noqa: BLE001  (every layer's error is reported)
        print(f"{layer}: {type(e).__name__}: {' | '.join(str(e).splitlines())}")
"""


# ---- after the fill-in: the kernels on both simulators -------------------------------

# tests/test_fuzz.py holds every target to the op's float64 model within its
# tolerance; this probe holds the simulated devices to the op's definition bit
# for bit: every dtype, sizes around the 32-byte block and the multi-core split,
# both Ascend SoCs (bfloat16 only where the SoC has it), the harness. Prints
# "ok", or what differs.
SIMULATOR_PROBE = """
import torch
import op_extension
from op_extension import ascend_sim, cuda_sim

problems = []
def check(what, got, x, alpha):
    want = (x.float() * alpha).to(x.dtype) if x.dtype != torch.float64 else x * alpha
    if got.shape != x.shape or got.dtype != x.dtype or not torch.equal(got, want):
        problems.append(what)

torch.manual_seed(0)
for n in (0, 1, 15, 16, 17, 255, 1000, 4099, 70001):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(n).to(dtype)
        for soc in ("Ascend910B", "Ascend310P"):
            if soc == "Ascend310P" and dtype == torch.bfloat16:
                continue
            check(f"ascend {soc} n={n} {dtype}", ascend_sim.run("scale_by", x, 2.5, soc=soc), x, 2.5)
            check(f"ascend {soc} backward n={n} {dtype}", ascend_sim.run_backward("scale_by", x, -0.5, soc=soc), x, -0.5)
        check(f"cuda n={n} {dtype}", cuda_sim.run("scale_by", x, 2.5), x, 2.5)
        check(f"cuda backward n={n} {dtype}", cuda_sim.run_backward("scale_by", x, -0.5), x, -0.5)
        check(f"cuda default alpha n={n} {dtype}", cuda_sim.run("scale_by", x), x, 1.0)
print("ok" if not problems else problems)
"""


# ---- step 3: the fill-in ---------------------------------------------------------------
# Each entry replaces text the scaffold generated (it must be there exactly once:
# a scaffold change that breaks this flow fails here, naming the file).

# CPU: y = x * alpha, in acc_t (float for float16/bfloat16, rounded once, as
# torch's x * alpha does), through vec_map (vec_utils.h), the elementwise ops'
# loop: at::vec loads that widen the 16-bit types, for each ISA the file is
# built for, tasks over ATen's threads, and streaming stores in calls larger
# than the cache (test_streaming_stores.py, a shared test, checks they are taken).
CPU_KERNEL = (
    """template <typename T>
void scale_by_forward_typed(const ScaleByArgs& a) {
  (void)a;
  throw std::runtime_error("scale_by: the CPU kernel is not implemented yet: fill in op_extension/csrc/kernel/cpu/scale_by.cpp");
}""",
    """template <typename T>
void scale_by_run(const void* in, void* out, int64_t n, double alpha) {
  using AVec = Vectorized<acc_t<T>>;
  const AVec a(static_cast<acc_t<T>>(alpha));
  vec_map<T, 1, 1>(n, {static_cast<const T*>(in)}, {static_cast<T*>(out)},
                   [&](const std::array<AVec, 1>& x, std::array<AVec, 1>& y) { y[0] = x[0] * a; });
}

template <typename T>
void scale_by_forward_typed(const ScaleByArgs& a) {
  scale_by_run<T>(a.input, a.output, a.numel, a.alpha);
}""",
)
CPU_BACKWARD_KERNEL = (
    """template <typename T>
void scale_by_backward_typed(const ScaleByBackwardArgs& a) {
  (void)a;
  throw std::runtime_error("scale_by_backward: the CPU kernel is not implemented yet: fill in op_extension/csrc/kernel/cpu/scale_by.cpp");
}""",
    """template <typename T>
void scale_by_backward_typed(const ScaleByBackwardArgs& a) {
  scale_by_run<T>(a.grad_output, a.grad_input, a.numel, a.alpha);
}""",
)

# CUDA: the shared elementwise map kernel (cuda_common.cuh: 128-bit accesses
# when aligned, grid-stride loops, math in acc_t), one function per element.
CUDA_KERNELS = (
    """void scale_by_forward(DType dtype, const cpu::ScaleByArgs& args, cudaStream_t stream) {
  (void)dtype;
  (void)args;
  (void)stream;
  throw std::runtime_error("scale_by: the CUDA kernel is not implemented yet: fill in op_extension/csrc/kernel/cuda/scale_by.cu");
}

void scale_by_backward(DType dtype, const cpu::ScaleByBackwardArgs& args, cudaStream_t stream) {
  (void)dtype;
  (void)args;
  (void)stream;
  throw std::runtime_error("scale_by_backward: the CUDA kernel is not implemented yet: fill in op_extension/csrc/kernel/cuda/scale_by.cu");
}""",
    """namespace {

using namespace detail;

template <typename Acc>
struct ScaleByOp {
  Acc alpha;
  __device__ void operator()(const Acc (&in)[1], Acc (&out)[1]) const { out[0] = in[0] * alpha; }
};

void scale_by_launch(DType dtype, const void* in, void* out, int64_t n, double alpha, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 1, 1> p{{static_cast<const T*>(in)}, {static_cast<T*>(out)}};
    launch_map(p, n, ScaleByOp<acc_t<T>>{static_cast<acc_t<T>>(alpha)}, stream);
  });
}

}  // namespace

void scale_by_forward(DType dtype, const cpu::ScaleByArgs& args, cudaStream_t stream) {
  scale_by_launch(dtype, args.input, args.output, args.numel, args.alpha, stream);
}

void scale_by_backward(DType dtype, const cpu::ScaleByBackwardArgs& args, cudaStream_t stream) {
  scale_by_launch(dtype, args.grad_output, args.grad_input, args.numel, args.alpha, stream);
}""",
)

# The torch glue, as gelu's: a dense layout other than row-major is walked as it
# lies and the output gets it, as torch's x * alpha does (tests/test_ops.py
# compares strides with torch's); anything else is made contiguous. The op
# module's FAKE says so to the fake kernel (REFERENCES below).
GLUE = [
    (
        """  // Then: dense inputs, the outputs, the args struct
  // (../../kernel/cpu/scale_by.h), and
  //   kernels(cpu::scale_by_forward, kernel_dtype(input.scalar_type()), args);
  TORCH_CHECK(false, op, ": the glue is not implemented yet: fill in op_extension/csrc/torch_ext/ops/scale_by.h");""",
        """  const bool keep = keeps_layout(input);
  const Tensor x = keep ? input : input.contiguous();
  Tensor out = keep ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  kernels(cpu::scale_by_forward, kernel_dtype(x.scalar_type()),
          {x.const_data_ptr(), out.mutable_data_ptr(), x.numel(), alpha});
  return out;""",
    ),
    (
        """  // Then: dense inputs, the outputs, the args struct
  // (../../kernel/cpu/scale_by.h), and
  //   kernels(cpu::scale_by_backward, kernel_dtype(grad_output.scalar_type()), args);
  TORCH_CHECK(false, op, ": the glue is not implemented yet: fill in op_extension/csrc/torch_ext/ops/scale_by.h");""",
        """  const bool keep = keeps_layout(grad_output);
  const Tensor dy = keep ? grad_output : grad_output.contiguous();
  Tensor dx = keep ? at::empty_like(dy) : at::empty(dy.sizes(), dy.options());
  kernels(cpu::scale_by_backward, kernel_dtype(dy.scalar_type()),
          {dy.const_data_ptr(), dx.mutable_data_ptr(), dy.numel(), alpha});
  return dx;""",
    ),
]


def ascend_kernel(stem: str, x: str, y: str) -> str:
    """The Ascend C kernel <stem> (scale_by_custom, scale_by_grad_custom): y = x * alpha
    over the elementwise split of elementwise_tiling.h, CopyIn / Compute / CopyOut on
    double-buffered queues, as add_custom.cpp. float is scaled as it is; float16 and
    bfloat16 go through a float row (cast, Muls, cast back round-to-nearest-even), so
    every dtype rounds once, as torch's x * alpha does."""
    return f"""// {stem}: {y} = {x} * alpha. Tiling: host/tiling/{stem}_tiling.h (elementwise_tiling.h's split).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "{stem}_tiling.h"

namespace {{

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelScaleBy {{
 public:
  __aicore__ inline KernelScaleBy() {{}}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const optiling::OpExtKernelTilingData& tiling, TPipe* pipe) {{
    alpha_ = tiling.alpha;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), tiling.totalLength);
    pipe->InitBuffer(inQueue_, kBufferNum, tiling.tileLength * sizeof(T));
    pipe->InitBuffer(outQueue_, kBufferNum, tiling.tileLength * sizeof(T));
    if constexpr (kViaFloat) {{
      pipe->InitBuffer(xFloat_, tiling.tileLength * sizeof(float));
    }}
  }}

  __aicore__ inline void Process() {{
    uint64_t offset;
    uint32_t count;
    while (tiles_.Next(offset, count)) {{
      CopyIn(offset, count);
      Compute(count);
      CopyOut(offset, count);
    }}
  }}

 private:
  static constexpr bool kViaFloat = !IsSameType<T, float>::value;

  __aicore__ inline void CopyIn(uint64_t offset, uint32_t count) {{
    LocalTensor<T> x = inQueue_.template AllocTensor<T>();
    op_ext_kernel::CopyGmToUb(x, xGm_[offset], count);
    inQueue_.EnQue(x);
  }}

  __aicore__ inline void Compute(uint32_t count) {{
    LocalTensor<T> x = inQueue_.template DeQue<T>();
    LocalTensor<T> y = outQueue_.template AllocTensor<T>();
    const int32_t n = static_cast<int32_t>(count);
    if constexpr (kViaFloat) {{
      LocalTensor<float> xf = xFloat_.template Get<float>();
      Cast(xf, x, RoundMode::CAST_NONE, count);
      // Each vector instruction reads the one before: on Ascend310P the compiler
      // does not order them (docs/ascend.md, the PIPE_V rule).
      PipeBarrier<PIPE_V>();
      Muls(xf, xf, alpha_, n);
      PipeBarrier<PIPE_V>();
      Cast(y, xf, op_ext_kernel::NarrowRound<T>(), count);
    }} else {{
      Muls(y, x, alpha_, n);
    }}
    outQueue_.EnQue(y);
    inQueue_.FreeTensor(x);
  }}

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {{
    LocalTensor<T> y = outQueue_.template DeQue<T>();
    tiles_.CopyOut(yGm_, y, offset, count);
    outQueue_.FreeTensor(y);
  }}

  TQue<TPosition::VECIN, kBufferNum> inQueue_;
  TQue<TPosition::VECOUT, kBufferNum> outQueue_;
  TBuf<TPosition::VECCALC> xFloat_;
  GlobalTensor<T> xGm_;
  GlobalTensor<T> yGm_;
  op_ext_kernel::ElementwiseTiles<T> tiles_;
  float alpha_ = 1.0f;
}};

template <typename T>
__aicore__ inline void Run(GM_ADDR x, GM_ADDR y, const optiling::OpExtKernelTilingData& tiling) {{
  TPipe pipe;
  KernelScaleBy<T> op;
  op.Init(x, y, tiling, &pipe);
  op.Process();
}}

}}  // namespace

extern "C" __global__ __aicore__ void {stem}(GM_ADDR {x}, GM_ADDR {y}, GM_ADDR workspace, GM_ADDR tiling) {{
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {{
    Run<float>({x}, {y}, tilingData);
  }} else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {{
    Run<half>({x}, {y}, tilingData);
#if OP_EXT_HAS_BF16
  }} else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {{
    Run<bfloat16_t>({x}, {y}, tilingData);
#endif
  }}
}}
"""


# The TilingData: the elementwise split's fields (FillElementwiseFields sets
# them) and alpha, which the kernel reads. 2 x 8 + 6 x 4 bytes: a whole number of 8.
TILING_FIELDS = """TILING_DATA_FIELD_DEF(uint64_t, totalLength)    // elements
TILING_DATA_FIELD_DEF(uint64_t, blocksPerCore)  // 32-byte blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)     // the first cores get one block more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)    // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tileLength)     // elements per tile (multiple of a block)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)       // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)       // KernelDType
TILING_DATA_FIELD_DEF(float, alpha)
"""


def tiling_header(op_type: str, x: str) -> list[tuple[str, str]]:
    fn = f"Compute{op_type.removesuffix('Custom')}Tiling"
    return [
        (f"""TILING_DATA_FIELD_DEF(uint64_t, totalLength)  // elements of {x}
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)  // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tailMode)     // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)     // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, reserved)     // keeps the struct a whole number of 8 bytes
""", TILING_FIELDS),
        # UB bytes per tile element, the kernel's buffer plan: input and output
        # queues, double buffered, plus the float row of 16-bit types.
        (f"optiling::{op_type}TilingData {fn}(uint64_t totalLength, uint32_t dtype, const SocSpec& soc);",
         f"""inline uint32_t {op_type}UbBytesPerElement(uint32_t dtype) {{
  const uint32_t e = dtype == 0 ? 4 : 2;
  return 2 * 2 * e + (dtype == 0 ? 0 : 4);
}}

optiling::{op_type}TilingData {fn}(uint64_t totalLength, uint32_t dtype, double alpha, const SocSpec& soc);"""),
    ]


def tiling_source(stem: str, op_type: str) -> list[tuple[str, str]]:
    fn = f"Compute{op_type.removesuffix('Custom')}Tiling"
    return [
        ('#include "tiling_util.h"', '#include "elementwise_tiling.h"\n#include "tiling_util.h"'),
        (f"""optiling::{op_type}TilingData {fn}(uint64_t totalLength, uint32_t dtype,
                                                                   const SocSpec& soc) {{
  (void)totalLength;
  (void)dtype;
  (void)soc;
  throw TilingError("{op_type}: the tiling is not implemented yet: fill in op_extension/csrc/host/tiling/{stem}_tiling.cpp");
}}""",
         f"""optiling::{op_type}TilingData {fn}(uint64_t totalLength, uint32_t dtype, double alpha,
                                                const SocSpec& soc) {{
  const ElementwisePlan plan =
      PlanElementwise("{op_type}", totalLength, dtype, {op_type}UbBytesPerElement(dtype), 0, soc);
  optiling::{op_type}TilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_alpha(float(alpha));
  return t;
}}"""),
    ]


def aclnn_body(stem: str, op_type: str, x: str) -> tuple[str, str]:
    """The aclnn plan's tiling and launch, as aclnn_gelu_custom.cpp: the generated
    entry has checked the dtypes, out's shape and contiguity; no launch for no
    elements."""
    fn = f"Compute{op_type.removesuffix('Custom')}Tiling"
    x_arg = x.split("_")[0] + "".join(part.capitalize() for part in x.split("_")[1:])  # the aclnn name
    return (
        f"""  // Check what the prototype cannot say (shapes between inputs, attribute
  // ranges), tile, and launch {stem} with AddLaunch, as
  // aclnn_gelu_custom.cpp does.
  (void)args;
  throw ArgError(ACLNN_ERR_INNER, "{op_type}: not implemented yet: fill in op_extension/csrc/host/aclnn/aclnn_{stem}.cpp");""",
        f"""  LaunchPlan plan;
  if (args.{x_arg}.Numel() == 0) return plan;
  const auto tiling = ascend::{fn}(args.{x_arg}.Numel(), args.dtype, args.alpha, args.soc);
  uint8_t* xd = args.{x_arg}.data;
  uint8_t* yd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {{
    return OP_EXT_LAUNCH_KERNEL({stem}, blockDim, stream, xd, yd, ws, td);
  }});
  return plan;""",
    )


def aclnn_declaration(stem: str) -> tuple[str, str]:
    """The kernel the entry launches: declared for the simulator, or CANN's generated header."""
    return (
        f'#include "{stem}_tiling.h"\n',
        f'''#include "{stem}_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_{stem}.h"
#endif

OP_EXT_DECLARE_KERNEL({stem}, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);
''',
    )


REFERENCES = [
    ("from op_extension import toolkit  # noqa: F401  (for what you add: FAKE, a function, TRANSFORM)",
     """from op_extension import toolkit

# The output keeps a dense input's layout, as the glue does (the derived fake
# kernel's default is row-major).
FAKE = {"scale_by": toolkit.FakeRule(layout=toolkit.KEEP_LAYOUT),
        "scale_by_backward": toolkit.FakeRule(layout=toolkit.KEEP_LAYOUT)}"""),
    ('    raise NotImplementedError("scale_by: the reference is not implemented yet: fill in op_extension/op_defs/scale_by.py")',
     "    return input * alpha"),
    ('    raise NotImplementedError("scale_by_backward: the reference is not implemented yet: fill in op_extension/op_defs/scale_by.py")',
     "    return grad_output * alpha"),
    # Elementwise and linear: any dim splits, and a Partial sum stays one.
    ('    raise NotImplementedError("scale_by: the DTensor sharding rule is not implemented yet: fill in op_extension/op_defs/scale_by.py")',
     "    return toolkit.row_sharding(range(input.ndim), [toolkit.ROW], [toolkit.ROW], linear=(0,))"),
    ('    raise NotImplementedError("scale_by_backward: the DTensor sharding rule is not implemented yet: fill in op_extension/op_defs/scale_by.py")',
     "    return toolkit.row_sharding(range(grad_output.ndim), [toolkit.ROW], [toolkit.ROW], linear=(0,))"),
]

# The shared tests' data (tests/op_cases/__init__.py says what each entry is).
OP_CASES = [
    ('SAMPLES = [sample("not_written", not_written("scale_by", "SAMPLES"))]',
     '''SAMPLES = [
    sample("3x769", lambda m: ((m(3, 769, scale=3), 2.5), {})),
    sample("transposed", lambda m: ((m(7, 33, layout="transposed"), -0.5), {})),
    sample("strided_3d", lambda m: ((m(2, 3, 5, layout="strided"), 3.0), {})),
    sample("empty", lambda m: ((m(0, 5), 2.0), {})),
    sample("0dim", lambda m: ((m(), 2.0), {})),
    sample("default_alpha", lambda m: ((m(3, 769),), {})),
    sample("large_5125", lambda m: ((m(4, 5125), 0.125), {}), True),
]'''),
    ('    return not_written("scale_by", "schema_args")(x)', "    return x(2, 3, 4), 0.5"),
    ('    return not_written("scale_by", "f_scale_by")(input)', "    return ops.scale_by(input, 0.5)"),
    ('CALLS = [Call(f_scale_by, not_written("scale_by", "CALLS (the inputs of f_scale_by)"))]',
     "CALLS = [Call(f_scale_by, lambda n: (rand(n, H),))]"),
    # Nothing but the dtype can be wrong in a call of scale_by: the derived
    # dtype, device and integer cases cover it, this one names it as a user sees it.
    ('BAD = {"not_written": Bad(not_written("scale_by", "BAD"), ValueError, "")}',
     'BAD = {"integer_input": Bad(lambda t: ops.scale_by(t(3, 4, dtype=torch.int32), 2.0), TypeError,\n'
     '                            r"input has dtype \\w+, which is not supported")}'),
    ('GRADCHECK = {"not_written": not_written("scale_by", "GRADCHECK")}',
     'GRADCHECK = {"alpha": lambda m: ((m(3, 7), 1.5), {}), "default_alpha": lambda m: ((m(3, 7),), {})}'),
    ('TRAFFIC = [sample("not_written", not_written("scale_by", "TRAFFIC"))]',
     'TRAFFIC = [sample("4x2048", lambda m: ((m(4, 2048), 0.5), {}))]'),
    # The fuzz suite's cases and float64 models. Constraint: values near the
    # dtype's max only where |alpha| <= 1 (alpha * x overflows otherwise, in the
    # kernel's dtype where float64 does not).
    ('    return not_written("scale_by", "fuzz_case")(fz)',
     '    alpha = fz.pick([0.5, 2.5, -0.75, 1.0, 0.0])\n'
     '    return fz.case((fz.spec(fz.any_shape(), near_max=abs(alpha) <= 1), alpha))'),
    ('    return not_written("scale_by", "fuzz_model")(case, args, grad_outputs)',
     '    y = f64(args[0]) * args[1]\n    return [Expect(y, y.abs())]'),
    ('    return not_written("scale_by", "backward_fuzz_case")(fz)',
     '    return fz.case((fz.grad_output(fz.any_shape()), fz.pick([0.5, 2.5, -0.75])))'),
    ('DISTRIBUTED = [placed("not_written", not_written("scale_by", "DISTRIBUTED"), [], [])]',
     'DISTRIBUTED = [placed(p, lambda g: [grand(g, *DT_ROWS), 0.5], [p], [p]) for p in ("R", "S0", "S2", "P")]'),
    ('BACKWARD_DISTRIBUTED = [placed("not_written", not_written("scale_by", "BACKWARD_DISTRIBUTED"), [], [])]',
     'BACKWARD_DISTRIBUTED = [placed(p, lambda g: [grand(g, *DT_ROWS), 0.5], [p], [p]) for p in ("R", "S1", "P")]'),
    ('    return not_written("scale_by", "backward_fuzz_model")(case, args, grad_outputs)',
     '    y = f64(args[0]) * args[1]\n    return [Expect(y, y.abs())]'),
    ('    return not_written("scale_by", "backward_schema_args")(x)', "    return x(2, 3, 4), 0.5"),
    ('BACKWARD_FAKE = {"not_written": Fake(not_written("scale_by", "BACKWARD_FAKE"), not_written("scale_by", "BACKWARD_FAKE"))}',
     'BACKWARD_FAKE = {"": Fake(lambda g: custom.scale_by_backward(g, 0.5), lambda d: (torch.randn(5, H).to(d),))}'),
    ('BACKWARD_BAD = {"not_written": Bad(not_written("scale_by", "BACKWARD_BAD"), ValueError, "")}',
     'BACKWARD_BAD = {"integer_grad": Bad(lambda t: custom.scale_by_backward(t(3, 4, dtype=torch.int32), 2.0),\n'
     '                                    TypeError, r"grad_output has dtype \\w+, which is not supported")}'),
]


def fill_in(tree: Path) -> None:
    """Step 3: every body the scaffold left to write, written."""
    fill(tree, f"{CSRC}/kernel/cpu/scale_by.cpp", [CPU_KERNEL, CPU_BACKWARD_KERNEL])
    fill(tree, f"{CSRC}/kernel/cuda/scale_by.cu", [CUDA_KERNELS])
    fill(tree, f"{CSRC}/torch_ext/ops/scale_by.h", GLUE)
    for stem, op_type, x, y in (("scale_by_custom", "ScaleByCustom", "input", "output"),
                                ("scale_by_grad_custom", "ScaleByGradCustom", "grad_output", "grad_input")):
        rewrite(tree, f"{CSRC}/kernel/ascendc/{stem}.cpp", ascend_kernel(stem, x, y))
        fill(tree, f"{CSRC}/host/tiling/{stem}_tiling.h", tiling_header(op_type, x))
        fill(tree, f"{CSRC}/host/tiling/{stem}_tiling.cpp", tiling_source(stem, op_type))
        fill(tree, f"{CSRC}/host/aclnn/aclnn_{stem}.cpp", [aclnn_declaration(stem), aclnn_body(stem, op_type, x)])
    fill(tree, "op_extension/op_defs/scale_by.py", REFERENCES)
    fill(tree, "tests/op_cases/scale_by.py", OP_CASES)


def fill(tree: Path, rel: str, replacements: list[tuple[str, str]]) -> None:
    path = tree / rel
    text = path.read_text()
    for old, new in replacements:
        assert text.count(old) == 1, f"{rel}: the scaffold no longer writes this, once:\n{old}"
        text = text.replace(old, new)
    path.write_text(text)


def rewrite(tree: Path, rel: str, text: str) -> None:
    """A file whose generated body is all stub (the Ascend C kernels): written whole."""
    path = tree / rel
    assert NOT_IMPLEMENTED in path.read_text().lower(), f"{rel}: not the scaffold's stub"
    path.write_text(text)


# ---- the flow ---------------------------------------------------------------------------


@dataclass
class Flow:
    tree: Path
    scaffold: subprocess.CompletedProcess
    written: set[str]
    stubs: dict[str, str] = field(default_factory=dict)
    simulators: subprocess.CompletedProcess | None = None
    shared: subprocess.CompletedProcess | None = None
    own: subprocess.CompletedProcess | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def scratch_copy(dest: Path) -> None:
    """The working tree as it is (tracked and untracked files git does not ignore:
    no build/, .venv or built libraries), less this test (step 4 would run it again)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to list the tree's files")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if rel == "tests/test_add_an_op.py" or not src.is_file():  # (deleted, not yet staged)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def run(tree: Path, *args: str, timeout: int, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **extra_env, "PYTHONPATH": str(tree), "MAX_JOBS": os.environ.get("MAX_JOBS", "2"), "COLUMNS": "1000",
           "CCACHE_DIR": str(CACHE)}  # this tree's compiler cache, not the scratch tree's own
    env.pop("OP_EXT_EXTENSIONS", None)  # all three: _C, _cuda_sim, _ascend_sim
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout)


def build(tree: Path, cache_log: Path) -> None:
    """setup.py's build, as `make build` runs it through pip, but into the tree
    itself (--inplace) rather than installed into an environment. ccache, where
    it runs, writes what each compile found in the cache to `cache_log`."""
    if shutil.which("g++") is None:
        pytest.fail("g++ is needed to build the scratch tree")
    done = run(tree, "setup.py", "build_ext", "--inplace", timeout=1500, CCACHE_STATSLOG=str(cache_log))
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]


def pytest_summary(done: subprocess.CompletedProcess) -> dict[str, int]:
    """The counts of pytest's last line (`12 passed, 1 skipped in 3.0s`)."""
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", last)}


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Flow:
    tree = tmp_path_factory.mktemp("add_an_op")
    seconds = {}
    start = time.monotonic()
    scratch_copy(tree)

    # Step 1: the prototypes.
    (tree / "op_protos" / "scale_by.json").write_text(PROTOTYPE)
    (tree / "op_protos" / "scale_by_backward.json").write_text(BACKWARD_PROTOTYPE)
    before = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}

    # Step 2: the scaffold, as README writes it.
    scaffold = run(tree, "-m", "op_extension.scaffold", "op_protos/scale_by.json", timeout=300)
    written = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()} - before
    f = Flow(tree, scaffold, written, seconds=seconds)
    if scaffold.returncode != 0:
        return f

    # The build of the scaffolded op: every layer raises "not implemented yet".
    t = time.monotonic()
    build(tree, tree / FIRST_BUILD_CACHE_LOG)
    seconds["first build"] = time.monotonic() - t
    probe = run(tree, "-c", STUB_PROBE, timeout=300)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    f.stubs = dict(line.split(": ", 1) for line in probe.stdout.splitlines() if ": " in line)

    # Step 3: the fill-in, and the incremental build.
    fill_in(tree)
    t = time.monotonic()
    build(tree, tree / "build" / "ccache_second_build.log")
    seconds["second build"] = time.monotonic() - t

    f.simulators = run(tree, "-c", SIMULATOR_PROBE, timeout=600)

    # Step 4: the shared tests, selected by the op's name, and the op's own.
    # (`make test` would run them all, and install the package into a venv.)
    t = time.monotonic()
    f.shared = run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", SHARED, "tests",
                   "--ignore=tests/test_scale_by.py", timeout=1500)
    seconds["shared tests"] = time.monotonic() - t
    f.own = run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_scale_by.py", timeout=300)
    seconds["total"] = time.monotonic() - start
    print("add an op, seconds:", {k: round(v) for k, v in seconds.items()})
    return f


def test_step2_the_scaffold_writes_every_planned_file(flow):
    assert flow.scaffold.returncode == 0, flow.scaffold.stdout + flow.scaffold.stderr
    assert flow.written == SCAFFOLDED
    # It planned the backward from the prototype written in step 1, and left it as it was.
    assert (flow.tree / "op_protos/scale_by_backward.json").read_text() == BACKWARD_PROTOTYPE


def test_the_scaffolded_op_builds_and_each_layer_says_it_is_not_written(flow):
    stubs = flow.stubs
    assert set(stubs) >= {"cpu op", "cuda harness", "ascend simulator", "reference"}, stubs
    for layer, said in stubs.items():
        assert NOT_IMPLEMENTED in said.lower(), (layer, said)
    # Each layer names the file to fill in: the glue for the devices' calls (it is
    # reached first), the aclnn entry on the simulator, the op module for the references.
    assert "fill in op_extension/csrc/torch_ext/ops/scale_by.h" in stubs["cpu op"], stubs["cpu op"]
    assert "fill in op_extension/csrc/torch_ext/ops/scale_by.h" in stubs["cuda harness"], stubs["cuda harness"]
    assert "fill in op_extension/csrc/host/aclnn/aclnn_scale_by_custom.cpp" in stubs["ascend simulator"], stubs
    assert "fill in op_extension/csrc/host/aclnn/aclnn_scale_by_grad_custom.cpp" in stubs["ascend simulator backward"]
    assert "fill in op_extension/op_defs/scale_by.py" in stubs["reference"], stubs["reference"]


def test_step4_the_shared_tests_pass_for_the_new_op(flow):
    done = flow.shared
    out = done.stdout + done.stderr
    counts = pytest_summary(done)
    # Exit code 5 is "no tests collected": a failure here, as any other.
    assert done.returncode == 0, out[-12000:]
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == counts.get("errors", 0) == 0, counts
    assert counts.get("passed", 0) >= MIN_SHARED_PASSED, (counts, out[-3000:])


def test_step4_the_ops_own_test_passes(flow):
    done = flow.own
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert pytest_summary(done).get("passed", 0) >= 4, done.stdout[-2000:]


def ccache_outcomes(log: Path) -> dict[str, set[str]]:
    """ccache's stats log: each compiled file (a "# <file>" line) and its counters."""
    outcomes, current = {}, None
    for line in log.read_text().splitlines():
        if line.startswith("# "):
            current = outcomes.setdefault(line[2:], set())
        elif current is not None and line.strip():
            current.add(line.strip())
    return outcomes


def test_the_first_build_takes_what_the_op_left_unchanged_from_this_trees_compiler_cache(flow):
    """The scratch tree lies elsewhere than this one: its compiles hit this tree's
    cache only if no path of the tree enters what is compiled (setup.py's
    compiler_cache(); generated files include their sources by relative paths).
    An absolute path that crept back in would make each of them a miss, and the
    first build compile everything again (4 minutes instead of 1 on 2 cores)."""
    if os.environ.get("OP_EXT_CCACHE", "1") == "0" or not (
            shutil.which("ccache", path=str(Path(sys.executable).parent)) or shutil.which("ccache")):
        pytest.skip("no compiler cache: ccache is not installed (scripts/setup_env.sh puts it in the venv) "
                    "or OP_EXT_CCACHE=0")
    if not any(CACHE.glob("?/*")):
        pytest.skip(f"this tree was not built through ccache ({CACHE} holds nothing): `make build` after setup")
    log = flow.tree / FIRST_BUILD_CACHE_LOG
    assert log.exists(), f"ccache is installed but wrote no stats log: did the build run through it? {log}"
    outcomes = ccache_outcomes(log)
    unchanged = sorted(f for f in outcomes if UNCHANGED_BY_A_NEW_OP.search(f) and OP not in f)
    assert len(unchanged) >= 60, sorted(outcomes)  # the ops' kernels, of every kind
    missed = [f for f in unchanged if not outcomes[f] & {"direct_cache_hit", "preprocessed_cache_hit"}]
    assert not missed, f"compiled again, not taken from {CACHE}: {missed}"
    # The log covers the whole build: the new op's kernels went through ccache too
    # (missed, or hit where an earlier run of this test left them).
    new_kernels = {f"generated/isa/{OP}.default.cpp", f"csrc/kernel/ascendc/{OP}_custom.cpp", f"generated/cuda_sim/{OP}.cpp"}
    assert {k for k in new_kernels if any(f.endswith(k) for f in outcomes)} == new_kernels, sorted(outcomes)


def test_step3_the_filled_in_kernels_compute_the_op_on_both_simulators(flow):
    done = flow.simulators
    assert done.returncode == 0 and done.stdout.splitlines()[-1:] == ["ok"], (done.stdout + done.stderr)[-5000:]
