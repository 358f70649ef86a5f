"""The stand-in's one rule: any name a module is asked for is a function that raises when called."""

from collections.abc import Callable


def missing(module: str) -> Callable[[str], object]:
    """A module `__getattr__`: `from torchvision.x import f` imports, calling `f` raises naming the stand-in."""

    def getattr_(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args: object, **kwargs: object) -> None:
            raise RuntimeError(f"{module}.{name}: torchvision is a stand-in (scripts/sglang_cpu), text models only")

        return unavailable

    return getattr_
