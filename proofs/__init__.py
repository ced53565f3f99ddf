"""proofs: the certificate, its checks, statistics, decoders and runs (README "Packages").

Old module paths that moved (proofs.protocol, ...) still import, with a DeprecationWarning
naming the new one: proofs/moved.py."""

from proofs.moved import install as _install_moved_paths

_install_moved_paths()
