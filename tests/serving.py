"""Test helper: a real `loopcert serve` subprocess for a fixture, stopped by its finalizer."""

from __future__ import annotations

from loopcert.serve.process import ServerProcess


def start(request, tmp_path_factory, *args: str, api_key: str | None = None) -> ServerProcess:
    """`loopcert serve ARGS` on 127.0.0.1; with api_key it wants `server.headers` on every request
    but /health."""
    server = ServerProcess(list(args), tmp_path_factory.mktemp("serve"), api_key=api_key)
    request.addfinalizer(server.stop)
    return server
