"""opd._ops: the operator methods of a Client (c.softmax, c.layernorm, ...).

DESIGN
They are generated from the daemon's schema list (Client.ops(), from
opd_ops_json) on first attribute access (OpMethods.__getattr__, a mixin
of Client) and stored in the instance's __dict__, so from then on they
are found directly. Each is a plain function bound to the client that
calls Client._run (_runner.py) with no layer in between; its __name__ and
__doc__ (signature, summary, shape rule, attributes) come from the
schema.
"""
import types

from . import errors


class OpMethods:
    """Client's generated operator methods and dir() listing them."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        m = self._methods.get(name)
        if m is not None:
            return m
        schema = self._schema(name)
        if schema is None:
            raise AttributeError("%r is neither a Client attribute nor an "
                                 "operator of the daemon (c.ops() lists them)"
                                 % name)
        m = types.MethodType(_make_method(schema), self)
        self._methods[name] = m
        self.__dict__[name] = m  # found directly from now on, no __getattr__
        return m

    def __dir__(self):
        names = set(super().__dir__())
        try:
            names.update(self.ops())
        except errors.OpdError:
            pass
        return sorted(names)


def _make_method(schema):
    op = schema["name"]

    def method(self, *inputs, out=None, device=None, **attrs):
        return self._run(op, inputs, out, device, attrs)

    ins = ", ".join(i["name"] + ("=None" if i["optional"] else "")
                    for i in schema["inputs"])
    at = ", ".join("%s=%r" % (a["name"], a["default"]) if not a["required"]
                   else a["name"] for a in schema["attrs"])
    method.__name__ = op
    method.__doc__ = "%s(%s%s, out=None, device=None)\n\n%s.\nshape: %s\n%s%s" % (
        op, ins, (", " + at) if at else "", schema["summary"], schema["shape"],
        "".join("attr %s (%s): %s\n" % (a["name"], a["type"], a["doc"])
                for a in schema["attrs"]),
        "In-place allowed (out=x).\n" if schema["inplace"] else "")
    return method

