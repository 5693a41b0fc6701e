"""Generate the code of protos/agentrt/v1: Python into services/agentrt/v1, TypeScript into
clients/typescript/src/gen.

The one script that produces the committed generated code (`make protos`). It is also
imported by tests/unit/test_protos_fresh.py, which generates into a temporary directory
and fails when the committed files differ.

Python comes from grpc_tools' protoc. TypeScript comes from `buf generate` with buf.gen.yaml
(protoc-gen-es from clients/typescript/node_modules, run locally), plus the ErrorInfo and
RetryInfo messages of google/rpc/error_details.proto, generated from the copy the pinned
googleapis-common-protos package ships (nothing of googleapis is vendored into the tree).

Usage: python protos/generate.py [OUT_DIR]   (default: services; TypeScript goes to the
clients/typescript/src/gen under OUT_DIR's parent when OUT_DIR is given, else in place)
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
#: Where the TypeScript code goes, relative to the root given to generate_typescript.
TS_GEN = pathlib.Path("clients") / "typescript" / "src" / "gen"
#: The googleapis files the TypeScript client needs (error details), from googleapis-common-protos.
GOOGLE_PROTOS = ("google/rpc/error_details.proto",)


def proto_files() -> list[str]:
    """Return the .proto sources relative to protos/, sorted."""
    return sorted(str(p.relative_to(PROTO_DIR)) for p in (PROTO_DIR / "agentrt" / "v1").glob("*.proto"))


def generate(out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc (grpc_tools) for every proto into out_dir; return the files written.

    Raises:
        RuntimeError: protoc failed.
    """
    import grpc_tools
    from grpc_tools import protoc

    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *proto_files(),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    pkg = out_dir / "agentrt" / "v1"
    init = pkg / "__init__.py"
    init.write_text('"""Generated from protos/agentrt/v1 by protos/generate.py; never edit."""\n')
    return sorted(p for p in pkg.iterdir() if p.is_file())


def _buf() -> str:
    beside = pathlib.Path(sys.executable).parent / "buf"
    found = str(beside) if beside.exists() else shutil.which("buf")
    if found is None:
        raise RuntimeError("buf is not installed (pip install buf-bin; `make install`)")
    return found


def generate_typescript(root: pathlib.Path) -> list[pathlib.Path]:
    """Run `buf generate` (buf.gen.yaml) so the TypeScript code lands in root/TS_GEN.

    Returns:
        The files written, sorted.

    Raises:
        RuntimeError: buf is missing, protoc-gen-es is not installed (run `npm ci` in
            clients/typescript), or buf failed.
    """
    from google.rpc import error_details_pb2

    plugin = ROOT / "clients" / "typescript" / "node_modules" / ".bin" / "protoc-gen-es"
    if not plugin.exists():
        raise RuntimeError(f"{plugin} is missing: run `make install` (npm ci in clients/typescript)")
    out = root / TS_GEN
    if out.exists():
        shutil.rmtree(out)
    template = str(ROOT / "buf.gen.yaml")
    google_root = pathlib.Path(error_details_pb2.__file__).resolve().parent.parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        for name in GOOGLE_PROTOS:
            (pathlib.Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(google_root / name, pathlib.Path(tmp) / name)
        runs = [
            [_buf(), "generate", "--template", template, "-o", str(root)],
            [_buf(), "generate", tmp, "--template", template, "-o", str(root)],
        ]
        for args in runs:
            done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"buf generate failed: {' '.join(args)}\n{done.stdout}{done.stderr}")
    return sorted(p for p in out.rglob("*") if p.is_file())


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "services"
    for path in generate(target):
        print(path.relative_to(target))
    ts_root = target.parent if len(sys.argv) > 1 else ROOT
    for path in generate_typescript(ts_root):
        print(path.relative_to(ts_root))
