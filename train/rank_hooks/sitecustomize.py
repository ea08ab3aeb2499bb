"""slurmgen's rank hooks, run by Python at start-up in every process of a job whose ranks run the
user's own code (this folder is first on their PYTHONPATH; `--no-rank-hooks` leaves it off).

It imports neither torch nor anything of the user's: it waits until the script imports torch's
optimizers, transformers' or Lightning's Trainer and hooks them then (train.script_hooks says what they do).
slurmgen's `train` package is imported under its own name only while a hook runs and is taken out
of sys.modules again, so a user's own `train` module stays theirs. A sitecustomize the site or the
user already had runs after this one, as if this one were not there. At exit a rank whose script
ended well leaves a mark (train.script_end), so an abort in Python's teardown after it is no failure.
"""

import importlib
import importlib.machinery
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(HERE))  # holds slurmgen's train package
_ours = {}  # slurmgen's train.* modules, between hooks


def _is_train(name):
    return name == "train" or name.startswith("train.")


def ours(name):
    """slurmgen's train.NAME, whatever `train` means to the user's code."""
    theirs = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_train(k)}
    sys.modules.update(_ours)
    saved = list(sys.path)
    sys.path.insert(0, PACKAGE_ROOT)
    try:
        return importlib.import_module(f"train.{name}")
    finally:
        sys.path[:] = saved
        _ours.update({k: sys.modules.pop(k) for k in list(sys.modules) if _is_train(k)})
        sys.modules.update(theirs)


def _warn(what, exc):
    print(f"slurmgen rank hooks: {what} failed ({type(exc).__name__}: {exc}); the script runs without it",
          file=sys.stderr, flush=True)


class _ThenCall:
    """A module's own loader, then a hook on the module it made. (Not a subclass of importlib.abc's
    Loader: the import system asks only for these methods, and importing importlib.abc costs every
    rank 18 ms at start.)"""

    def __init__(self, loader, hook):
        self.loader, self.hook = loader, hook

    def __getattr__(self, name):  # get_source, is_package, ...: the real loader's
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _safely(self.hook, module)


def _safely(hook, module):
    try:
        hook(module)
    except Exception as exc:  # a hook must never break the user's import
        _warn(f"hooking {module.__name__}", exc)


class _AfterImport:
    """Calls hooks[NAME](module) once the module NAME has been imported by someone."""

    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        if name not in self.hooks:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self or not hasattr(finder, "find_spec") else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.hooks.pop(name))
        return spec


def _call(module_name, function):
    return lambda module: getattr(ours(module_name), function)(module)


def install():
    """The hooks for this process: the ones whose module is already imported at once, the
    others when it is."""
    hooks = {"torch.optim.optimizer": _call("script_hooks", "after_optimizer_import"),
             "torch.distributed.checkpoint": _call("script_hooks", "after_checkpoint_import"),
             "transformers.trainer": _call("trainer_hooks", "after_trainer_import"),
             "lightning.pytorch.trainer.trainer": _call("lightning_hooks", "after_trainer_import"),
             "pytorch_lightning.trainer.trainer": _call("lightning_hooks", "after_trainer_import")}
    try:
        ours("script_hooks").start()
    except Exception as exc:
        _warn("the stack dump", exc)
    for name in [n for n in hooks if n in sys.modules]:
        _safely(hooks.pop(name), sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(hooks))


def _chain():
    """The sitecustomize this one hides, if any: the next one on sys.path."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec  # here, not at the top: with contextlib, 5 ms of every rank's start
    try:
        spec.loader.exec_module(module_from_spec(spec))
    except Exception as exc:  # what Python itself does with a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
              file=sys.stderr)


def _mark_the_end():
    """The script's own end, marked at exit (train.script_end): only here, where the script is this
    process's __main__ (the submit path runs its scripts in-process and judges them itself)."""
    try:
        ours("script_end").install()
    except Exception as exc:
        _warn("the end mark", exc)


if __name__ == "sitecustomize":
    if "RANK" in os.environ:  # a rank: torchrun's agent, preflight and the user's tools need nothing
        install()
        _mark_the_end()
    _chain()
