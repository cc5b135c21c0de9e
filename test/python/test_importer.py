"""Unit tests of the importer's pieces (python/bigc_import), each on its own: the config checks,
the prechecks that need no torch, the MLIR text writer, the weights' reading and writing, source
locations, the recognition stage (recognise.py: which fused op an elementwise expression is, by its
structure, on expression trees alone), and the lowering's recognition of RMSNorm, SwiGLU, GELU, RoPE
and repeat_kv (the MLIR it writes for small modules, FileCheck-style), near misses of each included.

Run by `make test` (python.importer): test/python/run.sh, in the project's Python environment.
"""

import io
import json
import math
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bigc_import import capture, config_check, lower, mlir, precheck, recognise, source, weights  # noqa: E402
from bigc_import.errors import UserError  # noqa: E402

LLAMA = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5}


class ConfigCheck(unittest.TestCase):
    def refused(self, cfg, family, want):
        with self.assertRaises(UserError) as c:
            config_check.check_config(cfg, family, "config.json")
        self.assertIn(want, str(c.exception))
        self.assertTrue(str(c.exception).startswith("config.json: "), str(c.exception))

    def test_a_good_config_passes(self):
        config_check.check_config(dict(LLAMA), "llama", "config.json")
        config_check.check_config({"n_embd": 64, "n_head": 4, "n_layer": 1, "layer_norm_epsilon": 1e-5},
                                  "gpt2", "config.json")

    def test_each_field_out_of_range_is_named(self):
        self.refused(dict(LLAMA, vocab_size=0), "llama", '"vocab_size" is 0; it must be a positive integer')
        self.refused(dict(LLAMA, rms_norm_eps=float("nan")), "llama", '"rms_norm_eps" is NaN')
        self.refused(dict(LLAMA, rms_norm_eps=float("inf")), "llama", '"rms_norm_eps" is Infinity')
        self.refused(dict(LLAMA, rms_norm_eps=-1e-5), "llama", "a finite number > 0")
        self.refused({"n_layer": -1}, "gpt2", '"n_layer" is -1')
        self.refused(dict(LLAMA, hidden_size=True), "llama", '"hidden_size" is true')
        self.refused(dict(LLAMA, hidden_size=2 ** 31), "llama", "(at most 2^31 - 1)")
        self.refused(dict(LLAMA, head_dim="8"), "llama", "\"head_dim\" is '8'")

    def test_heads_must_divide(self):
        self.refused(dict(LLAMA, num_attention_heads=5), "llama", '"num_attention_heads" 5 does not divide')
        self.refused(dict(LLAMA, num_key_value_heads=3), "llama", '"num_key_value_heads" 3 does not divide')
        self.refused({"n_embd": 64, "n_head": 6}, "gpt2", '"n_head" 6 does not divide "n_embd" 64')
        self.refused(dict(LLAMA, hidden_size=24, num_attention_heads=8, num_key_value_heads=4), "llama",
                     "head size hidden_size / num_attention_heads = 3 is odd")
        self.refused(dict(LLAMA, head_dim=7), "llama", '"head_dim" 7 is odd')
        # head_dim given: the width need not divide.
        config_check.check_config(dict(LLAMA, hidden_size=60, head_dim=16), "llama", "config.json")

    def test_missing_fields_take_the_defaults(self):
        config_check.check_config({"model_type": "qwen2"}, "qwen2", "config.json")


class Precheck(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()

    def path(self, name, data):
        p = os.path.join(self.d, name)
        with open(p, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return p

    def refused(self, fn, *args, want):
        with self.assertRaises(UserError) as c:
            fn(*args)
        self.assertIn(want, str(c.exception))

    def test_config_files(self):
        self.refused(precheck.read_config_json, os.path.join(self.d, "none.json"), want="none.json: no such file")
        self.refused(precheck.read_config_json, self.path("bad.json", "{"), want="not a JSON config")
        self.refused(precheck.read_config_json, self.path("list.json", "[1]"), want="not a JSON object")
        self.assertEqual(precheck.read_config_json(self.path("ok.json", '{"a": 1}')), {"a": 1})

    def test_family(self):
        self.assertEqual(precheck.family_of({"model_type": "qwen2"}, "c"), "qwen2")
        self.assertEqual(precheck.family_of({"architectures": ["MistralForCausalLM"]}, "c"), "mistral")
        self.refused(precheck.family_of, {"model_type": "bert"}, "c",
                     want="c: model_type 'bert' is not supported; supported families: llama, mistral, qwen2, gpt2")
        self.refused(precheck.family_of, {}, "c", want="no model_type or architectures")

    def test_seq_and_batch(self):
        self.assertEqual(precheck.max_positions({"n_positions": 1024}), 1024)
        self.assertIsNone(precheck.max_positions({"max_position_embeddings": 0}))
        self.refused(precheck.check_seq, 2048, 1, 1024, want="--seq 2048 exceeds the model's 1024 positions")
        self.refused(precheck.check_seq, 16, 0, 1024, want="--batch and --seq must be at least 1")
        precheck.check_seq(1024, 8, 1024)

    def test_weights_header(self):
        good = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
        ok = self.path("ok.safetensors", struct.pack("<Q", len(good)) + good + b"\0" * 4)
        precheck.check_weights_file(ok)
        self.refused(precheck.check_weights_file, self.path("short.safetensors", b"abc"),
                     want="not a readable safetensors file (shorter than a header)")
        self.refused(precheck.check_weights_file, self.path("long.safetensors", struct.pack("<Q", 99) + b"{}"),
                     want="header length 99 past the end of the file")
        self.refused(precheck.check_weights_file, self.path("list.safetensors", struct.pack("<Q", 2) + b"[]"),
                     want="the header is not a JSON object")


class MlirText(unittest.TestCase):
    def test_f64_literals_parse_as_mlir_floats(self):
        self.assertEqual(mlir.f64(1e-06), "1.0e-06")
        self.assertEqual(mlir.f64(2), "2.0")
        self.assertEqual(mlir.f64(0.5), "0.5")
        self.assertEqual(mlir.f64(1.5e300), "1.5e+300")
        self.assertEqual(float(mlir.f64(0.1)), 0.1)  # round-trips exactly
        for bad in (float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                mlir.f64(bad)

    def test_types_and_strings(self):
        self.assertEqual(mlir.tensor_type([2, 3]), "tensor<2x3xf32>")
        self.assertEqual(mlir.tensor_type([], "i32"), "tensor<i32>")
        self.assertEqual(mlir.quote('a"b\\c'), '"a\\"b\\\\c"')
        self.assertEqual(mlir.Attr.i64_array([1, 2]), "array<i64: 1, 2>")
        self.assertEqual(mlir.Attr.f64_array([1, 0.5]), "array<f64: 1.0, 0.5>")


class Weights(unittest.TestCase):
    def test_init_mimics_the_tensor(self):
        self.assertEqual(weights.init_of(torch.zeros(3)), {"init": "zeros"})
        self.assertEqual(weights.init_of(torch.ones(3)), {"init": "ones"})
        self.assertEqual(weights.init_of(torch.full((3,), 0.25)), {"init": "fill", "value": 0.25})
        g = torch.Generator().manual_seed(0)
        init = weights.init_of(torch.randn(10000, generator=g) * 0.02)
        self.assertEqual(init["init"], "normal")
        self.assertAlmostEqual(init["std"], 0.02, delta=0.0005)  # the sample's spread: 0.02 / sqrt(2e4)

    def test_written_file_reads_back_with_the_safetensors_library(self):
        from safetensors.torch import load_file
        a, b = torch.arange(6, dtype=torch.float64).view(2, 3), torch.tensor([1.5], dtype=torch.bfloat16)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "w.safetensors")
            with open(p, "wb") as f:
                weights.write_safetensors(f, [("a", a), ("b", b)])
            got = load_file(p)
            self.assertEqual(got["a"].dtype, torch.float32)
            self.assertTrue(torch.equal(got["a"], a.float()))
            self.assertTrue(torch.equal(got["b"], torch.tensor([1.5])))

    def test_match_names_the_first_mismatch(self):
        from safetensors.torch import save_file

        class Tied(nn.Module):
            base_model_prefix = "model"

            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(8, 4)
                self.head = nn.Linear(4, 8, bias=False)
                self.head.weight = self.emb.weight

        with tempfile.TemporaryDirectory() as d:
            def ckpt(tensors):
                p = os.path.join(d, "c.safetensors")
                save_file(tensors, p)
                return weights.Checkpoint(p), p

            w = torch.arange(32, dtype=torch.float32).view(8, 4)
            c, p = ckpt({"head.weight": w})  # a tied weight under its other name
            self.assertEqual(weights.match(Tied(), c, p), {"emb.weight": "head.weight", "head.weight": "head.weight"})
            self.assertTrue(weights.refers_in_place(c, weights.match(Tied(), c, p), ["emb.weight"]))
            self.assertEqual(weights.stored_names(weights.match(Tied(), c, p), ["emb.weight"]), {})  # (an alias)
            c, p = ckpt({"model.emb.weight": w})  # the base model's prefix: referred to under the file's name
            names = weights.match(Tied(), c, p)
            self.assertEqual(names["emb.weight"], "model.emb.weight")
            self.assertTrue(weights.refers_in_place(c, names, ["emb.weight"]))
            self.assertEqual(weights.stored_names(names, ["emb.weight"]), {"emb.weight": "model.emb.weight"})
            c, p = ckpt({"model.emb.weight": w.double()})  # F64, which bigc run does not read: copied
            self.assertFalse(weights.refers_in_place(c, weights.match(Tied(), c, p), ["emb.weight"]))
            c, p = ckpt({"emb.weight": w, "extra": torch.zeros(1)})
            with self.assertRaisesRegex(UserError, "holds 'extra' \\[1\\], which is not a parameter"):
                weights.match(Tied(), c, p)
            c, p = ckpt({"emb.weight": torch.zeros(8, 5)})
            with self.assertRaisesRegex(UserError, "'emb.weight' has shape \\[8, 5\\], the model's is \\[8, 4\\]"):
                weights.match(Tied(), c, p)
            c, p = ckpt({"emb.weight": torch.zeros(8, 4, dtype=torch.int32)})
            with self.assertRaisesRegex(UserError, "stored as I32, not floating point"):
                weights.match(Tied(), c, p)
            c, p = ckpt({"other": torch.zeros(1)})
            with self.assertRaisesRegex(UserError, "not a parameter"):
                weights.match(Tied(), c, p)
            # Meta parameters: checked from the headers alone.
            with torch.device("meta"):
                m = Tied()
            c, p = ckpt({"emb.weight": w})
            self.assertEqual(weights.match(m, c, p)["head.weight"], "emb.weight")

    def test_renamed_copy_keeps_the_bytes(self):
        from safetensors.torch import load_file, save_file
        g = torch.Generator().manual_seed(0)
        src = {"a": torch.randn(3, 5, generator=g).to(torch.bfloat16), "b": torch.randn(7, generator=g).half(),
               "c": torch.randn(2, 2, generator=g), "d": torch.randn(3, generator=g).double()}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "c.safetensors")
            save_file(src, p)
            c = weights.Checkpoint(p)
            seen = []
            out = os.path.join(d, "o.safetensors")
            with open(out, "wb") as f:
                weights.write_from_checkpoint(f, c, [("x.a", "a", (3, 5)), ("x.b", "b", (7,)), ("x.c", "c", (2, 2)),
                                                     ("x.d", "d", (3,))],
                                              progress=lambda done, total: seen.append((done, total)))
            got = load_file(out)
            for k in "abc":  # the same bytes under the new names
                self.assertEqual(got["x." + k].dtype, src[k].dtype)
                self.assertTrue(torch.equal(got["x." + k], src[k]), k)
            self.assertEqual(got["x.d"].dtype, torch.float32)  # f64, which bigc run does not read: rounded
            self.assertTrue(torch.equal(got["x.d"], src["d"].float()))
            total = 2 * 15 + 2 * 7 + 4 * 4 + 4 * 3
            self.assertEqual(seen[-1], (total, total))

    def test_index_naming_a_missing_shard(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "model.safetensors.index.json")
            with open(p, "w") as f:
                json.dump({"weight_map": {"w": "model-00001-of-00002.safetensors"}}, f)
            with self.assertRaisesRegex(UserError, "the shard .*model-00001-of-00002.safetensors is missing"):
                weights.Checkpoint(p)


class HfInits(unittest.TestCase):
    """capture.hf_inits reads the initialisation off transformers' own rules (the model built on the
    meta device): each parameter's bigc init must describe what transformers' init draws on the CPU.
    Each family's tiny model is built both ways; zeros/ones/fill must be exact, a normal's std within
    15% of the sample std (the smallest tensors have 64 elements: the sample std's spread is 9%)."""

    CONFIGS = {
        "llama": dict(LLAMA),
        "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_layer": 3, "n_head": 2, "vocab_size": 64, "n_positions": 16},
        "gemma": {"model_type": "gemma", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                  "max_position_embeddings": 16, "pad_token_id": 0},
        "qwen2": {"model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                  "max_position_embeddings": 16},
        "olmo": {"model_type": "olmo", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16},
    }

    def test_each_family_as_transformers_draws_it(self):
        from transformers import AutoConfig, AutoModelForCausalLM
        for fam, c in self.CONFIGS.items():
            with self.subTest(fam):
                cfg = AutoConfig.for_model(**c)
                torch.manual_seed(0)
                real = dict(AutoModelForCausalLM.from_config(cfg).named_parameters(remove_duplicate=False))
                with torch.device("meta"):
                    meta = AutoModelForCausalLM.from_config(cfg)
                notes = []
                inits, buffers = capture.hf_inits(meta, notes)
                self.assertEqual(set(inits), set(real))
                for n, t in real.items():
                    i = inits[n]
                    if i["init"] == "zeros":
                        self.assertTrue(bool((t == 0).all()), n)
                    elif i["init"] == "ones":
                        self.assertTrue(bool((t == 1).all()), n)
                    elif i["init"] == "fill":
                        self.assertTrue(bool((t == i["value"]).all()), n)
                    else:
                        rows = t[1:] if fam == "gemma" and "embed" in n else t  # the padding row is zero
                        self.assertAlmostEqual(float(rows.std()) / i["std"], 1.0, delta=0.15, msg=n)
                if fam == "gpt2":  # the residual projections' std: 0.02 / sqrt(2 * n_layer)
                    self.assertAlmostEqual(inits["transformer.h.0.attn.c_proj.weight"]["std"], 0.02 / math.sqrt(6))
                    self.assertEqual(inits["transformer.h.0.attn.c_attn.weight"]["std"], 0.02)
                if fam == "gemma":  # (1 + w) norms start at zero; the embedding scale is a buffer's value
                    self.assertEqual(inits["model.norm.weight"], {"init": "zeros"})
                    self.assertIn("the padding row of model.embed_tokens.weight", " ".join(notes))
                    self.assertAlmostEqual(float(buffers["model.embed_tokens.embed_scale"]), math.sqrt(32), places=5)
                if fam == "llama":
                    want = AutoModelForCausalLM.from_config(cfg).model.rotary_emb.inv_freq
                    self.assertTrue(torch.equal(buffers["model.rotary_emb.inv_freq"], want))

    def test_meta_capture_lowers_as_the_materialised_one(self):
        """The same MLIR ops from the model built on the meta device (constants folded on the CPU from
        the recorded buffers) as from the model in memory."""
        from transformers import AutoConfig, AutoModelForCausalLM
        cfg = AutoConfig.for_model(**dict(LLAMA, tie_word_embeddings=True))
        texts = []
        for meta in (False, True):
            torch.manual_seed(0)
            if meta:
                with torch.device("meta"):
                    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
                _, buffers = capture.hf_inits(m, [])
                buffers = {capture.WRAPPER_PREFIX + k: v for k, v in buffers.items()}
            else:
                m, buffers = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa"), None
            tok = torch.zeros((2, 16), dtype=torch.int64, device="meta" if meta else "cpu")
            ep = capture.export(capture.LossWrapper(m.eval(), "hf"), tok, tok, "llama")
            lw = lower.Lowerer(ep, strip_prefix=capture.WRAPPER_PREFIX, buffers=buffers)
            loss = lw.run()
            self.assertEqual([n for n, _ in lw.params][-1], "model.norm.weight")  # tied: one embedding
            self.assertEqual(len(lw.params), 20)
            texts.append(lw.b.text([("%tokens", "tensor<2x16xi32>"), ("%targets", "tensor<2x16xi32>")], loss.ssa,
                                   [], None))
        self.assertEqual(texts[0], texts[1])
        self.assertIn("bigc.rope", texts[1])


class SourceLocations(unittest.TestCase):
    class Node:
        def __init__(self, trace):
            self.meta = {"stack_trace": trace}

    def test_the_innermost_frame_outside_torch(self):
        tdir = os.path.dirname(torch.__file__)
        trace = (f'File "/home/u/model.py", line 12, in forward\n'
                 f'File "/home/u/model.py", line 40, in block\n'
                 f'File "{tdir}/nn/modules/linear.py", line 125, in forward\n')
        self.assertEqual(source.location(self.Node(trace)), ("/home/u/model.py", 40))
        only_torch = f'File "{tdir}/nn/functional.py", line 7, in f\n'
        self.assertEqual(source.location(self.Node(only_torch)), (f"{tdir}/nn/functional.py", 7))
        self.assertIsNone(source.location(self.Node("")))
        self.assertEqual(source.display(None), "<unknown source>")


def lowered(module, B=2, T=8, vocab=32):
    """The MLIR text the importer writes for `module` (forward(tokens) -> logits)."""
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, vocab, (B, T), generator=g)
    ep = capture.export(capture.LossWrapper(module, "tokens"), t, t.clone(), "test")
    lw = lower.Lowerer(ep, strip_prefix=capture.WRAPPER_PREFIX)
    loss = lw.run()
    for name, p in lw.params:
        lw.b.param(name, p.shape, {"init": "zeros"})
    return lw.b.text([("%tokens", f"tensor<{B}x{T}xi32>"), ("%targets", f"tensor<{B}x{T}xi32>")], loss.ssa,
                     ["test"], "w.safetensors", {})


def ops(text):
    return [line.split("=", 1)[1].split()[0] for line in text.splitlines()
            if line.strip().startswith("%") and "=" in line]


class X:
    """Expression trees as the lowering builds them (lower.ENode), written with operators."""

    def __init__(self, en):
        self.en = en

    @staticmethod
    def var(name):
        return X(lower.ENode("var", [name], None))

    @staticmethod
    def wrap(v):
        return v.en if isinstance(v, X) else float(v)

    def _b(self, op, o, swap=False):
        a, b = self.en, X.wrap(o)
        return X(lower.ENode(op, [b, a] if swap else [a, b], None))

    __add__ = lambda s, o: s._b("add", o)
    __radd__ = lambda s, o: s._b("add", o, True)
    __sub__ = lambda s, o: s._b("sub", o)
    __rsub__ = lambda s, o: s._b("sub", o, True)
    __mul__ = lambda s, o: s._b("mul", o)
    __rmul__ = lambda s, o: s._b("mul", o, True)
    __truediv__ = lambda s, o: s._b("div", o)
    __rtruediv__ = lambda s, o: s._b("div", o, True)
    __pow__ = lambda s, o: s._b("pow", o)
    __neg__ = lambda s: X(lower.ENode("neg", [s.en], None))


def fn(name, x):
    return X(lower.ENode(name, [x.en], None))


class RecognitionStage(unittest.TestCase):
    """recognise.py on expression trees: the forms models write, and near misses."""

    def match(self, e, *names):
        m = recognise.recognise(e.en, {n: f"value-{n}" for n in names}, var_key=lambda v: v)
        return None if m is None else (m.op, m.variables, m.attrs)

    def test_gelu_tanh_forms(self):
        x = X.var("x")
        k = math.sqrt(2.0 / math.pi)
        want = ("gelu", ["value-x"], {})
        for e in (0.5 * x * (1.0 + fn("tanh", k * (x + 0.044715 * x ** 3.0))),  # nanoGPT, HF NewGELU
                  x * 0.5 * (fn("tanh", (x + x * x * x * 0.044715) * k) + 1.0),  # factors in another order
                  0.5 * x + 0.5 * x * fn("tanh", k * x + k * 0.044715 * x ** 3),  # expanded
                  x * (1.0 + fn("tanh", 0.7978845608028654 * (x + 0.044715 * x * x * x))) / 2.0,
                  fn("gelu_tanh", x)):
            self.assertEqual(self.match(e, "x"), want)

    def test_gelu_erf_and_silu_forms(self):
        x = X.var("x")
        for e in (0.5 * x * (1.0 + fn("erf", x / math.sqrt(2.0))), x * 0.5 * (1.0 + fn("erf", x * 0.7071067811865476)),
                  fn("gelu_none", x)):
            self.assertEqual(self.match(e, "x"), ("gelu", ["value-x"], {"approximate": "none"}))
        for e in (x * fn("sigmoid", x), fn("sigmoid", x) * x, x / (1.0 + fn("exp", -x)), fn("silu", x)):
            self.assertEqual(self.match(e, "x"), ("silu", ["value-x"], {}))

    def test_swiglu_operand_order(self):
        g, u = X.var("g"), X.var("u")
        for e in (fn("silu", g) * u, u * (g * fn("sigmoid", g)), g / (1.0 + fn("exp", -g)) * u):
            self.assertEqual(self.match(e, "g", "u"), ("swiglu", ["value-g", "value-u"], {}))
            self.assertEqual(self.match(e, "u", "g"), ("swiglu", ["value-g", "value-u"], {}))
        for e in (fn("gelu_tanh", g) * u, u * 0.5 * g * (1.0 + fn("tanh", math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))):
            self.assertEqual(self.match(e, "g", "u"), ("geglu", ["value-g", "value-u"], {}))
        self.assertEqual(self.match(fn("gelu_none", g) * u, "u", "g"),
                         ("geglu", ["value-g", "value-u"], {"approximate": "none"}))
        # g * sigmoid(u) * u is silu(u) * g: the gate is u.
        self.assertEqual(self.match(g * fn("sigmoid", u) * u, "g", "u"), ("swiglu", ["value-u", "value-g"], {}))

    def test_softcap_forms(self):
        # Gemma 2's final_logit_softcapping: logits / c, tanh, * c; other orders; c tanh(a x) is
        # softcap of x scaled by a c; a tanh of anything else, or a sum with it, is not.
        x, y = X.var("x"), X.var("y")
        for c in (30.0, 0.1, 1.0 / 3.0):
            for e in (fn("tanh", x / c) * c, c * fn("tanh", x * (1.0 / c)), fn("tanh", (x / c)) * (c / 2.0) * 2.0):
                self.assertEqual(self.match(e, "x"), ("softcap", ["value-x"], {"cap": c, "prescale": 1.0}))
        self.assertEqual(self.match(5.0 * fn("tanh", 2.0 * x), "x"), ("softcap", ["value-x"], {"cap": 5.0, "prescale": 10.0}))
        # tanh itself is softcap with cap 1
        self.assertEqual(self.match(fn("tanh", x), "x"), ("softcap", ["value-x"], {"cap": 1.0, "prescale": 1.0}))
        self.assertIsNone(self.match(fn("tanh", x / 3.0) * 3.0 + x, "x"))
        self.assertIsNone(self.match(fn("tanh", x * x) * 3.0, "x"))
        self.assertIsNone(self.match(fn("tanh", x / 3.0) * y, "x", "y"))

    def test_identity_and_scale(self):
        x = X.var("x")
        self.assertEqual(self.match(x * 1.0, "x"), ("identity", ["value-x"], {}))
        self.assertEqual(self.match(x * 3.0, "x"), ("scale", ["value-x"], {"factor": 3.0}))
        self.assertEqual(self.match(x / 4.0, "x"), ("scale", ["value-x"], {"factor": 0.25}))
        self.assertEqual(self.match(-(x * 2.0), "x"), ("scale", ["value-x"], {"factor": -2.0}))

    def test_near_misses(self):
        x, g, u = X.var("x"), X.var("g"), X.var("u")
        k = math.sqrt(2.0 / math.pi)
        for e in (x * fn("sigmoid", 1.702 * x),  # quick GELU
                  0.5 * x * (1.0 + fn("tanh", k * (x + 0.04471 * x ** 3.0))),  # another coefficient
                  0.5 * x * (1.0 + fn("tanh", x + 0.044715 * x ** 3.0)),  # sqrt(2/pi) left out
                  0.5 * x * (1.0 + fn("erf", x)),  # erf without 1/sqrt(2)
                  x * fn("sigmoid", x) + 1.0,
                  x * x,
                  x * fn("sigmoid", x) * x):  # silu(x) * x: one variable twice, not SwiGLU
            self.assertIsNone(self.match(e, "x"), e)
        for e in (g * fn("sigmoid", u),  # the sigmoid of the other operand
                  fn("silu", g) + u):
            self.assertIsNone(self.match(e, "g", "u"))

    def test_is_square(self):
        x, y = X.var("x"), X.var("y")
        for e in (x * x, x ** 2.0, fn("square", x)):
            self.assertTrue(recognise.is_square(e.en, "x", var_key=lambda v: v))
        for e in (x * y, 2.0 * x * x, x ** 3.0, x * x + 0.0 * x + 1e-30):
            self.assertFalse(recognise.is_square(e.en, "x", var_key=lambda v: v))


class Block(nn.Module):
    """Embedding, a block of `body(self, x)`, an LM head."""

    def __init__(self, body, C=16, V=32, F_=24):
        super().__init__()
        self.body = body
        self.emb = nn.Embedding(V, C)
        self.w = nn.Parameter(torch.rand(C) + 0.5)
        self.g = nn.Linear(C, F_, bias=False)
        self.u = nn.Linear(C, F_, bias=False)
        self.d = nn.Linear(F_, C, bias=False)
        self.head = nn.Linear(C, V, bias=False)

    def forward(self, t):
        return self.head(self.body(self, self.emb(t)))


class Recognition(unittest.TestCase):
    """The lowering maps the written-out forms users' models have to bigc's fused ops, and leaves
    near misses alone."""

    def lower(self, body):
        torch.manual_seed(0)
        return lowered(Block(body))

    def test_rmsnorm(self):
        text = self.lower(lambda s, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * s.w)
        self.assertIn("bigc.rmsnorm", ops(text))
        self.assertRegex(text, r"bigc\.rmsnorm %\w+, %w \{eps = 1\.0e-06 : f64\}")
        # HF's LlamaRMSNorm order (weight first, through float32 and back), and 1 / sqrt.
        text = self.lower(lambda s, x: s.w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)
                                                                      + 1e-5)).to(x.dtype))
        self.assertIn("bigc.rmsnorm", ops(text))
        text = self.lower(lambda s, x: x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * s.w)
        self.assertIn("bigc.rmsnorm", ops(text))

    def test_not_rmsnorm(self):
        # eps outside the root: not an RMSNorm (bigc's puts it inside), and nothing else maps it.
        with self.assertRaisesRegex(UserError, r"test_importer\.py:\d+: unsupported operation aten\.mean "
                                               r"\(mean of squares outside an RMSNorm\)"):
            self.lower(lambda s, x: x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + 1e-5) * s.w)

    def test_swiglu(self):
        for act in (lambda g, u: F.silu(g) * u, lambda g, u: u * (g * torch.sigmoid(g)),
                    lambda g, u: g / (1 + torch.exp(-g)) * u):
            text = self.lower(lambda s, x, act=act: s.d(act(s.g(x), s.u(x))))
            self.assertIn("bigc.swiglu", ops(text), text)
            self.assertRegex(text, r"bigc\.swiglu %linear, %linear_1 ")  # gate first, then up

    def test_geglu_not_swiglu(self):
        # GELU-gated (GeGLU, Gemma's MLP): bigc.geglu, with the GELU's form; not SwiGLU.
        text = self.lower(lambda s, x: s.d(F.gelu(s.g(x)) * s.u(x)))
        self.assertEqual([o for o in ops(text) if o in ("bigc.gelu", "bigc.mul", "bigc.swiglu", "bigc.geglu")],
                         ["bigc.geglu"])
        self.assertRegex(text, r'bigc\.geglu %linear, %linear_1 \{approximate = "none"\}')
        text = self.lower(lambda s, x: s.d(s.u(x) * F.gelu(s.g(x), approximate="tanh")))
        self.assertRegex(text, r"bigc\.geglu %linear_1, %linear :")  # (up computed first: the gate is linear_1)
        # A scaled sigmoid (quick GELU) is neither SiLU nor GELU: refused, naming the op.
        with self.assertRaisesRegex(UserError, r"unsupported operation aten\.sigmoid"):
            self.lower(lambda s, x: s.d(s.g(x) * torch.sigmoid(1.702 * s.g(x)) * s.u(x)))

    def test_gelu_forms(self):
        tanh = lambda s, x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        text = self.lower(tanh)
        self.assertRegex(text, r"bigc\.gelu %\w+ :")
        text = self.lower(lambda s, x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))))
        self.assertRegex(text, r'bigc\.gelu %\w+ \{approximate = "none"\}')
        text = self.lower(lambda s, x: x * 3.0)
        self.assertNotIn("bigc.gelu", ops(text))

    def test_written_attention(self):
        class Attn(nn.Module):
            """q @ k^T * s, a mask, softmax, @ v, written out; `form` picks the mask and the scale."""

            def __init__(self, form, H=4, C=16, V=32, T=8):
                super().__init__()
                self.form, self.H = form, H
                self.emb = nn.Embedding(V, C)
                self.q, self.k, self.v = (nn.Linear(C, C, bias=False) for _ in range(3))
                self.head = nn.Linear(C, V, bias=False)
                tril = torch.tril(torch.ones(T, T))
                if form == "window":  # a sliding window of 3 keys
                    tril = tril - torch.tril(torch.ones(T, T), diagonal=-3)
                if form == "not_causal":
                    tril = torch.ones(T, T)
                self.register_buffer("tril", tril, persistent=False)

            def forward(self, t):
                B, T = t.shape
                x = self.emb(t)
                q, k, v = (m(x).view(B, T, self.H, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
                att = q @ k.transpose(-2, -1)
                att = att * 0.25 if self.form == "scale" else att / math.sqrt(q.size(-1))
                if self.form != "no_mask":
                    att = att.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
                y = F.softmax(att, dim=-1) @ v
                return self.head(x + y.transpose(1, 2).reshape(B, T, -1))

        def attn(form):
            torch.manual_seed(0)
            return lowered(Attn(form))

        self.assertRegex(attn("causal"), r"bigc\.gqa_attention %linear, %linear_1, %linear_2 \{heads = 4 : i64, "
                                         r"kv_heads = 4 : i64\}")
        self.assertRegex(attn("window"), r"bigc\.gqa_attention .*\{heads = 4 : i64, kv_heads = 4 : i64, window = 3 : i64\}")
        # 1/sqrt(D) = 0.5 here: another scale is the op's
        self.assertRegex(attn("scale"), r"bigc\.gqa_attention .*scale = 0\.25 : f64\}")
        with self.assertRaisesRegex(UserError, r"non-causal attention"):
            attn("no_mask")
        with self.assertRaisesRegex(UserError, r"an attention mask that is not causal"):
            attn("not_causal")

    def test_interleaved_rope(self):
        class Rot(nn.Module):
            """llama2.c's rotary embeddings: adjacent pairs as complex numbers, rotated, stacked back."""

            def __init__(self, sign=1.0, H=4, C=16, V=32, T=8):
                super().__init__()
                self.H, self.sign = H, sign
                self.emb = nn.Embedding(V, C)
                self.q = nn.Linear(C, C, bias=False)
                self.head = nn.Linear(C, V, bias=False)
                D = C // H
                a = torch.outer(torch.arange(T).float(), 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D)))
                self.register_buffer("c", torch.cos(a), persistent=False)
                self.register_buffer("s", torch.sin(a), persistent=False)

            def forward(self, t):
                B, T = t.shape
                q = self.q(self.emb(t)).view(B, T, self.H, -1)
                r, i = q.reshape(q.shape[:-1] + (-1, 2)).unbind(-1)
                c, s = self.c.view(1, T, 1, -1), self.s.view(1, T, 1, -1)
                re_ = r * c - i * s if self.sign > 0 else r * c + i * s
                q = torch.stack([re_, r * s + i * c], dim=-1).flatten(3)
                return self.head(q.reshape(B, T, -1))

        torch.manual_seed(0)
        text = lowered(Rot())
        self.assertRegex(text, r"bigc\.rope %linear \{head_dim = 4 : i64, inv_freq = array<f64: 1\.0, 0\.0099\d*>, interleaved\}")
        # The sine's sign turned in the real part only is no rotation: refused, naming the op and line.
        torch.manual_seed(0)
        with self.assertRaisesRegex(UserError, r"test_importer\.py:\d+: unsupported operation aten\.\w+ \(rotary "
                                               r"embeddings of interleaved pairs not of the form"):
            lowered(Rot(sign=-1.0))

    def test_rope_and_repeat_kv(self):
        class Attn(nn.Module):
            def __init__(self, H=4, KV=2, C=16, V=32):
                super().__init__()
                self.H, self.KV, self.D = H, KV, C // H
                self.emb = nn.Embedding(V, C)
                self.q = nn.Linear(C, C, bias=False)
                self.k = nn.Linear(C, KV * self.D, bias=False)
                self.v = nn.Linear(C, KV * self.D, bias=False)
                self.head = nn.Linear(C, V, bias=False)
                self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.D, 2).float() / self.D)),
                                     persistent=False)

            @staticmethod
            def rotate_half(x):
                return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

            def forward(self, t):
                B, T = t.shape
                x = self.emb(t)
                q = self.q(x).view(B, T, self.H, self.D).transpose(1, 2)
                k = self.k(x).view(B, T, self.KV, self.D).transpose(1, 2)
                v = self.v(x).view(B, T, self.KV, self.D).transpose(1, 2)
                f = torch.outer(torch.arange(T).float(), self.inv_freq)
                e = torch.cat((f, f), dim=-1)
                q = q * e.cos() + self.rotate_half(q) * e.sin()
                k = k * e.cos() + self.rotate_half(k) * e.sin()
                n = self.H // self.KV
                k = k[:, :, None].expand(B, self.KV, n, T, self.D).reshape(B, self.H, T, self.D)
                v = v[:, :, None].expand(B, self.KV, n, T, self.D).reshape(B, self.H, T, self.D)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.head(x + y.transpose(1, 2).reshape(B, T, -1))

        torch.manual_seed(0)
        text = lowered(Attn())
        self.assertEqual(ops(text).count("bigc.rope"), 2, text)
        self.assertRegex(text, r"bigc\.rope %linear \{head_dim = 4 : i64, inv_freq = array<f64: 1\.0, 0\.0099999")
        # repeat_kv folded into grouped-query attention: k and v stay at 2 heads.
        self.assertRegex(text, r"bigc\.gqa_attention %\w+, %\w+, %linear_2 \{heads = 4 : i64, kv_heads = 2 : i64\}")
        self.assertNotIn("bigc.concat", ops(text))


if __name__ == "__main__":
    unittest.main()
