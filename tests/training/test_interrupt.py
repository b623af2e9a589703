"""A Ctrl-C that Python swallows (raised inside a __del__ or weakref callback) is not lost."""

import os
import signal

import pytest

from eas import interrupt


# The swallowed KeyboardInterrupt is exactly what this test provokes; pytest reports it otherwise.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_swallowed_by_a_finaliser_is_raised_again_at_the_next_check_and_only_once():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt.install()
        interrupt.check()  # nothing asked yet

        class Finaliser:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs here, and its exception is "ignored"
                    pass

        Finaliser()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        # Handled once: the rest of this process (here: the other tests) trains undisturbed.
        interrupt.check()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_inside_a_deferred_block_waits_for_its_end_and_is_raised_once_at_the_next_check():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt.install()
        finished = False
        with interrupt.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs here, and must not raise
                pass
            finished = True
        assert finished
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        interrupt.check()  # raised once
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_training_lock_refuses_a_second_holder_and_goes_with_its_process(tmp_path):
    """flock: held per process (per open file), released however the holder ends."""
    import subprocess
    import sys

    from eas.errors import UserError
    from eas.training.folder_lock import training_lock

    code = ("import sys; from pathlib import Path; from eas.training.folder_lock import training_lock\n"
            f"with training_lock(Path({str(tmp_path)!r})):\n"
            "    print('held', flush=True); sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=r"is being trained by another process \(pid \d+ on "), \
                training_lock(tmp_path):
            pass
    finally:
        holder.kill()  # killed, not finished: the kernel releases its lock
        holder.wait()
    with training_lock(tmp_path):
        pass
