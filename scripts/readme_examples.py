"""Runs the README's examples: every fenced block right after a `<!-- example: python -->` or
`<!-- example: c -->` line, each in a fresh temporary directory. Python blocks run with this
interpreter (which must have the chassis package installed); C blocks are compiled with cc
against crates/chassis-c/include and target/debug/libchassis_c.a, then run."""

import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"<!-- example: (python|c) -->\s*```\w*\n(.*?)```", README, re.S)


def run(kind: str, code: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        if kind == "python":
            (d / "example.py").write_text(code)
            subprocess.run([sys.executable, "example.py"], cwd=d, check=True)
        else:
            (d / "example.c").write_text(code)
            subprocess.run(
                [
                    "cc", "-std=c11", "-Wall", "-Werror",
                    "-I", str(ROOT / "crates/chassis-c/include"),
                    "example.c", str(ROOT / "target/debug/libchassis_c.a"),
                    "-lpthread", "-ldl", "-lm", "-o", "example",
                ],
                cwd=d,
                check=True,
            )
            subprocess.run(["./example"], cwd=d, check=True)
    print(f"README example {n} ({kind}): ok")


if __name__ == "__main__":
    kinds = {k for k, _ in BLOCKS}
    if kinds != {"python", "c"}:
        sys.exit(f"README examples missing: found {sorted(kinds)}, want python and c")
    for n, (kind, code) in enumerate(BLOCKS, 1):
        run(kind, code, n)
