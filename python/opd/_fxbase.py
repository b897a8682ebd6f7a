"""opd._fxbase: what every rule of the torch.compile backend's support
table reads a node with (opd._fxrules, opd._fxindex): the Unsupported
exception, a node's arguments and its example tensor.

DESIGN
Kept apart from the table so that the rule modules share these without
importing each other (_fxrules imports _fxindex's rules, both import
this).
"""
import torch


class Unsupported(Exception):
    """The node stays in torch; str() is the reason."""


def arg(node, i, name, default=None):
    """The node's argument i (positional) or `name` (keyword)."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def meta(x):
    """The example (fake) tensor of FX node x, or None."""
    m = getattr(x, "meta", None)
    if m is None:
        return None
    v = m.get("example_value", m.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _is_tensor(x):
    return isinstance(x, torch.Tensor) or meta(x) is not None


def _static(x):
    return getattr(x, "meta", {}).get("opd_const", False)
