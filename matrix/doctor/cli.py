"""The doctor's command line: ``python -m matrix doctor`` in a checkout, ``wslpin-doctor`` where the kit is installed.

Standard library only, on Python 3.8 or later: a person asks before installing anything. The matrix it answers
from is the one the kit's package carries (``published.PACKAGED``), a file, or a URL (``remote``); the set-up is
this machine's, another machine's as a file describes it (``collected``), or what the flags say.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matrix import __version__
from matrix.cells import Mode, ModelClass, Runner, Stack
from matrix.doctor import answer, model, published, remote, render
from matrix.errors import MatrixError
from matrix.host import facts
from matrix.text.cli import run_command_line

# A doctor costs little more than Python's own start (benchmarks/bench_doctor.py): what only a flag needs is
# imported when that flag is given (--collect-env here, --matrix URL in ``remote``).


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The doctor's flags."""
    parser.add_argument("--kernel", metavar="RELEASE", help="a `uname -r` release instead of this machine's")
    parser.add_argument("--stack", metavar="cuda|rocm", help="the GPU stack instead of the detected one")
    parser.add_argument("--vllm", metavar="X.Y.Z", help="a vLLM release instead of the installed one")
    parser.add_argument("--runner", metavar="v1|v2", help="the model runner instead of the variable or the default")
    parser.add_argument("--mode", metavar="graph|eager", help="eager: with --enforce-eager (default: graph)")
    parser.add_argument(
        "--moe", action="store_true", help="for an MoE model: vLLM's default runner differs for them (before 0.29.0)"
    )
    parser.add_argument(
        "--arch",
        metavar="NAME",
        help="the model's architecture (its config.json `architectures`, e.g. DeepseekV2ForCausalLM): vLLM 0.24.0 "
        "to 0.28.0 pick the default runner by it",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="a model's directory: its architecture and MoE-ness read from its config.json"
    )
    parser.add_argument(
        "--collect-env",
        metavar="FILE",
        help="another machine's set-up instead of this one's: what `vllm collect-env` (or `python -m vllm."
        "collect_env`) printed there, or the JSON of `python -m matrix env`",
    )
    parser.add_argument(
        "--matrix",
        metavar="PATH|URL",
        help=f"a compat.json (a file, or an http(s) URL of at most {remote.LIMIT // remote.MIB} MiB) instead of the "
        "matrix this kit carries",
    )
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def _table(where: str | None) -> published.Published:
    if where is None:
        return published.read_published(published.PACKAGED, "the matrix this kit carries")
    if not remote.is_url(where):
        return published.read_published(Path(where), f"--matrix {where}")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="wslpin-matrix-") as scratch:
        path = Path(scratch) / "compat.json"
        path.write_bytes(remote.fetch(where))
        return published.read_published(path, f"--matrix {where}")


def run(args: argparse.Namespace) -> int:
    """The answer for the set-up ``args`` describe, printed; a refusal is one line (MatrixError)."""
    given = model.read_model(Path(args.model)) if args.model else None
    moe = ModelClass.MOE if args.moe or (given and given.moe) else None
    # People write CUDA and ROCm capitalised, as NVIDIA and AMD do.
    asked = answer.Asked(
        kernel=args.kernel,
        stack=Stack.parse(args.stack.lower()) if args.stack else None,
        vllm=args.vllm,
        runner=Runner.parse(args.runner.lower()) if args.runner else None,
        mode=Mode.parse(args.mode.lower()) if args.mode else None,
        model_class=moe,
        model_class_source=answer.Source.FLAG if args.moe or not given else answer.Source.MODEL,
        architecture=args.arch or (given.architecture if given else None),
    )
    if args.collect_env:
        from matrix.doctor import collected

        described = collected.read_set_up(Path(args.collect_env))
        machine, origin = described.facts, described.origin
    else:
        machine, origin = facts.collect_facts(), ""
    try:
        setup = answer.set_up(machine, asked, origin)
        found = answer.answer(setup, _table(args.matrix))
    except answer.RefusedError as exc:
        raise MatrixError(render.refusal(exc.refusal)) from None
    print(render.render_json(found) if args.json else render.render_text(found))
    # Now, not at exit: a reader that left (`| head`) is then a BrokenPipeError that run_command_line ends
    # quietly, where a failed flush at exit would print Python's own complaint and exit 120.
    sys.stdout.flush()
    return 0


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Does vLLM's pinned memory work on this set-up, and what to set: the published matrix's answer.",
    )
    add_arguments(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None, prog: str = "wslpin-doctor") -> int:
    """``wslpin-doctor``, the console script the kit's package installs, and ``python -m matrix doctor``."""
    return run_command_line(lambda: _parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
