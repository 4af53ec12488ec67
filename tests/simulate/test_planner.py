"""``simulate`` as a capacity planner (issue 25): models and GPUs in, GiB and GPUs out, an
interpolated knee, the service model's arithmetic, the SLO search, the HTML report, and
a regression test for each bug the issue found."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kachedb_radix.reference.blockpool import PRESETS
from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.plan.cost import CostModel
from kachedb_radix.spec.simulate.plan.figures import Service
from kachedb_radix.spec.simulate.plan.hardware import GIB, GPUS, Deployment, Sizing, format_gib
from kachedb_radix.spec.simulate.plan.knee import find_knee, parse_fractions, refinements
from kachedb_radix.spec.simulate.plan.models import CONFIGS, MODELS, count_parameters, parse_model
from kachedb_radix.spec.simulate.plan.slo import Slo, attainment, parse_duration, search
from kachedb_radix.spec.simulate.results import SCHEMA_PATH
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.trace import Trace
from tests.support.simulate import MOONCAKE_SAMPLE, exit_status

SCHEMA = json.loads(SCHEMA_PATH.read_text())
#: A timed run's figures with nothing in them.
QUIET = Service(ttft_ms={}, tpot_ms={}, warmup=0, makespan_s=0.0, input_tokens_per_s=None,
                output_tokens_per_s=None, requests_per_s=None, offered_prefill_s=0.0,
                offered_decode_s=0.0, offered_s=0.0, trace_span_s=0.0, busy=0.0,
                load=None)  # fmt: skip
H100_70B_FP8 = Deployment(MODELS["llama-3-70b-fp8"], GPUS["h100"], gpus=8)


def _head(lines: int, tmp_path: Path) -> Path:
    """The first ``lines`` lines of the Mooncake sample, as a file."""
    path = tmp_path / f"head{lines}.jsonl"
    path.write_text("".join(MOONCAKE_SAMPLE.read_text().splitlines(True)[:lines]))
    return path


# ---------------------------------------------------------------------- models, GPUs, sizes


def test_model_presets_agree_with_the_block_pool() -> None:
    """One source of KV sizes: the block pool's presets (the seed's 160 KiB a token)."""
    for name in ("llama-3-8b", "llama-3-70b", "llama-3-70b-fp8"):
        assert MODELS[name].kv_bytes_per_token == PRESETS[name].bytes_per_token
    assert MODELS["llama-3.1-8b"].kv_bytes_per_token == PRESETS["llama-3-8b"].bytes_per_token
    assert MODELS["llama-3-70b-fp8"].kv_bytes_per_token == 163_840
    assert MODELS["llama-3-8b"].layer_params == pytest.approx(6.979e9, rel=1e-3)
    custom = parse_model("layers=80,kv_heads=8,head_dim=128,dtype=fp8")
    assert custom.kv_bytes_per_token == 163_840 and not custom.can_serve
    assert custom.weight_dtype == "fp8"
    served = parse_model("layers=2,kv-heads=1,head_dim=4,hidden=8,heads=2,vocab=10,params=1e6")
    assert served.can_serve and served.layer_params == 1e6 - 160
    with pytest.raises(SimulateError, match="params must exceed the embeddings"):
        parse_model("layers=2,kv_heads=1,head_dim=4,hidden=8,heads=2,vocab=10,params=100")
    with pytest.raises(SimulateError, match="layers must be a finite whole number"):
        parse_model("layers=2.5,kv_heads=1,head_dim=4")
    with pytest.raises(SimulateError, match="unknown KV dtype"):
        parse_model("layers=2,kv_heads=1,head_dim=4,dtype=int3")


def test_presets_come_from_their_configs() -> None:
    """Every preset is its Hugging Face config read by from_config; the parameters
    counted from it are within 1% of what the model's card publishes; the MoE ones
    multiply through their active parameters, DeepSeek caches MLA's latent."""
    for name, (repo, config, published) in CONFIGS.items():
        total, active = count_parameters(config)
        assert total == pytest.approx(published, rel=0.01), name
        assert MODELS[name].source == repo and MODELS[name].params == total
        assert MODELS[name].layer_params <= active
    deepseek = MODELS["deepseek-v3"]
    assert deepseek.kv_bytes_per_token == 61 * (512 + 64) * 2  # 70,272: MLA's latent, bf16
    assert deepseek.weight_dtype == "fp8" and deepseek.compute_dtype == "fp8"
    assert deepseek.active_params == pytest.approx(37e9, rel=0.02)
    assert "MLA latent 576" in deepseek.describe()
    qwen = MODELS["qwen3-30b-a3b"]
    assert qwen.active_params == pytest.approx(3.3e9, rel=0.02)
    assert qwen.weight_bytes == pytest.approx(2 * 30.5e9, rel=0.01)  # every expert in HBM
    assert MODELS["qwen3-32b"].kv_bytes_per_token == 64 * 2 * 8 * 128 * 2  # 256 KiB
    assert MODELS["llama-3.2-1b"].tied and MODELS["llama-3.2-1b"].layer_params == pytest.approx(
        1.24e9 - 128256 * 2048, rel=0.01
    )
    assert parse_model("qwen3-8b", kv_dtype="fp8").kv_bytes_per_token == 36 * 2 * 8 * 128


def test_a_config_json_is_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--model path/to/config.json: read through the input layer, dimensions and
    parameters from it; a multimodal config's text_config; every bad one one line."""
    repo, config, _ = CONFIGS["qwen3-32b"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "_name_or_path": repo}))
    model = parse_model(str(path))
    assert model.name == "qwen3-32b" and model.kv_bytes_per_token == 262_144
    assert model.params == MODELS["qwen3-32b"].params and model.source == str(path)
    nested = tmp_path / "vision" / "config.json"
    nested.parent.mkdir()
    nested.write_text(json.dumps({"torch_dtype": "float16", "text_config": config}))
    assert parse_model(str(nested)).kv_dtype == "bf16"  # the text config's own dtype
    assert parse_model(str(nested)).name == "vision"  # a checkout's folder names it
    named = tmp_path / "Qwen3-8B.json"
    named.write_text(json.dumps(config))
    assert parse_model(str(named)).name == "qwen3-8b"  # else the file's stem
    assert main(["simulate", "--model", str(path), "--capacity", "1GiB", "--requests", "40",
                 "--no-bounds", "--executor", "serial", "--quiet"]) == 0  # fmt: skip
    assert "model: qwen3-32b (64 layers, 8 KV heads x 128, bf16 KV: 256 KiB/token)" in (
        capsys.readouterr().out
    )
    for body, message in (
        ("[1]", "not a JSON object"),
        ("{x", "not JSON"),
        (json.dumps({**config, "hidden_size": "big"}), "'hidden_size' is 'big'"),
        (json.dumps({"num_hidden_layers": 2}), "the config has no 'hidden_size'"),
        (json.dumps({**config, "num_attention_heads": 0}), "must be >= 1"),
    ):
        path.write_text(body)
        with pytest.raises(SimulateError, match=message):
            parse_model(str(path))
    with pytest.raises(SimulateError, match="no such file"):
        parse_model(str(tmp_path / "missing.json"))
    with pytest.raises(SimulateError, match="--kv-dtype: unknown KV dtype"):
        parse_model("qwen3-8b", kv_dtype="int3")


def test_every_gpu_has_its_datasheet() -> None:
    """The GPU classes the issue names, each with the datasheet its figures come from."""
    assert {"h100", "h100-pcie", "h200", "b200", "a100", "a100-40gb", "l40s", "mi300x"} <= set(GPUS)
    for gpu in GPUS.values():
        assert gpu.source and gpu.bf16_flops > 0 and gpu.hbm_bytes_per_s > 0
        assert gpu.fp8_flops is None or gpu.fp8_flops == pytest.approx(2 * gpu.bf16_flops, 0.02)
    assert GPUS["b200"].memory_gib == 180 and GPUS["mi300x"].hbm_bytes_per_s == 5.3e12
    assert GPUS["a100-40gb"].fp8_flops is None and GPUS["h100-pcie"].bf16_flops == 756e12


def test_a_deployment_and_the_sizes_it_gives() -> None:
    """8 x H100 at 0.9, 2 GiB reserved: 8 x 70 GiB less 70.6 GB of FP8 weights."""
    kv = 8 * 70 * GIB - 70.6e9
    assert H100_70B_FP8.kv_bytes_per_worker == pytest.approx(kv)
    sizing = Sizing(512, H100_70B_FP8.model, H100_70B_FP8)
    assert sizing.block_bytes == 512 * 163_840  # 80 MiB a Mooncake hash block
    assert sizing.gib(32_000) == pytest.approx(2500.0)  # the "~2.5 TiB"
    assert sizing.worker_blocks() == int(kv // (512 * 163_840)) == 6326
    assert sizing.gpus(6326) == pytest.approx(8.0, abs=0.01)
    assert "= 2.44 TiB = " in sizing.describe(32_000) and "GPUs of this class" in sizing.describe(1)
    assert Sizing(16).describe(2000) == "2,000 blocks (32k tokens)"
    assert (format_gib(0.5), format_gib(62.04), format_gib(2500)) == ("512 MiB", "62.0 GiB",
                                                                      "2.44 TiB")  # fmt: skip
    a100 = Deployment(MODELS["llama-3-70b-fp8"], GPUS["a100"], gpus=2)
    assert a100.gpu.peak_flops("fp8") == a100.gpu.bf16_flops  # no FP8 on an A100


@pytest.mark.parametrize(
    ("text", "blocks"),
    [("20k", 20_000), ("1.5k", 1500), ("2M", 2_000_000), ("1Mtok", 1953), ("80MiB", 1),
     ("2TiB", 26_214), ("1TB", 11_920), ("8gpu", 6326), ("32 GPUs", 25_305)],
)  # fmt: skip
def test_capacities_in_any_unit(text: str, blocks: int) -> None:
    sizing = Sizing(512, H100_70B_FP8.model, H100_70B_FP8)
    assert sizing.parse(text) == blocks


def test_capacity_units_need_what_they_convert_with() -> None:
    for text, needs in (
        ("64GiB", "needs --model"),
        ("8gpu", "GPUs need --model and --gpu"),
        ("1.5", "not a whole number of blocks"),
        ("10MiB", "less than one"),
    ):
        with pytest.raises(SimulateError, match=needs):
            Sizing(512, MODELS["llama-3-8b"] if text == "10MiB" else None).parse(text)  # fmt: skip


# ---------------------------------------------------------------------- the knee


def test_the_knee_is_interpolated_in_log_capacity() -> None:
    curve = [(1000, 0.2), (4000, 0.6), (16000, 0.8)]
    knee = find_knee("lru", 0.5, 1.0, curve)  # 0.5 lies 3/4 of the way from 0.2 to 0.6
    assert knee.capacity == pytest.approx(1000 * 4**0.75) and knee.bracket == (1000, 4000)
    assert find_knee("lru", 0.1, 1.0, curve).bounded_above_only
    assert find_knee("lru", 0.9, 1.0, curve).capacity is None
    assert find_knee("lru", 0.8, 1.0, curve).capacity == pytest.approx(16000)
    # non-monotone: the first crossing counts
    assert find_knee("x", 0.5, 1.0, [(10, 0.6), (20, 0.4), (40, 0.7)]).bracket == (None, 10)
    assert refinements([knee], [1000, 4000]) == [1590, 2520]
    assert refinements([knee], [1000, 1590, 4000]) == [2520]  # what ran is not run again
    narrow = find_knee("lru", 0.5, 1.0, [(1000, 0.4), (1040, 0.6)])
    assert refinements([narrow], [1000, 1040]) == []  # within 5%: done
    assert parse_fractions("0.9, 80%,0.95,0.9") == (0.8, 0.9, 0.95)
    for bad in ("0", "1.5", "x", ""):
        with pytest.raises(SimulateError, match="is not a fraction"):
            parse_fractions(bad)


def test_refinement_rounds_narrow_the_knee() -> None:
    """A sweep with a factor 2 between points brackets the knee widely; the rounds add a
    few points inside the bracket, and the interpolation lands within 3% of the knee that
    a dense scan (every 100 blocks) of this small, bumpy trace finds."""
    trace = read_trace(MOONCAKE_SAMPLE)
    sweep = (500, 1000, 2000, 4000, 8000)
    coarse = simulate(trace, Settings(executor="serial", capacities=sweep, knee_rounds=0))
    refined = simulate(trace, Settings(executor="serial", capacities=sweep))
    dense = simulate(trace, Settings(executor="serial", bounds=True, knee_rounds=0,
                                     capacities=tuple(range(1500, 4600, 100))))  # fmt: skip
    truth = dense.knee("lru")
    found, rough = refined.knee("lru"), coarse.knee("lru")
    assert truth is not None and found is not None and rough is not None
    assert truth.capacity and found.capacity and rough.capacity and found.bracket
    assert 0 < len(refined.refined) <= 8
    low, high = found.bracket
    assert low is not None and high / low < 1.1  # 2 ** (1 / 9): two rounds of 3 parts
    assert abs(found.capacity / truth.capacity - 1) < 0.03
    assert abs(rough.capacity / truth.capacity - 1) > abs(found.capacity / truth.capacity - 1)


# ---------------------------------------------------------------------- the service model


def test_prefill_flops_have_a_linear_and_a_quadratic_term() -> None:
    """Llama-3-8B, a 32K prompt from scratch: 2 P n + 4 L d n (n + 1) / 2 + the logits."""
    cost = CostModel.of(Deployment(MODELS["llama-3-8b"], GPUS["h100"]))
    model = MODELS["llama-3-8b"]
    n = 32_768
    linear = 2 * model.layer_params * n
    attention = 4 * 32 * 4096 * n * (n + 1) / 2
    assert cost.chunk_flops(0, n, True) == pytest.approx(linear + attention + 2 * 128_256 * 4096)
    # chunking changes nothing in the sum: two halves cost what the whole does
    halves = cost.chunk_flops(0, n // 2, False) + cost.chunk_flops(n // 2, n // 2, True)
    assert halves == pytest.approx(cost.chunk_flops(0, n, True))
    # 989 TFLOP/s dense BF16 at mfu 0.5: about 1.5 s (docs/simulate.md compares the seed's claim)
    solo = cost.solo_prefill(n, 0, 8192)
    assert solo["steps"] == 4 and solo["compute_ms"] == pytest.approx(1494, rel=0.01)
    assert solo["attention_flops"] / (solo["linear_flops"] + solo["attention_flops"]) > 0.35
    # a cached prefix is skipped by the linear term, still attended to
    cached = cost.solo_prefill(n, n - 1024, 8192)
    assert cached["linear_flops"] == pytest.approx(2 * model.layer_params * 1024)
    assert cost.prefill_compute_ms(n - 1024, 1024) < solo["compute_ms"] / 20


def test_decode_is_memory_bound_and_batching_amortises_the_weights() -> None:
    cost = CostModel.of(H100_70B_FP8, overhead_ms=0.0)
    weights_ms = 70.6e9 * 1000 / (8 * 3.35e12 * 0.7)
    one = cost.step_ms(0.0, 0, 1, 1000, 1000)
    assert one == pytest.approx(weights_ms + 1000 * 163_840 * 1000 / (8 * 3.35e12 * 0.7))
    batch = cost.step_ms(0.0, 0, 64, 64_000, 64_000)
    assert batch < 2 * one  # 64 tokens for the price of about one and a half
    # a restore: its latency, then the bytes over the host link (from disk: the slower
    # of the disk and the host link)
    host = 0.02 + 1000 * 163_840 * 1000 / (8 * 64e9)
    assert cost.restore_ms(1000) == cost.restore_ms(1000, "host") == pytest.approx(host)
    assert cost.restore_ms(1000, "disk") == pytest.approx(0.1 + 1000 * 163_840 * 1000 / (8 * 6.5e9))
    assert cost.restore_ms(0, "disk") == 0.0


def test_prefill_cost_prints_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--prefill-cost", "32768", "--model", "llama-3-8b", "--gpu",
                 "h100"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "32,768-token prefill: 0.739 PFLOP (38% attention): 1.49 s of compute" in out
    assert "in 4 steps of 8,192 tokens" in out


def test_the_slo_search_brackets_the_rate() -> None:
    """Requests meet a 100 ms SLO while the speed-up is at most 5: the search doubles to
    8, then bisects 4..8 in log scale within its runs."""
    tried: list[float] = []

    def run(speed: float) -> list[float]:
        tried.append(speed)
        return [50.0 if speed <= 5 else 500.0] * 10

    found = search(run, Slo(100.0, 0.9, runs=8), rate=2.0)
    assert tried[:4] == [1.0, 2.0, 4.0, 8.0] and found.runs == 8 == len(tried)
    assert found.failed_at is not None and 4 <= found.speed <= 5 < found.failed_at <= 8
    assert found.requests_per_s == pytest.approx(2 * found.speed)
    never = search(lambda speed: [math.nan], Slo(1.0, runs=10), rate=1.0)
    assert never.speed == 0.0 and never.requests_per_s == 0.0
    from kachedb_radix.spec.simulate.plan.report import _throughput
    from kachedb_radix.spec.simulate.point import Run

    def shown(found: Any) -> str:
        service = dataclasses.replace(QUIET, throughput=found)
        return _throughput(Run(None, None, 0.0, "accel", service))  # type: ignore[arg-type]

    assert (shown(never), shown(found)) == ("< 1/64 of trace", f"{found.requests_per_s:,.3g}")
    assert shown(search(lambda speed: [0.0], Slo(1.0, runs=9), rate=1.0)) == "≥ 64"
    assert shown(None) == "—"  # no search asked for
    assert attainment([1.0, 2.0, math.nan, 5.0], 2.0) == 0.5 and attainment([], 1.0) == 0.0
    assert parse_duration("500ms") == 500.0 and parse_duration("1.5 s") == 1500.0
    for bad in (
        {"ttft_ms": 0.0},
        {"ttft_ms": 1.0, "attainment": 0.0},
        {"ttft_ms": 1.0, "runs": -1},
    ):
        with pytest.raises(SimulateError):
            Slo(**bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the planner's command


def test_the_planner_command_in_gib_gpus_ttft_and_overload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's command on a small trace: capacities in GiB and GPUs, the knee at the
    fractions asked for, TTFT under load, and the overload warning (one A100 cannot keep
    up with Llama-3-8B's prefill on these 40K-token prompts)."""
    trace = _head(60, tmp_path)
    status = main(["simulate", str(trace), "--model", "llama-3-8b", "--gpu", "a100",
                   "--knee", "0.8,0.9", "--sweep", "3", "--knee-rounds", "1",
                   "--executor", "serial", "--quiet"])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "timed mode" in out and "GiB" in out and "GPUs" in out and "TTFT p50" in out
    assert "knee (LRU): 80% of the achievable hit ratio" in out
    assert "knee (LRU): 90% of the achievable hit ratio" in out
    assert "GiB = " in out and "GPUs of this class (A100 SXM4 80 GB)" in out
    assert "OVERLOAD in " in out and "offered more than their workers serve" in out
    assert "no cache" in out and "(HBM)" in out


def _page_parts(page: str) -> dict[str, list[str]]:
    class Parts(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: dict[str, list[str]] = {"table": [], "img": [], "link": [], "text": []}

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            values = dict(attrs)
            if tag == "table":
                self.found["table"].append(values.get("id") or "")
            if tag == "img":
                self.found["img"].append(values.get("src") or "")
            for name in ("src", "href"):
                if values.get(name):
                    self.found["link"].append(values[name] or "")
            if tag in ("script", "iframe", "object"):
                self.found["link"].append(tag)

        def handle_data(self, data: str) -> None:
            self.found["text"].append(data)

    parser = Parts()
    parser.feed(page)
    return parser.found


def test_the_report_is_one_self_contained_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report.html: the assumptions (with the datasheet), every table, the knees, the
    warnings and the plots -- embedded, nothing fetched, no script."""
    out = tmp_path / "out"
    status = main(["simulate", str(_head(40, tmp_path)), "--model", "llama-3-70b-fp8", "--gpu",
                   "h100", "--gpus", "8", "--capacity", "200,1000", "--workers", "2", "--routing",
                   "prefix", "--ttft-slo", "1s", "--slo-runs", "2", "--knee-rounds", "0",
                   "--executor", "serial", "--out", str(out)])  # fmt: skip
    assert status == 0
    capsys.readouterr()
    page = (out / "report.html").read_text()
    parts = _page_parts(page)
    assert parts["table"] == ["assumptions", "capacities", "service", "cluster"]
    assert page.index('<ul id="knees">') < page.index('id="assumptions"')
    text = " ".join(parts["text"])
    assert "H100 SXM5 80 GB" in text and "NVIDIA H100 Tensor Core GPU datasheet" in text
    assert "knee (LRU): 90% of the achievable hit ratio" in text and "2xprefix" in text
    assert "cost: mfu" in text and "TTFT ≤ 1 s" in text
    assert len(parts["img"]) == 3
    for source in parts["img"]:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG")
    assert all(link.startswith("data:") for link in parts["link"])  # nothing to fetch
    document = json.loads((out / "results.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["settings"]["deployment"]["gpus_per_worker"] == 8
    assert document["points"][0]["capacity_gib"] == pytest.approx(200 * 80 / 1024, abs=0.01)
    service = document["points"][0]["lru"]["service"]
    assert service["throughput_at_slo"]["runs"] == 2 and 0 <= service["slo_attainment"] <= 1
    assert set(document["no_cache"]) == {"1 worker", "2xleast-loaded"}
    assert document["points"][0]["clusters"]["2xprefix"]["balance"]["imbalance"] >= 1
    assert (out / "ttft_vs_capacity.png").read_bytes().startswith(b"\x89PNG")


# ---------------------------------------------------------------------- the bugs (issue 25)


def test_refused_requests_count_in_every_hit_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Timed, 8 blocks: a 12-block prompt is refused. Refused requests used to leave LRU's
    denominator but not the bounds': here LRU 50.0% against Belady = infinite 12.5%
    ("LRU/Belady 400.0%"), and on the full trace LRU fell as the pool grew. Now a refused
    request saves nothing and counts, for every policy and both bounds."""
    trace = tmp_path / "refused.jsonl"
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
             {"timestamp": 1000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
             {"timestamp": 2000, "input_length": 6144, "output_length": 1,
              "hash_ids": list(range(9, 21))}]  # fmt: skip
    trace.write_text("\n".join(map(json.dumps, lines)))
    assert main(["simulate", str(trace), "--mode", "timed", "--capacity", "8",
                 "--executor", "serial", "--knee-rounds", "0"]) == 0  # fmt: skip
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│"))
    assert row.split("│")[2:6] == ["   12.5% ", "  12.5% ", "    12.5% ", "     100.0% "]
    cost = CostModel.of(Deployment(MODELS["llama-3-8b"], GPUS["h100"]))
    results = simulate(read_trace(trace), Settings(mode="timed", cost=cost, capacities=(8,),
                                                   executor="serial", knee_rounds=0))  # fmt: skip
    point = results.points[0]
    assert point.replay.refused == 1 and point.lru.requests == 2
    assert results.infinite is not None and point.belady is not None
    assert point.lru.prompt_tokens == results.infinite.prompt_tokens == 1024 + 1024 + 6144


@pytest.mark.parametrize("impl", ["reference", "accel"])
def test_a_capacity_beyond_any_tree_runs_as_the_working_set(
    impl: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a traceback (the C twin takes at most 2**31 - 1 blocks) or, in the reference,
    a MemoryError (it reserves memory per block): a pool larger than the trace's working
    set never evicts, so it runs as the working set, and says so."""
    if impl == "accel":
        pytest.importorskip("kachedb_radix.accel")
    trace = _head(20, tmp_path)
    status = main(["simulate", str(trace), "--capacity", "99999999999999", "--impl", impl,
                   "--executor", "serial", "--no-bounds"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    assert "capacity 99,999,999,999,999 is more than the 778 blocks this trace can ever use" in out
    assert "│    778 │" in out


def test_an_unwritable_out_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to be reported after the whole run."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    status = exit_status(["simulate", str(MOONCAKE_SAMPLE), "--out", str(blocker / "results")])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""  # nothing ran, nothing printed
    assert f"argument --out: {blocker / 'results'}: {blocker} is a file" in captured.err
    fresh = tmp_path / "new" / "out"  # checked by making it; a run that fails leaves nothing
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["simulate", str(empty), "--out", str(fresh)]) == 2
    assert not (tmp_path / "new").exists() and "the trace is empty" in capsys.readouterr().err


def test_64_bit_hash_ids_and_a_bom_through_the_command(tmp_path: Path) -> None:
    """Both used to stop the command; the installed command, a real process."""
    trace = tmp_path / "vllm.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 1024, "hash_ids": [2**64 - 5, 2**63 + 1]},
        {"timestamp": 5, "input_length": 1500, "hash_ids": [2**64 - 5, 2**63 + 1, 3]},
    ]
    trace.write_bytes(b"\xef\xbb\xbf" + "\n".join(map(json.dumps, lines)).encode())
    done = subprocess.run(
        [sys.executable, "-m", "spec", "simulate", str(trace), "--capacity", "8",
         "--executor", "serial"], capture_output=True, text=True
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 requests (mooncake" in done.stdout and "working set: 3 distinct blocks" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_trace_is_the_same_whatever_its_ids() -> None:
    """The dense keys change nothing: the sample with every id shifted past 2**32 replays
    to the very figures of the original."""
    original = read_trace(MOONCAKE_SAMPLE)
    shifted_lines = []
    for line in MOONCAKE_SAMPLE.read_text().splitlines():
        record = json.loads(line)
        record["hash_ids"] = [value + 2**40 for value in record["hash_ids"]]
        shifted_lines.append(json.dumps(record))
    from kachedb_radix.spec.simulate.formats import parse_trace

    shifted = parse_trace("\n".join(shifted_lines).encode(), "shifted")
    assert isinstance(shifted, Trace)
    settings = Settings(executor="serial", capacities=(300, 3000), knee_rounds=0)
    one, two = simulate(original, settings), simulate(shifted, settings)
    assert [p.lru for p in one.points] == [p.lru for p in two.points]
    assert [p.belady for p in one.points] == [p.belady for p in two.points]


def test_the_edges_of_the_planner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the bigger tests leave out: bad deployments, a sizes-only model, the search at
    its limit, a sweep without a no-cache baseline, the seed-table workload and a delay in
    seconds from the command line, a report that cannot be written."""
    from kachedb_radix.spec.simulate import report
    from kachedb_radix.spec.simulate.executors import Session
    from kachedb_radix.spec.simulate.plan.hardware import get_gpu
    from kachedb_radix.spec.simulate.plan.report import service_table
    from kachedb_radix.spec.simulate.plan.service import ServiceModel
    from kachedb_radix.spec.simulate.plots import figures
    from kachedb_radix.spec.simulate.point import Job

    with pytest.raises(SimulateError, match="unknown GPU 'b300'"):
        get_gpu("b300")
    assert get_gpu("H100-SXM") is GPUS["h100"] and get_gpu("a100-80gb") is GPUS["a100"]
    for bad, message in (({"gpus": 0}, "--gpus must be"), ({"reserve_gib": -1.0}, "--gpu-reserve")):
        with pytest.raises(SimulateError, match=message):
            Deployment(MODELS["llama-3-8b"], GPUS["h100"], **bad)
    sizes_only = parse_model("layers=4,kv_heads=2,head_dim=8,dtype=bf16")
    with pytest.raises(SimulateError, match="the timed mode needs the model's hidden="):
        CostModel.of(Deployment(sizes_only, GPUS["h100"]))
    with pytest.raises(SimulateError, match="weights must be one of"):
        parse_model("layers=4,kv_heads=2,head_dim=8,weights=int4")
    assert Sizing(16, sizes_only).describe(1_000_000) == "1,000,000 blocks = 3.8 GiB"
    assert Sizing(1).describe(5) == "5 blocks (5 tokens)"
    always = search(lambda speed: [0.0], Slo(1.0, runs=20), rate=1.0)
    assert always.speed == 64.0 and always.failed_at is None and always.runs == 7
    assert not QUIET.overloaded and not QUIET.saturated and QUIET.offered_s == 0.0
    assert Session(Job(trace=read_trace(_head(2, tmp_path)), mode="sequential",
                       implementation="reference", service=ServiceModel(),
                       order=[0, 1])).run([], print) == []  # fmt: skip
    trace = read_trace(_head(30, tmp_path))
    with pytest.raises(SimulateError, match="the timed mode needs a cost model"):
        simulate(trace, Settings(mode="timed", capacities=(50,)))
    with pytest.raises(SimulateError, match="--speedup must be > 0"):
        simulate(trace, Settings(capacities=(50,), speed=0.0))
    cost = CostModel.of(Deployment(MODELS["llama-3-8b"], GPUS["h100"]))
    results = simulate(trace, Settings(mode="timed", cost=cost, capacities=(100,), knee_rounds=0,
                                       no_cache=False, slo=Slo(1.0, runs=0), executor="serial",
                                       model=sizes_only))  # fmt: skip
    table = service_table(results)
    assert [column.header for column in table.columns][-1] == "TTFT ≤ 1 ms" and not (
        results.no_cache or results.points[0].no_cache
    )
    assert set(figures(results)) == {"hit_ratio_vs_capacity.png", "hit_ratio_over_time.png",
                                     "ttft_vs_capacity.png"}  # fmt: skip
    assert "model (service)" not in report.render(results, None)
    with pytest.raises(KeyError):
        results.config("nope")
    # the command line: the seed-table workload, a delay in seconds, a bad scheduler
    assert main(["simulate", "--workload", "seed-table", "--requests", "40", "--capacity", "900",
                 "--workers", "2", "--routing", "prefix", "--router-delay", "1s", "--no-bounds",
                 "--executor", "serial"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "seed-table workload (seed 0): 40 requests" in out and "2xprefix+1s" in out
    assert exit_status(["simulate", "--requests", "20", "--mode", "timed",
                        "--max-running", "0"]) == 2  # fmt: skip
    assert "argument --max-running: 0 is below the least allowed, 1" in capsys.readouterr().err
    assert main(["simulate", "--requests", "20", "--mode", "timed", "--token-budget", "100"]) == 2
    assert "must be >= max running requests" in capsys.readouterr().err

    def refuse(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(report, "write_report", refuse)
    assert main(["simulate", "--requests", "20", "--capacity", "100", "--executor", "serial",
                 "--out", str(tmp_path / "o")]) == 2  # fmt: skip
    error = capsys.readouterr().err
    assert "cannot write results to" in error and "disk full" in error
