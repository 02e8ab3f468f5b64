"""The `heatc` command line. Every failure caused by input prints `file:line:col: error:`
and exits with status 1 — never a traceback. One module per group of commands; they all
register on one Typer app (`heatc.cli.common`).

Public surface: `app`, `main()`.
"""

import sys

try:  # the runtime-only install has no CLI dependencies
    import rich  # noqa: F401
    import typer  # noqa: F401
except ModuleNotFoundError as missing:
    sys.stderr.write(f"heatc: the compiler needs {missing.name!r}; install it with: pip install 'heatc[compiler]'\n")
    raise SystemExit(2) from None

# isort: off
# (each module registers its commands; --help lists them in this order)
from heatc.cli import rules, scanning, generating, learning, tuning, extract  # noqa: F401
from heatc.cli.common import app
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    app()
