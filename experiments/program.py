"""The entry point of the ``bpo`` script: SIGINT and SIGTERM are blocked before anything else is
imported (importing NumPy starts a thread, and every thread must inherit the mask: ``bpo.infra.processes``),
then ``experiments.cli.main`` runs the command. ``python -m experiments.cli`` does the same at the
top of that module. Only the script imports this module: imported into another program, it would
leave that program's main thread deaf to both signals."""

import signal

signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))

from experiments.cli import main as _main  # noqa: E402 (after the mask, on purpose)


def main() -> int:
    """``bpo`` (``experiments.cli.main`` as the program)."""
    return _main()
