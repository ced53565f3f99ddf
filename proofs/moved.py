"""Module paths that moved, kept as deprecated aliases for one minor version (docs/decoders.md,
"The public surface").

The redesign of 2026-12-01 (commits 1b7a993 and 70a507c) moved modules whose paths the README of
that day told users to import or read, `from proofs.protocol import NotApplicable` first among
them. Each old path in MOVED still imports: a finder at the end of sys.meta_path (installed by
proofs/__init__.py) answers it with an alias module whose attributes are read, on access, from
the modules its names live in now, each read with a DeprecationWarning (MovedWarning) that names
where to import the name from. The objects are the new ones (`proofs.protocol.NotApplicable is
proofs.decoders.protocol.NotApplicable`), so an old factory's `raise NotApplicable(...)` is still
a decline. Nothing of loopcert imports an old path (tests/test_public_api.py), and REMOVED_IN is
when they go: that test fails once the package's version reaches it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

REMOVED_IN = "0.3.0"  # moved during 0.1: they warn through 0.2.x and are removed in 0.3.0

SPEED_MODULES = (
    "batch_table", "context", "costs", "engines", "measure", "report", "round_worker", "rows",
    "settings", "slowdown", "targets", "theorem2_vs_measured", "timing",
)  # fmt: skip
# old module -> the modules its names live in now, searched in order (the first is "where it moved")
MOVED: dict[str, tuple[str, ...]] = {
    "proofs.protocol": ("proofs.decoders.protocol",),
    "proofs.certify": ("proofs.run.certify", "proofs.run.plan", "proofs.run.cases"),
    "proofs.distribution": ("proofs.checks.distribution",),
    "proofs.checks.sampling": ("proofs.checks.distribution",),
    "proofs.naive_kv": ("proofs.decoders.naive_kv",),
    "proofs.sampler": ("proofs.decoders.draw",),
    "proofs.depth_profile": ("analysis.depth_profile",),
    "proofs.state_dynamics": ("analysis.state_dynamics",),
    "proofs.speed.batch": ("speed.batch_table",),
    # 2026-12-05: speed measurement left proofs/ (speed/, below proofs); the certificate's speed
    # check and the regression gates stayed checks (proofs.checks.speed, proofs.gates)
    "proofs.speed": ("speed",),
    **{f"proofs.speed.{m}": (f"speed.{m}",) for m in SPEED_MODULES},
    "proofs.speed.check": ("proofs.checks.speed",),
    "proofs.speed.gates": ("proofs.gates.baseline",),
    "proofs.speed.paired": ("proofs.gates.paired",),
    "proofs.speed.false_alarm": ("proofs.gates.false_alarm",),
    "proofs.progress": ("refdec.progress",),
    "proofs.stamp": ("refdec.stamp",),
    # what a run costs moved into one package (2026-12-05)
    "proofs.run.cut_estimate": ("proofs.cost.estimate",),
    "proofs.run.predict": ("proofs.cost.predict",),
    "proofs.run.kv_need": ("proofs.cost.kv_need",),
}
# an old path that other old paths sit under is a package: `import proofs.speed.timing` needs it
PACKAGES = frozenset(old.rpartition(".")[0] for old in MOVED) & frozenset(MOVED)
# names of the old modules that the public surface (loopcert.api) holds now: the warning sends
# users there rather than to an internal module (tests/test_public_api.py checks loopcert.api has them)
PUBLIC_HOME = "loopcert.api"
PUBLIC: dict[str, tuple[str, ...]] = {
    "proofs.protocol": ("Decoder", "BatchDecoder", "Factory", "NotApplicable"),
    "proofs.certify": ("certify", "CertifyPlan"),
    "proofs.run.predict": ("predict",),
}


class MovedWarning(DeprecationWarning):
    """A name read through an old module path (MOVED). `loopcert` shows these (loopcert/cli.py):
    Python hides a DeprecationWarning raised outside __main__, i.e. in a user's decoder module."""


def home_of(old: str, name: str) -> str:
    """The module that holds `name` of old module `old` now; LookupError when none does."""
    for home in MOVED[old]:
        if hasattr(importlib.import_module(home), name):
            return home
    raise LookupError(name)


def new_path(old: str, name: str) -> str:
    """Where users should import `name` of old module `old` from now: the public surface when it
    holds the name, else its home."""
    return PUBLIC_HOME if name in PUBLIC.get(old, ()) else home_of(old, name)


class MovedModule(types.ModuleType):
    """An old path: every attribute is the new module's, read with a MovedWarning."""

    def __getattr__(self, name: str):
        old = self.__name__
        if name == "__all__":  # `from old import *`: the new modules' public names
            return sorted({n for home in MOVED[old] for n in _public_names(home)})
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            home = home_of(old, name)
        except LookupError:
            raise AttributeError(
                f"module {old!r} has no attribute {name!r} ({old} moved to {MOVED[old][0]})"
            ) from None
        warnings.warn(
            f"{old}.{name} is deprecated: import {name} from {new_path(old, name)} "
            f"({old} moved to {MOVED[old][0]}; loopcert {REMOVED_IN} removes the old path)",
            MovedWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)

    def __dir__(self):
        return sorted({n for home in MOVED[self.__name__] for n in _public_names(home)})


def _public_names(module: str) -> list[str]:
    """The module's __all__, else the public names it defines (not those it imports)."""
    mod = importlib.import_module(module)
    if hasattr(mod, "__all__"):
        return list(mod.__all__)
    return [
        n
        for n, v in vars(mod).items()
        if not n.startswith("_")
        and not isinstance(v, types.ModuleType)
        and getattr(v, "__module__", module) == module
    ]


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of MOVED (and nothing else); loads each as a MovedModule."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname in PACKAGES)

    def create_module(self, spec):
        doc = f"Deprecated: moved to {MOVED[spec.name][0]} (loopcert {REMOVED_IN} removes this path)."
        return MovedModule(spec.name, doc)

    def exec_module(self, module) -> None:
        """Nothing to run: the attributes are read from the new modules on access."""


def install() -> None:
    """Put the finder last on sys.meta_path, once: a real module of the same path comes first."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
