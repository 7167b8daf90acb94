"""What diffusers' hook registry leaves behind once its hooks are removed, and tidying it away.

`diffusers.hooks.HookRegistry` wraps a module's `forward` in an instance attribute and keeps itself on the
module as `_diffusers_hook`. Removing a hook puts back a bound `forward` (the same method, as an instance
attribute) and leaves the registry, empty; `disable_cache` leaves `_cache_config = None` on the model. The
techniques built on these hooks (step caches, layerwise casting, group offloading) tidy them after removal,
so a reverted model is the loaded one attribute for attribute.
"""

from __future__ import annotations

import torch

LEFTOVERS = ("_diffusers_hook", "forward", "_cache_config")


def _leftover(module: torch.nn.Module, name: str) -> bool:
    value = module.__dict__[name]
    if name == "_diffusers_hook":
        return not value.hooks
    if name == "forward":
        return getattr(value, "__func__", None) is type(module).forward and value.__self__ is module
    return value is None and getattr(type(module), name, None) is None


def tidy(model: torch.nn.Module) -> None:
    """Delete from `model` and its submodules the hook registry's leftovers: empty registries, instance
    `forward`s that are the class's own method again, a `_cache_config` of None."""
    for module in model.modules():
        for name in LEFTOVERS:
            if name in module.__dict__ and _leftover(module, name):
                delattr(module, name)


def hooked(model: torch.nn.Module, hook: str) -> list[torch.nn.Module]:
    """The submodules of `model` (itself included) that carry diffusers hook `hook`."""
    return [
        m
        for m in model.modules()
        if getattr(m.__dict__.get("_diffusers_hook"), "hooks", {}).get(hook) is not None
    ]
