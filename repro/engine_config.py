"""Whether a vLLM release accepts the reproduction's engine, checked without a GPU.

``check`` runs in a fresh child like the gate's (``repro.isolation``): it presents the cell's
host and, without the cell's GPU, a stand-in for it (``repro.emulation``), gives vLLM's
``EngineArgs`` the very keyword arguments the engine child gives ``LLM``
(``repro.engine.engine_kwargs``) in the environment it runs in, builds the engine config and
loads the tiny model's tokenizer through vLLM. It stops before any device is touched. A keyword
a release renamed, an attention backend it dropped or a model it no longer reads fails here, in
every release's history run, instead of on the first GPU the reproduction meets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import logging
import os
import tempfile
import traceback
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrix.cells import Cell, Host, ModelClass
from matrix.host import reads
from matrix.plan import CellPlan
from matrix.variables import CACHE_ROOT, GATE_PIN_VALUES, UNSET, V2_MODEL_RUNNER
from repro import emulation
from repro.answers import kept_directory, memory, tree_digest
from repro.engine import engine_kwargs
from repro.gate import preload, runner_of
from repro.isolation import Outcome, run_isolated
from repro.offload import EngineRun

DEFAULT_TIMEOUT = 180.0
# The reproduction's own run: the pin variable changes no engine argument, so one value stands for both in the
# settings; what vLLM warns while it builds the config is asked under each value (``check``).
PIN_ENV = "unset"
ROUND_TRIP = "the kit's tiny model"


@dataclass(frozen=True)
class ConfigRequest:
    """One child: the cells of one stack and host, presented and stood in for alike, checked one after another.

    Runner and graph mode reach vLLM as a variable it reads when the config is built and as a keyword,
    so one process builds each cell's config in turn (the gate's runner choice does the same), and
    pays vLLM's import once per host instead of once per cell.
    """

    runs: tuple[EngineRun, ...]
    model: str
    moe: str  # the MoE config's directory (repro.tinymodel.tiny_moe): which runner vLLM picks for such a model
    stub_gpu: bool  # no GPU of this stack here


def requests_for(plans: Iterable[CellPlan], model: Path, moe: Path) -> list[ConfigRequest]:
    """One request per stack, host and way of running them (native, emulated, gate-only)."""
    groups: dict[tuple, list[EngineRun]] = {}
    for plan in plans:
        emulated = plan.execution.presents_host
        key = (plan.cell.stack, plan.cell.host, emulated, plan.execution.stubs_gpu)
        groups.setdefault(key, []).append(EngineRun(plan.cell, PIN_ENV, True, emulated))
    return [ConfigRequest(tuple(runs), str(model), str(moe), stub_gpu=key[3]) for key, runs in sorted(groups.items())]


# A setting this release's config does not have (older releases keep some elsewhere, or nowhere).
MISSING = object()


def _setting(config: object, *paths: str) -> object:
    """The first of ``paths`` (dotted attributes) this config has, as plain data; MISSING if none."""
    for path in paths:
        value: object = config
        for name in path.split("."):
            value = getattr(value, name, MISSING)
        if value is not MISSING:
            return value if isinstance(value, bool | int | float | type(None)) else str(value)
    return MISSING


def _engine_settings(config: object) -> dict[str, object]:
    """What the built config says about the settings the reproduction depends on."""
    settings = {
        # Newer releases moved the offload size into an offload config of its own (the gate's _offload_path).
        "cpu_offload_gb": _setting(config, "offload_config.uva.cpu_offload_gb", "cache_config.cpu_offload_gb"),
        "enforce_eager": _setting(config, "model_config.enforce_eager"),
        "use_v2_model_runner": _setting(config, "use_v2_model_runner"),
        "attention_backend": _setting(config, "attention_config.backend"),
        "dtype": _setting(config, "model_config.dtype"),
        "max_model_len": _setting(config, "model_config.max_model_len"),
    }
    return {key: value for key, value in settings.items() if value is not MISSING}


def _get_tokenizer() -> Callable[[str], Any]:
    """vLLM's ``get_tokenizer``, from whichever module this release keeps it in."""
    try:
        from vllm.tokenizers import get_tokenizer
    except ImportError:
        from vllm.transformers_utils.tokenizer import get_tokenizer
    return get_tokenizer


def check(request: ConfigRequest, cache_root: str, kept: bool = False) -> dict[str, dict]:
    """In a fresh process: the host and stand-in, then per cell its engine's environment and vLLM's engine config.

    ``kept``: the cache root is the test session's, kept with its answers (``_first_inspection``)."""
    base = dict(os.environ) | {CACHE_ROOT.name: cache_root}
    first = request.runs[0]
    if first.present_host:
        emulation.present_host(first.cell.host)
    else:
        reads.record("engine-config child: vLLM sees this machine's uname")
    if request.stub_gpu:
        emulation.stub_gpu(first.cell.stack)
    try:
        import vllm.platforms  # noqa: F401 - what the gate imports; its import test judges a failure here
    except BaseException:  # noqa: BLE001
        return {run.cell.id: {"import_error": traceback.format_exc()} for run in request.runs}
    with _first_inspection(Path(cache_root)) if kept else contextlib.nullcontext():
        return _built(request, base)


def _built(request: ConfigRequest, base: dict[str, str]) -> dict[str, dict]:
    """Per cell its engine's environment and vLLM's engine config, once vLLM has been imported."""
    first = request.runs[0]
    answers = {}
    for run in request.runs:
        built = {pin: _config(dataclasses.replace(run, pin_env=pin), base, request.model) for pin in GATE_PIN_VALUES}
        answers[run.cell.id] = {
            "config": built[run.pin_env],
            "warnings": {pin: config.get("warnings", []) for pin, config in built.items()},
            **_tokenizer(request.model),
        }
    # Unset, the runner is vLLM's choice, made per model: the same for every cell of this host.
    os.environ.clear()
    os.environ.update(first.env(base))
    V2_MODEL_RUNNER.apply(os.environ, UNSET)
    defaults = {kind.value: _default_runner(first, model, request.model) for kind, model in _model_classes(request)}
    # Host-independent: which architectures vLLM reads as MoE is asked once per stack, where it runs natively.
    by_architecture = _by_architecture(read_moe=first.cell.host is Host.LINUX)
    for answer in answers.values():
        answer["runner_default"] = defaults
        answer["by_architecture"] = by_architecture
    try:
        # The engine's next step: what loads the weights imports under the cell's host and stand-in. Imported
        # in every check, not only where vLLM's model-info cache missed (vLLM imports it to write the cache).
        import vllm.model_executor.model_loader  # noqa: F401
    except BaseException:  # noqa: BLE001
        loader_error = traceback.format_exc()
        for answer in answers.values():
            answer["loader_error"] = loader_error
    return answers


def _config(run: EngineRun, base: dict[str, str], model: str) -> dict:
    """The settings of the engine config vLLM builds from the engine child's own keyword arguments and environment,
    and the warnings vLLM logged building it; or why it built none."""
    os.environ.clear()
    os.environ.update(run.env(base))
    with _logged_warnings() as warnings:
        try:
            from vllm.engine.arg_utils import EngineArgs

            config = EngineArgs(**engine_kwargs(run.spec(Path(model)))).create_engine_config()
            return {"settings": _engine_settings(config), "warnings": warnings}
        except BaseException:  # noqa: BLE001 - a release refusing the kit's engine is the finding
            return {"error": traceback.format_exc(), "warnings": warnings}


@contextlib.contextmanager
def _logged_warnings() -> Iterator[list[str]]:
    """The warnings vLLM's loggers handle meanwhile, each as a user reads it.

    vLLM logs some warnings once per process (``warning_once``, functools caches in ``vllm.logger``): those
    caches are emptied first, so each cell's config says what a user starting that engine is told. The
    records are taken where every logger hands them to its handlers, because vLLM's logging configuration
    replaces the handlers of its loggers while the first config is built.
    """
    import vllm.logger

    for name in dir(vllm.logger):
        cache_clear = getattr(getattr(vllm.logger, name), "cache_clear", None)
        if callable(cache_clear):
            cache_clear()
    seen: list[str] = []
    handle = logging.Logger.handle

    def keep(self: logging.Logger, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING and record.name.partition(".")[0] == "vllm":
            seen.append(_message(record))
        handle(self, record)

    logging.Logger.handle = keep  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        logging.Logger.handle = handle  # type: ignore[method-assign]


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except (TypeError, ValueError):  # arguments that do not fit the format: the format is what vLLM meant
        return str(record.msg)


def _model_classes(request: ConfigRequest) -> tuple[tuple[ModelClass, str], ...]:
    """(model class, model directory) pairs whose default runner is asked."""
    return ((ModelClass.DENSE, request.model), (ModelClass.MOE, request.moe))


def _default_runner(run: EngineRun, model: str, tokenizer: str) -> dict:
    """The runner vLLM's engine config picks for ``model`` with VLLM_USE_V2_MODEL_RUNNER unset, or why none."""
    try:
        from vllm.engine.arg_utils import EngineArgs

        kwargs = engine_kwargs(run.spec(Path(model))) | {"tokenizer": tokenizer}
        return {"runner": runner_of(EngineArgs(**kwargs).create_engine_config())}
    except BaseException:  # noqa: BLE001 - a release refusing the model is an answer too
        return {"error": traceback.format_exc()}


# The model classes vLLM's default runner depends on, as ``_is_default_v2_model_runner_model`` is asked them: an
# architecture on the release's list or off it, an MoE model or a dense one.
ARCHITECTURE_CLASSES = ("listed-dense", "listed-moe", "unlisted-dense", "unlisted-moe")
# An architecture no release lists: what a model off the list is asked as.
UNLISTED = "WslpinUnlistedForCausalLM"


def _by_architecture(read_moe: bool) -> dict:
    """Which runner vLLM's config picks by default per class of architecture, from the release's own config code.

    Up to 0.28.0 ``VllmConfig._is_default_v2_model_runner_model`` decides from the model's architecture (on the
    release's ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``, per platform from 0.27.0) and whether it is MoE; it is
    called here on a stand-in model config per class, under the stack's platform. A release without it (0.29.0
    on) decides alike for every architecture: ``{}``. Where its answer depends on MoE-ness and ``read_moe``, which
    architectures vLLM reads as MoE (``_moe_reading``) is recorded beside it.
    """
    from vllm.config import VllmConfig
    from vllm.config import vllm as config_module

    decide = getattr(VllmConfig, "_is_default_v2_model_runner_model", None)
    if decide is None:
        return {}
    platform_list = getattr(config_module, "default_v2_model_runner_architectures", None)
    listed = sorted(platform_list() if platform_list else config_module.DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)
    runners = {}
    for kind in ARCHITECTURE_CLASSES:
        where, _, weights = kind.partition("-")
        model_config = types.SimpleNamespace(
            runner_type="generate",
            architectures=[listed[0] if where == "listed" and listed else UNLISTED],
            is_moe=weights == "moe",
            is_quantized=False,
            is_hybrid=False,
            is_attention_free=False,
        )
        runners[kind] = "v2" if decide(types.SimpleNamespace(model_config=model_config)) else "v1"
    found: dict = {"listed": listed, "runner": runners}
    if read_moe and any(runners[f"{where}-dense"] != runners[f"{where}-moe"] for where in ("listed", "unlisted")):
        found |= _moe_reading()
    return found


def _moe_reading() -> dict[str, list[str]]:
    """The causal-LM architectures transformers knows, as MoE or dense by vLLM's own reading of each one's default
    config: ``ModelConfig.is_moe`` is its architecture-config convertor's ``get_num_experts() > 0``.

    A model's own config.json can differ from the default (a dense variant of an MoE family); an architecture
    transformers does not know is in neither list.
    """
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from vllm.transformers_utils import model_arch_config_convertor as convertors

    found: dict[str, set[str]] = {"moe": set(), "dense": set()}
    for model_type, names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        try:
            config = AutoConfig.for_model(model_type)
            convertor = convertors.MODEL_ARCH_CONFIG_CONVERTORS.get(model_type, convertors.ModelArchConfigConvertorBase)
            experts = convertor(config, config.get_text_config()).get_num_experts()
        except Exception:  # noqa: BLE001 - a config transformers cannot build by default says nothing either way
            continue
        found["moe" if experts else "dense"].update((names,) if isinstance(names, str) else names)
    return {kind: sorted(archs) for kind, archs in found.items()}


def _tokenizer(model: str) -> dict:
    try:
        tokenizer = _get_tokenizer()(model)
        text = tokenizer.decode(tokenizer.encode(ROUND_TRIP, add_special_tokens=False))
        return {"vocab_size": len(tokenizer), "round_trip": text}
    except BaseException:  # noqa: BLE001
        return {"tokenizer_error": traceback.format_exc()}


@contextlib.contextmanager
def _first_inspection(root: Path) -> Iterator[None]:
    """Until one check has come to its end under the test session's kept vLLM cache ``root``, one at a time.

    vLLM inspects each model architecture in an interpreter of its own (~5 s of CPU) and caches what it found
    under its cache root. The test session's children that start together (an evaluation's, and the sessions'
    around it) would each find the cache empty and each inspect; instead the others import vLLM meanwhile, then
    wait for the first and read its entries. Once one check has ended, none waits.

    Only there: what vLLM logs building a config differs between a child that missed its cache and one that
    read it (the missing one imports its kernels' modules in-process, which warn here that there is no
    libcuda), and which child comes first is a race. A cell session or the history keeps its children as
    they are, each of its records the same from one run to the next.
    """
    inspected = root / ".inspected"
    if inspected.exists():
        yield
        return
    with (root / ".inspecting").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
        inspected.touch()


def evaluate(requests: list[ConfigRequest], timeout: float = DEFAULT_TIMEOUT) -> dict[Cell, Outcome]:
    """One child per request, as many at a time as there are cores; each cell's answer.

    The children share one vLLM cache root, made for this call where no answers are kept. vLLM inspects the
    model's architecture in an interpreter of its own, which neither the presented host nor the stand-in GPU
    reaches, so its answer is every cell's. Where the kit's tests keep answers (``repro.answers``), each
    cell's is kept on its own, since one test asks for other cells together than the next: a child starts only
    for the cells none has asked yet; and the cache root is kept with them, as a user's is kept between runs
    (vLLM keys its entry by the model module's hash and writes it whole), so the architecture is inspected once
    per test session: the first child inspects while the others wait (``_first_inspection``).
    """
    # The tokenizer's answer is read from the model's files, the default runners from both models'.
    models = "".join(
        tree_digest(Path(model)) for model in sorted({m for request in requests for m in (request.model, request.moe)})
    )
    kept = memory("engine_config.check", timeout, salt=models)

    def part(request: ConfigRequest, run: EngineRun) -> ConfigRequest:
        return dataclasses.replace(request, runs=(run,))

    answers = {
        run.cell: found
        for request in requests
        for run in request.runs
        if kept is not None and (found := kept.recall(part(request, run))) is not None
    }
    unanswered = (
        dataclasses.replace(r, runs=tuple(run for run in r.runs if run.cell not in answers)) for r in requests
    )
    asked = [request for request in unanswered if request.runs]
    if asked:
        preload(len(asked), all(request.stub_gpu for request in asked))
        with contextlib.ExitStack() as stack:
            kept_root = kept_directory("vllm-cache-root")
            cache = str(kept_root or stack.enter_context(tempfile.TemporaryDirectory(prefix="wslpin-config-")))
            checking = functools.partial(check, cache_root=cache, kept=kept_root is not None)
            outcomes = run_isolated(checking, asked, timeout=timeout)
        for request, outcome in zip(asked, outcomes, strict=True):
            for run in request.runs:
                answers[run.cell] = (
                    dataclasses.replace(outcome, value=outcome.value[run.cell.id]) if outcome.ok else outcome
                )
                if kept is not None:
                    kept.remember(part(request, run), answers[run.cell])
    return {run.cell: answers[run.cell] for request in requests for run in request.runs}
