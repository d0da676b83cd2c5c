"""op_extension.transformers.patch on tiny random-init Hugging Face models (built
from their configs, no download), one per family, patched vs unpatched: what was
replaced, the parameters kept, float32 logits close, bfloat16 logits bit for bit
with the families' casting modes, gradients of every parameter, 10 AdamW steps,
greedy generate, torch.compile(fullgraph=True), autocast; training on 2 gloo
ranks under DDP, tensor parallel, tensor + sequence parallel (also compiled) and
FSDP2; the class-level form; the modules' Hugging Face constructors and casting
modes against the Hugging Face modules themselves; the RoPE functions against
Hugging Face's, and their fallback to Hugging Face's for what the op does not
take.

patch(model) replaces a family's apply_rotary_pos_emb process-wide: the unpatched
model of each comparison runs under oxt.unpatched(), and every test ends with
oxt.unpatch_classes() (nothing leaks into the next test or test file).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import gc
import importlib
import re
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Installed by scripts/setup_env.sh: a missing transformers fails here, it is never skipped.
import transformers

import op_extension.transformers as oxt
import process_group
from op_extension.nn import CustomGEGLUMLP, CustomRMSNorm, CustomSwiGLUMLP, FusedAddRMSNorm

T = transformers
VOCAB = 128
COMMON = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
              eos_token_id=1, bos_token_id=2)
# family -> (config class, model class, extra config, {replaced class: count})
FAMILIES = {
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, {}, {"LlamaRMSNorm": 5, "LlamaMLP": 2}),
    "mistral": (T.MistralConfig, T.MistralForCausalLM, {}, {"MistralRMSNorm": 5, "MistralMLP": 2}),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}, {"Qwen2RMSNorm": 5, "Qwen2MLP": 2}),
    # + the q/k norms of each layer
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {"head_dim": 8}, {"Qwen3RMSNorm": 9, "Qwen3MLP": 2}),
    "gemma": (T.GemmaConfig, T.GemmaForCausalLM, {"head_dim": 8}, {"GemmaRMSNorm": 5, "GemmaMLP": 2}),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, {"head_dim": 8}, {"Gemma2RMSNorm": 9, "Gemma2MLP": 2}),
    "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, {"head_dim": 8}, {"Gemma3RMSNorm": 13, "Gemma3MLP": 2}),
    "phi3": (T.Phi3Config, T.Phi3ForCausalLM, {}, {"Phi3RMSNorm": 5, "Phi3MLP": 2}),
}
NAMES = list(FAMILIES)


def build(family: str, seed: int = 0) -> torch.nn.Module:
    config_cls, model_cls, extra, _ = FAMILIES[family]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**COMMON, **extra)).eval()
    with torch.no_grad():  # norm weights start at 1 (Gemma: 0): move them, so the weight is exercised
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


def ids(batch=2, length=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def rope_name(family):
    return f"modeling_{family}.apply_rotary_pos_emb"


def modeling(family):
    return importlib.import_module(oxt.FAMILIES[family].module)


@pytest.fixture(autouse=True)
def hugging_face_after_each_test():
    yield
    oxt.unpatch_classes()


def unpatched(model, *args, **kwargs):
    """The unpatched model's output: with Hugging Face's RoPE functions."""
    with oxt.unpatched():
        return model(*args, **kwargs)


@contextlib.contextmanager
def counting_rope_calls():
    """Lists the q shapes of the calls of op_extension.ops.rotary_embedding that
    the RoPE functions make."""
    calls = []
    real = oxt.ops.rotary_embedding

    def counted(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    oxt.ops.rotary_embedding = counted
    try:
        yield calls
    finally:
        oxt.ops.rotary_embedding = real


@pytest.fixture(scope="module", params=NAMES)
def built_pair(request):
    model = build(request.param)
    patched = copy.deepcopy(model)
    report = oxt.patch(patched)
    oxt.unpatch_classes()
    return request.param, model, patched, report


@pytest.fixture
def pair(built_pair):
    """(family, unpatched float32 model, patched copy, report), with the family's
    RoPE function patched for the test (patching again puts it back; the modules
    are replaced already)."""
    oxt.patch(built_pair[2])
    return built_pair


def test_patch_reports_what_it_replaced_and_keeps_the_parameters(pair):
    family, model, _, _ = pair
    patched = copy.deepcopy(model)
    before = {name: p for name, p in patched.named_parameters()}
    report = oxt.patch(patched)
    assert dict(report) == FAMILIES[family][3] and report.unknown == {}
    assert report.rope == {rope_name(family): 2}  # one attention module per layer calls it
    after = dict(patched.named_parameters())
    # Same names (state_dict keys unchanged), the very same Parameter objects.
    assert after.keys() == before.keys()
    assert all(after[n] is before[n] for n in before)
    kinds = {type(m) for m in patched.modules()}
    assert CustomRMSNorm in kinds and (CustomSwiGLUMLP in kinds or CustomGEGLUMLP in kinds)
    assert not any(type(m).__name__ in report for m in patched.modules())
    # Patching again finds nothing left to replace; the RoPE function stays the same one.
    function = modeling(family).apply_rotary_pos_emb
    again = oxt.patch(patched)
    assert dict(again) == {} and again.rope == {rope_name(family): 2}
    assert modeling(family).apply_rotary_pos_emb is function


def test_float32_logits_close(pair):
    _, model, patched, _ = pair
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(patched(x).logits, unpatched(model, x).logits, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("family", NAMES)
def test_bfloat16_logits_bit_identical_with_hf_casting(family):
    model = build(family).bfloat16()
    x = ids(length=16)
    with torch.no_grad():
        want = unpatched(model, x).logits
    # The norms' casting mode is the family's (default); the MLP and RoPE round as the model.
    exact = copy.deepcopy(model)
    oxt.patch(exact, mlp_casting_mode="hf", rope_casting_mode="hf")
    with torch.no_grad(), counting_rope_calls() as calls:
        assert torch.equal(exact(x).logits, want)
    assert len(calls) == 2 * 2  # two layers, two calls each ("hf": the cos and the sin products)
    # The fused MLP and RoPE round once where the model rounds twice (three times):
    # close, not equal. The RoPE function is shared: this sets its mode to "none".
    fused = copy.deepcopy(model)
    oxt.patch(fused)
    with torch.no_grad(), counting_rope_calls() as calls:
        torch.testing.assert_close(fused(x).logits, want, atol=0.05, rtol=0.02)
    assert len(calls) == 2


# The benchmark's decoder size: 512 hidden, 128 tokens x 4. With a sum of squares
# in another order than torch's, Qwen3 and Gemma3 lost bit-identity at this size.
LARGER = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, head_dim=64, vocab_size=VOCAB, max_position_embeddings=256,
              pad_token_id=0, eos_token_id=1, bos_token_id=2)


@pytest.mark.parametrize("family", NAMES)
def test_16_bit_logits_bit_identical_at_hidden_512(family):
    config_cls, model_cls, _, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**LARGER)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    x = ids(batch=4, length=128)
    for dtype in (torch.bfloat16, torch.float16):
        model = model.to(dtype)
        exact = copy.deepcopy(model)
        oxt.patch(exact, mlp_casting_mode="hf", rope_casting_mode="hf")
        with torch.no_grad():
            want, got = unpatched(model, x).logits, exact(x).logits
        assert torch.equal(got, want), (dtype, (got != want).sum().item())


def _loss(model, x):
    return model(x, labels=x).loss


def test_gradients_of_every_parameter(pair):
    _, model, patched, _ = pair
    x = ids()
    model.zero_grad()
    patched.zero_grad()
    with oxt.unpatched():
        _loss(model, x).backward()
    _loss(patched, x).backward()
    for (name, p), q in zip(model.named_parameters(), patched.parameters()):
        assert q.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_ten_adamw_steps_give_the_same_losses(pair):
    family, *_ = pair
    model, patched = build(family).train(), build(family).train()
    oxt.patch(patched)
    losses = []
    for m, rope in ((model, oxt.unpatched), (patched, contextlib.nullcontext)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        run = []
        for step in range(10):
            opt.zero_grad()
            with rope():
                loss = _loss(m, ids(seed=7))  # one batch: the loss must fall
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), atol=1e-5, rtol=1e-5)
    assert losses[0][-1] < losses[0][0]


def test_generate_gives_the_same_tokens(pair):
    _, model, patched, _ = pair
    x = ids(batch=1, length=5)
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        with oxt.unpatched():
            want = model.generate(x, **kwargs)
        assert torch.equal(patched.generate(x, **kwargs), want)


def test_compile_fullgraph_captures_the_patched_model(pair):
    # aot_eager: Dynamo's capture (fullgraph: a graph break fails) and AOTAutograd's
    # trace of forward and backward, without Inductor's minutes of C++ builds;
    # Inductor itself runs on the ops in test_compile.py.
    _, model, patched, _ = pair
    torch._dynamo.reset()
    compiled = torch.compile(patched, fullgraph=True, backend="aot_eager")
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x).logits, unpatched(model, x).logits, atol=2e-5, rtol=1e-5)
    counts = {}
    def count_ops(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and str(node.target).startswith("custom."):
                counts[str(node.target)] = counts.get(str(node.target), 0) + 1
        return gm
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(patched, fullgraph=True, backend=count_ops)(x)
    assert counts.get("custom.rms_norm.default", 0) >= 5
    assert counts.get("custom.swiglu.default", 0) + counts.get("custom.geglu.default", 0) == 2
    assert counts.get("custom.rotary_embedding.default", 0) == 2


def test_autocast_bfloat16(pair):
    # Under autocast the activations are bfloat16 and the weights float32: the ops
    # take the mixed dtypes as F.rms_norm does, and the outputs match the model's.
    _, model, patched, _ = pair
    x = ids()
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        want = unpatched(model, x).logits
        got = patched(x).logits
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), atol=0.1, rtol=0.05)


def test_class_level_patch_builds_patched_models():
    originals = {f: modeling(f).apply_rotary_pos_emb for f in ("llama", "gemma3", "phi3")}
    try:
        replaced = oxt.patch_classes(["llama", "gemma3", "phi3"])
        assert "modeling_llama.LlamaRMSNorm" in replaced and "modeling_phi3.Phi3MLP" in replaced
        assert {rope_name(f) for f in originals} <= set(replaced)
        assert all(modeling(f).apply_rotary_pos_emb is not fn for f, fn in originals.items())
        for family in ("llama", "gemma3", "phi3"):
            model = build(family)
            kinds = {type(m) for m in model.modules()}
            assert CustomRMSNorm in kinds and not any(type(m).__name__.endswith("RMSNorm") and type(m) is not
                                                      CustomRMSNorm for m in model.modules())
            norms = [m for m in model.modules() if isinstance(m, CustomRMSNorm)]
            assert all(m.casting_mode == ("gemma" if family.startswith("gemma") else "llama") for m in norms)
    finally:
        oxt.unpatch_classes()
    # Restored: a model built now has Hugging Face's classes and functions, and computes the same.
    assert all(modeling(f).apply_rotary_pos_emb is fn for f, fn in originals.items())
    plain = build("gemma3")
    assert not any(isinstance(m, CustomRMSNorm) for m in plain.modules())
    x = ids()
    oxt.patch_classes(["gemma3"])
    try:
        patched = build("gemma3")
        with torch.no_grad():
            got = patched(x).logits  # with op_extension's RoPE too
    finally:
        oxt.unpatch_classes()
    with torch.no_grad():
        torch.testing.assert_close(got, plain(x).logits, atol=2e-5, rtol=1e-5)


def test_unknown_classes_are_left_alone_and_listed():
    class FooRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return x * self.weight

    class ReluMLP(torch.nn.Module):  # a Llama-named MLP with an activation we have no kernel for
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = (torch.nn.Linear(8, 8) for _ in range(3))
            self.act_fn = torch.nn.ReLU()

    ReluMLP.__name__ = "LlamaMLP"
    model = torch.nn.Sequential(FooRMSNorm(), ReluMLP(), torch.nn.GELU(approximate="tanh"))
    report = oxt.patch(model)
    assert dict(report) == {"GELU": 1} and report.unknown == {"FooRMSNorm": 1, "LlamaMLP": 1}
    assert report.rope == {}
    assert type(model[0]) is FooRMSNorm and type(model[1]).__name__ == "LlamaMLP"


def test_importing_op_extension_does_not_import_transformers():
    code = "import sys, op_extension, op_extension.nn, op_extension.transformers; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- the modules against Hugging Face's own -------------------------------------


@pytest.mark.parametrize("hf_cls,kwargs", [
    (T.models.llama.modeling_llama.LlamaRMSNorm, dict(casting_mode="llama")),
    (T.models.gemma.modeling_gemma.GemmaRMSNorm, dict(offset=1.0, casting_mode="gemma")),
    (T.models.gemma3.modeling_gemma3.Gemma3RMSNorm, dict(offset=1.0, casting_mode="gemma")),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rms_norm_casting_modes_match_hugging_face(hf_cls, kwargs, dtype):
    # Bit for bit, in every dtype: the kernel sums the float32 squares in torch's
    # order. Widths: under one 8-float vector, vectors with a tail, many cascade
    # blocks; enough rows that a 1-ulp difference in any row's statistics shows.
    for hidden in (5, 64, 100, 512, 4099):
        hf = hf_cls(hidden, eps=1e-6).to(dtype)
        with torch.no_grad():
            hf.weight.copy_(torch.randn(hidden) * 0.3 + (0 if "offset" in kwargs else 1))
        key = "dim" if "offset" in kwargs else "hidden_size"
        ours = CustomRMSNorm(**{key: hidden}, eps=1e-6, dtype=dtype, **kwargs)
        ours.load_state_dict(hf.state_dict())
        x = (torch.randn(64, 5, hidden) * 3).to(dtype)
        want, got = hf(x), ours(x)
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (hidden, (got != want).sum().item())


def test_fused_add_rms_norm_casting_modes_match_residual_plus_hugging_face_norm():
    for hf_cls, kwargs, key in [(T.models.llama.modeling_llama.LlamaRMSNorm, dict(casting_mode="llama"), "hidden_size"),
                                (T.models.gemma.modeling_gemma.GemmaRMSNorm, dict(offset=1.0, casting_mode="gemma"),
                                 "dim")]:
        hf = hf_cls(64, eps=1e-6).bfloat16()
        with torch.no_grad():
            hf.weight.copy_(torch.randn(64) * 0.3)
        ours = FusedAddRMSNorm(**{key: 64}, eps=1e-6, dtype=torch.bfloat16, **kwargs)
        ours.load_state_dict(hf.state_dict())
        x, r = torch.randn(4, 64).bfloat16(), torch.randn(4, 64).bfloat16()
        normed, total = ours(x, r)
        assert torch.equal(total, r + x) and torch.equal(normed, hf(r + x))


def test_modules_take_hugging_face_constructor_arguments():
    config = T.LlamaConfig(**COMMON)
    assert CustomRMSNorm(hidden_size=32, eps=1e-5).variance_epsilon == 1e-5
    gemma = CustomRMSNorm(dim=32, offset=1.0)
    assert torch.equal(gemma.weight, torch.zeros(32))  # used as 1 + 0
    mlp = CustomSwiGLUMLP(config)
    assert (mlp.hidden_size, mlp.intermediate_size) == (32, 64)
    assert CustomSwiGLUMLP.from_config(config).state_dict().keys() == T.models.llama.modeling_llama.LlamaMLP(
        config).state_dict().keys()
    phi = CustomSwiGLUMLP(T.Phi3Config(**COMMON), fused_gate_up=True)
    assert phi.state_dict().keys() == T.models.phi3.modeling_phi3.Phi3MLP(T.Phi3Config(**COMMON)).state_dict().keys()
    with pytest.raises(TypeError, match="exactly one of normalized_shape, hidden_size, dim"):
        CustomRMSNorm(32, hidden_size=32)
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        CustomRMSNorm(32, casting_mode="fast")


# ---- DDP ------------------------------------------------------------------------
#
# Two worker processes meet through a file store over gloo (tests/process_group.py:
# outputs to files, not pipes; one deadline for both; a failing worker ends the
# other at once; both workers' output on failure).
DDP_STEPS = 3


def _ddp_worker(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    process_group.init(rank, world, store)
    model = build("llama").train()
    oxt.patch(model)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    losses = []
    for step in range(DDP_STEPS):
        opt.zero_grad()
        x = ids(batch=2, seed=100 * step + rank)
        loss = ddp(x, labels=x).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if rank == 0:
        torch.save({"losses": losses, "state": model.state_dict()}, out)
    # DDP's reducer holds the process group and gloo's threads: torn down after
    # destroy_process_group (at exit), it hung rank 1 in 3 of ~15 runs; freed
    # while the group lives, in 0 of 20.
    del ddp, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def test_ddp_training_of_a_patched_model(tmp_path):
    world, out = 2, tmp_path / "ddp.pt"
    workers = process_group.run("test_transformers", "_ddp_worker", world, tmp_path / "workers", str(out))
    assert process_group.all_passed(workers), process_group.report(workers)
    result = torch.load(out)
    # The same training in one process over both ranks' batches (DDP averages the
    # two ranks' gradients: the mean of the two losses' gradients).
    model = build("llama").train()
    oxt.patch(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(DDP_STEPS):
        opt.zero_grad()
        losses = [_loss(model, ids(batch=2, seed=100 * step + r)) for r in range(world)]
        ((losses[0] + losses[1]) / 2).backward()
        opt.step()
        assert losses[0].item() == pytest.approx(result["losses"][step], rel=1e-5)
    for name, p in model.state_dict().items():
        torch.testing.assert_close(result["state"][name], p, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


# ---- tensor parallel, sequence parallel and FSDP2 -----------------------------------------
#
# The patched Llama under Hugging Face's own layout of tensor parallelism
# (q/k/v and gate/up column-wise, o/down row-wise; the norms, rotary embedding
# and SwiGLU on each rank's heads and columns), under tensor + sequence
# parallelism (the norms on each rank's part of the sequence), and under FSDP2:
# op_extension's ops in a model that torch.distributed splits need no change.
TP_STEPS = 3


def _tp_plan(model):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for i in range(len(model.model.layers)):
        prefix = f"model.layers.{i}"
        plan |= {f"{prefix}.self_attn.{p}": ColwiseParallel() for p in ("q_proj", "k_proj", "v_proj")}
        plan |= {f"{prefix}.mlp.{p}": ColwiseParallel() for p in ("gate_proj", "up_proj")}
        plan |= {f"{prefix}.self_attn.o_proj": RowwiseParallel(), f"{prefix}.mlp.down_proj": RowwiseParallel()}
    return plan


def _tp_train(model, length=9):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(TP_STEPS):
        opt.zero_grad()
        loss = _loss(model, ids(batch=2, length=length, seed=200 + step))
        loss.backward()
        losses.append(loss.detach())
        # by the model's own names: torch.compile's wrapper prefixes them with _orig_mod.
        grads = {n.removeprefix("_orig_mod."): (p.grad.full_tensor() if hasattr(p.grad, "full_tensor")
                                                else p.grad).clone()
                 for n, p in model.named_parameters()}
        opt.step()
    return torch.stack(losses), grads


def _tp_worker(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    process_group.init(rank, world, store)
    model = build("llama").train()
    oxt.patch(model)
    mesh = init_device_mesh("cpu", (world,))
    parallelize_module(model, mesh, _tp_plan(model))
    layer = model.model.layers[0]
    split = {name: [str(p) for p in getattr(module.weight, "placements", ())]
             for name, module in (("gate_proj", layer.mlp.gate_proj), ("o_proj", layer.self_attn.o_proj))}
    losses, grads = _tp_train(model)
    # FSDP2: every layer's parameters sharded, gathered for its forward and backward.
    from torch.distributed.fsdp import fully_shard

    sharded = build("llama").train()
    oxt.patch(sharded)
    for layer in sharded.model.layers:
        fully_shard(layer, mesh=mesh)
    fsdp_losses, fsdp_grads = _tp_train(fully_shard(sharded, mesh=mesh))
    if rank == 0:
        torch.save({"losses": losses, "grads": grads, "split": split,
                    "fsdp2": {"losses": fsdp_losses, "grads": fsdp_grads}}, out)
    # As _ddp_worker: the parallelized models hold the mesh's process group;
    # freed while it lives (rank 1 once aborted at its teardown, CI 2026-11-28).
    del model, sharded
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def test_tensor_parallel_and_fsdp2_training_of_a_patched_model(tmp_path):
    world, out = 2, tmp_path / "tp.pt"
    workers = process_group.run("test_transformers", "_tp_worker", world, tmp_path / "workers", str(out))
    assert process_group.all_passed(workers), process_group.report(workers)
    result = torch.load(out)
    assert result["split"] == {"gate_proj": ["S(0)"], "o_proj": ["S(1)"]}  # the weights are split
    model = build("llama").train()
    report = oxt.patch(model)
    assert report == {"LlamaRMSNorm": 5, "LlamaMLP": 2} and report.rope  # the patched modules are what was split
    losses, grads = _tp_train(model)
    for run in (result, result["fsdp2"]):
        torch.testing.assert_close(run["losses"], losses, atol=1e-5, rtol=0)
        assert run["grads"].keys() == grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(run["grads"][name], grad, atol=1e-5, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


# Sequence parallel as Megatron and torchtitan lay it out: the embedding's output,
# the norms and the residual stream split on the sequence (Shard(1)), gathered
# for q/k/v and gate/up (column-wise), o/down (row-wise) scattered back onto it.
# One difference from torchtitan's plan, where the residual stream is each rank's
# plain local tensor: Hugging Face reads the sequence length from the
# embedding's output (LlamaModel.forward's position_ids, create_causal_mask) and
# from the norm's output (LlamaAttention's view to heads). Kept as DTensors
# (use_local_output=False), they show the global shape, so the positions and
# the mask cover the whole sequence; a local embedding output gives each rank
# positions 0..S/ranks-1 (test_sequence_parallel_needs_the_global_shape...).
SP_LENGTH = 8  # split evenly over 2 ranks


def _sp_plan(model, embedding_output_local=False):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                  use_local_output=embedding_output_local),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    for i in range(len(model.model.layers)):
        prefix = f"model.layers.{i}"
        plan |= {f"{prefix}.input_layernorm": SequenceParallel(), f"{prefix}.post_attention_layernorm": SequenceParallel()}
        # Their inputs are the norms' Shard(1) DTensors; their outputs each rank's heads
        # and columns, plain tensors, as under plain tensor parallelism.
        plan |= {f"{prefix}.self_attn.{p}": ColwiseParallel(input_layouts=Shard(1)) for p in ("q_proj", "k_proj", "v_proj")}
        plan |= {f"{prefix}.mlp.{p}": ColwiseParallel(input_layouts=Shard(1)) for p in ("gate_proj", "up_proj")}
        plan |= {f"{prefix}.{p}": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
                 for p in ("self_attn.o_proj", "mlp.down_proj")}
    return plan


class _CustomOpCalls(TorchDispatchMode):
    """Counts the calls of torch.ops.custom.* by (op, whether on DTensors) and lists
    the placements and local shape of rms_norm's input. Below autograd, above
    DTensor: it sees the forward and backward ops with the arguments the model
    gave them, not DTensor's calls on the local shards."""

    def __init__(self):
        super().__init__()
        self.calls, self.norm_inputs = collections.Counter(), set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor

        if func.namespace == "custom":
            on_dtensors = any(isinstance(a, DTensor) for a in torch.utils._pytree.tree_leaves((args, kwargs)))
            self.calls[(func.name(), on_dtensors)] += 1
            if func is torch.ops.custom.rms_norm.default and isinstance(args[0], DTensor):
                self.norm_inputs.add((tuple(map(str, args[0].placements)), tuple(args[0].to_local().shape)))
        return func(*args, **(kwargs or {}))


def _traced_custom_ops(seen):
    """A torch.compile backend: counts the custom ops in Dynamo's graph by (op, whether
    traced on DTensors), then compiles with Inductor."""
    from torch._inductor.compile_fx import compile_fx
    from torch.distributed.tensor import DTensor

    def backend(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and str(node.target).startswith("custom."):
                values = [a.meta.get("example_value") for a in node.args if isinstance(a, torch.fx.Node)]
                seen[(str(node.target), any(isinstance(v, DTensor) for v in values))] += 1
        return compile_fx(gm, example_inputs)

    return backend


def _sp_worker(rank: int, world: int, store: str, out: str, variant: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    process_group.init(rank, world, store)
    mesh = init_device_mesh("cpu", (world,))
    model = build("llama").train()
    oxt.patch(model)
    parallelize_module(model, mesh, _sp_plan(model))
    result = {}
    if variant == "compiled":
        seen = collections.Counter()
        result["losses"], result["grads"] = _tp_train(torch.compile(model, backend=_traced_custom_ops(seen)),
                                                      length=SP_LENGTH)
        result["traced"] = dict(seen)
    else:
        with _CustomOpCalls() as calls:
            result["losses"], result["grads"] = _tp_train(model, length=SP_LENGTH)
        result["calls"], result["norm_inputs"] = dict(calls.calls), sorted(calls.norm_inputs)
        # The same plan with the embedding's output a plain local tensor.
        local = build("llama").train()
        oxt.patch(local)
        parallelize_module(local, mesh, _sp_plan(local, embedding_output_local=True))
        try:
            _loss(local, ids(batch=2, length=SP_LENGTH))
            result["local_embedding_output"] = "ran"
        except RuntimeError as e:
            result["local_embedding_output"] = str(e)
    if rank == 0:
        torch.save(result, out)
    dist.barrier()
    dist.destroy_process_group()


_SP_RUNS: dict[str, dict] = {}


@pytest.fixture
def sp_run(tmp_path_factory):
    """variant ("eager", "compiled") -> what rank 0 of its spawn saved: one spawn
    per variant in a session."""

    def get(variant):
        if variant not in _SP_RUNS:
            _SP_RUNS[variant] = _sp_run(tmp_path_factory.mktemp(f"sp_{variant}"), variant)
        return _SP_RUNS[variant]

    return get


def _sp_run(folder, variant):
    out = folder / "sp.pt"
    workers = process_group.run("test_transformers", "_sp_worker", 2, folder / "workers", str(out), variant)
    assert process_group.all_passed(workers), process_group.report(workers)
    return torch.load(out)


def _assert_trains_as_one_process(result):
    model = build("llama").train()
    oxt.patch(model)
    losses, grads = _tp_train(model, length=SP_LENGTH)
    torch.testing.assert_close(result["losses"], losses, atol=1e-5, rtol=0)
    assert result["grads"].keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(result["grads"][name], grad, atol=1e-5, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


def test_tensor_sequence_parallel_training_of_a_patched_model(sp_run):
    """Three SGD steps on 2 ranks: losses and every parameter's gradient equal one
    process's (float32, 1e-5); the norms ran on DTensors split on the sequence."""
    result = sp_run("eager")
    _assert_trains_as_one_process(result)
    # 5 norms a step, forward and backward, on each rank's half of the sequence
    # ([batch 2, 8 / 2 ranks, hidden 32]); RoPE and SwiGLU on each rank's heads and
    # columns, plain tensors (2 layers a step).
    assert result["norm_inputs"] == [(("S(1)",), (2, SP_LENGTH // 2, COMMON["hidden_size"]))]
    norms, layers = 5 * TP_STEPS, 2 * TP_STEPS
    assert result["calls"] == {("custom::rms_norm", True): norms, ("custom::rms_norm_backward", True): norms,
                               ("custom::rotary_embedding", False): layers,
                               ("custom::rotary_embedding_backward", False): layers,
                               ("custom::swiglu", False): layers, ("custom::swiglu_backward", False): layers}


def test_sequence_parallel_needs_the_global_shape_of_the_embedding_output(sp_run):
    """Why _sp_plan keeps the embedding's output a DTensor: as a plain local tensor
    (torchtitan's default), Hugging Face's positions cover only the local part of
    the sequence, and the RoPE tables (S/2 rows) meet the gathered q (S rows)."""
    result = sp_run("eager")
    assert re.search(rf"size of tensor a \({SP_LENGTH}\) must match the size of tensor b \({SP_LENGTH // 2}\)",
                     result["local_embedding_output"]), result["local_embedding_output"]


def test_tensor_sequence_parallel_training_of_a_compiled_patched_model(sp_run):
    """The same under torch.compile (Inductor): Dynamo traced the norms on DTensors."""
    result = sp_run("compiled")
    _assert_trains_as_one_process(result)
    assert result["traced"].get(("custom.rms_norm.default", True), 0) >= 5, result["traced"]
    assert ("custom.rms_norm.default", False) not in result["traced"], result["traced"]
    assert result["traced"].get(("custom.rotary_embedding.default", False), 0) >= 2, result["traced"]
    assert result["traced"].get(("custom.swiglu.default", False), 0) >= 2, result["traced"]


def test_class_level_patch_keeps_hugging_face_for_arguments_it_cannot_honour():
    # An argument op_extension's module has no use for must not be dropped silently:
    # the stand-in builds Hugging Face's own module then.
    original = T.models.llama.modeling_llama.LlamaRMSNorm
    oxt.patch_classes(["llama"])
    try:
        stand_in = T.models.llama.modeling_llama.LlamaRMSNorm
        assert isinstance(stand_in(16, eps=1e-5), CustomRMSNorm)
        with pytest.raises(TypeError):
            stand_in(16, eps=1e-5, elementwise_affine=False)  # Hugging Face's class takes no such argument
    finally:
        oxt.unpatch_classes()
    assert T.models.llama.modeling_llama.LlamaRMSNorm is original


# ---- rotary position embedding ----------------------------------------------------


@pytest.mark.parametrize("family", NAMES)
def test_rope_function_is_replaced_once_and_restored_exactly(family):
    module = modeling(family)
    original = module.apply_rotary_pos_emb
    model = build(family)
    report = oxt.patch(model, rms_norm=False, mlp=False, activation=False)
    assert dict(report) == {} and report.rope == {rope_name(family): 2} and report.unknown == {}
    ours = module.apply_rotary_pos_emb
    assert ours is not original and ours.__wrapped__ is original
    # Idempotent, for this model and any other of the family: the function stays the same one.
    assert oxt.patch(model).rope == oxt.patch(build(family, seed=1)).rope == {rope_name(family): 2}
    assert module.apply_rotary_pos_emb is ours
    with oxt.unpatched():
        assert module.apply_rotary_pos_emb is original
    assert module.apply_rotary_pos_emb is ours
    # Another casting mode replaces it again, still around Hugging Face's function.
    oxt.patch(model, rope_casting_mode="hf")
    assert module.apply_rotary_pos_emb is not ours and module.apply_rotary_pos_emb.__wrapped__ is original
    oxt.unpatch_classes()
    assert module.apply_rotary_pos_emb is original
    assert oxt.patch(model, rope=False).rope == {} and module.apply_rotary_pos_emb is original


def test_rope_casting_mode_is_checked_before_anything_is_replaced():
    model = build("llama")
    with pytest.raises(ValueError, match="patch: rope_casting_mode must be one of \\('none', 'hf'\\), got 'llama'"):
        oxt.patch(model, rope_casting_mode="llama")
    with pytest.raises(ValueError, match="patch_classes: rope_casting_mode must be one of"):
        oxt.patch_classes(["llama"], rope_casting_mode="fast")
    assert oxt._ORIGINALS == {} and not any(isinstance(m, CustomRMSNorm) for m in model.modules())


def rope_inputs(dtype, head=64, rot=None, batch=2, seq=5, heads=(4, 2), seed=0):
    """q, k as the attention makes them ([batch, heads, seq, head], a transposed
    view) and cos, sin as the rotary embedding makes them (halves repeated)."""
    g = torch.Generator().manual_seed(seed)
    rot = head if rot is None else rot
    q = torch.randn(batch, seq, heads[0], head, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(batch, seq, heads[1], head, generator=g).to(dtype).transpose(1, 2)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float) / rot))
    pos = torch.arange(seq, dtype=torch.float)[None, :, None] + torch.randint(0, 100, (batch, 1, 1), generator=g)
    emb = torch.cat([pos * inv_freq, pos * inv_freq], dim=-1)
    return q, k, emb.cos().to(dtype), emb.sin().to(dtype)


def _forward_backward(fn, q, k, cos, sin, unsqueeze_dim=1):
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    q_embed, k_embed = fn(q, k, cos, sin, unsqueeze_dim)
    g = torch.Generator().manual_seed(5)
    grads = [torch.randn(t.shape, generator=g).to(t.dtype) for t in (q_embed, k_embed)]
    torch.autograd.backward((q_embed, k_embed), grads)
    return q_embed, k_embed, q.grad, k.grad


@pytest.mark.parametrize("family,rot", [("llama", 64), ("gemma3", 64), ("phi3", 64), ("phi3", 48)],
                         ids=["llama", "gemma3", "phi3", "phi3-partial"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rope_functions_against_hugging_face_forward_and_backward(family, rot, dtype):
    original = modeling(family).apply_rotary_pos_emb
    q, k, cos, sin = rope_inputs(dtype, rot=rot)
    want = _forward_backward(original, q, k, cos, sin)
    # "hf": the model's three roundings, bit for bit, gradients too, in every dtype.
    oxt.patch_classes([family], rms_norm=False, mlp=False, rope_casting_mode="hf")
    with counting_rope_calls() as calls:
        got = _forward_backward(modeling(family).apply_rotary_pos_emb, q, k, cos, sin)
    assert calls == [(2, 4, 5, rot)] * 2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
    # "none": one rounding per output (16-bit: the products are exact in float32),
    # not the model's in the last bit; in 16-bit dtypes no less accurate than the
    # model's (against float64). In float32 both are a few roundings of float32.
    oxt.patch_classes([family], rms_norm=False, mlp=False)
    with counting_rope_calls() as calls:
        got = _forward_backward(modeling(family).apply_rotary_pos_emb, q, k, cos, sin)
    assert len(calls) == 1
    exact = _forward_backward(original, *(t.double() for t in (q, k, cos, sin)))
    tol = {torch.float32: 1e-6, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[dtype]
    for g, w, e in zip(got, want, exact):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, atol=4 * tol, rtol=2 * tol)
        if dtype != torch.float32:
            assert (g.double() - e).abs().max() <= (w.double() - e).abs().max()


def test_rope_function_takes_the_bshd_layout():
    # [batch, seq, heads, head] with unsqueeze_dim=2 goes to the op too.
    q, k, cos, sin = rope_inputs(torch.bfloat16)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    original = modeling("llama").apply_rotary_pos_emb
    oxt.patch_classes(["llama"], rms_norm=False, mlp=False, rope_casting_mode="hf")
    with counting_rope_calls() as calls:
        got = modeling("llama").apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    assert len(calls) == 2
    for g, w in zip(got, original(q, k, cos, sin, unsqueeze_dim=2)):
        assert torch.equal(g, w)


def _q_k_cos_sin(q_shape, k_shape, cos_shape, dtype=torch.float32, cos_dtype=None):
    g = torch.Generator().manual_seed(3)
    make = lambda shape, dt: torch.randn(shape, generator=g).to(dt)  # noqa: E731
    return (make(q_shape, dtype), make(k_shape, dtype), make(cos_shape, cos_dtype or dtype),
            make(cos_shape, cos_dtype or dtype))


FALLBACKS = {
    # What the op refuses, or would compute otherwise: Hugging Face's function runs.
    "dtype-mix (autocast)": (_q_k_cos_sin((2, 4, 5, 8), (2, 2, 5, 8), (2, 5, 8), torch.bfloat16, torch.float32), 1),
    "table-narrower-than-head": (_q_k_cos_sin((2, 4, 5, 8), (2, 2, 5, 8), (2, 5, 1)), 1),
    "odd-head-dim": (_q_k_cos_sin((2, 4, 5, 7), (2, 2, 5, 7), (2, 5, 7)), 1),
    "tables-broadcast-q-up": (_q_k_cos_sin((1, 4, 5, 8), (1, 2, 5, 8), (3, 5, 8)), 1),
    "integer": (tuple(t.mul(4).int() for t in _q_k_cos_sin((2, 4, 5, 8), (2, 2, 5, 8), (2, 5, 8))), 1),
    "unsqueeze-dim-last": (_q_k_cos_sin((2, 5, 8, 1), (2, 5, 8, 1), (2, 5, 8)), -1),
    # Where Hugging Face's function raises, the same error: never one of the op's.
    "unsqueeze-dim-out-of-range": (_q_k_cos_sin((2, 4, 5, 8), (2, 2, 5, 8), (2, 5, 8)), 5),
    "k-head-dim-differs": (_q_k_cos_sin((2, 4, 5, 8), (2, 2, 5, 6), (2, 5, 8)), 1),
}


@pytest.mark.parametrize("case", FALLBACKS)
@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_rope_function_falls_back_to_hugging_face_for_what_the_op_does_not_take(family, case):
    (q, k, cos, sin), unsqueeze_dim = FALLBACKS[case]
    original = modeling(family).apply_rotary_pos_emb
    oxt.patch_classes([family], rms_norm=False, mlp=False)
    ours = modeling(family).apply_rotary_pos_emb
    try:
        want = original(q, k, cos, sin, unsqueeze_dim)
    except Exception as e:  # then the same error, Hugging Face's
        with counting_rope_calls() as calls, pytest.raises(type(e), match=re.escape(str(e))):
            ours(q, k, cos, sin, unsqueeze_dim)
    else:
        with counting_rope_calls() as calls:
            got = ours(q, k, cos, sin, unsqueeze_dim)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
    assert calls == []


def test_rope_function_falls_back_under_torch_func_and_forward_mode_ad():
    import torch.autograd.forward_ad as fwAD

    original = modeling("llama").apply_rotary_pos_emb
    oxt.patch_classes(["llama"], rms_norm=False, mlp=False)
    ours = modeling("llama").apply_rotary_pos_emb
    q, k, cos, sin = rope_inputs(torch.float32)
    with counting_rope_calls() as calls:
        # vmap over a leading dim, and grad of a sum (the op has no functorch support)
        for fn in (original, ours):
            stacked = torch.func.vmap(fn)(*(torch.stack([t, 2 * t]) for t in (q, k, cos, sin)))
            grad = torch.func.grad(lambda q_: fn(q_, k, cos, sin)[0].pow(2).sum())(q)
            if fn is original:
                want = (*stacked, grad)
        for g, w in zip((*stacked, grad), want):
            assert torch.equal(g, w)
        tangent = torch.randn_like(q)
        results = []
        for fn in (original, ours):
            with fwAD.dual_level():
                q_embed, _ = fn(fwAD.make_dual(q, tangent), k, cos, sin)
                results.append(fwAD.unpack_dual(q_embed))
        assert torch.equal(results[0].primal, results[1].primal) and torch.equal(results[0].tangent,
                                                                                 results[1].tangent)
    assert calls == []


@pytest.mark.compile
def test_rope_function_compiles_fullgraph_with_dynamic_shapes():
    oxt.patch_classes(["phi3"], rms_norm=False, mlp=False)
    fn = modeling("phi3").apply_rotary_pos_emb
    original = fn.__wrapped__

    def f(q, k, cos, sin):
        q_embed, k_embed = fn(q, k, cos, sin)
        return q_embed.sum(-1), k_embed.sum(-1)

    counts = []

    def backend(gm, example_inputs):
        counts.append(sum(1 for n in gm.graph.nodes if n.target is torch.ops.custom.rotary_embedding.default))
        return gm

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    for seq, rot in ((5, 48), (9, 48), (7, 64)):
        q, k, cos, sin = rope_inputs(torch.float32, rot=rot, seq=seq)
        for g, w in zip(compiled(q, k, cos, sin), (t.sum(-1) for t in original(q, k, cos, sin))):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert counts and all(c == 1 for c in counts)
