"""The model sections, which combine ops as a model does: small Hugging Face
decoders unpatched vs op_extension.transformers.patch, and a Llama decoder four
ways (eager, Inductor, backend="op_extension", patched). CPU only; they need
transformers."""

from __future__ import annotations

import contextlib
import sys
import time

import torch

from .doubt import ROW_TRIES, doubt_note, section_doubt, until_quiet, with_doubt
from .harness import Progress, RunConfig, measure, warm_up
from .report import fmt_marked, print_aligned, print_section_legend

# Hugging Face models: op_extension.transformers.patch on a small decoder of
# each family (random init, built from its config), forward + backward of a
# causal-LM loss, unpatched vs patched in the same interleaved run.
HF_FAMILIES = ("llama", "qwen3", "gemma3", "phi3")
HF_SHAPE = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=4, head_dim=64, vocab_size=1024, max_position_embeddings=512,
                pad_token_id=0, eos_token_id=1, bos_token_id=2)
HF_BATCH, HF_SEQ = 4, 128


def _hf_model(family, transformers, dtype):
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    }[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**HF_SHAPE)).to(dtype).train()
    with torch.no_grad():  # norm weights away from their init value, so they count
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def hf_models(cfg: RunConfig, progress: Progress):
    """Rows: family, dtype, unpatched and patched fwd+bwd ms, speed-up, and how
    the logits compare: the max |difference| with the default patch (fused MLP,
    RoPE rounded once), and, for 16-bit dtypes, whether they are bit for bit
    equal with the Hugging Face casting modes (mlp_casting_mode="hf",
    rope_casting_mode="hf"), as tests/test_transformers.py asserts
    (docs/transformers.md). patch replaces a family's RoPE function
    process-wide: the unpatched model runs under oxt.unpatched()."""
    import copy

    import transformers

    import op_extension.transformers as oxt

    rows = []
    ids = torch.randint(3, HF_SHAPE["vocab_size"], (HF_BATCH, HF_SEQ), generator=torch.Generator().manual_seed(0))
    for family in HF_FAMILIES:
        for dtype in cfg.dtypes:
            progress.show(f"hf {family} {str(dtype).replace('torch.', '')}")
            model = _hf_model(family, transformers, dtype)
            with torch.no_grad(), oxt.unpatched():
                want = model(ids).logits
            # The RoPE function's casting mode is per process: the "hf" patch first,
            # then the default one, which is timed.
            exact = copy.deepcopy(model)
            oxt.patch(exact, mlp_casting_mode="hf", rope_casting_mode="hf")
            with torch.no_grad():
                identical = bool(torch.equal(exact(ids).logits, want))
            del exact
            patched = copy.deepcopy(model)
            report = oxt.patch(patched)
            with torch.no_grad():
                diff = (patched(ids).logits.float() - want.float()).abs().max().item()
            steps = {}
            for name, m, rope in (("hf", model, oxt.unpatched), ("patched", patched, contextlib.nullcontext)):
                def step(m=m, rope=rope):
                    m.zero_grad(set_to_none=True)
                    with rope():
                        loss = m(ids, labels=ids).loss
                    loss.backward()
                warm_up(step, cfg.device, min_calls=2)
                steps[name] = step
            (timings, errors), others, attempts = until_quiet(
                lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
            row = {"family": family, "dtype": str(dtype).replace("torch.", ""), "replaced": dict(report),
                   "rope": dict(report.rope), "max_abs_logit_diff": diff,
                   "logits_identical_hf_casting": identical, "errors": errors}
            for name, t in timings.items():
                row[f"{name}_ms"] = t.median_s * 1e3
            if "hf_ms" in row and "patched_ms" in row:
                row["speedup"] = row["hf_ms"] / row["patched_ms"]
            row.update(others_cpu_busy=others, timing_attempts=attempts,
                       in_doubt=section_doubt(row, others, ("hf_ms", "patched_ms"), "speedup"))
            rows.append(row)
            progress.advance(with_doubt(f"hf {family}", row))
    oxt.unpatch_classes()
    return rows


# A Llama model, four ways: eager, torch.compile (Inductor), torch.compile with
# backend="op_extension" (which finds the eager patterns itself, then Inductor),
# and manually patched (op_extension.transformers.patch, eager). Forward +
# backward of a causal-LM loss, the same decoder as the Hugging Face section.
MODEL_WAYS = ("eager", "inductor", "op_extension", "patched")


def model_ways(cfg: RunConfig, progress: Progress):
    """Rows: dtype, ms per way, speed-up of each way over eager, the compile
    seconds of the two compiled ways, and what the backend rewrote. The ways
    other than "patched" run under oxt.unpatched() (Hugging Face's RoPE)."""
    import copy

    import transformers

    import op_extension.compiler as oc
    import op_extension.transformers as oxt

    rows = []
    ids = torch.randint(3, HF_SHAPE["vocab_size"], (HF_BATCH, HF_SEQ), generator=torch.Generator().manual_seed(0))
    for dtype in cfg.dtypes:
        progress.show(f"model llama {str(dtype).replace('torch.', '')}: compiling")
        model = _hf_model("llama", transformers, dtype)
        patched = copy.deepcopy(model)
        oxt.patch(patched)
        models = {"eager": model, "inductor": torch.compile(copy.deepcopy(model)),
                  "op_extension": torch.compile(copy.deepcopy(model), backend=oc.BACKEND_NAME), "patched": patched}
        steps, compile_s, replaced = {}, {}, {}
        for name, m in models.items():
            def step(m=m, rope=contextlib.nullcontext if name == "patched" else oxt.unpatched):
                m.zero_grad(set_to_none=True)
                with rope():
                    loss = m(ids, labels=ids).loss
                loss.backward()
            t0 = time.perf_counter()
            step()  # compiles the compiled ways
            compile_s[name] = time.perf_counter() - t0
            if name == "op_extension" and oc.last_report() is not None:
                replaced = dict(oc.last_report().replaced)
            warm_up(step, cfg.device, min_calls=2)
            steps[name] = step
        (timings, errors), others, attempts = until_quiet(
            lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
        row = {"model": "llama", "dtype": str(dtype).replace("torch.", ""), "errors": errors,
               "compile_s": {k: compile_s[k] for k in ("inductor", "op_extension")}, "rewritten": replaced}
        for name, t in timings.items():
            row[f"{name}_ms"] = t.median_s * 1e3
        for name in MODEL_WAYS[1:]:
            if "eager_ms" in row and f"{name}_ms" in row:
                row[f"{name}_speedup"] = row["eager_ms"] / row[f"{name}_ms"]
        row.update(others_cpu_busy=others, timing_attempts=attempts,
                   in_doubt=section_doubt(row, others, tuple(f"{w}_ms" for w in MODEL_WAYS), "op_extension_speedup"))
        rows.append(row)
        progress.advance(with_doubt("model llama", row))
    oxt.unpatch_classes()
    return rows


def print_hf(rows, file=sys.stdout):
    header = ("family", "dtype", "HF ms", "patched ms", "speed-up", "max|dlogit|", "bitwise (hf casting)",
              "note")
    table = [(r["family"], r["dtype"], fmt_marked(r, "hf_ms", ".1f"), fmt_marked(r, "patched_ms", ".1f"),
              fmt_marked(r, "speedup", ".2f", "x"), f"{r['max_abs_logit_diff']:.2e}",
              "-" if r["dtype"] in ("float32", "float64") else
              ("yes" if r["logits_identical_hf_casting"] else "no"),
              doubt_note(r) if r.get("in_doubt") else "") for r in rows]
    print_aligned(header, table, file, right=range(2, 6))
    print_section_legend(rows, file)


def print_model_ways(rows, file=sys.stdout):
    header = ("model", "dtype", "eager ms", "inductor ms", "op_extension ms", "patched ms",
              "x inductor", "x op_extension", "x patched", "compile s (ind/ox)", "note")
    table = [(r["model"], r["dtype"], *(fmt_marked(r, f"{w}_ms", ".1f") for w in MODEL_WAYS),
              *(fmt_marked(r, f"{w}_speedup", ".2f", "x") for w in MODEL_WAYS[1:]),
              f"{r['compile_s']['inductor']:.0f}/{r['compile_s']['op_extension']:.0f}",
              doubt_note(r) if r.get("in_doubt") else "") for r in rows]
    print_aligned(header, table, file, right=range(2, 10))
    for r in rows:
        print(f"# {r['dtype']}: backend rewrote " + (", ".join(f"{k} x{v}" for k, v in sorted(r["rewritten"].items()))
                                                   or "nothing"), file=file)
    print_section_legend(rows, file)
