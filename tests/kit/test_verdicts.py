"""Verdicts: what a user gets from a cell, from what vLLM decided (predicted) or did on a GPU (measured).

The inputs are JUnit files as the cell sessions write them; GPU results are written here by hand,
since no GPU exists on the machines that run these tests (say so: they stand in for a GPU run).
"""

from __future__ import annotations

import html
import json

import jsonschema
import pytest
from builders import BUILT, CAP_WARNING, CUDA_NEW_KERNEL, CUDA_OLD_KERNEL, NATIVE, NOW, SCHEMA, suite, written_compat

from matrix.errors import MatrixError
from matrix.judge.verdicts import load_verdict_rules
from matrix.questions import Level, Question, Verdict
from matrix.report import render_html, render_json, render_md
from matrix.report.model import build_report
from matrix.report.view import advice, build_view, plain, why


def verdicts(tmp_path, *suites):
    report = build_report([str(s) for s in suites], kit_commit="t", now=NOW)
    return report, {
        (c.vllm, c.cell.id): {a.question: a for a in report.verdicts_of(c).answers} for c in report.all_cells
    }


def test_a_new_kernel_needs_the_opt_in_and_an_old_one_the_update_first(tmp_path):
    report, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-graph", CUDA_NEW_KERNEL | CAP_WARNING),
        suite(tmp_path, "cuda-wsl2old-v1-graph", CUDA_OLD_KERNEL | CAP_WARNING),
        suite(tmp_path, "cuda-linux-v1-graph", NATIVE),
    )
    new, old, native = (found[("0.29.0", f"cuda-{h}-v1-graph")] for h in ("wsl2new", "wsl2old", "linux"))
    assert {q: a.verdict for q, a in new.items()} == {
        Question.ENGINE_START: Verdict.WORKS,
        Question.OFFLOAD_WITH_GRAPHS: Verdict.NEEDS_OPT_IN,
        # Unpinned copies run, only slower: the variable makes it fast, it is not what makes it run.
        Question.PINNED_MEMORY: Verdict.SLOW,
    }
    assert new[Question.PINNED_MEMORY].and_opt_in and new[Question.PINNED_MEMORY].fixed.rule.id == "pinned"
    # With the variable, vLLM warns of Windows' cap on pinned memory: the advice carries it.
    assert new[Question.OFFLOAD_WITH_GRAPHS].opt_in.rule.id == "offload-uva-wsl-graph"
    assert "Windows caps pinned memory at roughly half of physical RAM" in why(new[Question.OFFLOAD_WITH_GRAPHS])
    # Below 4.19.121 CUDA on WSL2 has no GPU at all (NVIDIA's documented requirement): nothing starts, whatever
    # vLLM would decide about pinned memory, and every answer says it rests on that documentation, not on a run.
    assert {a.verdict for a in old.values()} == {Verdict.NEEDS_WSL_UPDATE}
    start, offload = old[Question.ENGINE_START], old[Question.OFFLOAD_WITH_GRAPHS]
    assert start.unset.rule.id == "cuda-wsl-kernel-too-old" and start.level is Level.DOCUMENTED
    # After `wsl --update` the variable is still needed.
    assert offload.and_opt_in and offload.unset.rule.id == "no-gpu" and offload.level is Level.DOCUMENTED
    assert all(a.verdict is Verdict.WORKS for a in native.values())
    cell = next(
        c for row in next(build_view(report).releases()).rows for c in row.cells if c.id == "cuda-wsl2old-v1-graph"
    )
    assert cell.verdict.word == "needs-wsl-update"
    assert "wsl --update" in cell.answer and "VLLM_WSL2_ENABLE_PIN_MEMORY=1" in cell.answer
    assert cell.answer.endswith("from a vendor's documented requirement, nothing run).")
    assert "predicted" not in cell.answer


def test_the_pinned_memory_cap_is_advised_only_where_the_release_warned_of_it(tmp_path):
    # The same decisions, one release logging the warning as it built the engine config and one not (0.23.0 has
    # none): the why repeats vLLM's warning only where that release gave it, whatever its version number says.
    _, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-graph", CUDA_NEW_KERNEL | CAP_WARNING, vllm="0.29.0"),
        suite(tmp_path, "cuda-wsl2new-v1-graph", CUDA_NEW_KERNEL, vllm="0.28.0"),
    )
    warned, silent = (found[(v, "cuda-wsl2new-v1-graph")][Question.OFFLOAD_WITH_GRAPHS] for v in ("0.29.0", "0.28.0"))
    assert warned.verdict is silent.verdict is Verdict.NEEDS_OPT_IN
    assert warned.opt_in.rule.id == "offload-uva-wsl-graph" and "Windows caps pinned memory" in why(warned)
    assert silent.opt_in.rule.id == "offload-uva" and "Windows" not in why(silent)
    assert "taken from vLLM's log" in warned.opt_in.rule.basis


def test_eager_offload_without_pinned_memory_is_slow_and_graphs_are_broken(tmp_path):
    # ROCm before 0.28 on a new kernel: the base platform's "any WSL, no pin", whatever the variable says.
    rocm = {k: v for k, v in CUDA_OLD_KERNEL.items() if k[0] != "v2_buffer"}
    _, found = verdicts(
        tmp_path,
        suite(tmp_path, "rocm-wsl2new-v1-eager", rocm, vllm="0.27.0"),
        suite(tmp_path, "rocm-wsl2new-v1-graph", rocm, vllm="0.27.0"),
    )
    eager, graph = found[("0.27.0", "rocm-wsl2new-v1-eager")], found[("0.27.0", "rocm-wsl2new-v1-graph")]
    assert eager[Question.OFFLOAD_WITH_GRAPHS].verdict is Verdict.SLOW
    assert graph[Question.OFFLOAD_WITH_GRAPHS].verdict is Verdict.BROKEN
    assert graph[Question.OFFLOAD_WITH_GRAPHS].workaround.value == "eager"
    assert graph[Question.PINNED_MEMORY].verdict is Verdict.SLOW


def test_what_runs_without_the_variable_is_slow_never_needs_opt_in_and_the_advice_says_what_makes_it_work(tmp_path):
    # CPU offload in eager mode on WSL2 runs unset, copying pageable weights every forward (measured with 0.26.0
    # on an H200, cuda-wsl2new-v1-eager): "works only with" the variable would be false.
    # ROCm 0.28+ pins on a new kernel as installed (#49861), not below it, where its engine still starts.
    rocm_new = {k: v for k, v in NATIVE.items() if k[0] != "v2_buffer"}
    rocm_old = {k: v for k, v in CUDA_OLD_KERNEL.items() if k[0] != "v2_buffer"}
    report, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-eager", CUDA_NEW_KERNEL),
        suite(tmp_path, "rocm-wsl2new-v1-eager", rocm_new),
        suite(tmp_path, "rocm-wsl2old-v1-eager", rocm_old),
    )
    new, old = found[("0.29.0", "cuda-wsl2new-v1-eager")], found[("0.29.0", "rocm-wsl2old-v1-eager")]
    for cell in (new, old):
        assert {q: a.verdict for q, a in cell.items()} == {
            Question.ENGINE_START: Verdict.WORKS,
            Question.OFFLOAD_WITH_GRAPHS: Verdict.SLOW,
            Question.PINNED_MEMORY: Verdict.SLOW,
        }
    assert (new[Question.OFFLOAD_WITH_GRAPHS].after_update, old[Question.OFFLOAD_WITH_GRAPHS].after_update) == (
        False,
        True,
    )
    cells = {c.id: c for row in next(build_view(report).releases()).rows for c in row.cells}
    offload = {cell: cells[cell].answers[1] for cell in ("cuda-wsl2new-v1-eager", "rocm-wsl2old-v1-eager")}
    assert plain(offload["cuda-wsl2new-v1-eager"].advice) == "set VLLM_WSL2_ENABLE_PIN_MEMORY=1"
    assert plain(offload["rocm-wsl2old-v1-eager"].advice) == "run wsl --update (kernel ≥ 4.19.121)"
    assert offload["cuda-wsl2new-v1-eager"].why == (
        "offloaded weights are copied from pageable memory every forward; with VLLM_WSL2_ENABLE_PIN_MEMORY=1: "
        "offloaded weights are read in place over PCIe (zero-copy UVA), which CUDA graphs capture"
    )
    assert offload["rocm-wsl2old-v1-eager"].why == (
        "offloaded weights are copied from pageable memory every forward; after wsl --update: "
        "offloaded weights are read in place over PCIe (zero-copy UVA), which CUDA graphs capture"
    )


def test_the_v2_runner_ignores_cpu_offload_in_every_release_whose_source_has_no_offloader_and_only_there(tmp_path):
    # v2_offloader: the gate reads from each release's source whether the V2 runner calls create_offloader
    # (0.28.0 added the call). The verdict follows that fact, release by release, not a range fitted to 0.26.0.
    without = CUDA_NEW_KERNEL | {("v2_offloader", p): "False" for p in ("unset", "1")}
    with_it = CUDA_NEW_KERNEL | {("v2_offloader", p): "True" for p in ("unset", "1")}
    _, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v2-graph", without, vllm="0.24.0"),
        suite(tmp_path, "cuda-wsl2new-v2-graph", without, vllm="0.27.1"),
        suite(tmp_path, "cuda-wsl2new-v2-graph", with_it, vllm="0.28.0"),
        suite(tmp_path, "cuda-wsl2new-v1-graph", without, vllm="0.27.1"),
    )
    for vllm in ("0.24.0", "0.27.1"):
        cell = found[(vllm, "cuda-wsl2new-v2-graph")]
        assert cell[Question.ENGINE_START].verdict is Verdict.NEEDS_OPT_IN  # 'UVA is not available' unset
        # Unset the engine does not start, so nothing is copied pinned or not: the variable is what starts it.
        assert cell[Question.PINNED_MEMORY].verdict is Verdict.NEEDS_OPT_IN
        assert cell[Question.PINNED_MEMORY].unset.rule.id == "pin-no-engine-v2"
        offload = cell[Question.OFFLOAD_WITH_GRAPHS]
        assert offload.verdict is Verdict.IGNORED and offload.and_opt_in
        assert offload.opt_in.rule.id == "v2-ignores-cpu-offload"
        assert "read from this release's source" in offload.opt_in.rule.why
        # Unset, the engine does not start (#47387); set, offload does nothing (#51396).
        assert [i.rpartition("/")[2] for i in offload.issues] == ["47387", "51396"]
    assert found[("0.28.0", "cuda-wsl2new-v2-graph")][Question.OFFLOAD_WITH_GRAPHS].verdict is Verdict.NEEDS_OPT_IN
    # The V1 runner has its offloader in every release: the fact is the V2 runner's alone.
    assert found[("0.27.1", "cuda-wsl2new-v1-graph")][Question.OFFLOAD_WITH_GRAPHS].verdict is Verdict.NEEDS_OPT_IN


def test_what_no_setting_avoids_but_a_newer_release_fixes_advises_that_release(tmp_path):
    # 0.25.x: vLLM does not import on WSL2 (#48397); 0.26.0 imports and the engine starts (the V1 runner's).
    broken = {("imports", p): "False" for p in ("unset", "1")}
    report, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-graph", broken, vllm="0.25.0"),
        suite(tmp_path, "cuda-wsl2new-v1-graph", broken, vllm="0.25.1"),
        suite(tmp_path, "cuda-wsl2new-v1-graph", CUDA_NEW_KERNEL, vllm="0.26.0"),
    )
    for vllm in ("0.25.0", "0.25.1"):
        start = found[(vllm, "cuda-wsl2new-v1-graph")][Question.ENGINE_START]
        assert (start.verdict, start.works_in) == (Verdict.BROKEN, "0.26.0")
        assert plain(advice(start)) == "no setting avoids it: upgrade to vLLM 0.26.0, where it works as installed"
    # The newest release has nothing newer to point at, and what works needs no upgrade.
    assert found[("0.26.0", "cuda-wsl2new-v1-graph")][Question.ENGINE_START].works_in is None
    offload = found[("0.25.1", "cuda-wsl2new-v1-graph")][Question.OFFLOAD_WITH_GRAPHS]
    assert offload.verdict is Verdict.BROKEN and offload.works_in is None  # 0.26.0 still needs the variable


def test_gpu_evidence_overrides_the_prediction_and_says_it_was_emulated(tmp_path):
    # Stands in for an emulated GPU run (an H200 with the uname presented as WSL2): no GPU here.
    measured = CUDA_NEW_KERNEL | {("repro", "unset"): "dynamo-unsupported", ("repro", "1"): "works"}
    measured |= {("offloaded", "1"): "True"}
    ignored = (
        NATIVE | {("repro", p): "works" for p in ("unset", "1")} | {("offloaded", p): "False" for p in ("unset", "1")}
    )
    report, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-graph", measured, execution="emulated", gpu="NVIDIA H200"),
        suite(tmp_path, "cuda-linux-v2-graph", ignored, execution="native", gpu="NVIDIA H200"),
    )
    offload = found[("0.29.0", "cuda-wsl2new-v1-graph")][Question.OFFLOAD_WITH_GRAPHS]
    assert (offload.verdict, offload.level) == (Verdict.NEEDS_OPT_IN, Level.EMULATED)
    assert offload.unset.rule.id == "gpu-offload-fails-graph" and offload.unset.shown == "dynamo-unsupported"
    native = found[("0.29.0", "cuda-linux-v2-graph")][Question.OFFLOAD_WITH_GRAPHS]
    assert (native.verdict, native.level) == (Verdict.IGNORED, Level.NATIVE)
    cell = next(
        c for row in next(build_view(report).releases()).rows for c in row.cells if c.id == "cuda-wsl2new-v1-graph"
    )
    assert "emulated on native Linux (uname presented as WSL2 kernel ≥ 4.19.121)" in cell.answer
    assert "emulated on NVIDIA H200: native Linux, the uname presented as the cell's" in cell.evidence_line


def test_a_cell_without_results_is_unknown_never_works(tmp_path):
    report, found = verdicts(tmp_path, suite(tmp_path, "cuda-linux-v1-graph", NATIVE))
    missing = found[("0.29.0", "rocm-wsl2new-v2-eager")]
    assert {(a.verdict, a.level) for a in missing.values()} == {(Verdict.UNKNOWN, Level.NONE)}
    (cell,) = [c for c in report.all_cells if c.cell.id == "rocm-wsl2new-v2-eager"]
    assert report.verdicts_of(cell).headline.verdict is Verdict.UNKNOWN


def test_compat_json_markdown_and_the_page_lead_with_the_verdicts(tmp_path):
    report, _ = verdicts(
        tmp_path,
        suite(
            tmp_path,
            "cuda-wsl2new-v2-graph",
            CUDA_NEW_KERNEL | {("runner_default_dense", "unset"): "v2", ("runner_default_moe", "unset"): "v1"},
        ),
    )
    path = tmp_path / "compat.json"
    render_json.write(report, path)
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    (version,) = document["versions"]
    assert (version["default_runner"], version["default_runners"]) == ("v2", {"dense": "v2", "moe": "v1"})
    said = (
        "With VLLM_USE_V2_MODEL_RUNNER unset, this release picks the V2 runner for a dense model and the V1 runner "
        "for an MoE model (its engine config, asked for the reproduction's engine)."
    )
    assert said in html.unescape(render_html.render(report))
    assert said.partition(", ")[2] in render_md.render(report)  # Markdown escapes the variable's underscores
    (cell,) = [c for c in version["cells"] if c["id"] == "cuda-wsl2new-v2-graph"]
    assert cell["verdicts"]["engine_start"] == {
        "verdict": "needs-opt-in",
        "level": "predicted",
        "advice": "set VLLM_WSL2_ENABLE_PIN_MEMORY=1",
        "why": "without VLLM_WSL2_ENABLE_PIN_MEMORY=1: the V2 runner raises 'UVA is not available' at start "
        "without pinned memory; with it: the engine starts",
        "issues": ["https://github.com/vllm-project/vllm/issues/47387"],
        "rules": ["v2-uva-crash", "starts"],
        # The two runs it is made from, and what a user who keeps the variable at each value is told.
        "outcomes": {"unset": "fails", "1": "works"},
        "kept": {
            "unset": {
                "verdict": "broken",
                "level": "predicted",
                "advice": "use the V1 runner: VLLM_USE_V2_MODEL_RUNNER=0",
                "why": "the V2 runner raises 'UVA is not available' at start without pinned memory",
            },
            "1": {"verdict": "works", "level": "predicted", "advice": "nothing to set", "why": "the engine starts"},
        },
    }
    markdown = render_md.render(report)
    row = next(line for line in markdown.splitlines() if line.startswith("| **CUDA** · WSL2 kernel ≥ 4.19.121 |"))
    assert row.split(" | ")[3].startswith(
        "⚑ **needs-opt-in**: set <code>VLLM&#95;WSL2&#95;ENABLE&#95;PIN&#95;MEMORY=1</code>"
    )
    page = render_html.render(report)
    assert 'data-verdict="needs-opt-in" data-cell="cuda-wsl2new-v2-graph" style="--v:#BBCCEE"' in page


def test_a_bad_verdict_rule_is_refused_in_one_line(tmp_path):
    path = tmp_path / "verdicts.toml"
    path.write_text('[[rule]]\nid = "x"\nquestion = "engine_start"\nwhen = { pinned = "True" }\noutcome = "works"\n')
    with pytest.raises(MatrixError, match=r"^rule 'x' in verdicts.toml: when needs keys from .*pinned"):
        load_verdict_rules(path)
    path.write_text('[[rule]]\nid = "y"\nquestion = "engine_start"\nwhen = { pin = "True" }\noutcome = "fine"\n')
    with pytest.raises(MatrixError, match=r"^rule 'y' in verdicts.toml: .*'fine'"):
        load_verdict_rules(path)
    # Cells are named as in expectations.toml (matrix.judge.rules), and a glob that names no cell is a typo.
    path.write_text(
        '[[rule]]\nid = "z"\ncells = "cuda-wsl3-*"\nquestion = "engine_start"\nwhen = { pin = "True" }\n'
        'outcome = "works"\nwhy = "w"\nbasis = "b"\n'
    )
    with pytest.raises(MatrixError, match=r"^rule 'z' in verdicts.toml: cells \['cuda-wsl3-\*'\] match no cell"):
        load_verdict_rules(path)


def test_a_release_without_the_v1_runner_says_its_v1_cells_do_not_start_and_to_unset_the_variable(tmp_path):
    # vLLM 0.34.0 as its gate records it: with VLLM_USE_V2_MODEL_RUNNER=0 vLLM refuses (the runner and the engine
    # config), with it =1 the V2 runner builds as before. The starts rule rests on the engine config, not the import.
    refused = {("runner", p): "refused" for p in ("unset", "1")} | {
        ("engine_config", p): "refused" for p in ("unset", "1")
    }
    report, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-linux-v1-graph", NATIVE | refused, vllm="0.34.0"),
        suite(tmp_path, "cuda-linux-v2-graph", NATIVE | {("runner", p): "v2" for p in ("unset", "1")}, vllm="0.34.0"),
        suite(tmp_path, "cuda-linux-v1-eager", NATIVE | {k: "refused" for k in BUILT}, vllm="0.34.0"),
    )
    v1, v2, other = (
        found[("0.34.0", c)] for c in ("cuda-linux-v1-graph", "cuda-linux-v2-graph", "cuda-linux-v1-eager")
    )
    assert {a.verdict for a in v1.values()} == {Verdict.BROKEN}
    start = v1[Question.ENGINE_START]
    assert start.unset.rule.id == "v1-runner-removed" and "no V1 model runner" in why(start)
    for answer in v1.values():
        assert plain(advice(answer)) == "unset VLLM_USE_V2_MODEL_RUNNER (the V2 runner is the only one)"
    assert {a.verdict for a in v2.values()} == {Verdict.WORKS}
    assert v2[Question.ENGINE_START].unset.rule.id == "starts"
    # Refused for another reason than the runner: broken, and no advice about a runner it does not concern.
    assert other[Question.ENGINE_START].unset.rule.id == "config-refused"
    assert plain(advice(other[Question.ENGINE_START])) == "no setting avoids it"
    # A result that never asked for the engine config (older kits' records) still starts on the import alone.
    unrecorded = {k: v for k, v in NATIVE.items() if k not in BUILT}
    _, older = verdicts(tmp_path, suite(tmp_path, "cuda-linux-v1-graph", unrecorded, vllm="0.33.0"))
    assert older[("0.33.0", "cuda-linux-v1-graph")][Question.ENGINE_START].unset.rule.id == "starts-imported"


def test_compat_json_says_per_release_and_stack_which_architectures_get_the_v2_runner(tmp_path):
    listed = "DeepseekV2ForCausalLM,Qwen2MoeForCausalLM"
    runners = "listed-dense=v2,listed-moe=v2,unlisted-dense=v2,unlisted-moe=v1"
    by_arch = {("v2_architectures", "unset"): listed, ("runner_by_architecture", "unset"): runners}
    moe = '<property name="moe_architectures" value="[&quot;MixtralForCausalLM&quot;]"/>'
    moe += '<property name="dense_architectures" value="[&quot;LlamaForCausalLM&quot;]"/>'
    path = suite(tmp_path, "cuda-linux-v1-graph", NATIVE | by_arch, vllm="0.28.0")
    path.write_text(
        path.read_text().replace('value="runner_by_architecture"/>', f'value="runner_by_architecture"/>{moe}')
    )
    none = {("v2_architectures", "unset"): "none", ("runner_by_architecture", "unset"): "none"}
    # A GPU run of the same cell by a kit that did not ask (stands in for one: no GPU here) supersedes the gate's
    # result; the release's fact is still the gate's.
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    measured = suite(gpu, "cuda-linux-v1-graph", NATIVE, vllm="0.28.0", execution="native", gpu="NVIDIA H200")
    report, _ = verdicts(tmp_path, path, measured, suite(tmp_path, "cuda-linux-v1-graph", NATIVE | none, vllm="0.29.0"))
    (cell,) = [c for c in report.versions["0.28.0"] if c.cell.id == "cuda-linux-v1-graph"]
    assert cell.envelope.execution.value == "native" and cell.superseded
    document = written_compat(report, tmp_path)
    releases = {v["vllm"]: v for v in document["versions"]}
    assert releases["0.28.0"]["v2_architectures"] == {
        "cuda": {
            "listed": ["DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM"],
            "runner": {"listed-dense": "v2", "listed-moe": "v2", "unlisted-dense": "v2", "unlisted-moe": "v1"},
            "moe": ["MixtralForCausalLM"],
            "dense": ["LlamaForCausalLM"],
        }
    }
    assert releases["0.29.0"]["v2_architectures"] is None
    (release, *_) = [r for r in build_view(report).releases() if r.vllm == "0.28.0"]
    assert "on CUDA, DeepseekV2ForCausalLM, Qwen2MoeForCausalLM: the V2 runner" in release.default_runners
    assert "every other architecture: the V2 runner for a dense model and the V1 runner for an MoE model" in (
        release.default_runners
    )


def test_on_an_old_cuda_kernel_the_advice_is_the_kernel_never_a_runner(tmp_path):
    # 0.29.0's V2 runner crashes without pinned memory on a new kernel; below 4.19.121 no GPU is there at all, so
    # what the V2 runner needs is not the answer there: `wsl --update` is, then what the new kernel needs.
    _, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v2-graph", CUDA_NEW_KERNEL),
        suite(tmp_path, "cuda-wsl2old-v2-graph", CUDA_OLD_KERNEL),
    )
    old = found[("0.29.0", "cuda-wsl2old-v2-graph")]
    assert {a.verdict for a in old.values()} == {Verdict.NEEDS_WSL_UPDATE}
    for answer in old.values():
        assert plain(advice(answer)) == "run wsl --update (kernel ≥ 4.19.121), then set VLLM_WSL2_ENABLE_PIN_MEMORY=1"
    assert old[Question.OFFLOAD_WITH_GRAPHS].unset.rule.id == "no-gpu"
    assert "no GPU is there for it" in why(old[Question.PINNED_MEMORY])


def test_where_wsl_update_gets_a_slow_run_on_an_old_kernel_the_advice_is_wsl_update(tmp_path):
    # 0.23.0 reads no variable: on a new kernel eager offload and pinned memory are slow (pageable), not broken.
    no_variable = {k: v for k, v in CUDA_OLD_KERNEL.items() if k[0] != "v2_buffer"}
    _, found = verdicts(
        tmp_path,
        suite(tmp_path, "cuda-wsl2new-v1-eager", no_variable, vllm="0.23.0"),
        suite(tmp_path, "cuda-wsl2old-v1-eager", no_variable, vllm="0.23.0"),
    )
    new, old = found[("0.23.0", "cuda-wsl2new-v1-eager")], found[("0.23.0", "cuda-wsl2old-v1-eager")]
    assert new[Question.OFFLOAD_WITH_GRAPHS].verdict is Verdict.SLOW
    offload = old[Question.OFFLOAD_WITH_GRAPHS]
    assert offload.verdict is Verdict.BROKEN and plain(advice(offload)) == "run wsl --update (kernel ≥ 4.19.121)"
    after = "; after wsl --update: offloaded weights are copied from pageable memory every forward"
    assert why(offload).endswith(after)
    assert plain(advice(old[Question.PINNED_MEMORY])) == "run wsl --update (kernel ≥ 4.19.121)"
    # What a user keeping the variable at =1 is told, and where vLLM never reads it: the runs made so.
    kept = new[Question.OFFLOAD_WITH_GRAPHS].kept_at("1")
    assert kept is not None and kept.verdict is Verdict.SLOW and not kept.and_opt_in
