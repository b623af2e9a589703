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
