"""Generate the Python code of protos/agentrt/v1 into services/agentrt/v1.

The one script that produces the committed generated code (`make protos`). It is also
imported by tests/unit/test_protos_fresh.py, which generates into a temporary directory
and fails when the committed files differ.

Usage: python protos/generate.py [OUT_DIR]   (default: services)
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"


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


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "services"
    for path in generate(target):
        print(path.relative_to(target))
