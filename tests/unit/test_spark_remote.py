"""A Spark Connect URL's token (sc://HOST:PORT/;token=...) in no error or log line of the jobs."""
from __future__ import annotations

import socket

import pytest
from kmigrate.errors import ConfigError
from kmigrate_spark.conf import check_connect_server, shown_remote, unreachable

TOKEN = "tok-3b1f0c9e7d"


def test_shown_remote_hides_the_token_only():
    assert shown_remote(f"sc://spark:15002/;token={TOKEN};use_ssl=true") == "sc://spark:15002/;token=***;use_ssl=true"
    assert shown_remote("sc://spark:15002") == "sc://spark:15002"
    assert shown_remote("sc://spark:15002/;user_id=me;session_id=x") == "sc://spark:15002/;user_id=me;session_id=x"


def test_an_unreachable_server_is_named_without_its_token():
    with socket.socket() as free:  # a port nothing listens on: bound, never listening
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"sc://127.0.0.1:{port}/;token=\*\*\*") as refused:
            check_connect_server(f"sc://127.0.0.1:{port}/;token={TOKEN}", timeout_s=2)
    assert TOKEN not in str(refused.value)


def test_a_url_that_is_not_spark_connect_is_named_without_its_token():
    with pytest.raises(ConfigError, match="is not a Spark Connect URL") as refused:
        check_connect_server(f"http://spark:15002/;token={TOKEN}")
    assert TOKEN not in str(refused.value)


def test_a_cause_that_repeats_the_url_hides_the_token_too():
    error = unreachable(f"sc://h:1/;token={TOKEN}", f"failed to connect to sc://h:1/;token={TOKEN}: refused")
    assert TOKEN not in str(error) and str(error).count("token=***") == 2
