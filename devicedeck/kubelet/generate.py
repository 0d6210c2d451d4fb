"""Regenerate the kubelet gRPC stubs in devicedeck/kubelet/proto from the .proto files there.

    python -m devicedeck.kubelet.generate           # rewrite the generated modules in place
    python -m devicedeck.kubelet.generate --check   # exit 1 and list the files that are out of date

The protos are compiled with the repository root as the include path and with their
repository-relative file names, so the generated modules import each other as
``devicedeck.kubelet.proto.X_pb2`` and work from any working directory.
"""

from __future__ import annotations

import argparse
import filecmp
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_PACKAGE_DIR = Path("devicedeck/kubelet/proto")
PROTO_NAMES = ("deviceplugin", "podresources", "pluginregistration", "drahealth")
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[str]:
    """The .proto files as repository-relative paths, the form protoc is given."""
    return [(PROTO_PACKAGE_DIR / f"{name}.proto").as_posix() for name in PROTO_NAMES]


def generated_files() -> list[Path]:
    """Repository-relative paths of every module the generator writes."""
    return [PROTO_PACKAGE_DIR / f"{n}{s}" for n in PROTO_NAMES for s in GENERATED_SUFFIXES]


def run_protoc(out_dir: Path, repo_root: Path = REPO_ROOT) -> None:
    """Compile every proto into out_dir (which receives the devicedeck/kubelet/proto/ tree)."""
    # Imported here so that importing this module (e.g. for the file lists) needs no
    # grpcio-tools, which is a development dependency only.
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{repo_root}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *proto_files(),
    ]
    # The relative proto names are resolved against the -I root, so the generated
    # imports read "from devicedeck.kubelet.proto import ..." whatever the working directory.
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed exit_code={code}")


def stale_files(repo_root: Path = REPO_ROOT) -> list[str]:
    """Generate into a temporary dir and return the generated files that differ or are missing."""
    with tempfile.TemporaryDirectory(prefix="devicedeck-protos-") as tmp:
        run_protoc(Path(tmp), repo_root)
        stale = []
        for rel in generated_files():
            fresh = Path(tmp) / rel
            current = repo_root / rel
            if not current.is_file() or not filecmp.cmp(fresh, current, shallow=False):
                stale.append(rel.as_posix())
        return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devicedeck.kubelet.generate", description=__doc__
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 listing generated files that are out of date",
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for rel in stale:
            print(f"out of date: {rel}", file=sys.stderr)
        if stale:
            print("run: python -m devicedeck.kubelet.generate", file=sys.stderr)
            return 1
        return 0
    run_protoc(REPO_ROOT)
    for path in generated_files():
        print(f"generated: {path.as_posix()}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
