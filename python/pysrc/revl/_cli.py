"""The ``revl`` command installed with the package: the same command line as the Rust
binary (same flags, same documents), run in this process."""

from __future__ import annotations

import signal
import sys

from . import _revl


def main() -> None:
    # As a native program: Ctrl-C stops it. SIGPIPE stays ignored (Python's default): a
    # tool that never reads its stdin must not kill `revl call`; a closed stdout
    # (`revl log | head`) is handled by the command line itself, which drops the output.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    argv = ["revl", *sys.argv[1:]]
    sys.exit(_revl.cli_main(argv))


if __name__ == "__main__":
    main()
