"""EAGLE-3 draft heads (draft_head.py): their shapes (shipped, read, assumed), their kernels in a decode step and
their memory, against hand-computed figures; configure's --draft-model and what --emit says of them."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from moeserve.capacity.cli import main
from moeserve.capacity.draft_head import DraftHead, default_head, head_from_config, load_head
from moeserve.capacity.efficiency import Efficiency
from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.memory import draft_head_bytes, memory_report
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.predict import Options, Predictor, Workload
from moeserve.capacity.step_time import Eagle3Layer, StepInput, StepModel, StepTime

IDEAL = Efficiency(gemm=1.0, attention=1.0, attention_decode=1.0, weight_stream=1.0, kv_stream=1.0, network=1.0, overlap=1.0)
QWEN_HEAD = DraftHead(hidden=4096, heads=64, kv_heads=4, head_dim=128, intermediate=24576, draft_vocab=32000,
                      target_hidden=4096, source="test")


def test_the_shipped_heads_are_specforges():
    qwen, kimi = default_head(load_model("qwen3-235b-a22b")), default_head(load_model("kimi-k2"))
    assert replace(qwen, source="test") == QWEN_HEAD and "qwen3-235B-A22B-eagle3.json" in qwen.source
    assert (kimi.hidden, kimi.heads, kimi.kv_heads, kimi.head_dim, kimi.intermediate, kimi.draft_vocab) == \
        (7168, 64, 64, 128, 18432, 32000)
    # by hand: fc 3 x 4096 x 4096; q, k and v read 2 x 4096 (64 + 2 x 4 heads of 128); o 8192 x 4096;
    # SwiGLU 3 x 4096 x 24576; LM head 32000 x 4096
    assert QWEN_HEAD.fc_params == 50_331_648
    assert QWEN_HEAD.qkv_params == 2 * 4096 * 128 * 72 == 75_497_472
    assert QWEN_HEAD.o_params == 33_554_432 and QWEN_HEAD.mlp_params == 301_989_888
    assert QWEN_HEAD.params_per_rank(8) == 50_331_648 + (75_497_472 + 33_554_432 + 301_989_888 + 131_072_000) / 8


def test_a_head_assumed_from_its_target():
    # Mixtral: no dense MLP, so 6 x hidden as SpecForge's heads of Qwen3-235B and gpt-oss-120b; its own heads
    head = default_head(load_model("mixtral-8x7b"))
    assert (head.hidden, head.heads, head.kv_heads, head.head_dim, head.intermediate, head.draft_vocab) == \
        (4096, 32, 8, 128, 6 * 4096, 32000)
    assert head.source == "assumed from the target's shape"


def test_a_head_read_from_its_config():
    target = load_model("qwen3-235b-a22b")
    hf = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_attention_heads": 32,
          "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 1, "draft_vocab_size": 16000}
    head = head_from_config(hf, target, "hf")
    assert (head.heads, head.kv_heads, head.head_dim, head.intermediate, head.draft_vocab, head.target_hidden) == \
        (32, 8, 128, 14336, 16000, 4096)
    # the speculators library's layout: the layer's fields one level down, the target's hidden size given
    spec = {"speculators_model_type": "eagle3", "draft_vocab_size": 32000, "target_hidden_size": 5120,
            "transformer_layer_config": {"hidden_size": 7168, "num_attention_heads": 32, "num_key_value_heads": 8,
                                         "head_dim": 192, "intermediate_size": 14336, "num_hidden_layers": 1}}
    head = head_from_config(spec, target, "speculators")
    assert (head.hidden, head.head_dim, head.target_hidden, head.fc_params) == (7168, 192, 5120, 3 * 5120 * 7168)
    # its target_hidden_size null (the library's default) and a null head_dim: the target's, hidden / heads
    spec["target_hidden_size"], spec["transformer_layer_config"]["head_dim"] = None, None
    head = head_from_config(spec, target, "speculators")
    assert (head.target_hidden, head.head_dim) == (4096, 7168 // 32)


@pytest.mark.parametrize("cfg, words", [
    ({"hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 1, "num_hidden_layers": 2}, "one decoder layer"),
    ({"hidden_size": "4096", "num_attention_heads": 32, "intermediate_size": 1}, "hidden_size must be a whole number"),
    ({"hidden_size": 4096, "num_attention_heads": 32}, "intermediate_size must be"),
])
def test_a_config_that_is_no_eagle3_head_is_named(cfg, words):
    with pytest.raises(ValueError, match=words):
        head_from_config(cfg, load_model("qwen3-235b-a22b"), "x")


def test_load_head_reads_a_directory_and_names_what_it_cannot(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 64,
                                                       "num_key_value_heads": 4, "head_dim": 128,
                                                       "intermediate_size": 24576, "draft_vocab_size": 32000}))
    assert replace(load_head(str(tmp_path), load_model("qwen3-235b-a22b")), source="test") == QWEN_HEAD
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="--draft-model .* must hold a JSON object"):
        load_head(str(tmp_path / "bad.json"), load_model("qwen3-235b-a22b"))
    (tmp_path / "binary.json").write_bytes(b"\x80\x81 not text")  # named, not a UnicodeDecodeError of its own
    with pytest.raises(ValueError, match="--draft-model .*binary.json is not valid JSON"):
        load_head(str(tmp_path / "binary.json"), load_model("qwen3-235b-a22b"))
    with pytest.raises(ValueError, match="cannot read"):
        load_head(str(tmp_path / "none.json"), load_model("qwen3-235b-a22b"))


def test_an_eagle3_draft_by_hand():
    """Every kernel at its floor (a 1 ms floor): the first draft after a verify runs fc and two RMSNorms, the
    layer's ten kernels (attention 3, q/k/v and o 2, the MLP 3, two norms), the LM head's 2 and the argmax's 2;
    the later drafts the same without fc. At TP 1 there is no all-reduce."""
    slow = replace(load_hardware("h200"), kernel_floor_us=1000.0)
    sm = StepModel(load_model("qwen3-235b-a22b"), slow, Layout(tp=1), Precision(), IDEAL)
    s = StepInput("decode", tokens=1, context=2048, sequences=1)
    first, later = StepTime(), StepTime()
    sm.eagle3_draft_step(s, first, QWEN_HEAD, 1.0, first=True)
    sm.eagle3_draft_step(s, later, QWEN_HEAD, 1.0, first=False)
    assert first.parts["mtp_draft"] == pytest.approx(17 * 1e-3)
    assert later.parts["mtp_draft"] == pytest.approx(16 * 1e-3)
    assert first.parts.get("communication", 0.0) == 0.0
    # three drafts after a verify step: the model on 4 tokens a sequence and 17 + 16 + 16 floors more
    base = sm.step(replace(s, tokens=4))
    assert sm.step(replace(s, tokens=4), mtp_draft=3, draft=QWEN_HEAD).total == pytest.approx(base.total + 49e-3)


def test_the_heads_gemms_by_hand():
    """No floor: q, k and v read 2 x hidden, split over TP 8 with o; fc whole on every rank on the accepted
    tokens; each weight read once in BF16 (memory-bound at a few rows on an H200)."""
    h200 = replace(load_hardware("h200"), kernel_floor_us=0.0)
    lay = Layout(tp=8)
    head = Eagle3Layer(QWEN_HEAD, h200, lay, Precision(weights="bf16"), IDEAL)
    bw = h200.memory_bandwidth_gbs * 1e9
    rows = 2 * 8  # two accepted tokens of one sequence a rank, the group's 16
    # GEMM bytes: the weights and the rows in and out (2 x rows x hidden, BF16)
    assert head.projections(rows) == pytest.approx(((75_497_472 + 33_554_432) / 8 * 2 + 2 * rows * 4096 * 2) / bw)
    sm = StepModel(load_model("qwen3-235b-a22b"), h200, lay, Precision(), IDEAL)
    out = StepTime()
    sm.eagle3_draft_step(StepInput("decode", tokens=3, context=1024, sequences=1), out, QWEN_HEAD, 2.0, first=True)
    fc = (50_331_648 * 2 + 2 * rows * 4096 * 2) / bw
    assert out.parts["mtp_draft"] > fc + head.projections(rows)


def test_the_heads_memory_by_hand():
    lay, prec = Layout(tp=8), Precision(kv="fp8")
    weights, kv = draft_head_bytes(QWEN_HEAD, lay, prec)
    assert weights == pytest.approx(QWEN_HEAD.params_per_rank(8) * 2)  # BF16
    assert kv == 2 * 1 * 128 * prec.kv_bytes  # 4 KV heads over TP 8: one a rank (replicated), FP8
    qwen = load_model("qwen3-235b-a22b")
    plain = memory_report(qwen, lay, prec, 141, tokens_per_step=8, kv_tokens_needed=1000)
    drafting = memory_report(qwen, lay, prec, 141, tokens_per_step=8, kv_tokens_needed=1000, draft=QWEN_HEAD)
    assert drafting.weights - plain.weights == pytest.approx(weights)
    assert drafting.kv_per_token - plain.kv_per_token == pytest.approx(kv)


def test_a_model_without_mtp_layers_drafts_with_its_head():
    w = Workload(1024, 1024)
    qwen = Predictor(load_model("qwen3-235b-a22b"), load_hardware("h200"), Precision(), IDEAL)
    drafting = qwen.decode(Layout(tp=8), 1 / 8, w, Options(mtp_accept=2.5))
    assert drafting.breakdown_ms["mtp_draft"] > 0
    assert qwen.draft_head(Options(mtp_accept=2.5)).source.startswith("SpecForge")
    assert qwen.draft_head(Options()) is None
    # DeepSeek drafts with its MTP module unless a head is given
    ds = Predictor(load_model("deepseek-v3"), load_hardware("h200"), Precision(), IDEAL)
    assert ds.draft_head(Options(mtp_accept=2)) is None
    assert ds.draft_head(Options(mtp_accept=2, draft_head=QWEN_HEAD)) is QWEN_HEAD
    mtp = ds.decode(Layout(tp=8), 1 / 8, w, Options(mtp_accept=2))
    eagle = ds.decode(Layout(tp=8), 1 / 8, w, Options(mtp_accept=2, draft_head=QWEN_HEAD))
    assert eagle.breakdown_ms["mtp_draft"] != pytest.approx(mtp.breakdown_ms["mtp_draft"])


def test_configure_names_the_head_and_refuses_a_head_without_drafts(tmp_path, capsys):
    args = ["--model", "qwen3-235b-a22b", "--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "1"]
    assert main(args + ["--mtp-accept", "2.5"]) == 0
    assert "drafts: EAGLE-3 head (SpecForge configs/qwen3-235B-A22B-eagle3.json)" in capsys.readouterr().out
    cfg = tmp_path / "head.json"
    cfg.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "intermediate_size": 14336, "draft_vocab_size": 32000}))
    assert main(args + ["--draft-model", str(cfg)]) == 2
    assert "drafts nothing without --mtp-accept" in capsys.readouterr().err
    assert main(args + ["--mtp-accept", "2", "--draft-model", str(cfg), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith(f"drafts: EAGLE-3 head ({cfg}): hidden 4096, 32 heads") for n in notes)


def test_emit_says_moeserve_serve_runs_no_eagle3_head(tmp_path, capsys):
    out = tmp_path / "q.yaml"
    assert main(["--model", "qwen3-235b-a22b", "--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "1",
                 "--mtp-accept", "2", "--emit", str(out)]) == 0
    text = out.read_text()
    assert yaml.safe_load(text)["speculative_config"] is None
    assert "drafts with an EAGLE-3 head, which moeserve serve does not run" in text
