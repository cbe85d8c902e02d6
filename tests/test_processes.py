"""The process toolkit (`parlightning.runtime.processes`): the start handshake, one message
protocol, named errors for a child that fails, reports, exits or is killed, and stopping."""

import os
import signal

import pytest

from parlightning.errors import ConfigError
from parlightning.runtime.processes import Child, ProcessDied, ProcessStartError, receive, send, start_method


def echo(conn, owner, prefix):
    """Reports ready, then answers each message with prefix + message until None."""
    send(conn, ("ready", {"pid": os.getpid(), "owner": owner}))
    while True:
        message = receive(conn)
        if message is None:
            return
        send(conn, ("echo", prefix + message))


def refuses(conn, owner):
    send(conn, ("error", ConfigError("data.env: no such world; name it by class_path")))


def silent(conn, owner):
    os._exit(3)


def reports_then_exits(conn, owner):
    send(conn, ("ready", {}))
    receive(conn)
    send(conn, ("error", ValueError("actor 1 on task 't-2': step raised ValueError")))  # then exit 0


def test_a_child_starts_answers_in_order_and_stops():
    child = Child(echo, ("> ",), name="echo", what="the echo process")
    try:
        facts = child.wait_ready(60.0)
        assert facts["owner"] == os.getpid() and facts["pid"] == child.pid != os.getpid()
        for word in ("a", "b", "c"):
            child.send(word)
        assert [child.receive() for _ in range(3)] == [("echo", "> a"), ("echo", "> b"), ("echo", "> c")]
    finally:
        child.close()
    assert not child.process.is_alive() and child.process.exitcode == 0


def test_a_child_that_cannot_start_raises_its_own_error():
    child = Child(refuses, (), name="refuses", what="the refusing process")
    with pytest.raises(ConfigError, match="data.env: no such world"):
        child.wait_ready(60.0)
    assert child.closed


def test_a_child_that_exits_without_a_word_is_a_start_error_with_its_exit_code():
    child = Child(silent, (), name="silent", what="the silent process")
    with pytest.raises(ProcessStartError, match=r"the silent process exited while starting \(exit code 3"):
        child.wait_ready(60.0)


def test_a_child_that_reported_an_error_and_exited_raises_that_error_not_died_exit_code_0():
    child = Child(reports_then_exits, (), name="reports", what="the reporting process")
    try:
        child.wait_ready(60.0)
        child.send("go")
        child.process.join(30.0)
        assert child.process.exitcode == 0
        with pytest.raises(ValueError, match="actor 1 on task 't-2'"):
            for _ in range(1000):  # the pipe breaks once the child has gone: its report is raised then
                child.send("more" * 10000)
    finally:
        child.close()


def test_a_killed_child_is_process_died_with_pid_and_signal():
    child = Child(echo, ("",), name="echo", what="the echo process")
    try:
        child.wait_ready(60.0)
        os.kill(child.pid, signal.SIGKILL)
        child.process.join(30.0)
        with pytest.raises(ProcessDied, match=rf"the echo process \(pid {child.pid}\) died \(killed by SIGKILL, exit code -9\)"):
            child.receive()
    finally:
        child.close()


def test_an_unknown_start_method_is_one_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"data.env.init_args.start_method: 'teleport' is not one of"):
        start_method("teleport", "data.env.init_args.start_method")
