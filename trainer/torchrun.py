"""python -m trainer.torchrun [torchrun options] -m trainer train ...

torchrun that exits with its failed worker's exit status. Plain torchrun exits 1 whatever
its worker returned, which hides the difference between a failure that a restart can cure
(143 after SIGTERM, 137 after SIGKILL, 1 for a crash) and one it cannot (2: the user's input,
3: a non-finite loss); launchers and the PyTorchJob's `restartPolicy: ExitCode` decide on
this status. A worker killed by signal N gives 128 + N, as a shell reports it.
"""

from __future__ import annotations

import sys


def main() -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun()
    except ChildFailedError as err:
        code = err.get_first_failure()[1].exitcode
        sys.exit(code if code > 0 else 128 - code if code < 0 else 1)


if __name__ == "__main__":
    main()
