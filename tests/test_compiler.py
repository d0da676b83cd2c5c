"""op_extension.compiler: torch.compile finds the eager patterns and runs our ops.

Every model is compiled with fullgraph=True (a graph break fails the test) and,
but for one Inductor test, with the backend's rewrite followed by AOTAutograd
with recording compilers: Inductor's C++ builds cost ~30 s per graph on this
machine, and the rewrite is the same whatever compiles the graph next.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch import nn
from torch._dynamo.backends.common import aot_autograd

import op_extension.compiler as oc

pytestmark = pytest.mark.compile


def custom_ops(gm: torch.fx.GraphModule) -> Counter:
    """custom:: ops called in a graph (Torch IR or ATen), by name."""
    found = Counter()
    for n in gm.graph.nodes:
        name = getattr(n.target, "name", None)
        if n.op == "call_function" and callable(name) and name().startswith("custom::"):
            found[name().split("::")[1].split(".")[0]] += 1
    return found


class Recorder:
    """backend=op_extension (the rewrite), then AOTAutograd with compilers that
    keep the forward and backward graphs they are given."""

    def __init__(self) -> None:
        self.dynamo, self.forward, self.backward = [], [], []

        def keep(graphs):
            def compiler(gm, example_inputs):
                graphs.append(gm)
                return make_boxed_func(gm.forward)
            return compiler

        self.inner = aot_autograd(fw_compiler=keep(self.forward), bw_compiler=keep(self.backward))

    def __call__(self, gm, example_inputs):
        out = oc.backend(gm, example_inputs, {"inner": self.inner})
        self.dynamo.append(gm)
        return out

    def compile(self, model, dynamic=True):
        torch._dynamo.reset()
        return torch.compile(model, backend=self, dynamic=dynamic, fullgraph=True)


# ---- the patterns, as models write them ----------------------------------------------


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(0.1 * torch.randn(hidden))
        self.eps = eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class PlainRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight


class DivisionRMSNorm(nn.Module):
    """The division form: x / sqrt(mean(x^2) + eps), times the weight."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """A pre-norm decoder block's arithmetic: norm, residual add, norm, SwiGLU MLP."""

    def __init__(self, norm_cls, hidden=32, inter=48, act="silu"):
        super().__init__()
        self.norm1, self.norm2 = norm_cls(hidden), norm_cls(hidden)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.act = act

    def forward(self, x):
        h = x + self.proj(self.norm1(x))
        n = self.norm2(h)
        g, u = self.gate(n), self.up(n)
        a = F.silu(g) if self.act == "silu" else F.gelu(g, approximate=self.act)
        return h + self.down(a * u)


def check_against_eager(model, compiled, x, atol=1e-5, rtol=1e-5):
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = model(x1), compiled(x2)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
    want.float().square().sum().backward()
    got.float().square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("norm_cls", [LlamaRMSNorm, GemmaRMSNorm, PlainRMSNorm, DivisionRMSNorm])
def test_block_float32_rewritten_forward_and_backward(norm_cls):
    torch.manual_seed(0)
    model = Block(norm_cls)
    twin = copy.deepcopy(model)
    rec = Recorder()
    compiled = rec.compile(twin)
    check_against_eager(model, compiled, torch.randn(2, 7, 32))
    # norm1 reads x: rms_norm; norm2 reads the residual sum, which the block
    # returns too: fused_add_rms_norm; the MLP: swiglu.
    assert oc.last_report().replaced == Counter(rms_norm=1, fused_add_rms_norm=1, swiglu=1)
    assert custom_ops(rec.dynamo[-1]) == Counter(rms_norm=1, fused_add_rms_norm=1, swiglu=1)
    assert custom_ops(rec.forward[-1]) == Counter(rms_norm=1, fused_add_rms_norm=1, swiglu=1)
    assert custom_ops(rec.backward[-1]) == Counter(rms_norm_backward=1, fused_add_rms_norm_backward=1,
                                                   swiglu_backward=1)
    # Parameter gradients match too.
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    # A new sequence length reuses the graph (dynamic shapes, no recompilation).
    graphs = len(rec.dynamo)
    check_against_eager(model, compiled, torch.randn(3, 11, 32))
    assert len(rec.dynamo) == graphs


@pytest.mark.parametrize("norm_cls", [LlamaRMSNorm, GemmaRMSNorm])
def test_block_bfloat16_with_the_upcasting_norms(norm_cls):
    torch.manual_seed(1)
    model = Block(norm_cls).bfloat16()
    rec = Recorder()
    compiled = rec.compile(copy.deepcopy(model))
    x = torch.randn(2, 7, 32).bfloat16()
    with torch.no_grad():
        want, got = model(x), compiled(x)
    if norm_cls is LlamaRMSNorm:
        # Llama's arithmetic is the op's (normalise in float32, round, times the
        # weight): the norms are exact; the fused SwiGLU rounds once, not twice.
        assert oc.last_report().replaced == Counter(rms_norm=1, fused_add_rms_norm=1, swiglu=1)
    else:
        # Gemma's norm input is a float32 copy of the sum: no fused add there.
        assert oc.last_report().replaced == Counter(rms_norm=2, swiglu=1)
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.02)


def test_geglu_gelu_softmax_layer_norm_and_torch_rms_norm():
    class Misc(nn.Module):
        def __init__(self):
            super().__init__()
            self.rms = nn.RMSNorm(16, eps=1e-6)
            self.ln = nn.LayerNorm(16)

        def forward(self, g, u, s):
            a = F.gelu(g, approximate="tanh") * u       # geglu
            b = F.gelu(s)                                # gelu (erf)
            c = torch.softmax(s, dim=-1) + s.softmax(-1) + F.softmax(s, dim=1)
            d = self.ln(a) + F.rms_norm(b, (16,), None, 1e-5) + self.rms(c)
            return d

    torch.manual_seed(2)
    model = Misc()
    rec = Recorder()
    compiled = rec.compile(copy.deepcopy(model))
    g, u, s = (torch.randn(3, 5, 16) for _ in range(3))
    args = [t.clone().requires_grad_() for t in (g, u, s)]
    args2 = [t.clone().requires_grad_() for t in (g, u, s)]
    want, got = model(*args), compiled(*args2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    got.sum().backward()
    want.sum().backward()
    for a, b in zip(args2, args):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
    assert oc.last_report().replaced == Counter(geglu=1, gelu=1, softmax=3, layer_norm=1, rms_norm=2)
    assert custom_ops(rec.backward[-1]) == Counter(geglu_backward=1, gelu_backward=1, softmax_backward=3,
                                                   layer_norm_backward=1, rms_norm_backward=2)


def test_gelu_tanh_written_as_its_formula():
    import math

    def new_gelu(x):  # Hugging Face's NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class Formulas(nn.Module):
        def forward(self, x, g, u):
            cube = x * x * x  # the cube written out, the formula's other spelling
            other = 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * cube)))
            return new_gelu(x) + other, new_gelu(g) * u

    rec = Recorder()
    compiled = rec.compile(Formulas())
    x, g, u = (torch.randn(3, 16) for _ in range(3))
    with torch.no_grad():
        for got, want in zip(compiled(x, g, u), Formulas()(x, g, u)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert oc.last_report().replaced == Counter(gelu=2, geglu=1)
    # A near miss (another constant) stays as written.
    rec.compile(lambda t: 0.5 * t * (1.0 + torch.tanh(0.79 * (t + 0.044715 * torch.pow(t, 3.0)))))(x)
    assert oc.last_report().replaced == Counter()


# ---- what must not be rewritten ----------------------------------------------------------


class EpsOutside(nn.Module):
    def forward(self, x):
        return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + 1e-6)


class OtherDim(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6)


class NoKeepdim(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6).unsqueeze(-1)


class SixteenBitMath(nn.Module):
    """RMSNorm computed in bfloat16 (no upcast): squares and mean rounded to bf16."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class SoftmaxWithDtype(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1, dtype=torch.float64)


class MethodSoftmaxWithDtype(nn.Module):
    def forward(self, x):
        return x.softmax(-1, torch.float64)


class Broadcast(nn.Module):
    def forward(self, g, u):
        return F.silu(g) * u[:, :1]


class SiluUsedTwice(nn.Module):
    def forward(self, g, u):
        a = F.silu(g)
        return a * u + a


@pytest.mark.parametrize("model,inputs,note", [
    (EpsOutside(), [torch.randn(4, 16)], None),
    (OtherDim(), [torch.randn(4, 16)], "mean over dim 0"),
    (NoKeepdim(), [torch.randn(4, 16)], "keepdim=False"),
    (SixteenBitMath(), [torch.randn(4, 16).bfloat16()], "computed in torch.bfloat16"),
    (SoftmaxWithDtype(), [torch.randn(4, 16)], "computes in torch.float64"),
    (MethodSoftmaxWithDtype(), [torch.randn(4, 16)], "computes in torch.float64"),
    (Broadcast(), [torch.randn(4, 16), torch.randn(4, 16)], "operands differ"),
    (SiluUsedTwice(), [torch.randn(4, 16), torch.randn(4, 16)], None),
], ids=["eps-outside-sqrt", "other-dim", "no-keepdim", "bf16-math", "softmax-dtype", "method-softmax-dtype",
       "broadcast", "silu-reused"])
def test_patterns_with_other_semantics_are_left_alone(model, inputs, note):
    rec = Recorder()
    compiled = rec.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs))
    report = oc.last_report()
    assert report.replaced == Counter() and custom_ops(rec.dynamo[-1]) == Counter()
    if note is not None:
        assert any(note in line for line in report.left_alone), report.left_alone


# ---- eps that Dynamo passes as a tensor ----------------------------------------------------


def test_eps_read_from_a_tensor_input_is_checked_at_run_time():
    # Under dynamic=True Dynamo may pass a module's float attribute as a 0-dim
    # tensor and read it with .item(); the rewrite bakes the value in and the
    # graph checks it on every call. Here the graph is built by hand as Dynamo
    # would give it.
    from types import SimpleNamespace

    from torch._subclasses.fake_tensor import FakeTensorMode

    def f(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps.item())

    gm = torch.fx.symbolic_trace(f)
    x, eps = torch.randn(4, 16), torch.tensor(1e-5, dtype=torch.float64)
    eps_value = float(eps)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fx_, feps = mode.from_tensor(x), mode.from_tensor(eps)
        values = {"x": fx_, "eps": feps}
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                n.meta["example_value"] = values[n.name]
            elif n.target == "item":
                n.meta["example_value"] = eps_value  # Dynamo's would be a SymFloat
            elif n.op != "output":
                args = torch.fx.node.map_arg(n.args, lambda a: a.meta["example_value"])
                if n.op == "call_method":
                    n.meta["example_value"] = getattr(args[0], n.target)(*args[1:], **n.kwargs)
                else:
                    n.meta["example_value"] = n.target(*args, **n.kwargs)
    [eps_node] = [n for n in gm.graph.nodes if n.name == "eps"]
    eps_node.meta["grapharg"] = SimpleNamespace(example=eps)
    report = oc.rewrite(gm.graph)
    gm.recompile()
    assert report.replaced == Counter(rms_norm=1)
    torch.testing.assert_close(gm(x, eps), f(x, eps))
    with pytest.raises(RuntimeError, match="rms_norm's constant eps was 1e-05 .* has changed since"):
        gm(x, torch.tensor(1e-3, dtype=torch.float64))


# ---- the named backend, the report, Inductor -----------------------------------------------


def test_backend_by_name_and_the_log_line(caplog):
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = Block(LlamaRMSNorm)
    compiled = torch.compile(model, backend="op_extension", fullgraph=True, options={"inner": "aot_eager"})
    x = torch.randn(2, 3, 32)
    with caplog.at_level(logging.INFO, logger="op_extension.compiler"), torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert any("fused_add_rms_norm x1, rms_norm x1, swiglu x1" in r.getMessage() for r in caplog.records)
    assert "swiglu x1" in str(oc.last_report())
    with pytest.raises(ValueError, match="apply to inner='inductor' only"):
        oc.backend(torch.fx.symbolic_trace(nn.Identity()), [torch.randn(2)], {"inner": "eager", "max_autotune": True})


@pytest.mark.parametrize("imports", [
    "import torch",                                          # the entry point alone
    "import torch, op_extension",                            # op_extension before Dynamo
    "import torch, torch._dynamo, op_extension",             # Dynamo first: registered on import
    "import torch, op_extension, torch._dynamo; torch._dynamo.list_backends()",  # entry points read first
])
def test_backend_name_resolves_whatever_the_import_order(imports):
    import subprocess
    import sys

    code = (f"{imports}\n"
            "f = torch.compile(lambda x: torch.nn.functional.silu(x) * x.cos(), backend='op_extension',"
            " options={'inner': 'eager'})\n"
            "x = torch.randn(8)\n"
            "torch.testing.assert_close(f(x), torch.nn.functional.silu(x) * x.cos())\n"
            "import op_extension.compiler as oc; print(dict(oc.last_report().replaced))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("{'swiglu': 1}")


def test_enable_rewrites_inside_the_default_inductor_backend():
    torch.manual_seed(3)
    model = Block(PlainRMSNorm, hidden=16, inter=16)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    stack = contextlib.ExitStack()
    oc.enable()
    try:
        torch._dynamo.reset()
        compiled = torch.compile(copy.deepcopy(model), fullgraph=True)
        # Inductor's caches would replay an earlier run's (rewritten) graph without
        # running the pass again, and so without a report: compile afresh.
        stack.enter_context(inductor_config.patch(fx_graph_cache=False))
        stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
        x = torch.randn(2, 5, 16)
        check_against_eager(model, compiled, x, atol=1e-5, rtol=1e-5)
        assert oc.last_report().replaced == Counter(rms_norm=1, fused_add_rms_norm=1, swiglu=1)
    finally:
        stack.close()
        oc.disable()
    assert inductor_config.pre_grad_custom_pass is None


# ---- unpatched Hugging Face models -----------------------------------------------------


def _hf_model(family: str):
    import transformers as T

    config_cls, model_cls, extra = {
        "llama": (T.LlamaConfig, T.LlamaForCausalLM, {}),
        "mistral": (T.MistralConfig, T.MistralForCausalLM, {}),
        "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}),
        "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {"head_dim": 8}),
        "gemma": (T.GemmaConfig, T.GemmaForCausalLM, {"head_dim": 8}),
        # Eager attention named: transformers 5.23 refuses SDPA for Gemma2 (softcapping)
        # and so runs eager, 5.17 (the GPU machines') runs SDPA, whose graph holds no softmax.
        "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, {"head_dim": 8, "attn_implementation": "eager"}),
        "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, {"head_dim": 8}),
        "phi3": (T.Phi3Config, T.Phi3ForCausalLM, {}),
    }[family]
    torch.manual_seed(0)
    config = config_cls(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, pad_token_id=0,
                        eos_token_id=1, bos_token_id=2, **extra)
    model = model_cls(config).train()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


# 2 layers: the first layer's input norm reads the embeddings and the final norm
# a sum nothing else reads (rms_norm); the three other residual adds fuse. Qwen3
# and Gemma3 add q/k norms (4), Gemma2/3 pre- and post-feedforward norms (4);
# Phi-3's fused gate_up_proj is chunked into gate and up; Gemma2's eager
# attention takes softmax(dtype=float32) of float32 scores (2).
HF_REWRITES = {
    "llama": dict(rms_norm=2, fused_add_rms_norm=3, swiglu=2),
    "mistral": dict(rms_norm=2, fused_add_rms_norm=3, swiglu=2),
    "qwen2": dict(rms_norm=2, fused_add_rms_norm=3, swiglu=2),
    "qwen3": dict(rms_norm=6, fused_add_rms_norm=3, swiglu=2),
    "gemma": dict(rms_norm=2, fused_add_rms_norm=3, geglu=2),
    "gemma2": dict(rms_norm=6, fused_add_rms_norm=3, geglu=2, softmax=2),
    "gemma3": dict(rms_norm=10, fused_add_rms_norm=3, geglu=2),
    "phi3": dict(rms_norm=2, fused_add_rms_norm=3, swiglu=2),
}


@pytest.mark.parametrize("family", list(HF_REWRITES))
def test_unpatched_hugging_face_models(family):
    model = _hf_model(family)
    twin = copy.deepcopy(model)
    rec = Recorder()
    compiled = rec.compile(twin)
    gen = torch.Generator().manual_seed(1)
    expected = Counter(HF_REWRITES[family])
    for length in (9, 13):  # the second length reuses the graph
        ids = torch.randint(3, 128, (2, length), generator=gen)
        model.zero_grad()
        twin.zero_grad()
        want = model(ids, labels=ids)
        got = compiled(ids, labels=ids)
        torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-5)
        want.loss.backward()
        got.loss.backward()
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
        if length == 9:
            graphs = len(rec.dynamo)
            assert oc.last_report().replaced == expected
            assert custom_ops(rec.forward[-1]) == expected
            assert custom_ops(rec.backward[-1]) == Counter({f"{op}_backward": n for op, n in expected.items()})
    assert len(rec.dynamo) == graphs
