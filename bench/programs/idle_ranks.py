"""A rank that waits forever without torch (bench/stacks.py --light): the last rank in `receive`, the others in
`collective`, as a job hung in a collective looks, at a fraction of torch's memory per process."""

import os
import threading


def receive() -> None:
    threading.Event().wait()


def collective() -> None:
    threading.Event().wait()


if __name__ == "__main__":
    print("ready", os.environ["RANK"], flush=True)
    if int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
        receive()
    else:
        collective()
