"""Test helper: a real `loopcert serve` subprocess for a fixture, stopped by its finalizer."""

from __future__ import annotations

from loopcert.serve.process import ServerProcess


def start(request, tmp_path_factory, *args: str) -> ServerProcess:
    server = ServerProcess(list(args), tmp_path_factory.mktemp("serve"))
    request.addfinalizer(server.stop)
    return server
