"""The occupancy model of the CUDA kernels (op_extension/cuda_occupancy.py) and
what it says of every launch the ops make at the benchmark's shapes.

The harness (cuda_sim.launch_plan) gives each launch's geometry without running
it; ptxas's registers and static shared memory come from the committed table
(csrc/kernel/cuda/kernel_resources.json, held to a fresh compile by
scripts/check_cuda_compile.sh). A launch no block of which fits an SM is refused
by the GPU ("too many resources requested for launch"): a crash the harness
alone cannot see, since it knows neither registers nor the driver's reserve.
"""

from __future__ import annotations

import pytest
import torch

from op_extension import cuda_occupancy as occ
from op_extension import cuda_sim
from op_extension.bench.plan import load_plan, row_hidden
from op_extension.bench.traffic import call_launch_plan, recorded_calls

SM90, SM80 = occ.GPUS["sm_90"], occ.GPUS["sm_80"]


# ---- the calculator, case by case from the rules in the module's docstring -----------

@pytest.mark.parametrize("threads, registers, shared, gpu, blocks, limited_by", [
    # 8 warps a block: 64 / 8 = 8 blocks; 32 registers = 1024 a warp, 16 warps a
    # sub-partition, 64 an SM: 8 blocks too; the warps come first.
    (256, 32, 0, SM90, 8, "warps"),
    # 64 registers: 2048 a warp, 8 a sub-partition, 32 an SM: 4 blocks of 8 warps.
    (256, 64, 0, SM90, 4, "registers"),
    # 65 registers: 2080 a warp, allocated 2304; 16384 // 2304 = 7 a sub-partition,
    # 28 an SM: 3 blocks (not 3.5).
    (256, 65, 0, SM90, 3, "registers"),
    # 48 KiB + the 1 KiB reserve = 50176 bytes a block: 233472 // 50176 = 4 on sm_90,
    # 167936 // 50176 = 3 on sm_80.
    (128, 16, 48 * 1024, SM90, 4, "shared memory"),
    (128, 16, 48 * 1024, SM80, 3, "shared memory"),
    # The allocation unit: 1 + 1024 bytes take 1152; 233472 // 1152 = 202 > 32.
    (32, 16, 1, SM90, 32, "blocks"),
    # 32 KiB + reserve = 33792: 6 blocks; 1 byte more rounds to 33920: still 6; the
    # bytes that make 7 blocks impossible are the reserve's.
    (64, 16, 32 * 1024, SM90, 6, "shared memory"),
    # A block of 1024 threads of 64 registers takes every register of the SM.
    (1024, 64, 0, SM90, 1, "registers"),
    # 100 threads take 4 warps.
    (100, 32, 0, SM90, 16, "warps"),
])
def test_the_calculator_follows_the_occupancy_rules(threads, registers, shared, gpu, blocks, limited_by):
    assert occ.blocks_per_sm(threads, registers, shared, gpu) == (blocks, limited_by)


@pytest.mark.parametrize("threads, registers, shared, gpu, why", [
    # 65 registers x 32 warps: 2304 x 32 = 73728 > 65536 (what __launch_bounds__(1024) prevents).
    (1024, 65, 0, SM90, "registers of an SM"),
    (256, 256, 0, SM90, "registers per thread"),
    # 227 KiB is the most a block may have on sm_90, 163 KiB on sm_80.
    (256, 32, 227 * 1024 + 1, SM90, "shared memory per block"),
    (256, 32, 163 * 1024 + 1, SM80, "shared memory per block"),
    (2048, 32, 0, SM90, "threads"),
])
def test_a_block_that_cannot_fit_an_sm_is_refused(threads, registers, shared, gpu, why):
    with pytest.raises(occ.LaunchError, match=why):
        occ.blocks_per_sm(threads, registers, shared, gpu)


def test_227_kib_of_shared_memory_is_the_most_an_sm_90_block_may_have():
    assert occ.blocks_per_sm(256, 32, 227 * 1024, SM90) == (1, "shared memory")


def test_waves_and_the_grid_a_launch_fills():
    launch = {"kernel": "k", "signature": "k", "grid": (66, 1, 1), "block": (256, 1, 1), "dynamic_shared_bytes": 0}
    half = occ.launch_occupancy(launch, "sm_90", occ.KernelResources(registers=64, static_shared_bytes=0))
    # 4 blocks an SM x 132 SMs = 528 slots; 66 blocks use an eighth of them, on half the SMs.
    assert (half["blocks_per_sm"], half["active_sms"]) == (4, 66)
    assert half["waves"] == pytest.approx(66 / 528)
    assert half["warps_per_sm"] == 8  # one block of 8 warps on each of the 66
    full = occ.launch_occupancy(launch | {"grid": (528 + 52, 1, 1)}, "sm_90", occ.KernelResources(64, 0))
    # A full wave and a tail of 52 blocks: two rounds, (528 + 52) / 1056 of their slots used.
    assert full["waves"] == pytest.approx(580 / 528)
    assert full["sm_fill"] == pytest.approx(580 / 1056)
    assert full["occupancy"] == pytest.approx(0.5)


def test_kernel_names_are_spelled_one_way_for_the_harness_and_for_ptxas():
    gcc = "op_ext::cuda::{anonymous}::rms_norm_forward_kernel<__nv_bfloat16, 8, 2, false>"
    cxxfilt = ("void op_ext::cuda::(anonymous namespace)::rms_norm_forward_kernel<__nv_bfloat16, 8, 2, false>"
               "(op_ext::cpu::RmsNormArgs, op_ext::cuda::(anonymous namespace)::ForwardRows)")
    assert occ.normalize_signature(gcc) == occ.normalize_signature(cxxfilt) \
        == "op_ext::cuda::rms_norm_forward_kernel<__nv_bfloat16, 8, 2, false>"


def test_a_kernel_missing_from_the_table_names_the_command_that_refreshes_it():
    with pytest.raises(KeyError, match="check_cuda_compile.sh --write-resources"):
        occ.kernel_resources("op_ext::cuda::no_such_kernel<float>", "sm_90")


def test_the_table_holds_both_archs_and_its_compiler():
    table = occ.load_resources()
    assert table["nvcc"].startswith("V")
    assert set(table["archs"]) == {"sm_80", "sm_90"}
    for arch, kernels in table["archs"].items():
        assert len(kernels) > 100, arch
        assert all(0 < k["registers"] <= 255 and k["static_shared_bytes"] >= 0 for k in kernels.values())
        # The kernels that declare __launch_bounds__ carry it (the model refuses a
        # bigger block); the others take any block their registers fit.
        bounds = {name: k["max_threads"] for name, k in kernels.items() if "max_threads" in k}
        assert all(32 <= b <= 1024 for b in bounds.values()), arch
        assert bounds[f"op_ext::cuda::rotary_embedding_kernel<float, 4, false>"] == 256, arch


# ---- every launch of every op at the benchmark's shapes -------------------------------

PLAN = load_plan().benches
# The benchmark's token counts on a GPU (scripts/gpu_check.sh) and its long rows
# (--hidden 65536, 4 and 256 tokens), float32 and bfloat16, forward and backward.
SHAPES = [(tokens, None) for tokens in (16, 2048, 8192)] + [(4, 65536), (256, 65536)]
ROWS = [(name, dtype, tokens, hidden)
        for name in PLAN for dtype in (torch.float32, torch.bfloat16) for tokens, hidden in SHAPES
        if hidden is None or row_hidden(name, hidden) is not None]
# A launch at a shape that moves at least this much is the bandwidth case (issue
# 26: 85% of copy bandwidth from 64 MB on).
LARGE_BYTES = 64 << 20
# Such a launch reaches at least this share of the SMs: an SM with no block moves no bytes.
MIN_ACTIVE_SMS = 0.9


def launches(calls, arch):
    """[(launch record, bytes the op call moves at least)] of recorded op calls on `arch`."""
    out = []
    for op, args, kwargs in calls:
        call_bytes = sum(t.numel() * t.element_size() for t in cuda_sim._tensors((args, kwargs)))
        out += [(launch, call_bytes) for launch in call_launch_plan(op, args, kwargs, arch)]
    return out


def row_id(row):
    name, dtype, tokens, hidden = row
    return f"{name}-{str(dtype)[6:]}-T{tokens}" + (f"-h{hidden}" if hidden else "")


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_every_launch_fits_the_gpu_and_the_large_ones_reach_every_sm(row):
    """The forward and backward calls of each benchmark row (recorded once, on the
    CPU): on sm_80 and sm_90, each launch's kernel is in the table and a block of
    it fits an SM with its registers, its static and dynamic shared memory and the
    driver's reserve; at the shapes that move 64 MB or more, each launch puts a
    block on at least 90% of an H100's SMs (sm_90, 132)."""
    from op_extension import ops

    name, dtype, tokens, hidden = row
    calls = recorded_calls(ops, name, "fwd+bwd", dtype, tokens, row_hidden(name, hidden))
    for arch in ("sm_80", "sm_90"):
        found = launches(calls, arch)
        assert found, f"{row_id(row)}: no launch recorded"
        for launch, call_bytes in found:
            o = occ.launch_occupancy(launch, arch)  # raises LaunchError / KeyError
            assert o["blocks_per_sm"] >= 1
            if arch == "sm_90" and call_bytes >= LARGE_BYTES:
                assert o["active_sms"] >= MIN_ACTIVE_SMS * SM90.sms, (
                    f"{row_id(row)}: {launch['signature']} grid {launch['grid']} reaches {o['active_sms']} of "
                    f"{SM90.sms} SMs")


# Row widths at which the row kernels' planners change paths (held in registers,
# cached in shared memory, a cluster's, the long-row launches) and odd ones.
SWEEP_WIDTHS = (1, 4095, 8193, 16385, 32769, 65537, 131073, 262144)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", [n for n in PLAN if row_hidden(n, 1) is not None])
def test_every_launch_fits_the_gpu_at_every_row_width(name, dtype, arch):
    """The same for the ops whose rows take any width, at 5 rows of each width in
    SWEEP_WIDTHS: the planners' dynamic shared memory, with the kernels' static
    arrays and the driver's reserve, never exceeds a block's share."""
    from op_extension import ops

    for width in SWEEP_WIDTHS:
        for call in recorded_calls(ops, name, "fwd+bwd", dtype, 5, width):
            for launch in call_launch_plan(*call, arch):
                occ.launch_occupancy(launch, arch)  # raises LaunchError / KeyError


def test_a_launch_on_too_few_blocks_is_seen():
    """The check above on a planted launch: 64 blocks for a 64 MB row."""
    launch = {"kernel": "k", "signature": "k", "grid": (64, 1, 1), "block": (256, 1, 1), "dynamic_shared_bytes": 0}
    o = occ.launch_occupancy(launch, "sm_90", occ.KernelResources(32, 0))
    assert o["active_sms"] < MIN_ACTIVE_SMS * SM90.sms


def test_a_launch_beyond_the_shared_memory_of_a_block_is_refused_with_its_static_arrays():
    """The harness checks dynamic shared memory against the opt-in maximum; the
    model adds the kernel's static arrays and the reserve: 227 KiB of dynamic
    memory in a kernel with 1 KiB of static arrays cannot launch."""
    launch = {"kernel": "k", "signature": "k", "grid": (1, 1, 1), "block": (256, 1, 1),
              "dynamic_shared_bytes": 227 * 1024}
    with pytest.raises(occ.LaunchError, match="kernel k on sm_90"):
        occ.launch_occupancy(launch, "sm_90", occ.KernelResources(32, 1024))


def test_a_block_beyond_the_kernels_launch_bounds_is_refused():
    """ptxas gave the kernel registers for __launch_bounds__(256) threads: a block
    of 512 fails to launch, though its registers would fit an SM; 256 launches."""
    launch = {"kernel": "k", "signature": "k", "grid": (1, 1, 1), "block": (512, 1, 1), "dynamic_shared_bytes": 0}
    bounded = occ.KernelResources(32, 0, max_threads=256)
    with pytest.raises(occ.LaunchError, match=r"kernel k on sm_90: a block of 512 threads, beyond its "
                                              r"__launch_bounds__\(256\): the launch fails"):
        occ.launch_occupancy(launch, "sm_90", bounded)
    assert occ.launch_occupancy(launch | {"block": (32, 8, 1)}, "sm_90", bounded)["threads"] == 256
    assert occ.launch_occupancy(launch, "sm_90", occ.KernelResources(32, 0))["threads"] == 512  # no bound


# ---- the table's check (scripts/cuda_kernel_resources.py), on planted reports -------

def _resources_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "cuda_kernel_resources.py"
    spec = importlib.util.spec_from_file_location("cuda_kernel_resources", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PTXAS_REPORT = """\
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_80'
ptxas info    : Function properties for _Z6kernelPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 672 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_90'
ptxas info    : Function properties for _Z6kernelPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 42 registers, used 0 barriers, 360 bytes cmem[0]
"""


# `cuobjdump -elf` of a __launch_bounds__(256) kernel: its .nv.info section.
ELF_DUMP = """\
.nv.info._Z6kernelPf
\t<0x1>
\tAttribute:\tEIATTR_CBANK_PARAM_SIZE
\tFormat:\tEIFMT_HVAL
\tValue:\t0x8
\t<0x2>
\tAttribute:\tEIATTR_MAX_THREADS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x100 0x1 0x1 
"""


def test_the_table_takes_each_kernels_launch_bounds_from_its_elf(tmp_path):
    """The bound is the source's, so every arch's entry gets it; a changed bound
    is a difference like a changed register count."""
    script = _resources_script()
    archs = script.parse([PTXAS_REPORT])
    script.add_launch_bounds(archs, [ELF_DUMP])
    assert archs["sm_80"]["_Z6kernelPf"]["max_threads"] == archs["sm_90"]["_Z6kernelPf"]["max_threads"] == 256
    report, elf, committed = tmp_path / "k.ptxas", tmp_path / "k.elf", tmp_path / "table.json"
    report.write_text(PTXAS_REPORT)
    elf.write_text(ELF_DUMP)
    common = ["--ptxas", str(report), "--elf", str(elf), "--nvcc", "V13.0.88"]
    assert script.main(common + ["--write", str(committed)]) == 0
    written = __import__("json").loads(committed.read_text())
    assert written["archs"]["sm_90"]["kernel"] == {"registers": 42, "static_shared_bytes": 0, "max_threads": 256}
    assert occ.load_resources(committed)["archs"]["sm_80"]["kernel"]["max_threads"] == 256
    elf.write_text(ELF_DUMP.replace("0x100 0x1 0x1", "0x200 0x1 0x1"))
    assert script.main(common + ["--check", str(committed)]) == 1


def test_the_resource_table_is_read_from_ptxas_and_its_changes_are_named(tmp_path):
    script = _resources_script()
    archs = script.parse([PTXAS_REPORT])
    assert archs == {"sm_80": {"_Z6kernelPf": {"registers": 40, "static_shared_bytes": 672}},
                     "sm_90": {"_Z6kernelPf": {"registers": 42, "static_shared_bytes": 0}}}
    table = script.table(archs, "V13.0.88")
    assert table["archs"]["sm_90"] == {"kernel": {"registers": 42, "static_shared_bytes": 0}}
    changed = {"nvcc": "V13.0.88", "archs": {"sm_80": table["archs"]["sm_80"],
                                             "sm_90": {"kernel": {"registers": 48, "static_shared_bytes": 0},
                                                       "gone_kernel": {"registers": 8, "static_shared_bytes": 0}}}}
    found = script.differences(changed, table)
    assert found == ["sm_90: gone_kernel: in the table, no longer built",
                     "sm_90: kernel: {'registers': 48, 'static_shared_bytes': 0} in the table, "
                     "{'registers': 42, 'static_shared_bytes': 0} now"]
    report = tmp_path / "k.ptxas"
    report.write_text(PTXAS_REPORT)
    committed = tmp_path / "table.json"
    assert script.main(["--ptxas", str(report), "--nvcc", "V13.0.88", "--write", str(committed)]) == 0
    assert script.main(["--ptxas", str(report), "--nvcc", "V13.0.88", "--check", str(committed)]) == 0
    committed.write_text(__import__("json").dumps(changed))
    assert script.main(["--ptxas", str(report), "--nvcc", "V13.0.88", "--check", str(committed)]) == 1
    # Another compiler allocates registers its own way: not compared.
    assert script.main(["--ptxas", str(report), "--nvcc", "V12.8.93", "--check", str(committed)]) == 0
