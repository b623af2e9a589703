"""The agent's one deadline thread: a connection whose request is still arriving at its deadline
is cut; one whose request was read in time is left alone."""

import socket

from eas_agent.agent import Deadlines


def test_a_connection_past_its_deadline_is_cut_and_a_cancelled_one_is_not():
    deadlines = Deadlines()
    late_server, late_client = socket.socketpair()
    kept_server, kept_client = socket.socketpair()
    with late_server, late_client, kept_server, kept_client:
        deadlines.add(late_server, 0.2)
        deadlines.add(kept_server, 0.2)
        deadlines.cancel(kept_server)
        late_client.settimeout(60)
        assert late_client.recv(1) == b""  # shut down by the deadline thread: the peer sees the end
        kept_server.sendall(b"x")
        kept_client.settimeout(60)
        assert kept_client.recv(1) == b"x"
        assert kept_server.fileno() != -1


def test_a_later_deadline_added_first_does_not_delay_an_earlier_one():
    deadlines = Deadlines()
    far_server, far_client = socket.socketpair()
    near_server, near_client = socket.socketpair()
    with far_server, far_client, near_server, near_client:
        deadlines.add(far_server, 3600)
        deadlines.add(near_server, 0.2)
        near_client.settimeout(60)
        assert near_client.recv(1) == b""
        far_server.sendall(b"y")  # still open
        far_client.settimeout(60)
        assert far_client.recv(1) == b"y"
